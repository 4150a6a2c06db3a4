#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Micro-batching benchmark (SERVING.md §13): 1, 2, 4, 8 simulated robots against one server, unbatched
(``GR00T_MAX_BATCH=1``) and batched (``GR00T_MAX_BATCH`` = the most robots, ``GR00T_BATCH_WINDOW_MS``), in one run on
one machine.

Each robot is a closed loop at ``--hz``: at every tick of its clock, when no request of its own is in flight, it
sends its observation (the demo request with a fresh seed: pre-encoded JSON, so the client costs almost nothing)
and waits for the answer; a tick that finds its request still out is skipped. Every robot starts at the same time
(the worst case for the unbatched server, the best for batching). Per mode and robot count: throughput (answers
per second, all robots together), the client-side latency p50 / p99, and the mean batch size the answers report.
The servers are booted here, one at a time, on 127.0.0.1 (loopback only), and stopped after their mode.

    python code/scripts/bench/bench_batching.py [--version n15|n16|n17] [--weights synthetic:tiny] [--robots 1,2,4,8]
        [--hz 30] [--seconds 10] [--min-requests 3] [--window-ms 3] [--torch-path reference|fast]
        [--torch-dtype float32|bfloat16] [--json out.json]

``make bench-batching`` runs it on synthetic:tiny; ``make bench-batching BATCH_WEIGHTS=synthetic:full
BATCH_SECONDS=1 BATCH_MIN=2`` on the full-size checkpoint (a CPU request takes seconds there: each robot sends
``--min-requests`` requests). Random weights: a speed measurement, not a policy.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # code/scripts: bench_http's shared client helpers
from bench_http import cpu_model, get

ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def boot(env: dict, log_path: Path, timeout_s: float = 1800) -> tuple[subprocess.Popen, str]:
    """A server process on a free loopback port; returns once /health answers 200."""
    port = free_port()
    cmd = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port),
           "--http", "gr00t_p150.server.web.h11:GuardedH11Protocol", "gr00t_p150.server.app:app"]
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "code"), **env},
                            stdout=log, stderr=subprocess.STDOUT)
    url, t0 = f"http://127.0.0.1:{port}", time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        if proc.poll() is not None:
            raise SystemExit(f"bench_batching: the server exited during boot; see {log_path}")
        try:
            urllib.request.urlopen(url + "/health", timeout=2)
            return proc, url
        except OSError:
            time.sleep(1)
        if int(time.perf_counter() - t0) % 60 == 0:
            print(f"    still booting ({time.perf_counter() - t0:.0f} s, log {log_path})", flush=True)
    proc.terminate()
    raise SystemExit(f"bench_batching: the server was not ready after {timeout_s:.0f} s; see {log_path}")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def post(url: str, body: bytes) -> dict:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=1800) as resp:
        return json.loads(resp.read())


def robots(url: str, request: dict, n: int, hz: float, seconds: float, min_requests: int) -> dict:
    """``n`` closed-loop robots started together; runs ``seconds`` and until every robot has ``min_requests``."""
    bodies = [[json.dumps({**request, "seed": 10_000 * r + i}).encode() for i in range(256)] for r in range(n)]
    period, start = 1.0 / hz, threading.Barrier(n + 1)
    latencies: list[list[float]] = [[] for _ in range(n)]
    sizes: list[int] = []
    errors: list[str] = []
    t_end = [0.0]

    def robot(r: int):
        start.wait()
        t0, tick = time.perf_counter(), 0
        while True:
            now = time.perf_counter()
            if now - t0 >= seconds and len(latencies[r]) >= min_requests:
                return
            due = t0 + tick * period
            if now < due:
                time.sleep(due - now)
            t = time.perf_counter()
            try:
                answer = post(url + "/predict", bodies[r][len(latencies[r]) % 256])
            except OSError as exc:
                errors.append(f"robot {r}: {exc}")
                return
            latencies[r].append((time.perf_counter() - t) * 1e3)
            sizes.append(int(answer.get("batch_size", 1)))
            tick = int((time.perf_counter() - t0) / period) + 1  # the next tick after the answer
    threads = [threading.Thread(target=robot, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    t_end[0] = time.perf_counter() - t0
    if errors:
        raise SystemExit(f"bench_batching: {errors[0]}")
    every = [x for lat in latencies for x in lat]
    return {"robots": n, "requests": len(every), "wall_s": round(t_end[0], 3),
            "throughput_rps": round(len(every) / t_end[0], 3),
            "latency_ms_p50": round(float(np.percentile(every, 50)), 2),
            "latency_ms_p99": round(float(np.percentile(every, 99)), 2),
            "mean_batch_size": round(float(np.mean(sizes)), 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", default="n15", choices=("n15", "n16", "n17"))
    ap.add_argument("--weights", default="synthetic:tiny")
    ap.add_argument("--robots", default="1,2,4,8")
    ap.add_argument("--hz", type=float, default=30.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--min-requests", type=int, default=3)
    ap.add_argument("--window-ms", type=float, default=3.0)
    ap.add_argument("--torch-path", default="reference", choices=("reference", "fast"),
                    help="GR00T_TORCH_PATH of both servers (on a GPU: fast, with --torch-dtype bfloat16)")
    ap.add_argument("--torch-dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--json")
    args = ap.parse_args()
    counts = [int(x) for x in args.robots.split(",")]
    most = max(counts)
    modes = {"unbatched": {"GR00T_MAX_BATCH": "1"},
             "batched": {"GR00T_MAX_BATCH": str(most), "GR00T_BATCH_WINDOW_MS": str(args.window_ms)}}
    base_env = {"GR00T_VERSION": args.version, "GR00T_WEIGHTS": args.weights, "GR00T_TORCH_PATH": args.torch_path,
                "GR00T_TORCH_DTYPE": args.torch_dtype, "GR00T_MAX_QUEUE": str(max(8, most))}
    out = {"cpu": cpu_model(), "version": args.version, "weights": args.weights, "hz": args.hz,
           "seconds": args.seconds, "min_requests": args.min_requests, "window_ms": args.window_ms,
           "torch_path": args.torch_path, "torch_dtype": args.torch_dtype,
           "command": " ".join(sys.argv), "rows": []}
    logs = Path(tempfile.mkdtemp(prefix="gr00t-bench-batching-"))
    for mode, env in modes.items():
        print(f"==> {mode}: booting {args.version} {args.weights} ({env})", flush=True)
        proc, url = boot({**base_env, **env}, logs / f"{mode}.log")
        try:
            info = get(url + "/info")
            request = get(url + "/demo")["request"]
            request.pop("noise", None)
            print(f"    stage {info['stage']}, batching: {info['batching']}", flush=True)
            for _ in range(2):  # warm the request path (and the batcher)
                post(url + "/predict", json.dumps(request).encode())
            for n in counts:
                row = {"mode": mode, **robots(url, request, n, args.hz, args.seconds, args.min_requests)}
                out["rows"].append(row)
                print(f"    {n} robot(s): {row['throughput_rps']:.2f} answers/s, p50 {row['latency_ms_p50']:.1f} ms,"
                      f" p99 {row['latency_ms_p99']:.1f} ms, mean batch {row['mean_batch_size']:.2f}"
                      f" ({row['requests']} requests)", flush=True)
            out.setdefault("servers", {})[mode] = {"batching": get(url + "/info")["batching"]}
        finally:
            stop(proc)
    print(f"\n{args.version} {args.weights}, {args.hz:g} Hz closed-loop robots, CPU: {out['cpu']}")
    print("| robots | mode | answers/s | p50 ms | p99 ms | mean batch |")
    print("|---:|---|---:|---:|---:|---:|")
    for n in counts:
        for row in (r for r in out["rows"] if r["robots"] == n):
            print(f"| {n} | {row['mode']} | {row['throughput_rps']:.2f} | {row['latency_ms_p50']:.1f} | "
                  f"{row['latency_ms_p99']:.1f} | {row['mean_batch_size']:.2f} |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
