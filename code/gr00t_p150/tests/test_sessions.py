# SPDX-License-Identifier: Apache-2.0
"""Robot sessions (SERVING.md §12): the store's bounds (LRU count, idle TTL), ``seq`` ordering, and /predict with
and without a session: an old observation is refused with 409 before any work, sessionless requests are
unchanged, /reset forgets."""

from __future__ import annotations

import pytest

from gr00t_p150.server.sessions import SessionConflict, SessionStore


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_seq_must_grow_within_a_session_and_a_claim_holds_it():
    store = SessionStore(max_sessions=4, ttl_s=10)
    store.claim("arm", 1)
    store.claim("arm", 5)
    with pytest.raises(SessionConflict, match="seq 5 is not after this session's last seq 5"):
        store.claim("arm", 5)  # the same seq again (a retry racing the original, or a replay)
    with pytest.raises(SessionConflict):
        store.claim("arm", 3)
    store.claim("other", 3)  # sessions are independent
    store.claim("arm", None)  # no seq: no ordering asked for
    assert store.reset("arm") and not store.reset("arm")
    store.claim("arm", 0)  # a reset session starts again


def test_sessions_are_bounded_in_count_and_idle_time():
    clock = Clock()
    store = SessionStore(max_sessions=2, ttl_s=10, clock=clock)
    store.claim("a", 1)
    clock.t = 1
    store.claim("b", 1)
    clock.t = 2
    store.claim("a", 2)  # a is now the most recently used
    store.claim("c", 1)  # full: b (least recently used) goes
    assert len(store) == 2 and store.evicted == 1
    store.claim("b", 1)  # b is new again, so seq 1 is fine; a goes
    clock.t = 20
    store.claim("d", 1)  # everything older than 10 s idle is gone first
    assert len(store) == 1 and store.expired == 2 and store.evicted == 2
    assert store.describe() == {"sessions": 1, "max_sessions": 2, "ttl_s": 10, "evicted": 2, "expired": 2}


def test_predict_with_a_session(client, request_body):
    engine = client.app.state.engine
    calls = []
    prepare = engine.prepare

    def counting_prepare(*args, **kwargs):
        calls.append(1)
        return prepare(*args, **kwargs)

    engine.prepare = counting_prepare
    try:
        plain = client.post("/predict", json=request_body)
        assert plain.status_code == 200 and "session" not in plain.json()
        first = client.post("/predict", json={**request_body, "session_id": "arm-1", "seq": 7, "control_hz": 30})
        assert first.status_code == 200, first.text
        body = first.json()
        assert body["actions"] == plain.json()["actions"]  # a session changes nothing of the answer
        assert body["session"]["id"] == "arm-1" and body["session"]["seq"] == 7 and body["session"]["requests"] == 1
        assert body["session"]["control_hz"] == 30 and body["session"]["latency_ms_p90"] > 0
        n = len(calls)
        old = client.post("/predict", json={**request_body, "session_id": "arm-1", "seq": 7})
        assert old.status_code == 409, old.text
        assert old.json()["error"]["field"] == "seq" and "is not after" in old.json()["error"]["rule"]
        assert len(calls) == n  # refused before any work
        assert client.post("/predict", json={**request_body, "session_id": "arm-1", "seq": 8}).json()[
            "session"]["requests"] == 2
        reset = client.post("/reset", json={"session_id": "arm-1"})
        assert reset.status_code == 200 and reset.json() == {"session_id": "arm-1", "reset": True}
        assert client.post("/predict", json={**request_body, "session_id": "arm-1", "seq": 1}).status_code == 200
        lone = client.post("/predict", json={**request_body, "seq": 3})
        assert lone.status_code == 400 and lone.json()["error"]["field"] == "seq"
        bad = client.post("/predict", json={**request_body, "session_id": "a b"})
        assert bad.status_code == 400 and bad.json()["error"]["field"] == "session_id"
        assert client.get("/info").json()["sessions"]["sessions"] >= 1
    finally:
        engine.prepare = prepare


def test_inpaint_rtc_freezes_the_steps_the_robot_will_run_from_the_previous_chunk(client, request_body):
    """A 10-chunk rollout of one session at 30 Hz (random weights: a property of the algorithm, not a policy).
    With ``rtc: inpaint`` each new chunk's first ``frozen`` steps are the previous chunk's steps
    ``offset … offset + frozen``, bit for bit (N1.5's actions are absolute, so model space maps the same way both
    times), and the jump at the switch is zero; without it the same seeds jump. The sampler without ``inpaint``
    is untouched (the sessionless answer equals the demo golden elsewhere)."""
    import numpy as np

    del request_body["noise"]
    horizon = client.app.state.engine.backend.action_shape[0]

    def rollout(sid: str, rtc: dict | None):
        chunks, plans = [], []
        for i in range(10):
            body = {**request_body, "seed": 100 + i, "session_id": sid, "seq": i, "control_hz": 30}
            if rtc is not None and i:
                body["rtc"] = rtc
            r = client.post("/predict", json=body)
            assert r.status_code == 200, r.text
            chunks.append(np.concatenate([np.asarray(v, np.float32) for v in r.json()["actions"].values()], -1))
            plans.append(r.json().get("rtc"))
        return chunks, plans

    chunks, plans = rollout("rtc-arm", {"variant": "inpaint", "delay": 4})
    naive, _ = rollout("naive-arm", None)
    jumps_rtc, jumps_naive = [], []
    for i in range(1, 10):
        plan = plans[i]
        assert plan["variant"] == "inpaint" and plan["delay"] == 4, plan
        off, frozen = plan["offset"], plan["frozen"]
        assert 0 <= off and frozen == min(4, horizon - off) > 0, plan
        assert np.array_equal(chunks[i][:frozen], chunks[i - 1][off:off + frozen]), i  # exact
        jumps_rtc.append(np.abs(chunks[i][0] - chunks[i - 1][off]).max())
        jumps_naive.append(np.abs(naive[i][0] - naive[i - 1][off]).max())
    assert max(jumps_rtc) == 0.0 and min(jumps_naive) > 1e-3, (jumps_rtc, jumps_naive)
    # the unfrozen rest is still the model's own work, not a copy of the old chunk
    assert all(not np.array_equal(chunks[i][4:], chunks[i - 1][4:]) for i in range(1, 10))

    default = client.post("/predict", json={**request_body, "session_id": "rtc-arm", "seq": 10,
                                            "rtc": {"variant": "inpaint"}}).json()["rtc"]
    assert default["delay"] >= 1  # ceil(p90 latency × 30 Hz) from the session's own history
    first = client.post("/predict", json={**request_body, "session_id": "fresh", "rtc": {"variant": "inpaint"}})
    assert first.json()["rtc"] == {"variant": "inpaint", "frozen": 0, "offset": None, "delay": None,
                                   "reason": "no previous chunk in this session"}
    lone = client.post("/predict", json={**request_body, "rtc": {"variant": "inpaint"}})
    assert lone.status_code == 400 and lone.json()["error"]["field"] == "rtc"
