# SPDX-License-Identifier: Apache-2.0
"""Server test fixtures: one real torch-backend server on the tiny synthetic checkpoint, booted once."""

from __future__ import annotations

import dataclasses
import os

import pytest
from fastapi.testclient import TestClient


@pytest.fixture(scope="session")
def server_env(tmp_path_factory):
    """Environment of the test server: an isolated cache, synthetic tiny weights, a small body limit."""
    env = {"GR00T_VERSION": "n15", "GR00T_WEIGHTS": "synthetic:tiny", "GR00T_WARMUP_RUNS": "2",
           "GR00T_CACHE": str(tmp_path_factory.mktemp("server-cache")), "GR00T_MAX_BODY_BYTES": str(2 * 2**20)}
    os.environ["GR00T_CACHE"] = env["GR00T_CACHE"]
    return env


@pytest.fixture(scope="session")
def server_config(server_env):
    from gr00t_p150.server.settings import load_config

    return load_config(server_env)


@pytest.fixture(scope="session")
def client(server_config):
    from gr00t_p150.server.app import create_app

    with TestClient(create_app(server_config), raise_server_exceptions=False) as c:
        yield c


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


def with_config(config, **changes):
    return dataclasses.replace(config, **changes)
