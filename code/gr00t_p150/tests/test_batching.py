# SPDX-License-Identifier: Apache-2.0
"""Micro-batching (SERVING.md §13): B requests stacked into one model call give each request its unbatched answer
within ``BATCH_ATOL`` (fp32 CPU: not bitwise, the GEMMs sum in another order at another M), on N1.5 and N1.7;
through the server, concurrent requests of one shape share a call, another shape runs in its own, a malformed
request fails alone before the batcher, and a batch that fails is retried request by request."""

from __future__ import annotations

import base64
import copy
import io
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from gr00t_p150.server.app import create_app

from .conftest import with_config

BATCH_ATOL = 1e-5  # measured 6e-7..1.2e-6 (tiny checkpoints, AVX2 and AVX-512 hosts); bitwise only at B = 1


def noisy_png(h: int, w: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def size_of(png_b64: str) -> tuple[int, int]:
    w, h = Image.open(io.BytesIO(base64.b64decode(png_b64))).size
    return h, w


def variants(engine, request: dict, n: int) -> list:
    """``n`` prepared requests of one shape that differ in images, state and seed (so a row mix-up would show)."""
    from models.experimental.gr00t.common.observation import parse_observation

    out = []
    for i in range(n):
        body = copy.deepcopy(request)
        body.pop("noise", None)
        for cam, frames in body["images"].items():  # same sizes as the demo's, other pixels
            if isinstance(frames, list):
                body["images"][cam] = [noisy_png(*size_of(f), 10 * i + k) for k, f in enumerate(frames)]
            else:
                body["images"][cam] = noisy_png(*size_of(frames), 10 * i)
        for key, value in body["state"].items():
            body["state"][key] = (np.asarray(value) + 0.05 * i).tolist()
        obs = parse_observation(body, engine.layout)
        out.append(engine.backend.prepare(obs, seed=1000 + i))
    return out


def check_batch_equals_alone(engine, request: dict) -> float:
    from models.experimental.gr00t.common.policy import batch_key

    prepared = variants(engine, request, 3)
    assert len({batch_key(p.inputs) for p in prepared}) == 1
    batched = engine.backend.run_batch(prepared)
    alone = [engine.backend.run(p) for p in prepared]
    worst = 0.0
    for b, a in zip(batched, alone):
        assert b.batch_size == 3 and a.batch_size == 1
        assert b.seed == a.seed and b.actions.keys() == a.actions.keys()
        worst = max(worst, float(np.abs(b.action_pred - a.action_pred).max()))
        for k in a.actions:
            np.testing.assert_allclose(b.actions[k], a.actions[k], rtol=0, atol=BATCH_ATOL * 10, err_msg=k)
    assert worst <= BATCH_ATOL, worst
    # the rows really differ (a batch that answered every row with row 0 would fail here)
    assert np.abs(alone[0].action_pred - alone[1].action_pred).max() > 1e-2
    return worst


def test_a_batch_gives_every_n15_request_its_unbatched_answer(client, request_body):
    print("n15 batched vs alone, max |d| action_pred:", check_batch_equals_alone(client.app.state.engine, request_body))


@pytest.mark.parametrize("version", ["n16", "n17"])
def test_a_batch_gives_every_request_of_the_other_versions_its_unbatched_answer(clients, version):
    served = clients(version)
    print(f"{version} batched vs alone, max |d| action_pred:",
          check_batch_equals_alone(served.app.state.engine, served.get("/demo").json()["request"]))


@pytest.mark.parametrize("variant", ["inpaint", "guided"])
def test_rtc_requests_with_different_delays_batch_and_keep_their_answers(client, request_body, variant):
    """RTC rows carry their own mask / weights, so requests with different frozen lengths share one batch key and
    one model call; each keeps its unbatched answer within BATCH_ATOL, and inpaint's frozen rows stay exact."""
    import torch

    from models.experimental.gr00t.common.policy import batch_key
    from models.experimental.gr00t.common.rtc import GuidedPrefix, InpaintPrefix

    engine = client.app.state.engine
    prepared = variants(engine, request_body, 3)
    horizon, dim = prepared[0].inputs.noise.shape[1:]
    for i, p in enumerate(prepared):
        rows = np.random.default_rng(i).uniform(-0.9, 0.9, (horizon - 2 * i, dim)).astype(np.float32)
        if variant == "inpaint":
            p.inputs.inpaint = InpaintPrefix.build(rows[:2 + i], horizon)
        else:
            p.inputs.guide = GuidedPrefix.build(rows, 2 + i, horizon)
    assert len({batch_key(p.inputs) for p in prepared}) == 1
    batched = engine.backend.run_batch(prepared)
    alone = [engine.backend.run(p) for p in prepared]
    for i, (b, a) in enumerate(zip(batched, alone)):
        assert b.batch_size == 3
        assert np.abs(b.action_pred - a.action_pred).max() <= BATCH_ATOL, i
        if variant == "inpaint":
            want = prepared[i].inputs.inpaint.target[0, :2 + i].numpy()
            assert np.array_equal(b.action_pred[:2 + i], want) and np.array_equal(a.action_pred[:2 + i], want)
    assert not torch.equal(torch.from_numpy(alone[0].action_pred), torch.from_numpy(alone[1].action_pred))


@pytest.fixture(scope="module")
def batched(server_config):
    with TestClient(create_app(with_config(server_config, max_batch=4, batch_window_ms=1000.0)),
                    raise_server_exceptions=False) as c:
        yield c


def post_together(client, bodies: list[dict]) -> list:
    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda b: client.post("/predict", json=b), bodies))


def test_concurrent_requests_share_one_model_call(batched, client, request_body):
    assert batched.get("/info").json()["batching"]["enabled"] is True
    assert client.get("/info").json()["batching"] == {"enabled": False, "reason": "GR00T_MAX_BATCH=1"}
    del request_body["noise"]
    bodies = [{**request_body, "seed": 50 + i} for i in range(4)]
    answers = post_together(batched, bodies)
    assert [r.status_code for r in answers] == [200] * 4, [r.text for r in answers]
    assert [r.json()["batch_size"] for r in answers] == [4] * 4
    for body, r in zip(bodies, answers):
        alone = client.post("/predict", json=body).json()  # the unbatched server
        assert "batch_size" not in alone and r.json()["seed"] == body["seed"]
        for k, v in alone["actions"].items():
            np.testing.assert_allclose(r.json()["actions"][k], v, rtol=0, atol=BATCH_ATOL * 10, err_msg=k)
    info = batched.get("/info").json()["batching"]
    assert info["calls_by_size"].get("4", 0) >= 1 and info["requests"] >= 4


def test_another_shape_runs_in_its_own_call_and_a_malformed_request_fails_alone(batched, request_body):
    del request_body["noise"]
    long_prompt = {**request_body, "seed": 3, "instruction": request_body["instruction"] + " and then wave"}
    malformed = {**request_body, "state": {**request_body["state"], "left_arm": [[0.0] * 3]}}
    answers = post_together(batched, [{**request_body, "seed": 1}, {**request_body, "seed": 2}, long_prompt,
                                      malformed])
    assert [r.status_code for r in answers[:3]] == [200] * 3, [r.text for r in answers]
    assert answers[3].status_code == 400 and answers[3].json()["error"]["field"].startswith("state")
    assert [r.json().get("batch_size") for r in answers[:3]] == [2, 2, None]
    assert answers[2].json()["seq_len"] > answers[0].json()["seq_len"]


def test_a_failing_batch_is_retried_request_by_request(batched, request_body, monkeypatch):
    backend = batched.app.state.engine.backend
    real = backend.run_batch

    def fails_when_batched(group):
        if len(group) > 1:
            raise RuntimeError("simulated batch failure")
        return real(group)

    monkeypatch.setattr(backend, "run_batch", fails_when_batched)
    del request_body["noise"]
    answers = post_together(batched, [{**request_body, "seed": 7 + i} for i in range(3)])
    assert [r.status_code for r in answers] == [200] * 3, [r.text for r in answers]
    assert all("batch_size" not in r.json() for r in answers)  # each ran alone


def test_the_fast_path_batches_in_static_buckets_built_at_boot(server_config, client, request_body, monkeypatch):
    """The fast path with static shapes (as on CUDA, here padded on the CPU in fp32): boot builds one set of
    buffers per bucket up to GR00T_MAX_BATCH's (1, 2, 4 for 3), /info names them, and three concurrent requests
    share one call in bucket 4, each answered as the unbatched reference server answers it."""
    import functools

    from models.experimental.gr00t.torch_fast import build

    monkeypatch.setattr(build, "fast_policy_from_reference",
                        functools.partial(build.fast_policy_from_reference, pad=True))
    config = with_config(server_config, max_batch=3, batch_window_ms=1000.0, torch_path="fast")
    del request_body["noise"]
    bodies = [{**request_body, "seed": 20 + i} for i in range(3)]
    with TestClient(create_app(config), raise_server_exceptions=False) as fast:
        policy = fast.app.state.engine.backend.policy
        assert policy.pad and sorted(e[0].input_ids.shape[0] for e in policy._static.values()) == [1, 2, 4]
        info = fast.get("/info").json()
        answers = post_together(fast, bodies)
    assert info["backend"]["path"] == "fast" and info["batching"]["static_buckets"] == [1, 2, 4]
    assert [r.status_code for r in answers] == [200] * 3, [r.text for r in answers]
    assert [r.json()["batch_size"] for r in answers] == [3] * 3
    for body, r in zip(bodies, answers):
        alone = client.post("/predict", json=body).json()  # the unbatched reference server
        for k, v in alone["actions"].items():
            np.testing.assert_allclose(r.json()["actions"][k], v, rtol=0, atol=BATCH_ATOL * 10, err_msg=k)
