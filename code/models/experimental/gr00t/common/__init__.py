# SPDX-License-Identifier: Apache-2.0
"""Host-only pieces shared by the reference, the TT port and the server (never imports ttnn)."""
