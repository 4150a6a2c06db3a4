# SPDX-License-Identifier: Apache-2.0
"""GR00T N1.5 / N1.7 port: host-side common code, PyTorch reference, TT-NN modules."""
