# SPDX-License-Identifier: Apache-2.0
"""The fleet on a real local Ray cluster: 2 CPU replicas of the single server behind the ingress.

In file order (the last tests kill and replace replicas): both replicas serve; answers equal the single server's bit
for bit; 100 requests of 4 sessions stay each on one replica; sessionless requests spread; a replica's full queue
answers 429 + Retry-After through the ingress; metrics per replica; a killed replica's sessions move (next seq,
RTC with the client's prefix, a request in flight retried, a server-side RTC request in flight told to retry); an
injected device loss takes a replica out of rotation until Ray replaces it; scale-down drains in-flight requests;
shutdown closes every backend and leaves no process behind."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from .conftest import http, processes_under

pytestmark = pytest.mark.fleet


@pytest.fixture(scope="module")
def demo(fleet):
    r = http(fleet.url, "/demo")
    assert r.status == 200, r.body
    return {k: v for k, v in r.body["request"].items() if k != "noise"}


def predict(fleet, body: dict, **fields):
    return http(fleet.url, "/predict", {**body, **fields})


def sessions_by_owner(ids: list[str], per_replica: int, prefix: str) -> dict[str, list[str]]:
    """Session names (new to the ingress: each test its own ``prefix``) that the rendezvous hash gives
    ``per_replica`` to each replica of ``ids``."""
    from gr00t_fleet.router import owner

    out: dict[str, list[str]] = {r: [] for r in ids}
    i = 0
    while any(len(v) < per_replica for v in out.values()):
        name = f"{prefix}-{i}"
        if len(out[owner(name, ids)]) < per_replica:
            out[owner(name, ids)].append(name)
        i += 1
    return out


def replica_of(reply) -> str:
    assert reply.status == 200, reply.body
    assert reply.headers["x-gr00t-replica"] == reply.body["fleet"]["replica"]
    return reply.body["fleet"]["replica"]


def test_rendezvous_moves_only_the_dead_replicas_sessions():
    from gr00t_fleet.router import owner

    before = {f"s{i}": owner(f"s{i}", ["a", "b", "c"]) for i in range(3000)}
    after = {s: owner(s, ["a", "c"]) for s in before}
    assert all(after[s] == o for s, o in before.items() if o != "b")  # nobody else moves
    assert {after[s] for s, o in before.items() if o == "b"} == {"a", "c"}  # b's sessions spread over both
    shares = [sum(o == r for o in before.values()) / len(before) for r in "abc"]
    assert all(0.28 < s < 0.39 for s in shares), shares


def test_both_replicas_are_ready_and_serve(fleet, demo):
    health = http(fleet.url, "/health")
    assert health.status == 200 and health.body["status"] == "ok", health.body
    assert [r["status"] for r in health.body["replicas"]] == ["ok", "ok"]
    info = http(fleet.url, "/info").body
    ids = sorted(r["id"] for r in info["fleet"]["replicas"])
    assert len(set(r["pid"] for r in info["fleet"]["replicas"])) == 2 and info["version"] == "n15"
    seen = {replica_of(predict(fleet, demo, seed=1, session_id=s))
            for s in sum(sessions_by_owner(ids, 1, "both").values(), [])}
    assert seen == set(ids)
    models = http(fleet.url, "/v1/models")
    assert models.status == 200 and models.body["data"][0]["ready"] is True


def test_answers_equal_the_single_server_bit_for_bit(fleet, single_server, demo):
    for fields in ({"seed": 7}, {"seed": 123, "session_id": "bitwise-a", "seq": 1}, {}):
        ours = predict(fleet, demo, return_normalized=True, **fields)
        theirs = http(single_server, "/predict", {**demo, "return_normalized": True, **fields})
        assert ours.status == theirs.status == 200, (ours.body, theirs.body)
        assert ours.body["actions"] == theirs.body["actions"]
        assert ours.body["action_pred_normalized"] == theirs.body["action_pred_normalized"]
        same = {k for k in theirs.body if k not in ("timing_ms", "session")}
        assert {k: ours.body[k] for k in same} == {k: theirs.body[k] for k in same}
    bad = {**demo, "state": {}}
    assert predict(fleet, bad).body == http(single_server, "/predict", bad).body  # the refusal, too
    assert predict(fleet, bad).status == 400


def test_100_requests_of_4_sessions_each_stay_on_one_replica(fleet, demo):
    ids = sorted(r["id"] for r in fleet.wait_ready(2))
    owners = sessions_by_owner(ids, 2, "sticky")
    sessions = sum(owners.values(), [])

    def robot(sid: str) -> list[str]:
        return [replica_of(predict(fleet, demo, seed=seq, session_id=sid, seq=seq, control_hz=30.0))
                for seq in range(25)]

    with ThreadPoolExecutor(4) as pool:
        served = dict(zip(sessions, pool.map(robot, sessions)))
    for sid, replicas in served.items():
        assert len(replicas) == 25 and set(replicas) == {next(r for r, s in owners.items() if sid in s)}, sid


def test_sessionless_requests_go_to_the_less_busy_replica(fleet, demo):
    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(lambda i: predict(fleet, demo, seed=i), range(16)))
    ok = [r for r in replies if r.status == 200]
    assert all(r.status in (200, 429) for r in replies)
    assert len({replica_of(r) for r in ok}) == 2


def test_a_full_replica_answers_429_with_retry_after_through_the_ingress(fleet, demo):
    with ThreadPoolExecutor(16) as pool:  # one session: one replica, whose GR00T_MAX_QUEUE is 2
        replies = list(pool.map(lambda i: predict(fleet, demo, seed=i, session_id="crowd"), range(16)))
    statuses = [r.status for r in replies]
    assert set(statuses) <= {200, 429} and 429 in statuses and 200 in statuses, statuses
    refused = next(r for r in replies if r.status == 429)
    assert int(refused.headers["retry-after"]) >= 1
    assert refused.body["error"]["retry_after_s"] == int(refused.headers["retry-after"])


def test_metrics_are_per_replica_with_the_fleets_own(fleet, demo):
    from prometheus_client.parser import text_string_to_metric_families

    assert predict(fleet, demo, seed=3).status == 200
    r = http(fleet.url, "/metrics")
    families = {f.name: f for f in text_string_to_metric_families(r.body["text"])}
    answered = [s for s in families["gr00t_policy_requests"].samples if s.name.endswith("_total")]
    assert len({s.labels["replica"] for s in answered}) == 2
    forwarded = [s for s in families["gr00t_fleet_requests"].samples
                 if s.name.endswith("_total") and s.labels["route"] == "/predict" and s.labels["status"] == "200"]
    assert forwarded and forwarded[0].value >= sum(s.value for s in answered if s.labels["status"] == "200") - 1e-9


def test_killing_a_replica_moves_its_sessions_and_loses_no_robot(fleet, demo):
    replicas = fleet.wait_ready(2)
    ids = sorted(r["id"] for r in replicas)
    victim = ids[0]
    pid = next(r["pid"] for r in replicas if r["id"] == victim)
    owners = sessions_by_owner(ids, 3, "kill")
    moving, staying = owners[victim], owners[ids[1]]
    last = {}
    for sid in moving + staying:  # each robot's first chunk, from its owner
        reply = predict(fleet, demo, seed=1, session_id=sid, seq=1, control_hz=30.0, return_normalized=True)
        assert replica_of(reply) == (victim if sid in moving else ids[1])
        last[sid] = reply.body
    # two requests in flight on the victim when it dies: a seeded one (retried), a server-side RTC one (told)
    _drill(fleet, victim, "hold", 3.0)
    out: dict[str, object] = {}
    threads = [threading.Thread(target=lambda: out.__setitem__("seeded", predict(
                   fleet, demo, seed=9, session_id=moving[0], seq=2, control_hz=30.0))),
               threading.Thread(target=lambda: out.__setitem__("rtc", predict(
                   fleet, demo, seed=9, session_id=moving[1], seq=2, control_hz=30.0,
                   rtc={"variant": "inpaint"})))]
    for t in threads:
        t.start()
    time.sleep(1.0)
    t_kill = time.time()
    os.kill(pid, signal.SIGKILL)
    for t in threads:
        t.join(60)
    seeded, rtc = out["seeded"], out["rtc"]
    assert seeded.status == 200 and replica_of(seeded) == ids[1], seeded.body
    assert seeded.body["fleet"]["moved_from"] == victim
    assert rtc.status == 503 and rtc.headers["retry-after"] == "1", rtc.body
    # every robot goes on: next seq accepted, RTC continued from the chunk the robot holds (rtc.prefix)
    from gr00t_client.clients import rtc_prefix

    for sid in moving + staying:
        seq = 3
        reply = predict(fleet, demo, seed=2, session_id=sid, seq=seq, control_hz=30.0,
                        rtc={"variant": "inpaint", "delay": 3, "prefix": rtc_prefix(last[sid], 4)})
        assert reply.status == 200, (sid, reply.body)
        assert reply.body["rtc"]["source"] == "client" and reply.body["rtc"]["frozen"] == 3
        assert reply.body["session"]["seq"] == seq
        assert replica_of(reply) == ids[1]
        if sid in moving[1:]:  # their first answer since the kill says where they came from
            assert reply.body["fleet"]["moved_from"] == victim
        else:  # moving[0] was told on its retried answer; the others never moved
            assert "moved_from" not in reply.body["fleet"]
    assert http(fleet.url, "/health").status == 200
    fleet.log.append(("kill", time.time() - t_kill))
    metrics = http(fleet.url, "/metrics").body["text"]
    assert 'gr00t_fleet_retries_total{reason="replica_died"} 1.0' in metrics
    assert "gr00t_fleet_failover_errors_total 1.0" in metrics
    fleet.wait_ready(2, exclude=(victim,))  # Ray starts a replacement


def _drill(fleet, replica: str, kind: str, seconds: float = 0.0) -> dict:
    from ray import serve

    handle = serve.get_deployment_handle("PolicyReplica", "default")
    return handle.drill.remote(kind, seconds, replica=replica).result(timeout_s=30)


def test_an_injected_device_loss_takes_the_replica_out_of_rotation(fleet, demo):
    replicas = fleet.wait_ready(2)
    ids = sorted(r["id"] for r in replicas)
    lost, other = ids
    owned = sessions_by_owner(ids, 2, "lost")[lost]
    assert _drill(fleet, lost, "device_lost")["state"] == "lost"
    for i, sid in enumerate(owned):  # its sessions are answered by the other replica at once
        reply = predict(fleet, demo, seed=i, session_id=sid)
        assert reply.status == 200 and replica_of(reply) == other, reply.body
    health = http(fleet.url, "/health")
    if any(r["id"] == lost for r in health.body["replicas"]):  # until Ray's health check has replaced it
        assert health.status == 200 and health.body["status"] == "degraded"
        assert next(r for r in health.body["replicas"] if r["id"] == lost)["status"] in ("lost", "unreachable")
    fleet.wait_ready(2, exclude=(lost,))


def test_scale_down_drains_requests_in_flight(fleet, demo):
    from ray import serve

    from gr00t_fleet.app import build

    ids = sorted(r["id"] for r in fleet.wait_ready(2))
    for r in ids:
        _drill(fleet, r, "hold", 2.0)
    owners = sessions_by_owner(ids, 1, "drain")
    with ThreadPoolExecutor(2) as pool:
        pending = [pool.submit(predict, fleet, demo, seed=5, session_id=owners[r][0]) for r in ids]
        time.sleep(0.5)
        serve.run(build({**fleet.args, "replicas": 1}), blocking=False)  # one replica goes, its request in flight
        replies = [p.result(60) for p in pending]
    assert [r.status for r in replies] == [200, 200], [r.body for r in replies]
    assert {replica_of(r) for r in replies} == set(ids)  # each answered where it was, the leaving one included
    deadline = time.time() + 60
    while len(http(fleet.url, "/info").body["fleet"]["replicas"]) != 1 and time.time() < deadline:
        time.sleep(0.5)
    assert len(http(fleet.url, "/info").body["fleet"]["replicas"]) == 1


def test_shutdown_leaves_no_process_behind(fleet):
    assert processes_under(fleet.temp_dir)  # Ray's processes carry its temp dir on their command line
    assert fleet.shutdown() == []  # none left 30 s after serve shutdown and ray shutdown
    logs = Path(fleet.temp_dir, "session_latest", "logs", "serve").glob("replica_*PolicyReplica*.log")
    closed = [f.name for f in logs if "closed its backend" in f.read_text(errors="replace")]
    assert len(closed) >= 2, closed  # the replica scaled down, and the last one at shutdown: backend.close() ran
