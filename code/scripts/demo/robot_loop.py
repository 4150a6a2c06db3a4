#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A simulated robot at a fixed control rate against a running server, over any protocol (an action-chunk broker).

Each tick the robot executes one action of its current chunk. When ``--ask-at`` actions (or fewer) remain and
no request is in flight, it sends the current observation (the demo frames and state) on a background thread.
When the answer arrives, the robot switches to it, skipping the steps that elapsed since the observation was
taken (they are in the past). Reports per-request latency (p50/p90/p99), ticks that found no action left
(starvation), the age of each action's observation when it ran (staleness), the requests in flight, and the
switch discontinuity: at each switch, max |new chunk's action − the action the old chunk had next|. Bounded
by ``--seconds``; loopback only.

    python code/scripts/demo/robot_loop.py --protocol http|zmq|openpi --url http://127.0.0.1:P [--zmq-port Z]
        [--openpi-port O] [--hz 30] [--seconds 20] [--ask-at 8] [--rtc inpaint|guided ...] [--json out.json]

``--rtc V`` runs the loop once more per protocol as a robot session with server-side real-time chunking of
variant V (SERVING.md §12): the server derives the frozen steps from its own latency for that session.
``make robot-demo [GR00T_VERSION=n17] [ROBOT_RTC="inpaint guided"]`` boots a synthetic:tiny server and runs it
for 20 s per protocol and variant.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # bench_protocols: the demo observation
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # code/scripts: bench_http's shared client helpers
from bench_http import cpu_model, summary
from bench_protocols import demo_observation
from gr00t_client import HttpClient, OpenpiClient, PolicyError, ZmqClient


def percentile(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 2) if values else float("nan")


def stacked(actions: dict) -> np.ndarray:
    return np.concatenate([actions[k] for k in sorted(actions)], axis=-1)


def run(client, obs: dict, hz: float, seconds: float, ask_at: int, first: np.ndarray,
        session: dict | None = None) -> dict:
    """The loop, starting with ``first`` (a chunk answered before the clock starts) as the current chunk.
    ``session``: options sent with every request (``session_id``, ``control_hz``, ``rtc``); ``seq`` counts."""
    period = 1.0 / hz
    chunk: list[np.ndarray] = list(first)
    chunk_obs_tick = 0  # the tick whose observation the current chunk answers
    pending: dict = {}
    lock = threading.Lock()
    latencies, staleness, in_flight_max, starved, executed, requests = [], [], 0, 0, 0, 0
    jumps = []  # at each switch: how far the new chunk's action is from the one the old chunk had next

    def ask(tick: int):
        t = time.perf_counter()
        options = {"seed": 1000 + requests}  # fresh noise per chunk, as a robot's sampler would draw
        if session is not None:
            options.update(session, seq=session.get("seq", 0) + requests)
        actions, _ = client.get_action(obs, options)
        with lock:
            pending["answer"] = (tick, stacked(actions))
            latencies.append((time.perf_counter() - t) * 1e3)

    worker = None
    start = time.perf_counter()
    ticks = int(seconds * hz)
    for tick in range(ticks):
        with lock:
            answer = pending.pop("answer", None)
        if answer is not None:
            obs_tick, actions = answer
            skip = tick - obs_tick  # steps that ran (or were due) while the request was out
            old_next = chunk[0] if chunk else None
            chunk, chunk_obs_tick = list(actions[skip:]), obs_tick
            if old_next is not None and chunk:
                jumps.append(float(np.abs(chunk[0] - old_next).max()))
        if (worker is None or not worker.is_alive()) and len(chunk) <= ask_at:
            worker = threading.Thread(target=ask, args=(tick,), daemon=True)
            worker.start()
            requests += 1
        in_flight_max = max(in_flight_max, int(worker is not None and worker.is_alive()))
        if chunk:
            chunk.pop(0)
            staleness.append((tick - chunk_obs_tick) * period * 1e3)  # age of the observation it came from
            executed += 1
        else:
            starved += 1
        next_tick = start + (tick + 1) * period
        time.sleep(max(0.0, next_tick - time.perf_counter()))
    if worker is not None:
        worker.join(timeout=30)
    return {"ticks": ticks, "executed": executed, "starved_ticks": starved, "requests": requests,
            "in_flight_max": in_flight_max, "latency_ms": {"p50": percentile(latencies, 50),
                                                            "p90": percentile(latencies, 90),
                                                            "p99": percentile(latencies, 99), **summary(latencies)},
            "staleness_ms": {"p50": percentile(staleness, 50), "p90": percentile(staleness, 90),
                             "max": round(max(staleness), 2) if staleness else float("nan")},
            "switch_jump": {"median": round(float(np.median(jumps)), 6) if jumps else float("nan"),
                            "max": round(max(jumps), 6) if jumps else float("nan"), "switches": len(jumps)}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--protocol", choices=["http", "zmq", "openpi"], action="append", required=True)
    ap.add_argument("--url", required=True)
    ap.add_argument("--zmq-port", type=int)
    ap.add_argument("--openpi-port", type=int)
    ap.add_argument("--hz", type=float, default=30.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--ask-at", type=int, default=8, help="ask for the next chunk when this many actions remain")
    ap.add_argument("--rtc", action="append", choices=["inpaint", "guided"], default=[],
                    help="also run the loop as a session with server-side RTC of this variant (repeatable), on "
                         "every protocol given")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if not (1 <= args.hz <= 1000 and 0 < args.seconds <= 600):
        ap.error("--hz must be in [1, 1000] and --seconds in (0, 600]")
    obs, _ = demo_observation(args.url)
    del obs["noise"]  # each request gets its own seed (see run)
    results = {}
    for protocol in args.protocol:
        client = {"http": lambda: HttpClient(args.url), "zmq": lambda: ZmqClient(port=args.zmq_port),
                  "openpi": lambda: OpenpiClient(port=args.openpi_port)}[protocol]()
        first, _ = client.get_action(obs)  # connect and warm up outside the timed loop; the robot starts on it
        results[protocol] = run(client, obs, args.hz, args.seconds, args.ask_at, stacked(first))
        for variant in args.rtc:
            session = {"session_id": f"robot-loop-{protocol}-{variant}-{time.time_ns()}", "control_hz": args.hz}
            rtc = {"variant": variant}
            first, _ = client.get_action(obs, {**session, "seq": 0})  # the session's first chunk: nothing to steer
            try:
                client.get_action(obs, {**session, "seq": 1, "rtc": rtc})
            except PolicyError as exc:  # e.g. a backend without RTC
                print(f"{protocol}+{variant} skipped: {exc}")
                continue
            results[f"{protocol}+{variant}"] = run(client, obs, args.hz, args.seconds, args.ask_at, stacked(first),
                                                   session={**session, "seq": 2, "rtc": rtc})
        if hasattr(client, "close"):
            client.close()
    print(f"robot loop at {args.hz:g} Hz for {args.seconds:g} s per protocol, next chunk asked at "
          f"{args.ask_at} actions left; {cpu_model()}")
    print(f"{'protocol':<16}{'requests':>9}{'lat p50':>9}{'p90':>8}{'p99':>8}{'starved':>9}{'stale p50':>11}"
          f"{'p90':>8}{'in flight':>11}{'jump p50':>10}{'max':>9}   (ms; starved: ticks; jump: |Δ action|)")
    for p, r in results.items():
        lat, st = r["latency_ms"], r["staleness_ms"]
        print(f"{p:<16}{r['requests']:>9}{lat['p50']:>9.1f}{lat['p90']:>8.1f}{lat['p99']:>8.1f}{r['starved_ticks']:>9}"
              f"{st['p50']:>11.1f}{st['p90']:>8.1f}{r['in_flight_max']:>11}{r['switch_jump']['median']:>10.4f}"
              f"{r['switch_jump']['max']:>9.4f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"hz": args.hz, "seconds": args.seconds, "ask_at": args.ask_at,
                                         "cpu": cpu_model(), "protocols": results}, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
