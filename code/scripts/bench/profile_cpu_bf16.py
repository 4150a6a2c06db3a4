#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Where the bf16 CPU fast path's time goes: per stage, measured time against its GEMM floor, and the largest
non-GEMM costs.

- FLOPs per stage: ``torch.utils.flop_counter.FlopCounterMode`` around one bf16 call of the demo request (matmuls
  2·M·K·N; SDPA 4·b·h·Sq·Sk·d, mapped here for the CPU kernel); a stopwatch whose laps also read the counter's
  running total splits them by stage (the policy's own stage laps).
- The GEMM rate: one 512×2048 @ 2048×8192 matmul in bf16 and in fp32, ``--threads`` threads, the median of
  ``--gemm-reps``, in this process on this machine. The floor of a stage = its FLOPs ÷ the bf16 rate: the time
  its matrix products alone would take at that rate (everything else free). Measured ÷ floor says how far a stage
  is from GEMM-bound.
- Top ops: ``torch.profiler`` over ``--n`` calls, self CPU time per aten op, matmul-family ops marked.

    profile_cpu_bf16.py --version n15|n17 [--scale full] [--threads 2] [--n 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from bench_reference import ensure_checkpoint, peak_rss_gib
from models.experimental.gr00t.common.cli import run_cli
from models.experimental.gr00t.common.demo import load_demo_request
from models.experimental.gr00t.common.layouts import DEFAULT_LAYOUT, get_layout
from models.experimental.gr00t.common.observation import parse_observation
from models.experimental.gr00t.common.timing import Stopwatch
from models.experimental.gr00t.common.versions import SPECS

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # code/scripts: bench_http's shared helpers
from bench_http import cpu_model, write_result

GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::matmul",
            "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::scaled_dot_product_attention")


def gemm_rate(dtype, threads: int, reps: int) -> float:
    """GFLOP/s of one 512×2048 @ 2048×8192 matmul (the median of ``reps``)."""
    import torch

    a, b = torch.randn(512, 2048, dtype=dtype), torch.randn(2048, 8192, dtype=dtype)
    for _ in range(2):
        a @ b
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t)
    return 2 * 512 * 2048 * 8192 / statistics.median(times) / 1e9


def sdpa_cpu_flops(query, key, value, *args, out_shape=None, **kwargs) -> int:
    """Q·Kᵀ and P·V of the CPU SDPA kernel, which FlopCounterMode does not map (it gets shapes here): 2·b·h·Sq·Sk·d
    each, with h the query heads (grouped-query attention reads fewer K/V heads, the products are the same)."""
    b, h, sq, d = query
    sk, dv = key[-2], value[-1]
    return 2 * b * h * sq * sk * d + 2 * b * h * sq * sk * dv


class CountingClock(Stopwatch):
    """A stopwatch whose laps also record the FLOP counter's running total."""

    def __init__(self, counter):
        super().__init__()
        self.counter, self.flops, self._seen = counter, {}, 0

    def lap(self, name, device=None) -> None:
        super().lap(name, device)
        total = self.counter.get_total_flops()
        self.flops[name] = self.flops.get(name, 0) + total - self._seen
        self._seen = total


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", default="n15", choices=list(SPECS))
    ap.add_argument("--scale", default="full", choices=["tiny", "full"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=2, help="profiled calls (after one warm-up)")
    ap.add_argument("--gemm-reps", type=int, default=10)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    import torch
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.flop_counter import FlopCounterMode

    from gr00t_p150.backends.torch_backend import cpu_bf16_units
    from models.experimental.gr00t.reference.policies import load_reference_policy
    from models.experimental.gr00t.torch_fast.build import fast_policy_from_reference

    torch.set_num_threads(args.threads)
    rates = {"bfloat16": gemm_rate(torch.bfloat16, args.threads, args.gemm_reps),
             "float32": gemm_rate(torch.float32, args.threads, args.gemm_reps)}
    ckpt = ensure_checkpoint(args.version, args.scale, 0)
    request = load_demo_request(args.version)
    obs = parse_observation(request, get_layout(DEFAULT_LAYOUT[args.version]))
    policy = fast_policy_from_reference(load_reference_policy(ckpt, args.version), dtype="bfloat16")
    inputs = policy.prepare(obs, noise=request["noise"])
    policy.infer(inputs, Stopwatch())  # warm-up
    sdpa = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: sdpa_cpu_flops}
    with FlopCounterMode(display=False, custom_mapping=sdpa) as counter:
        clock = CountingClock(counter)
        policy.infer(inputs, clock)
    timed = []
    for _ in range(3):
        watch = Stopwatch()
        policy.infer(inputs, watch)
        timed.append(watch.ms)
    stages = {}
    for name, flops in clock.flops.items():
        ms = statistics.median(t[name] for t in timed)
        floor_ms = flops / (rates["bfloat16"] * 1e9) * 1e3
        stages[name] = {"gflop": round(flops / 1e9, 2), "measured_ms": round(ms, 1), "floor_ms": round(floor_ms, 1),
                        "measured_over_floor": round(ms / floor_ms, 2) if floor_ms else None}
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.n):
            policy.infer(inputs, Stopwatch())
    ops = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total_us = sum(e.self_cpu_time_total for e in ops)
    top = [{"op": e.key, "self_ms_per_call": round(e.self_cpu_time_total / args.n / 1e3, 1),
            "share": round(e.self_cpu_time_total / total_us, 3), "calls_per_call": e.count // args.n,
            "gemm": e.key in GEMM_OPS} for e in ops[: args.top]]
    result = {"what": f"bf16 CPU fast path, {args.version} {args.scale} synthetic, the demo request: per-stage time "
                      "vs its GEMM floor (FLOPs / the measured bf16 GEMM rate), and the top ops by self CPU time",
              "command": "code/scripts/bench/profile_cpu_bf16.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "cpu": cpu_model(), "bf16_units": cpu_bf16_units(), "threads": args.threads,
              "gemm_gflops": {k: round(v, 1) for k, v in rates.items()}, "stages": stages,
              "total": {"gflop": round(sum(s["gflop"] for s in stages.values()), 1),
                        "measured_ms": round(sum(s["measured_ms"] for s in stages.values()), 1),
                        "floor_ms": round(sum(s["floor_ms"] for s in stages.values()), 1)},
              "top_ops": top, "peak_rss_gib": round(peak_rss_gib(), 2)}
    t = result["total"]
    print(f"{args.version} {args.scale}, {cpu_model()} ({', '.join(cpu_bf16_units()) or 'no bf16 units'}), "
          f"{args.threads} threads; GEMM bf16 {rates['bfloat16']:.0f} GFLOP/s, fp32 {rates['float32']:.0f} GFLOP/s")
    print(f"{'stage':<12}{'GFLOP':>10}{'measured ms':>14}{'floor ms':>12}{'x floor':>9}")
    t["measured_over_floor"] = round(t["measured_ms"] / t["floor_ms"], 2)
    for name, s in [*stages.items(), ("total", t)]:
        print(f"{name:<12}{s['gflop']:>10.1f}{s['measured_ms']:>14.1f}{s['floor_ms']:>12.1f}"
              f"{s['measured_over_floor']:>9.2f}")
    print("top ops by self CPU time per call:")
    for row in top:
        print(f"  {row['op']:<52}{row['self_ms_per_call']:>9.1f} ms {100 * row['share']:>5.1f} %"
              f"{'  (GEMM)' if row['gemm'] else ''}  x{row['calls_per_call']}")
    if args.json:
        write_result(args.json, result)
    return 0


if __name__ == "__main__":
    run_cli(main, "profile_cpu_bf16")
