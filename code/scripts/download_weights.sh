#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fetch the pinned GR00T snapshot into the Hugging Face cache (run where the hub is reachable).
#   code/scripts/download_weights.sh [n15|n17]
# The server then finds it with GR00T_WEIGHTS=hub (the default); copy $HF_HOME to an offline machine as is.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-.venv/bin/python}
VERSION=${1:-n15}
PYTHONPATH=code "$PYTHON" - "$VERSION" <<'PY'
import sys
from huggingface_hub import snapshot_download
from gr00t_p150.server.settings import HF_REPOS, HF_SNAPSHOT_SHAS
from gr00t_p150.server.weights import ALLOW_PATTERNS
version = sys.argv[1]
if version not in HF_REPOS:
    sys.exit(f"download_weights: unknown version {version!r}: expected one of {sorted(HF_REPOS)}")
path = snapshot_download(HF_REPOS[version], revision=HF_SNAPSHOT_SHAS[version], allow_patterns=ALLOW_PATTERNS[version])
print(f"{HF_REPOS[version]}@{HF_SNAPSHOT_SHAS[version]} -> {path}")
PY
