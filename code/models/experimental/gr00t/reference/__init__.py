# SPDX-License-Identifier: Apache-2.0
"""PyTorch reference modules: submodule names equal checkpoint keys."""
