#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Latency and memory of the fp32 CPU reference ``get_action`` on a full-scale synthetic checkpoint.

Generates the checkpoint once (7 GB, cached under $GR00T_CACHE/synthetic/) in a child process, loads it,
runs warm-up calls, then times N calls per stage (vision / llm / adapter / each DiT step) and reports
median / min plus peak RSS of this process. Random weights: the numbers are about speed, not a policy.

    bench_reference.py [--scale full] [--n 5] [--warmup 1] [--threads 2] [--json out.json]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.experimental.gr00t.common.cli import run_cli  # noqa: E402
from models.experimental.gr00t.common.layouts import GR1  # noqa: E402
from models.experimental.gr00t.common.observation import parse_observation  # noqa: E402
from models.experimental.gr00t.common.preprocessing import encode_png  # noqa: E402


def cache_root() -> Path:
    return Path(os.environ.get("GR00T_CACHE", Path.home() / ".cache" / "gr00t-p150"))


def ensure_checkpoint(scale: str, seed: int) -> Path:
    path = cache_root() / "synthetic" / f"n15-{scale}-seed{seed}"
    if (path / "SYNTHETIC.json").is_file():
        return path
    tmp = path.with_name(path.name + ".partial")
    if tmp.exists():
        import shutil  # noqa: PLC0415

        shutil.rmtree(tmp)
    script = Path(__file__).with_name("make_synthetic_checkpoint.py")
    subprocess.run([sys.executable, str(script), "--version", "n15", "--scale", scale, "--seed", str(seed),
                    "--out", str(tmp)], check=True)
    tmp.rename(path)
    return path


def demo_observation():
    import numpy as np  # noqa: PLC0415

    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, (256, 256, 3), dtype=np.uint8)
    request = {"images": {"ego_view": encode_png(frame)},
               "state": {name: [rng.uniform(-1, 1, dim).tolist()] for name, dim in GR1.state_groups},
               "instruction": "pick the pear from the counter and place it in the plate"}
    return parse_observation(request, GR1)


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: KiB


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", default="full", choices=["tiny", "full"])
    ap.add_argument("--seed", type=int, default=0, help="synthetic weights seed")
    ap.add_argument("--n", type=int, default=5, help="timed calls")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, help="write the results here too")
    args = ap.parse_args()

    import torch  # noqa: PLC0415
    from models.experimental.gr00t.reference.torch_policy import ReferencePolicy  # noqa: PLC0415

    torch.set_num_threads(args.threads)
    ckpt = ensure_checkpoint(args.scale, args.seed)
    t0 = time.perf_counter()
    policy = ReferencePolicy.from_checkpoint(ckpt)
    load_s = time.perf_counter() - t0
    rss_after_load = peak_rss_gib()
    obs = demo_observation()
    for _ in range(args.warmup):
        policy.get_action(obs, seed=0)
    runs, walls = [], []
    for i in range(args.n):
        t = time.perf_counter()
        r = policy.get_action(obs, seed=0)
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
        "what": "fp32 CPU reference get_action, GR1 layout, seq_len 296, synthetic weights",
        "scale": args.scale, "threads": args.threads, "n": args.n, "warmup": args.warmup,
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "python": platform.python_version(), "torch": torch.__version__},
        "load_s": round(load_s, 2), "fp32_weight_gib": round(weight_bytes / 2**30, 3),
        "peak_rss_gib_after_load": round(rss_after_load, 3), "peak_rss_gib": round(peak_rss_gib(), 3),
        "stages": {k: {m: round(v, 1) for m, v in row.items()} for k, row in rows.items()},
    }
    print(f"\nfp32 CPU reference, {args.scale} synthetic N1.5, {args.threads} threads, median of {args.n} "
          f"(after {args.warmup} warm-up)")
    print(f"{'stage':<14}{'median ms':>12}{'min ms':>12}")
    for name, row in result["stages"].items():
        print(f"{name:<14}{row['median_ms']:>12.1f}{row['min_ms']:>12.1f}")
    print(f"load {load_s:.1f} s; fp32 weights {result['fp32_weight_gib']:.2f} GiB; peak RSS {result['peak_rss_gib']:.2f} GiB")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    run_cli(main, "bench_reference")
