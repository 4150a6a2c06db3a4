# SPDX-License-Identifier: Apache-2.0
"""Every tt-model manifest (N1.5, N1.6, N1.7) passes verify_manifest.py: the static schema rules and every verify: line,
run in fresh interpreters with the image's /opt/tt-metal layout reproduced from code/."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("manifest", ["tt-model.yaml", "tt-model.n16.yaml", "tt-model.n17.yaml"])
def test_manifest_verifies(manifest):
    proc = subprocess.run([sys.executable, str(ROOT / "code/tools/manifest/verify_manifest.py"), str(ROOT / manifest)],
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    passed, failed = map(int, re.search(r"verify: (\d+) passed, (\d+) failed", proc.stdout).groups())
    assert failed == 0 and passed >= 14, proc.stdout
    assert "static: 0 error(s)" in proc.stdout
