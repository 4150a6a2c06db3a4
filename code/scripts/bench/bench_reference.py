#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Latency and memory of the fp32 CPU reference ``get_action`` on a full-scale synthetic checkpoint.

Generates the checkpoint once (~7 GB, cached under $GR00T_CACHE/synthetic/) in a child process, loads
it, runs warm-up calls on the version's shipped demo request, then times N calls per stage (vision /
llm / adapter / each DiT step) and reports median / min plus peak RSS of this process. Random weights:
the numbers are about speed, not a policy.

    bench_reference.py [--version n15|n17] [--scale full] [--n 5] [--warmup 1] [--threads 2] [--json out.json]
"""

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


from models.experimental.gr00t.common.demo import load_demo_request
from models.experimental.gr00t.common.cli import run_cli
from models.experimental.gr00t.common.layouts import DEFAULT_LAYOUT, get_layout
from models.experimental.gr00t.common.observation import parse_observation
from models.experimental.gr00t.common.versions import SPECS


def cache_root() -> Path:
    return Path(os.environ.get("GR00T_CACHE", Path.home() / ".cache" / "gr00t-p150"))


def ensure_checkpoint(version: str, scale: str, seed: int) -> Path:
    path = cache_root() / "synthetic" / f"{version}-{scale}-seed{seed}"
    if (path / "SYNTHETIC.json").is_file():
        return path
    tmp = path.with_name(path.name + ".partial")
    if tmp.exists():
        import shutil

        shutil.rmtree(tmp)
    script = Path(__file__).resolve().parents[1] / "operate" / "make_synthetic_checkpoint.py"
    subprocess.run([sys.executable, str(script), "--version", version, "--scale", scale, "--seed", str(seed),
                    "--out", str(tmp)], check=True)
    tmp.rename(path)
    return path


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: KiB


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", default="n15", choices=list(SPECS))
    ap.add_argument("--scale", default="full", choices=["tiny", "full"])
    ap.add_argument("--seed", type=int, default=0, help="synthetic weights seed")
    ap.add_argument("--n", type=int, default=5, help="timed calls")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, help="write the results here too")
    args = ap.parse_args()

    import torch
    from models.experimental.gr00t.reference.policies import load_reference_policy

    torch.set_num_threads(args.threads)
    ckpt = ensure_checkpoint(args.version, args.scale, args.seed)
    t0 = time.perf_counter()
    policy = load_reference_policy(ckpt, args.version)
    load_s = time.perf_counter() - t0
    rss_after_load = peak_rss_gib()
    request = load_demo_request(args.version)
    obs = parse_observation(request, get_layout(DEFAULT_LAYOUT[args.version]))
    for _ in range(args.warmup):
        policy.get_action(obs, noise=request["noise"])
    runs, walls = [], []
    for i in range(args.n):
        t = time.perf_counter()
        r = policy.get_action(obs, noise=request["noise"])
        walls.append((time.perf_counter() - t) * 1e3)
        runs.append(r.timing_ms)
        print(f"  run {i + 1}/{args.n}: {walls[-1]:.0f} ms", file=sys.stderr, flush=True)

    stages = list(runs[0])
    rows = {s: {"median_ms": statistics.median(r[s] for r in runs), "min_ms": min(r[s] for r in runs)} for s in stages}
    dit = [sum(v for k, v in r.items() if k.startswith("dit_step_")) for r in runs]
    rows["dit_4_steps"] = {"median_ms": statistics.median(dit), "min_ms": min(dit)}
    rows["total"] = {"median_ms": statistics.median(walls), "min_ms": min(walls)}
    weight_bytes = sum(p.numel() * p.element_size() for p in policy.model.parameters())
    result = {
        "what": f"fp32 CPU reference get_action, {args.version} demo request (seq_len {r.seq_len}), synthetic weights",
        "version": args.version, "scale": args.scale, "threads": args.threads, "n": args.n, "warmup": args.warmup,
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "python": platform.python_version(), "torch": torch.__version__},
        "load_s": round(load_s, 2), "fp32_weight_gib": round(weight_bytes / 2**30, 3),
        "peak_rss_gib_after_load": round(rss_after_load, 3), "peak_rss_gib": round(peak_rss_gib(), 3),
        "stages": {k: {m: round(v, 1) for m, v in row.items()} for k, row in rows.items()},
    }
    print(f"\nfp32 CPU reference, {args.scale} synthetic {args.version}, {args.threads} threads, median of {args.n} "
          f"(after {args.warmup} warm-up)")
    print(f"{'stage':<14}{'median ms':>12}{'min ms':>12}")
    for name, row in result["stages"].items():
        print(f"{name:<14}{row['median_ms']:>12.1f}{row['min_ms']:>12.1f}")
    print(f"load {load_s:.1f} s; fp32 weights {result['fp32_weight_gib']:.2f} GiB; "
          f"peak RSS {result['peak_rss_gib']:.2f} GiB")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    run_cli(main, "bench_reference")
