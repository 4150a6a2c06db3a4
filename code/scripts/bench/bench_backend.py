#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The plain fp32 reference and the torch fast path, timed in the same process, per stage.

CPU (default): one fp32 model; the fast path computes with the reference's own tensors. Timed calls
alternate reference / fast so that this VM's drift hits both alike; the table gives median and min per
stage and the ratio reference / fast, the JSON also the fast path's max |d| against the reference at
every tap, and the peak RSS of the process (both paths together) against the fp32 weight bytes.

CPU bf16 (``--dtype bfloat16``, ``bench_cpu_bf16.py``): the fp32 reference, the fp32 fast path (its tensors) and the
bf16 fast path (a second load), calls alternated; bf16 against the fp32 reference on the demo noise and on
``--seeds`` (chunk PCC, per-group PCC and max |d|).

CUDA (``--device cuda``): the golden is the fp32 reference on the CPU (one call); then the fp32
reference is timed on the GPU, and the fast path (``--dtype bfloat16`` by default there: mixed
precision, static shapes, fused projections, per-stage CUDA graphs, CUDA-event stage timing) is built
from a second load, timed, and compared with the golden (PCC and max |d| per action group, in the
action unit). Random synthetic weights: the numbers are about speed and fidelity, not a policy.

    bench_backend.py [--version n15|n17] [--device cpu|cuda] [--dtype float32|bfloat16] [--[no-]fuse] [--n 5] \
[--warmup 1]
                     [--threads 2] [--json benchmarks/results/backend_cpu_n15_full.json]
"""

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path


from bench_reference import ensure_checkpoint, peak_rss_gib

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # code/scripts: bench_http's shared helpers
from bench_http import write_result
from models.experimental.gr00t.common.demo import load_demo_request
from models.experimental.gr00t.common.cli import run_cli
from models.experimental.gr00t.common.layouts import DEFAULT_LAYOUT, get_layout
from models.experimental.gr00t.common.observation import parse_observation
from models.experimental.gr00t.common.versions import SPECS

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results"


def timed(policy, obs, noise) -> tuple[float, dict[str, float], object]:
    t = time.perf_counter()
    r = policy.get_action(obs, noise=noise)
    return (time.perf_counter() - t) * 1e3, r.timing_ms, r


def summarise(runs: list[tuple[float, dict[str, float]]]) -> dict[str, dict[str, float]]:
    stages = [s for s in runs[0][1] if s not in ("preprocess", "postprocess")]
    rows = {s: [r[1][s] for r in runs] for s in stages}
    rows["dit_4_steps"] = [sum(v for k, v in r[1].items() if k.startswith("dit_step_")) for r in runs]
    rows["total"] = [r[0] for r in runs]
    return {k: {"median_ms": round(statistics.median(v), 2), "min_ms": round(min(v), 2)} for k, v in rows.items()}


def fidelity(got, want) -> dict:
    from models.experimental.gr00t.common.quality import max_abs_diff, pcc

    return {"action_pred_max_abs": max_abs_diff(got.action_pred, want.action_pred),
            "groups": {k: {"pcc": round(pcc(got.actions[k], want.actions[k]), 7),
                           "max_abs": max_abs_diff(got.actions[k], want.actions[k])} for k in want.actions},
            "taps_max_abs": {k: max_abs_diff(got.taps[k].float().cpu(), want.taps[k].float().cpu())
                             for k in want.taps if k in got.taps and got.taps[k].shape == want.taps[k].shape}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", default="n15", choices=list(SPECS))
    ap.add_argument("--scale", default="full", choices=["tiny", "full"])
    ap.add_argument("--seed", type=int, default=0, help="synthetic weights seed")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--dtype", choices=["float32", "bfloat16"],
                    help="fast path dtype (default: bf16 on cuda, fp32 on cpu)")
    ap.add_argument("--fuse", action=argparse.BooleanOptionalAction, default=None,
                    help="fused QKV / gate-up / K-V projections in the fast path (default: on for cuda, off for cpu)")
    ap.add_argument("--n", type=int, default=5, help="timed calls per path")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                    help="--device cpu --dtype bfloat16: the seeds bf16 is compared with the fp32 reference on")
    ap.add_argument("--json", type=Path, help="default: benchmarks/results/backend_<device>_<version>_<scale>.json")
    args = ap.parse_args()
    dtype = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    if args.device == "cpu" and dtype == "bfloat16":
        from bench_cpu_bf16 import run_cpu_bf16

        return run_cpu_bf16(args)

    import torch
    from models.experimental.gr00t.reference.policies import load_reference_policy
    from models.experimental.gr00t.torch_fast.build import fast_policy_from_reference

    torch.set_num_threads(args.threads)
    ckpt = ensure_checkpoint(args.version, args.scale, args.seed)
    request = load_demo_request(args.version)
    obs = parse_observation(request, get_layout(DEFAULT_LAYOUT[args.version]))
    noise = request["noise"]
    t0 = time.perf_counter()
    ref = load_reference_policy(ckpt, args.version)
    load_s = time.perf_counter() - t0
    weight_bytes = sum(p.numel() * p.element_size() for p in ref.model.parameters())
    rss_after_load = peak_rss_gib()

    if args.device == "cpu":
        golden = None
        fast = fast_policy_from_reference(ref, dtype=dtype, fuse=args.fuse)
        for _ in range(args.warmup):
            timed(ref, obs, noise)
            timed(fast, obs, noise)
        ref_runs, fast_runs = [], []
        for i in range(args.n):  # alternate, so drift hits both paths alike
            ref_runs.append(timed(ref, obs, noise))
            fast_runs.append(timed(fast, obs, noise))
            print(f"  run {i + 1}/{args.n}: reference {ref_runs[-1][0]:.0f} ms, fast {fast_runs[-1][0]:.0f} ms",
                  file=sys.stderr, flush=True)
        fid = fidelity(fast_runs[-1][2], ref_runs[-1][2])
    else:
        golden = ref.get_action(obs, noise=noise)  # fp32 CPU: the golden
        dev = torch.device("cuda")
        ref = type(ref)(ref.model.to(dev), ref.config, ref.layout, ref.stats, ref.checkpoint_dir, ref.synthetic)
        for _ in range(args.warmup):
            timed(ref, obs, noise)
        ref_runs = [timed(ref, obs, noise) for _ in range(args.n)]
        ref_vs_golden = fidelity(ref_runs[-1][2], golden)
        del ref
        torch.cuda.empty_cache()
        t = time.perf_counter()
        fast = fast_policy_from_reference(load_reference_policy(ckpt, args.version), device="cuda", dtype=dtype,
                                          fuse=args.fuse)
        fast_load_s = time.perf_counter() - t
        t = time.perf_counter()
        timed(fast, obs, noise)  # first call of this shape: warm-up + graph capture
        capture_s = time.perf_counter() - t
        for _ in range(args.warmup):
            timed(fast, obs, noise)
        fast_runs = [timed(fast, obs, noise) for _ in range(args.n)]
        fid = fidelity(fast_runs[-1][2], golden)

    ref_rows, fast_rows = summarise(ref_runs), summarise(fast_runs)
    result = {
        "what": f"torch backend, plain reference vs fast path, {args.version} demo request, "
                f"synthetic {args.scale} weights",
        "command": "code/scripts/bench/bench_backend.py " + " ".join(sys.argv[1:]),
        "version": args.version, "scale": args.scale, "device": args.device, "fast_dtype": dtype,
        "threads": args.threads, "n": args.n, "warmup": args.warmup,
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "python": platform.python_version(), "torch": torch.__version__,
                    "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None},
        "fast_options": fast.options(), "load_s": round(load_s, 2), "fp32_weight_gib": round(weight_bytes / 2**30, 3),
        "peak_rss_gib_after_load": round(rss_after_load, 3), "peak_rss_gib": round(peak_rss_gib(), 3),
        "peak_rss_over_fp32_weights": round(peak_rss_gib() * 2**30 / weight_bytes, 3),
        "reference": ref_rows, "fast": fast_rows,
        "ratio_reference_over_fast": {k: round(ref_rows[k]["median_ms"] / fast_rows[k]["median_ms"], 3)
                                      for k in ref_rows if fast_rows.get(k, {}).get("median_ms")},
        "fast_vs_reference" if golden is None else "fast_vs_cpu_fp32_golden": fid,
    }
    if golden is not None:
        result.update(reference_cuda_fp32_vs_golden=ref_vs_golden, fast_load_s=round(fast_load_s, 2),
                      first_call_with_capture_s=round(capture_s, 2),
                      cuda_max_memory_gib=round(torch.cuda.max_memory_allocated() / 2**30, 3))
    print(f"\n{args.version} {args.scale} synthetic, {args.device}, fast path {dtype} {fast.options()}, "
          f"{args.threads} threads, median (min) of {args.n} after {args.warmup} warm-up")
    print(f"{'stage':<14}{'reference ms':>22}{'fast ms':>22}{'ref/fast':>10}")
    for k in ref_rows:
        r, f = ref_rows[k], fast_rows.get(k, {"median_ms": float("nan"), "min_ms": float("nan")})
        print(f"{k:<14}{r['median_ms']:>12.1f} ({r['min_ms']:>7.1f}){f['median_ms']:>12.1f} ({f['min_ms']:>7.1f})"
              f"{result['ratio_reference_over_fast'].get(k, float('nan')):>10.2f}")
    print(f"peak RSS {result['peak_rss_gib']:.2f} GiB = {result['peak_rss_over_fp32_weights']:.3f} x fp32 weights "
          f"({result['fp32_weight_gib']:.2f} GiB); fast vs {'reference' if golden is None else 'golden'}: "
          f"action_pred max|d| {fid['action_pred_max_abs']:.2e}, min group PCC "
          f"{min(g['pcc'] for g in fid['groups'].values()):.6f}")
    write_result(args.json or RESULTS / f"backend_{args.device}_{args.version}_{args.scale}.json", result)
    return 0


if __name__ == "__main__":
    run_cli(main, "bench_backend")
