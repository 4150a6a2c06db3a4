# SPDX-License-Identifier: Apache-2.0
"""Developer tools for this repository that are not shipped in the tt-model image."""
