# SPDX-License-Identifier: Apache-2.0
"""The shipped demo request of each version (``<version>/``), its made-up scenes and the script that makes them."""
