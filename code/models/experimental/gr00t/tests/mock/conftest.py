# SPDX-License-Identifier: Apache-2.0
"""Mock P150 fixtures: build the mock runtime once, point ttnn at it before its first import, and
open one mock device for the session."""

from __future__ import annotations

import os
import shutil

import pytest


@pytest.fixture(scope="session")
def mock_device(tmp_path_factory):
    from models.experimental.gr00t.tt.tools.mock_runtime import build_mock_runtime, mock_env

    if shutil.which("riscv64-unknown-elf-ld") is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install binutils-riscv64-unknown-elf for the mock-device tests (.ci/run does)")
        pytest.skip("no mock P150: apt-get install -y binutils-riscv64-unknown-elf (CI installs it)")
    if "ttnn" in __import__("sys").modules and not os.environ.get("TT_METAL_MOCK_CLUSTER_DESC_PATH"):
        pytest.fail("ttnn was imported before the mock runtime was configured; run the mock tests in their own process")
    root = build_mock_runtime(tmp_path_factory.mktemp("tt-mock") / "runtime")
    os.environ.update(mock_env(root))
    os.environ.setdefault("TT_LOGGER_LEVEL", "error")  # tt-metal's info/warning chatter would bury pytest's summary
    import ttnn  # must follow the environment above

    device = ttnn.open_device(device_id=0)
    yield device
    ttnn.close_device(device)
