# SPDX-License-Identifier: Apache-2.0
"""The tt-model manifest verifier: verify_manifest.py (the CLI) and manifest_rules.py (its document rules)."""
