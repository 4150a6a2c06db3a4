# SPDX-License-Identifier: Apache-2.0
"""Analysis and test tooling around the TT-NN port (mock runtime, golden ops, census, trace safety), not the model."""
