#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The fleet demo (FLEET.md): a local Ray cluster serving 2 replicas of the policy server (synthetic:tiny weights,
CPU), several simulated robots against the one ingress address, and one replica killed (SIGKILL) mid-run.

Each robot is a session (``session_id``, ``seq``, ``control_hz``): every ``--period`` seconds it sends an
observation and gets a chunk. From its second request on it asks for real-time chunking with the chunk it still
holds (``rtc.prefix`` from the previous answer, the steps already executed at ``--hz`` cut off, ``rtc.delay``), so
its chunks stay continuous on whichever replica answers. A refused request (503 / 429 + Retry-After) is sent
again after ``min(Retry-After, --retry-s)``; meanwhile the robot goes on executing the chunk it holds.

At ``--kill-at`` seconds the replica holding the most robots is killed. The report, per robot: requests, answers,
retryable refusals, other errors, whether its session moved and where, and the longest time without a new chunk
(the gap; the robot's chunk covers horizon / hz = 16 / 30 Hz ≈ 0.53 s). Bounded by ``--seconds``; loopback only;
Ray is shut down and the script checks that no Ray process is left.

    make fleet-demo                                   # 4 robots, 20 s, kill at 8 s
    .venv-fleet/bin/python code/scripts/demo/fleet_demo.py --robots 6 --seconds 30 --kill-at 10 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # code/scripts: bench_http's helpers
from bench_http import cpu_model


def call(url: str, path: str, body: dict | None = None, timeout_s: float = 30.0) -> tuple[int, dict, dict]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, json.loads(e.read() or b"{}")
    except (urllib.error.URLError, OSError, ValueError) as e:
        return 0, {}, {"error": {"rule": f"{type(e).__name__}: {e}"}}


class Robot(threading.Thread):
    def __init__(self, name: str, url: str, request: dict, args, stop: threading.Event):
        super().__init__(name=name, daemon=True)
        self.url, self.request, self.args, self.stop_event = url, request, args, stop
        self.events: list[dict] = []  # one per request: t, status, replica, moved_from, latency_s
        self.in_flight_since: float | None = None  # perf_counter when the request now in flight was sent

    def run(self) -> None:
        from gr00t_client.clients import rtc_prefix

        a, seq, last, last_at = self.args, 0, None, None
        t0 = time.perf_counter()
        while not self.stop_event.is_set():
            seq += 1
            body = {**self.request, "seed": seq, "session_id": self.name, "seq": seq, "control_hz": a.hz,
                    "return_normalized": True}
            if last is not None:  # continue the chunk the robot holds, wherever the session is served now
                executed = min(int((time.perf_counter() - last_at) * a.hz), len(last["action_pred_normalized"]) - 1)
                body["rtc"] = {"variant": "inpaint", "delay": a.delay, "prefix": rtc_prefix(last, executed)}
            sent = self.in_flight_since = time.perf_counter()
            status, headers, reply = call(self.url, "/predict", body)
            done, self.in_flight_since = time.perf_counter(), None
            event = {"t": round(sent - t0, 3), "latency_s": round(done - sent, 4), "status": status, "seq": seq}
            if status == 200:
                last, last_at = reply, sent
                event.update(replica=reply["fleet"]["replica"], moved_from=reply["fleet"].get("moved_from"),
                             rtc_frozen=(reply.get("rtc") or {}).get("frozen"))
            else:
                event["error"] = (reply.get("error") or {}).get("rule")
                event["retry_after"] = headers.get("retry-after")
            self.events.append(event)
            wait = a.period if status == 200 else min(float(headers.get("retry-after") or a.retry_s), a.retry_s)
            self.stop_event.wait(max(0.0, wait - (time.perf_counter() - sent)))

    def report(self, kill_t: float | None) -> dict:
        ok = [e for e in self.events if e["status"] == 200]
        times = [e["t"] + e["latency_s"] for e in ok]  # when each chunk arrived
        gaps = [b - a for a, b in zip(times, times[1:])]
        replicas = [e["replica"] for e in ok]
        around = [b - a for a, b in zip(times, times[1:]) if kill_t is not None and a <= kill_t + 5 and b >= kill_t]
        return {"robot": self.name, "requests": len(self.events), "answered": len(ok),
                "answered_after_kill": sum(kill_t is not None and e["t"] > kill_t for e in ok),
                "retryable": sum(e["status"] in (429, 503) for e in self.events),
                "other_errors": sum(e["status"] not in (200, 429, 503) for e in self.events),
                "replicas": list(dict.fromkeys(replicas)), "moved": [e["moved_from"] for e in ok if e["moved_from"]],
                "max_gap_s": round(max(gaps), 3) if gaps else None,
                "gap_at_kill_s": round(max(around), 3) if around else None,
                "latency_p50_s": round(sorted(e["latency_s"] for e in ok)[len(ok) // 2], 4) if ok else None}


def fleet_counters(url: str) -> dict:
    """The ingress's own counters from the fleet's /metrics: retries by reason, failover errors, session moves."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("gr00t_fleet_") and s.name.endswith("_total") and "route" not in s.labels:
                key = s.name[len("gr00t_fleet_"):-len("_total")] + "".join(f"_{v}" for v in s.labels.values())
                out[key] = int(s.value)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--robots", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--kill-at", type=float, default=8.0, help="seconds into the run (negative: never)")
    ap.add_argument("--period", type=float, default=0.25, help="seconds between one robot's requests")
    ap.add_argument("--hz", type=float, default=30.0, help="the robots' control rate")
    ap.add_argument("--delay", type=int, default=3, help="rtc.delay: steps frozen from the held chunk")
    ap.add_argument("--retry-s", type=float, default=0.1, help="longest wait before resending a refused request")
    ap.add_argument("--version", default="n15", choices=("n15", "n17"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import ray
    from ray import serve

    from gr00t_fleet.app import build
    from gr00t_fleet.local import free_port, start_local, stop_local

    temp_dir = tempfile.mkdtemp(prefix="gr00t-ray-", dir="/tmp")
    cache = Path(os.environ.get("GR00T_CACHE", Path.home() / ".cache" / "gr00t-p150"))
    env = {"GR00T_VERSION": args.version, "GR00T_WEIGHTS": "synthetic:tiny", "GR00T_WARMUP_RUNS": "1",
           "GR00T_CACHE": str(cache), "GR00T_TORCH_DTYPE": "float32"}
    t_start = time.time()
    print(f"==> local Ray cluster (2 CPUs, temp {temp_dir}) and the fleet: 2 CPU replicas, {args.version} "
          "synthetic:tiny", flush=True)
    url = start_local(temp_dir, free_port())
    robots: list[Robot] = []
    result: dict = {}
    try:
        serve.run(build({"replicas": 2, "env": env, "health_check_period_s": 1.0}), blocking=False)
        info = {}
        for _ in range(240):
            status, _, info = call(url, "/info")
            if status == 200 and sum(r["state"] == "ready" for r in info["fleet"]["replicas"]) == 2:
                break
            time.sleep(0.5)
        else:
            raise SystemExit(f"the fleet did not come up: {info}")
        print(f"==> fleet ready in {time.time() - t_start:.1f} s at {url}: replicas "
              + ", ".join(f"{r['id']} (pid {r['pid']})" for r in info["fleet"]["replicas"]), flush=True)
        _, _, demo = call(url, "/demo")
        request = {k: v for k, v in demo["request"].items() if k != "noise"}
        stop = threading.Event()
        robots = [Robot(f"robot-{i}", url, request, args, stop) for i in range(args.robots)]
        t0 = time.perf_counter()
        for r in robots:
            r.start()
        kill_t, victim, in_flight = None, None, None
        while time.perf_counter() - t0 < args.seconds:
            time.sleep(0.05)
            if kill_t is None and 0 <= args.kill_at <= time.perf_counter() - t0:
                held: dict[str, list[Robot]] = {}
                for r in robots:
                    ok = [e for e in r.events if e["status"] == 200]
                    if ok:
                        held.setdefault(ok[-1]["replica"], []).append(r)
                victim = max(held, key=lambda k: len(held[k]))
                now = time.perf_counter()
                busy = [r for r in held[victim] if r.in_flight_since and now - r.in_flight_since > 0.002]
                if not busy and time.perf_counter() - t0 < args.kill_at + 1.0:
                    continue  # kill while one of its robots has a request in flight (for 1 s at most)
                pid = next(r["pid"] for r in info["fleet"]["replicas"] if r["id"] == victim)
                kill_t, in_flight = time.perf_counter() - t0, len(busy)
                os.kill(pid, signal.SIGKILL)
                print(f"==> {kill_t:.2f} s: killed replica {victim} (pid {pid}), which held "
                      f"{len(held[victim])} robots, {len(busy)} with a request in flight", flush=True)
        stop.set()
        for r in robots:
            r.join(30)
        reports = [r.report(kill_t) for r in robots]
        _, _, after = call(url, "/info")
        ingress = fleet_counters(url)
        result = {"machine": cpu_model(), "nproc": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                                          time.gmtime()),
                  "command": " ".join(sys.argv), "args": {k: str(v) for k, v in vars(args).items()},
                  "ray": ray.__version__, "robots": reports,
                  "killed": {"replica": victim, "at_s": kill_t, "robots_with_a_request_in_flight": in_flight},
                  "ingress": ingress,
                  "replicas_after": [{"id": r["id"], "state": r["state"]} for r in after.get("fleet", {}).get(
                      "replicas", [])],
                  "totals": {k: sum(r[k] for r in reports) for k in ("requests", "answered", "retryable",
                                                                     "other_errors")}}
    finally:
        left = stop_local(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
    if not result:
        return 1
    result["processes_left"] = left
    print(f"\n{'robot':<9} {'requests':>8} {'answered':>8} {'retryable':>9} {'errors':>6} {'max gap s':>9} "
          f"{'gap@kill s':>10}  replicas (moved from)")
    for r in result["robots"]:
        print(f"{r['robot']:<9} {r['requests']:>8} {r['answered']:>8} {r['retryable']:>9} {r['other_errors']:>6} "
              f"{r['max_gap_s'] or 0:>9.3f} {r['gap_at_kill_s'] or 0:>10.3f}  {' -> '.join(r['replicas'])}"
              + (f" (moved from {', '.join(r['moved'])})" if r["moved"] else ""))
    t = result["totals"]
    print(f"\ntotal: {t['requests']} requests, {t['answered']} answered, {t['retryable']} retryable refusals, "
          f"{t['other_errors']} other errors; Ray processes left: {len(left)}; machine: {result['machine']}")
    print(f"ingress counters: {result['ingress']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")
    killed = result["killed"]["at_s"] is not None
    lost = [r["robot"] for r in result["robots"]
            if r["answered"] == 0 or r["other_errors"] or (killed and not r["answered_after_kill"])]
    return 1 if lost or left else 0


if __name__ == "__main__":
    sys.exit(main())
