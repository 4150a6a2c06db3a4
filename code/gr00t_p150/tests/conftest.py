# SPDX-License-Identifier: Apache-2.0
"""Server test fixtures: one real torch-backend server on the tiny synthetic checkpoint, booted once."""

from __future__ import annotations

import base64
import dataclasses
import io
import os
import socket
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

CODE = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A loopback TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def png(h: int, w: int) -> str:
    """A black ``h``×``w`` RGB PNG, base64 as a request carries it."""
    import numpy as np
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.zeros((h, w, 3), np.uint8)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


@pytest.fixture(scope="session")
def server_env(tmp_path_factory):
    """Environment of the test server: an isolated cache, synthetic tiny weights, a small body limit."""
    # fp32 pinned: the server tests hold the served answer to the fp32 reference bit for bit in this process;
    # GR00T_TORCH_DTYPE=auto would pick bf16 on a CPU with native bf16 (test_torch_fast tests that choice)
    env = {"GR00T_VERSION": "n15", "GR00T_WEIGHTS": "synthetic:tiny", "GR00T_WARMUP_RUNS": "2",
           "GR00T_CACHE": str(tmp_path_factory.mktemp("server-cache")), "GR00T_MAX_BODY_BYTES": str(2 * 2**20),
           "GR00T_TORCH_DTYPE": "float32"}
    os.environ["GR00T_CACHE"] = env["GR00T_CACHE"]
    return env


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """An N1.5 synthetic tiny checkpoint of its own (seed 0), for tests that open a backend directly."""
    from models.experimental.gr00t.common.synthetic import write_checkpoint

    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "n15-tiny", scale="tiny", seed=0, log=lambda _: None)


@pytest.fixture(scope="session")
def server_config(server_env):
    from gr00t_p150.server.settings import load_config

    return load_config(server_env)


@pytest.fixture(scope="session")
def clients(server_env):
    """One booted test server per version of the registry, each started on first use and kept for the session."""
    from contextlib import ExitStack

    from gr00t_p150.server.app import create_app
    from gr00t_p150.server.settings import load_config

    booted: dict[str, TestClient] = {}
    with ExitStack() as stack:
        def client_of(version: str) -> TestClient:
            if version not in booted:
                app = create_app(load_config({**server_env, "GR00T_VERSION": version}))
                booted[version] = stack.enter_context(TestClient(app, raise_server_exceptions=False))
            return booted[version]

        yield client_of


@pytest.fixture(scope="session")
def client(clients):
    """The N1.5 server (the default version of most server tests)."""
    return clients("n15")


@pytest.fixture(scope="session")
def demo(client):
    return client.get("/demo").json()


@pytest.fixture(scope="session")
def reference_answer(client, demo):
    """The fp32 reference's answer to the demo request, computed in this process by the policy the server
    serves: on the same machine and software the served answer must equal it bit for bit."""
    return reference_answer_of(client, demo["request"])


def reference_answer_of(client, request: dict) -> dict:
    from models.experimental.gr00t.common.observation import parse_observation

    engine = client.app.state.engine
    result = engine.backend.reference_policy.get_action(parse_observation(request, engine.layout),
                                                        noise=request.get("noise"), seed=request.get("seed"))
    return {"actions": {k: v.tolist() for k, v in result.actions.items()},
            "action_pred_normalized": result.action_pred.tolist()}


def assert_matches_golden(got: dict, golden: dict):
    """``got`` within the cross-machine golden rule of a golden made on another machine (common.quality)."""
    from models.experimental.gr00t.common.quality import compare_with_golden

    cmp = compare_with_golden(got, golden)
    assert cmp.ok, f"served vs shipped golden: {cmp.summary()}"


@pytest.fixture
def request_body(demo):
    """A fresh copy of the demo request (its explicit noise included)."""
    import copy

    return copy.deepcopy(demo["request"])


def metrics_of(text: str) -> dict:
    """{(sample name, frozenset(labels)): value}, parsed by prometheus-client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def with_config(config, **changes):
    return dataclasses.replace(config, **changes)
