# SPDX-License-Identifier: Apache-2.0
"""Real-time chunking without server memory (SERVING.md §12): the client sends the previous chunk's rows still
ahead of the robot as ``rtc.prefix`` (with ``rtc.delay``), and the server steers the new chunk onto them exactly
as it does onto a session's stored chunk, so a robot whose replica died continues RTC on another one. Both
versions (N1.7 re-expresses the absolute actions against the new state), both variants, bit for bit; the
refusals of a malformed prefix; the same over ZMQ and openpi with ndarrays."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gr00t_client.clients import rtc_prefix

from models.experimental.gr00t.common.versions import VERSIONS

from .wire_clients import groot_observation, openpi_observation, serve_every_protocol

SLOW_HZ = 1e-3  # round(Δt · control_hz) = 0 for any Δt under 500 s: the session path's offset is 0, deterministically


def post(http, body: dict) -> dict:
    r = http.post("/predict", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def demo_of(http) -> dict:
    """The demo request, seeded instead of its explicit noise, asking for the model-space chunk too."""
    body = http.get("/demo").json()["request"]
    del body["noise"]
    return {**body, "return_normalized": True}


def moved(body: dict) -> dict:
    """The same request with the robot moved a little (each state group's first value), so N1.7's re-expression
    of the previous absolute actions against the new state is not the identity."""
    state = {}
    for group, value in body["state"].items():
        a = np.array(value, dtype=np.float64)
        a.reshape(-1)[0] += 0.05
        state[group] = a.tolist()
    return {**body, "state": state}


@pytest.mark.parametrize("variant", ["inpaint", "guided"])
@pytest.mark.parametrize("version", VERSIONS)
def test_a_client_prefix_steers_the_chunk_exactly_as_the_session_s_stored_chunk(clients, version, variant):
    """The session path (the server remembers the first chunk; offset 0 by a slow control rate) and the client path
    (a sessionless request, and a fresh session on "another replica", sending the same rows as ``prefix`` with the
    same delay) give bit-identical chunks; the plans differ only in ``source``."""
    http = clients(version)
    body = demo_of(http)
    sid = f"prefix-{version}-{variant}"
    first = post(http, {**body, "session_id": sid, "seq": 0, "control_hz": SLOW_HZ, "seed": 1})
    rtc = {"variant": variant, "delay": 3}
    nxt = {**moved(body), "seed": 2}
    remembered = post(http, {**nxt, "session_id": sid, "seq": 1, "rtc": rtc})
    prefix = rtc_prefix(first, 0)
    sent = post(http, {**nxt, "rtc": {**rtc, "prefix": prefix}})
    failover = post(http, {**nxt, "session_id": f"{sid}-elsewhere", "seq": 2, "rtc": {**rtc, "prefix": prefix}})
    plain = post(http, nxt)

    horizon = len(first["action_pred_normalized"])
    want = {"variant": variant, "delay": 3, "offset": 0, "frozen": 3,
            "overlap": horizon if variant == "guided" else 3, **({"beta": 5.0} if variant == "guided" else {})}
    assert remembered["rtc"] == {**want, "source": "session"}, remembered["rtc"]
    assert sent["rtc"] == failover["rtc"] == {**want, "source": "client"}, sent["rtc"]
    for other in (sent, failover):
        assert other["actions"] == remembered["actions"]  # bit for bit (JSON floats of the same float32 values)
        assert other["action_pred_normalized"] == remembered["action_pred_normalized"]
    assert sent["actions"] != plain["actions"]  # the prefix did steer
    assert "session" not in sent and failover["session"]["requests"] == 1
    if variant == "inpaint" and version == "n15":  # absolute actions: the frozen rows are the previous ones
        assert sent["action_pred_normalized"][:3] == first["action_pred_normalized"][:3]


@pytest.mark.parametrize("variant", ["inpaint", "guided"])
def test_a_prefix_from_a_later_step_is_the_session_plan_at_that_offset(clients, variant):
    """With ``executed`` steps gone (offset 5 on the session path, which the HTTP tests cannot pin), the job of the
    client's rows 5 … H − 1 puts the same target on the prepared N1.7 request as the session plan does."""
    import torch

    from gr00t_p150.server.rtc import RtcPrefix, prefix_plan, rtc_plan
    from gr00t_p150.server.sessions import Session
    from models.experimental.gr00t.common.observation import parse_observation

    http = clients("n17")
    engine = http.app.state.engine
    body = demo_of(http)
    first = post(http, {**body, "seed": 1})
    horizon, hz, executed = len(first["action_pred_normalized"]), 10.0, 5
    session = Session("s", 0.0, 0.0, control_hz=hz, observed_at=100.0,
                      last_chunk_normalized=np.asarray(first["action_pred_normalized"], np.float32),
                      last_actions={k: np.asarray(v, np.float32) for k, v in first["actions"].items()})
    plan_s, job_s = rtc_plan(session, 100.0 + executed / hz, 4, horizon, variant)
    plan_c, job_c = prefix_plan(RtcPrefix.model_validate(rtc_prefix(first, executed)), 4, variant)
    assert plan_s["offset"] == executed and plan_c["offset"] == 0
    assert {k: v for k, v in plan_s.items() if k not in ("offset", "source")} == \
           {k: v for k, v in plan_c.items() if k not in ("offset", "source")}
    obs = parse_observation(moved(body), engine.layout)
    a, b = (engine.prepare(obs, noise=None, seed=2, state_dtype="float64") for _ in range(2))
    engine.attach_rtc(job_s, a)
    engine.attach_rtc(job_c, b)
    name = "guide" if variant == "guided" else "inpaint"
    pa, pb = getattr(a.inputs, name), getattr(b.inputs, name)
    assert torch.equal(pa.target, pb.target) and pa.target.abs().sum() > 0


def _refusal(http, body: dict) -> dict:
    import json

    r = http.post("/predict", content=json.dumps(body), headers={"Content-Type": "application/json"})  # NaN too
    assert r.status_code == 400, r.text
    return r.json()["error"]


def test_a_malformed_prefix_is_refused_with_its_field(client, request_body):
    layout = client.app.state.engine.layout
    horizon, action_dim = client.app.state.engine.action_shape
    body = {k: v for k, v in request_body.items() if k != "noise"}
    first = post(client, {**body, "return_normalized": True})
    good = rtc_prefix(first, 2)
    g0 = layout.action_keys[0]

    def refused(prefix=None, **rtc) -> dict:
        return _refusal(client, {**body, "rtc": {"variant": "inpaint", "delay": 3, "prefix": prefix or good, **rtc}})

    assert post(client, {**body, "rtc": {"variant": "inpaint", "delay": 3, "prefix": good}})["rtc"]["frozen"] == 3
    no_delay = _refusal(client, {**body, "rtc": {"variant": "inpaint", "prefix": good}})
    assert no_delay["field"] == "rtc.delay" and "required with prefix" in no_delay["rule"]
    short = {**good, "actions": {**good["actions"], g0: good["actions"][g0][:-1]}}
    assert refused(short)["field"] == f"rtc.prefix.actions.{g0}"
    narrow = {**good, "normalized": [r[:-1] for r in good["normalized"]]}
    err = refused(narrow)
    assert err["field"] == "rtc.prefix.normalized" and str(action_dim) in err["rule"]
    thin = {**good, "actions": {**good["actions"], g0: [r[:-1] for r in good["actions"][g0]]}}
    assert refused(thin)["field"] == f"rtc.prefix.actions.{g0}"
    extra = {**good, "actions": {**good["actions"], "tail": good["actions"][g0]}}
    assert refused(extra)["field"] == "rtc.prefix.actions.tail"
    missing = {**good, "actions": {k: v for k, v in good["actions"].items() if k != g0}}
    assert refused(missing)["field"] == f"rtc.prefix.actions.{g0}"
    nan = {**good, "normalized": [[math.nan] * action_dim] + good["normalized"][1:]}
    assert refused(nan)["field"] == "rtc.prefix.normalized"
    huge = {**good, "actions": {**good["actions"], g0: [[1e39] * len(r) for r in good["actions"][g0]]}}
    assert refused(huge)["field"] == f"rtc.prefix.actions.{g0}"  # finite in JSON, not as float32
    long = {"normalized": [[0.0] * action_dim] * (horizon + 1),
            "actions": {k: [[0.0] * d] * (horizon + 1) for k, d in layout.action_dims.items()}}
    err = refused(long)
    assert err["field"] == "rtc.prefix.normalized" and str(horizon) in err["rule"]
    empty = {"normalized": [], "actions": {k: [] for k in layout.action_dims}}
    assert refused(empty)["field"] == "rtc.prefix.normalized"
    assert _refusal(client, {**body, "rtc": {"variant": "inpaint", "delay": 3,
                                             "prefix": {"normalized": good["normalized"]}}})["field"] == \
        "rtc.prefix.actions"
    assert _refusal(client, {**body, "rtc": {"variant": "inpaint"}})["field"] == "rtc"  # neither session nor prefix
    stopped = post(client, {**body, "rtc": {"variant": "inpaint", "delay": 0, "prefix": good}})["rtc"]
    assert stopped["frozen"] == 0 and stopped["source"] == "client" and "reason" in stopped


@pytest.fixture(scope="module")
def wired(server_env):
    with serve_every_protocol(server_env, "n15") as s:
        yield s


def test_a_prefix_travels_as_ndarrays_over_zmq_and_openpi(wired):
    """Over ZMQ (``options``) and openpi (observation keys) the prefix's rows may be msgpack-numpy ndarrays, and
    ``return_normalized`` gives the model-space chunk they are cut from; the answer is HTTP's, bit for bit."""
    from openpi_client.websocket_client_policy import WebsocketClientPolicy

    http, zmq_client, config, demo = wired
    layout = http.app.state.engine.layout
    obs = groot_observation(demo, layout, layout.wire.language_key)
    first, info = zmq_client.get_action(obs, {"seed": 1, "return_normalized": True})
    normalized = info["action_pred_normalized"]
    assert normalized.dtype == np.float32 and normalized.shape == (1, *http.app.state.engine.action_shape)
    prefix = {"normalized": normalized[0, 2:], "actions": {k: v[0, 2:] for k, v in first.items()}}
    rtc = {"variant": "inpaint", "delay": 3, "prefix": prefix}
    second, info = zmq_client.get_action(obs, {"seed": 2, "rtc": rtc})
    assert info["rtc"]["source"] == "client" and info["rtc"]["frozen"] == 3, info["rtc"]
    body = {k: v for k, v in demo.items() if k != "noise"}
    as_lists = {"normalized": prefix["normalized"].tolist(),
                "actions": {k: v.tolist() for k, v in prefix["actions"].items()}}
    over_http = post(http, {**body, "seed": 2, "rtc": {"variant": "inpaint", "delay": 3, "prefix": as_lists}})
    for k in layout.action_keys:
        assert np.array_equal(second[k][0], np.asarray(over_http["actions"][k], np.float32)), k
        assert np.array_equal(second[k][0, :3], first[k][0, 2:5]), k  # N1.5: the frozen rows, exactly

    policy = WebsocketClientPolicy(host="127.0.0.1", port=config.openpi_port)
    base = openpi_observation(demo, layout)
    got = policy.infer({**base, "seed": 1, "return_normalized": True})
    assert np.array_equal(got["action_pred_normalized"], normalized[0])
    got = policy.infer({**base, "seed": 2, "rtc": {**rtc, "delay": np.int64(3)}})  # a numpy scalar too
    assert got["rtc"] == info["rtc"]
    for k in layout.action_keys:
        assert np.array_equal(got[f"action/{k}"], second[k][0]), k
    with pytest.raises(RuntimeError, match="rtc.prefix.normalized"):
        policy.infer({**base, "rtc": {**rtc, "prefix": {**prefix, "normalized": prefix["normalized"][:, :-1]}}})
    with pytest.raises(RuntimeError, match="return_normalized"):
        policy.infer({**base, "return_normalized": "yes"})
