#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""HTTP benchmark of a running GR00T policy server with its demo request.

Times N sequential POST /predict calls after W warm-ups: the client's wall time and the server's own
``timing_ms`` stages (decode, encode, device, decode_actions, total), reported as median / p90 / min,
plus the server-side overhead (total − device). Prints a table and writes JSON.

    python code/scripts/bench_http.py --url http://127.0.0.1:20000 --warmup 3 --n 20 [--json out.json]

Standard library only. The scripts in bench/, demo/ and check/ share its client helpers (``get``, ``post``,
``summary``, ``cpu_model``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request


def post(url: str, body: bytes) -> dict:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as resp:
        return json.loads(resp.read())


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=60) as resp:
        return json.loads(resp.read())


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return {"median": round(statistics.median(ordered), 3), "p90": round(p90, 3), "min": round(ordered[0], 3)}


def write_result(path, result: dict) -> None:
    """A result file as every benchmark writes it (indented JSON, parents made), and a line saying where."""
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")


def cpu_model() -> str:
    """The host CPU's model name (``/proc/cpuinfo``), for the machine line of a result file."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:20000")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()
    base = args.url.rstrip("/")
    try:
        info = get(base + "/info")
        body = json.dumps(get(base + "/demo")["request"]).encode()
    except OSError as exc:
        print(f"bench_http: error: server {base} unreachable ({exc})", file=sys.stderr)
        return 2
    for _ in range(args.warmup):
        post(base + "/predict", body)
    client, stages = [], {}
    for _ in range(args.n):
        t = time.perf_counter()
        r = post(base + "/predict", body)
        client.append((time.perf_counter() - t) * 1e3)
        for k, v in r["timing_ms"].items():
            stages.setdefault(k, []).append(v)
        stages.setdefault("overhead (total - device)", []).append(r["timing_ms"]["total"] - r["timing_ms"]["device"])
    rows = {"client wall": summary(client), **{f"server {k}": summary(v) for k, v in stages.items()}}
    backend = info.get("backend", {})
    result = {"url": base, "n": args.n, "warmup": args.warmup, "version": info.get("version"),
              "weights": (info.get("weights") or {}).get("source"),
              "backend": {k: backend.get(k) for k in ("name", "device", "dtype")},
              "request": "GET /demo request (its explicit noise)", "ms": rows}
    print(f"{result['version']} on {backend.get('name')}/{backend.get('device')}/{backend.get('dtype')}, "
          f"weights {result['weights']}: {args.n} sequential requests after {args.warmup} warm-ups")
    print(f"{'stage (ms)':<34}{'median':>10}{'p90':>10}{'min':>10}")
    for name, s in rows.items():
        print(f"{name:<34}{s['median']:>10.1f}{s['p90']:>10.1f}{s['min']:>10.1f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
