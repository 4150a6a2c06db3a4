#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The fleet's cost on one machine (FLEET.md): the single server vs the Ray Serve fleet of it, in one run.

Boots on 127.0.0.1, with the same weights and ``GR00T_*`` settings (fp32, ``OMP_NUM_THREADS=1``), the single server
(uvicorn) and a local Ray cluster serving ``gr00t_fleet.app:build`` with one 1-CPU replica, then measures:

(a) **the ingress hop**: N sequential POST /predict of the demo request (noise dropped, a seed added) from one
    client after W warm-ups, alternating single server / fleet request by request (the pair's order flips each
    time) so that load drifts hit both alike: client latency median / p99 of each, their differences (Ray Serve's
    HTTP proxy + the ingress + the handle call), and the servers' own ``timing_ms.total`` medians (the model).
(b) **throughput**: K closed-loop client threads, each its own ``session_id``, for T seconds against the single
    server, the fleet with 1 replica, then the fleet redeployed with 2 (sessions picked with
    ``gr00t_fleet.router.owner`` over the live replica ids to split evenly): answers/s, latency p50 / p99, and
    which replica served each session.

Each client keeps one HTTP/1.1 keep-alive connection (``http.client``). Everything shares this machine's cores, so
on 2 cores 2 replicas cannot double throughput: this measures correctness and overhead, not scaling. Ray is shut
down and the server stopped on every exit.

    .venv-fleet/bin/python code/scripts/bench/bench_fleet.py [--n 200] [--warmup 10] [--clients 4] [--seconds 15]
        [--json benchmarks/results/fleet_bench.json] [--plot media/fleet_overhead.png]

``make bench-fleet`` runs it (the .venv-fleet overlay: ``make fleet-venv``). Random weights: speed, not a policy.
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # code/scripts: bench_http's shared client helpers
from bench_http import cpu_model, summary, write_result

from gr00t_fleet.local import free_port, start_local, stop_local

ROOT = Path(__file__).resolve().parents[3]
CLIENT = "http.client.HTTPConnection, HTTP/1.1 keep-alive: one connection per client, reused for every request"


class Client:
    """One keep-alive connection to ``url``; a request on a connection the server closed while idle is sent once
    more on a new one (counted in ``reconnects``)."""

    def __init__(self, url: str, timeout_s: float = 600):
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.timeout_s = u.hostname, u.port, timeout_s
        self.conn: http.client.HTTPConnection | None = None
        self.reconnects = -1  # the first connect is not a reconnect

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
                self.reconnects += 1
            try:
                self.conn.request(method, path, body=body,
                                  headers={"Content-Type": "application/json"} if body is not None else {})
                r = self.conn.getresponse()
                return r.status, r.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def json(self, method: str, path: str, body: bytes | None = None) -> tuple[int, dict]:
        status, raw = self.request(method, path, body)
        return status, json.loads(raw)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def stats(values: list[float]) -> dict[str, float]:
    """bench_http's summary (median, p90, min) with p99, mean and max."""
    a = np.asarray(values, dtype=float)
    return {**summary(values), "p99": round(float(np.percentile(a, 99)), 3), "mean": round(float(a.mean()), 3),
            "max": round(float(a.max()), 3), "n": len(values)}


def lscpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")),
                "unknown")


# ---- the two servers ----
def boot_single(env: dict, log_path: Path, timeout_s: float = 300) -> tuple[subprocess.Popen, str]:
    """The single server as the manifests launch it (uvicorn, the guarded h11 protocol), ready when /health is 200."""
    port = free_port()
    cmd = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port), "--lifespan", "on",
           "--http", "gr00t_p150.server.web.h11:GuardedH11Protocol", "gr00t_p150.server.app:app"]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GR00T_", "TT_"))}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env={**base, **env, "PYTHONPATH": str(ROOT / "code")},
                                stdout=log, stderr=subprocess.STDOUT)
    url, deadline = f"http://127.0.0.1:{port}", time.time() + timeout_s
    while time.time() < deadline and proc.poll() is None:
        try:
            if Client(url, 5).request("GET", "/health")[0] == 200:
                return proc, url
        except OSError:
            pass
        time.sleep(0.5)
    stop_single(proc)
    raise SystemExit(f"bench_fleet: the single server did not start; see {log_path}:\n{log_path.read_text()[-2000:]}")


def stop_single(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def fleet_replicas(url: str) -> list[dict]:
    try:
        status, body = Client(url, 10).json("GET", "/info")
    except (OSError, ValueError):
        return []
    return body["fleet"]["replicas"] if status == 200 and "fleet" in body else []


def deploy(url: str, args: dict, n: int, timeout_s: float = 300) -> list[dict]:
    """``serve.run`` of the fleet with ``n`` replicas; returns once /info lists exactly ``n``, all ready."""
    from ray import serve

    from gr00t_fleet.app import build

    t0 = time.time()
    serve.run(build({**args, "replicas": n}), blocking=False)
    while time.time() - t0 < timeout_s:
        replicas = fleet_replicas(url)
        if len(replicas) == n and all(r["state"] == "ready" for r in replicas):
            print(f"    {n} replica(s) ready in {time.time() - t0:.1f} s: "
                  f"{', '.join(r['id'] + ' pid ' + str(r['pid']) for r in replicas)}", flush=True)
            return replicas
        time.sleep(0.5)
    raise SystemExit(f"bench_fleet: {n} replica(s) not ready in {timeout_s:.0f} s: {fleet_replicas(url)}")


# ---- the measurements ----
def predict(client: Client, body: bytes) -> tuple[float, dict]:
    """(client latency ms, answer) of one /predict; anything but 200 stops the benchmark."""
    t = time.perf_counter()
    status, raw = client.request("POST", "/predict", body)
    ms = (time.perf_counter() - t) * 1e3
    if status != 200:
        raise RuntimeError(f"/predict answered {status}: {raw[:300]!r}")
    return ms, json.loads(raw)


def overhead(single: str, fleet: str, demo: dict, n: int, warmup: int) -> dict:
    """(a): ``warmup`` + ``n`` pairs, one request to each side per pair, the order flipped every pair."""
    clients = {"single": Client(single), "fleet_1": Client(fleet)}
    client_ms: dict[str, list[float]] = {k: [] for k in clients}
    server_ms: dict[str, list[float]] = {k: [] for k in clients}
    replicas: set[str] = set()
    for i in range(warmup + n):
        body = json.dumps({**demo, "seed": i}).encode()  # the same request to both sides
        for side in (("single", "fleet_1") if i % 2 == 0 else ("fleet_1", "single")):
            ms, answer = predict(clients[side], body)
            if i >= warmup:
                client_ms[side].append(ms)
                server_ms[side].append(answer["timing_ms"]["total"])
            if side == "fleet_1":
                replicas.add(answer["fleet"]["replica"])
        if i >= warmup and (i - warmup + 1) % 50 == 0:
            print(f"    {i - warmup + 1}/{n} pairs: median single {np.median(client_ms['single']):.2f} ms, "
                  f"fleet {np.median(client_ms['fleet_1']):.2f} ms", flush=True)
    out = {k: {"client_ms": stats(client_ms[k]), "server_total_ms": stats(server_ms[k]),
               "reconnects": clients[k].reconnects} for k in clients}
    for c in clients.values():
        c.close()
    cs, cf = out["single"]["client_ms"], out["fleet_1"]["client_ms"]
    out["overhead_ms"] = {"median": round(cf["median"] - cs["median"], 3), "p99": round(cf["p99"] - cs["p99"], 3),
                          "mean": round(cf["mean"] - cs["mean"], 3)}
    out["fleet_replicas_seen"] = sorted(replicas)
    out["samples_ms"] = {k: [round(x, 3) for x in v] for k, v in client_ms.items()}
    return out


def sessions_for(ids: list[str], k: int, prefix: str) -> list[str]:
    """``k`` session names new to the fleet, client j's owned by ``ids[j % len(ids)]`` (rendezvous hashing)."""
    from gr00t_fleet.router import owner

    names, i = [], 0
    for j in range(k):
        while owner(f"{prefix}-{i}", ids) != ids[j % len(ids)]:
            i += 1
        names.append(f"{prefix}-{i}")
        i += 1
    return names


def closed_loop(url: str, demo: dict, sessions: list[str], seconds: float) -> dict:
    """(b): one thread per session, each sending its next request as soon as the last is answered."""
    k = len(sessions)
    latencies: list[list[float]] = [[] for _ in range(k)]
    served: list[dict[str, int]] = [{} for _ in range(k)]
    errors: list[str] = []
    t0, ends = [0.0], [0.0] * k
    start = threading.Barrier(k + 1, action=lambda: t0.__setitem__(0, time.perf_counter()))  # before any runs

    def client(j: int) -> None:
        c = Client(url)
        bodies = [json.dumps({**demo, "seed": 1000 * j + i, "session_id": sessions[j]}).encode() for i in range(64)]
        try:
            predict(c, bodies[-1])  # connect, open the session: not timed
            start.wait()
            while time.perf_counter() - t0[0] < seconds:
                ms, answer = predict(c, bodies[len(latencies[j]) % 64])
                latencies[j].append(ms)
                r = answer.get("fleet", {}).get("replica", "single")
                served[j][r] = served[j].get(r, 0) + 1
        except Exception as exc:  # reported; the run stops after the phase
            errors.append(f"client {j}: {type(exc).__name__}: {exc}")
            start.abort()
        finally:
            ends[j] = time.perf_counter()
            c.close()

    threads = [threading.Thread(target=client, args=(j,), daemon=True) for j in range(k)]
    for t in threads:
        t.start()
    try:
        start.wait()
    except threading.BrokenBarrierError:
        pass
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"closed loop against {url}: {errors[0]}")
    wall = max(ends) - t0[0]
    every = [x for lat in latencies for x in lat]
    return {"clients": k, "seconds": seconds, "requests": len(every), "wall_s": round(wall, 3),
            "throughput_rps": round(len(every) / wall, 3),
            "latency_ms_p50": round(float(np.percentile(every, 50)), 2),
            "latency_ms_p99": round(float(np.percentile(every, 99)), 2),
            "per_session": {s: {"requests": len(latencies[j]), "served_by": served[j]} for j, s in enumerate(sessions)},
            "load_avg_1m_after": round(os.getloadavg()[0], 2)}


# ---- output ----
def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a, b = result["overhead"], result["throughput"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5.2), gridspec_kw={"width_ratios": [1.1, 1]})
    names = ["single server", "fleet, 1 replica"]
    data = [a["samples_ms"]["single"], a["samples_ms"]["fleet_1"]]
    left.boxplot(data, whis=(1, 99), widths=0.5, flierprops={"markersize": 3, "alpha": 0.5})
    left.set_xticks([1, 2], names)
    for i, key in enumerate(("single", "fleet_1"), start=1):
        c, s = a[key]["client_ms"], a[key]["server_total_ms"]
        left.text(i + 0.28, c["median"], f"median {c['median']:.1f}\np99 {c['p99']:.1f}\nserver-side {s['median']:.1f}",
                  va="center", fontsize=8)
    left.set_ylabel("client latency per /predict, ms")
    left.set_xlim(0.5, 2.9)
    ov = a["overhead_ms"]
    left.set_title(f"(a) ingress hop: {ov['median']:+.1f} ms median, {ov['p99']:+.1f} ms p99\n{result['params']['n']}"
                   " sequential requests per side, interleaved (box: quartiles, whiskers: p1-p99)", fontsize=10)
    left.grid(axis="y", alpha=0.3)
    rows = [("single server", b["single"]), ("fleet\n1 replica", b["fleet_1"]), ("fleet\n2 replicas", b["fleet_2"])]
    bars = right.bar(range(3), [r["throughput_rps"] for _, r in rows], color=["#8c8c8c", "#4c72b0", "#55a868"],
                     width=0.6)
    for bar, (_, r) in zip(bars, rows):
        right.text(bar.get_x() + bar.get_width() / 2, bar.get_height(),
                   f"{r['throughput_rps']:.1f}/s\np50 {r['latency_ms_p50']:.0f} ms\np99 {r['latency_ms_p99']:.0f} ms",
                   ha="center", va="bottom", fontsize=8)
    right.set_xticks(range(3), [n for n, _ in rows])
    right.set_ylabel("throughput, answers per second")
    right.set_ylim(0, max(r["throughput_rps"] for _, r in rows) * 1.3)
    p = result["params"]
    right.set_title(f"(b) {p['clients']} closed-loop clients (own sessions), {p['seconds']:g} s each\n"
                    f"1 CPU per replica; Ray's proxy/ingress share the same {result['nproc']} cores", fontsize=10)
    right.grid(axis="y", alpha=0.3)
    fig.suptitle(f"GR00T fleet (Ray Serve {result['versions']['ray']}) vs single server: N1.5 synthetic:tiny, fp32, "
                 f"OMP_NUM_THREADS=1\n{result['cpu']} ({result['nproc']} cores), {result['date']}", fontsize=11)
    fig.text(0.5, 0.01, f"{result['nproc']} cores: each replica reserves 1 Ray CPU (1 torch thread, as the single "
             "server); Ray's proxy, controller and ingress and the clients share the same cores,\nso 2 replicas "
             "cannot double throughput here. One keep-alive HTTP connection per client (http.client).",
             ha="center", fontsize=8)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def table(result: dict) -> None:
    a, b = result["overhead"], result["throughput"]
    print(f"\n{result['cpu']} ({result['nproc']} cores); client: {CLIENT}")
    print(f"(a) {result['params']['n']} sequential /predict each, interleaved")
    print("| side | client median ms | client p99 ms | server total median ms |")
    print("|---|---:|---:|---:|")
    for key, name in (("single", "single server"), ("fleet_1", "fleet, 1 replica")):
        c, s = a[key]["client_ms"], a[key]["server_total_ms"]
        print(f"| {name} | {c['median']:.2f} | {c['p99']:.2f} | {s['median']:.2f} |")
    print(f"| overhead (fleet - single) | {a['overhead_ms']['median']:+.2f} | {a['overhead_ms']['p99']:+.2f} | |")
    print(f"(b) {result['params']['clients']} closed-loop clients, {result['params']['seconds']:g} s each")
    print("| target | answers/s | p50 ms | p99 ms | requests per replica |")
    print("|---|---:|---:|---:|---|")
    for key, name in (("single", "single server"), ("fleet_1", "fleet, 1 replica"), ("fleet_2", "fleet, 2 replicas")):
        r = b[key]
        per: dict[str, int] = {}
        for s in r["per_session"].values():
            for rep, cnt in s["served_by"].items():
                per[rep] = per.get(rep, 0) + cnt
        print(f"| {name} | {r['throughput_rps']:.2f} | {r['latency_ms_p50']:.1f} | {r['latency_ms_p99']:.1f} | "
              f"{', '.join(f'{rep[-8:]}: {cnt}' for rep, cnt in sorted(per.items()))} |")
    print(result["note"])


def interrupted(*_):
    raise KeyboardInterrupt("SIGTERM")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200, help="(a): timed requests per side")
    ap.add_argument("--warmup", type=int, default=10, help="(a): untimed requests per side first")
    ap.add_argument("--clients", type=int, default=4, help="(b): closed-loop clients")
    ap.add_argument("--seconds", type=float, default=15.0, help="(b): seconds per target")
    ap.add_argument("--weights", default="synthetic:tiny")
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks/results/fleet_bench.json")
    ap.add_argument("--plot", type=Path, default=ROOT / "media/fleet_overhead.png")
    args = ap.parse_args(argv)
    t_start = time.time()
    import ray
    import torch

    # SIGTERM ends the run as Ctrl-C does, through the finally blocks (Ray down, server stopped)
    signal.signal(signal.SIGTERM, interrupted)
    work = Path(tempfile.mkdtemp(prefix="gr00t-bf-", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    env = {"GR00T_VERSION": "n15", "GR00T_WEIGHTS": args.weights, "GR00T_TORCH_DTYPE": "float32",
           "GR00T_CACHE": str(work / "cache"), "GR00T_MAX_QUEUE": str(max(8, 2 * args.clients)),
           "OMP_NUM_THREADS": "1"}  # Ray gives a 1-CPU actor OMP_NUM_THREADS=1 anyway; here it is explicit
    fleet_args = {"cpus_per_replica": 1.0, "env": env}
    result = {"bench": "fleet vs single server", "date": datetime.date.today().isoformat(), "cpu": cpu_model(),
              "lscpu_model_name": lscpu_model(), "nproc": os.cpu_count(),
              "versions": {"ray": ray.__version__, "torch": torch.__version__, "python": platform.python_version()},
              "command": shlex.join(sys.orig_argv),
              "params": {"n": args.n, "warmup": args.warmup, "clients": args.clients, "seconds": args.seconds,
                         "version": "n15", "weights": args.weights, "torch_dtype": "float32",
                         "cpus_per_replica": 1.0, "ray_num_cpus": 2, "replica_env": env},
              "client": CLIENT, "load_avg_1m_start": round(os.getloadavg()[0], 2)}
    proc, ray_up = None, False
    try:
        print(f"==> single server: booting n15 {args.weights} fp32, OMP_NUM_THREADS=1 (log {work}/single.log)",
              flush=True)
        t = time.time()
        proc, single = boot_single(env, work / "single.log")
        print(f"    ready in {time.time() - t:.1f} s at {single}", flush=True)
        print(f"==> fleet: local Ray cluster (num_cpus=2, temp dir {work}/ray), 1 replica of 1 CPU", flush=True)
        ray_up = True  # from here on (also when the start fails half-way) stop_local shuts down what started
        fleet = start_local(str(work / "ray"), free_port())
        print(f"    Serve's HTTP proxy at {fleet}", flush=True)
        result["fleet_1_replicas"] = deploy(fleet, fleet_args, 1)
        status, demo_body = Client(single).json("GET", "/demo")
        assert status == 200, demo_body
        demo = {k: v for k, v in demo_body["request"].items() if k != "noise"}
        print(f"==> (a) ingress overhead: {args.warmup} + {args.n} sequential /predict per side, alternating",
              flush=True)
        result["overhead"] = overhead(single, fleet, demo, args.n, args.warmup)
        ov = result["overhead"]["overhead_ms"]
        print(f"    overhead: median {ov['median']:+.2f} ms, p99 {ov['p99']:+.2f} ms", flush=True)
        result["throughput"] = {}
        k, secs = args.clients, args.seconds
        print(f"==> (b) throughput, single server: {k} clients x {secs:g} s", flush=True)
        result["throughput"]["single"] = closed_loop(single, demo, sessions_for(["single"], k, "single"), secs)
        print(f"    {result['throughput']['single']['throughput_rps']:.2f} answers/s", flush=True)
        print(f"==> (b) throughput, fleet with 1 replica: {k} clients x {secs:g} s", flush=True)
        ids = [r["id"] for r in result["fleet_1_replicas"]]
        result["throughput"]["fleet_1"] = closed_loop(fleet, demo, sessions_for(ids, k, "one"), secs)
        print(f"    {result['throughput']['fleet_1']['throughput_rps']:.2f} answers/s", flush=True)
        print("==> fleet: redeploying with 2 replicas", flush=True)
        result["fleet_2_replicas"] = deploy(fleet, fleet_args, 2)
        ids = sorted(r["id"] for r in result["fleet_2_replicas"])
        sessions = sessions_for(ids, k, "two")
        print(f"==> (b) throughput, fleet with 2 replicas: {k} clients x {secs:g} s, sessions "
              f"{', '.join(f'{s}->{ids[j % 2][-8:]}' for j, s in enumerate(sessions))}", flush=True)
        two = result["throughput"]["fleet_2"] = closed_loop(fleet, demo, sessions, secs)
        two["expected_owner"] = {s: ids[j % len(ids)] for j, s in enumerate(sessions)}
        two["sticky"] = all(list(two["per_session"][s]["served_by"]) == [two["expected_owner"][s]] for s in sessions)
        print(f"    {two['throughput_rps']:.2f} answers/s; every session on its owner: {two['sticky']}", flush=True)
    finally:
        left: list[int] = []
        if ray_up:
            print("==> shutting down Ray Serve and Ray", flush=True)
            left = stop_local(str(work))
        stop_single(proc)
        if left:
            print(f"bench_fleet: warning: processes still running after shutdown: {left}", file=sys.stderr)
        result["leftover_processes"] = len(left)
        shutil.rmtree(work, ignore_errors=True)
    cores = result["nproc"]
    result["note"] = (f"This machine has {cores} cores. Each fleet replica reserves 1 Ray CPU and runs torch on 1 "
                      f"thread, as the single server does here; Ray's HTTP proxy, controller and the ingress (0 Ray "
                      f"CPUs each) and the benchmark's own client threads compete with the replicas for the same "
                      f"{cores} cores, so 2 replicas cannot double throughput on this machine. The point is "
                      f"correctness (sessions stay on their rendezvous owner) and the ingress hop's overhead, not "
                      f"scaling.")
    result["runtime_s"] = round(time.time() - t_start, 1)
    table(result)
    if not result["throughput"]["fleet_2"]["sticky"]:
        print("bench_fleet: warning: some session was served by a replica other than its rendezvous owner",
              file=sys.stderr)
    write_result(args.json, result)
    plot(result, args.plot)
    print(f"total runtime {result['runtime_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
