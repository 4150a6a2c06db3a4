# SPDX-License-Identifier: Apache-2.0
"""Backends behind one protocol: torch (cpu/cuda) today, ttnn with the TT-NN port."""
