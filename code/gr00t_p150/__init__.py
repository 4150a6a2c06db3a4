# SPDX-License-Identifier: Apache-2.0
"""GR00T policy server (FastAPI) for Tenstorrent p150a, CUDA and CPU."""
