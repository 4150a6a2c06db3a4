# SPDX-License-Identifier: Apache-2.0
"""TT-NN side of the port (Blackhole p150a). Importing this package does not import ttnn."""
