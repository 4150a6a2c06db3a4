# SPDX-License-Identifier: Apache-2.0
"""``bench_backend.py --device cpu --dtype bfloat16``: the three CPU paths of the torch backend in one process on
one machine, and bf16's distance from the fp32 reference.

The fp32 reference and the fp32 fast path share one fp32 model; the bf16 fast path is a second load, cast in
place (what a ``GR00T_TORCH_DTYPE=bfloat16`` server holds), made first so that two fp32 models never coexist.
Timed calls alternate reference / fast fp32 / fast bf16 so that the VM's drift hits all three alike. Accuracy: for
the demo request's noise and for each ``--seeds`` seed, the bf16 answer against the fp32 reference's: the PCC of
the model-space chunk (valid columns), and per action group the PCC and max |d| in action units. Random
synthetic weights: speed and fidelity, not a policy.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

from bench_backend import RESULTS, fidelity, summarise, timed

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # code/scripts: bench_http's shared client helpers
from bench_http import cpu_model, write_result
from bench_reference import ensure_checkpoint, peak_rss_gib
from models.experimental.gr00t.common.demo import load_demo_request
from models.experimental.gr00t.common.layouts import DEFAULT_LAYOUT, get_layout
from models.experimental.gr00t.common.observation import parse_observation

PATHS = ("reference", "fast_fp32", "fast_bf16")


def accuracy(bf16, ref, obs, noise, seeds, layout) -> dict:
    """bf16 vs the fp32 reference per input: chunk PCC (valid columns) and each group's PCC and max |d|."""
    from models.experimental.gr00t.common.quality import pcc

    valid = sum(d for _, d in layout.action_groups)
    rows = {}
    for name, kwargs in [("demo_noise", {"noise": noise})] + [(f"seed_{s}", {"seed": s}) for s in seeds]:
        got, want = bf16.get_action(obs, **kwargs), ref.get_action(obs, **kwargs)
        fid = fidelity(got, want)
        rows[name] = {"chunk_pcc": round(pcc(got.action_pred[:, :valid], want.action_pred[:, :valid]), 7),
                      "groups": fid["groups"], "action_pred_max_abs": fid["action_pred_max_abs"]}
    return rows


def run_cpu_bf16(args) -> int:
    import torch
    from models.experimental.gr00t.reference.policies import load_reference_policy
    from models.experimental.gr00t.torch_fast.build import fast_policy_from_reference, load_mixed_fast_policy
    from gr00t_p150.backends.torch_backend import cpu_bf16_units

    torch.set_num_threads(args.threads)
    ckpt = ensure_checkpoint(args.version, args.scale, args.seed)
    layout = get_layout(DEFAULT_LAYOUT[args.version])
    request = load_demo_request(args.version)
    obs, noise = parse_observation(request, layout), request["noise"]
    # bf16 first: its fp32 load is cast in place, so the peak is one fp32 model, not two (N1.7: 2 x 13 GB)
    t = time.perf_counter()
    bf16 = load_mixed_fast_policy(ckpt, args.version, fuse=args.fuse)  # as the server's torch backend loads it
    bf16_load_s = time.perf_counter() - t
    bf16_bytes = sum(p.numel() * p.element_size() for p in bf16.model.parameters())
    rss_bf16 = peak_rss_gib()
    t = time.perf_counter()
    ref = load_reference_policy(ckpt, args.version)
    load_s = time.perf_counter() - t
    fp32_bytes = sum(p.numel() * p.element_size() for p in ref.model.parameters())
    policies = {"reference": ref, "fast_fp32": fast_policy_from_reference(ref), "fast_bf16": bf16}
    for _ in range(args.warmup):
        for policy in policies.values():
            timed(policy, obs, noise)
    runs = {k: [] for k in PATHS}
    for i in range(args.n):  # alternate, so drift hits every path alike
        for k in PATHS:
            runs[k].append(timed(policies[k], obs, noise))
        print(f"  run {i + 1}/{args.n}: " + ", ".join(f"{k} {runs[k][-1][0]:.0f} ms" for k in PATHS),
              file=sys.stderr, flush=True)
    rows = {k: summarise(v) for k, v in runs.items()}
    acc = accuracy(bf16, ref, obs, noise, args.seeds, layout)
    result = {
        "what": f"torch backend on the CPU: fp32 reference, fp32 fast path and bf16 fast path in one process, "
                f"{args.version} demo request, synthetic {args.scale} weights (random: not a policy)",
        "command": "code/scripts/bench/bench_backend.py " + " ".join(sys.argv[1:]),
        "version": args.version, "scale": args.scale, "threads": args.threads, "n": args.n, "warmup": args.warmup,
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "bf16_units": cpu_bf16_units(),
                    "python": platform.python_version(), "torch": torch.__version__},
        "bf16_options": bf16.options(), "load_s": round(load_s, 2), "bf16_load_s": round(bf16_load_s, 2),
        "fp32_weight_gib": round(fp32_bytes / 2**30, 3), "bf16_model_gib": round(bf16_bytes / 2**30, 3),
        "peak_rss_gib_bf16_model": round(rss_bf16, 3), "peak_rss_gib_all": round(peak_rss_gib(), 3),
        **rows,
        "ratio_reference_over_fast_bf16": {k: round(rows["reference"][k]["median_ms"] / v["median_ms"], 3)
                                           for k, v in rows["fast_bf16"].items() if v["median_ms"]},
        "bf16_vs_fp32_reference": acc,
    }
    print(f"\n{args.version} {args.scale} synthetic, cpu {cpu_model()} (bf16 units: "
          f"{', '.join(cpu_bf16_units()) or 'none'}), {args.threads} threads, median (min) of {args.n} after "
          f"{args.warmup} warm-up")
    print(f"{'stage':<14}" + "".join(f"{k + ' ms':>24}" for k in PATHS) + f"{'ref/bf16':>10}")
    for stage in rows["reference"]:
        cells = "".join(f"{rows[k].get(stage, {}).get('median_ms', float('nan')):>13.1f} "
                        f"({rows[k].get(stage, {}).get('min_ms', float('nan')):>8.1f})" for k in PATHS)
        print(f"{stage:<14}{cells}{result['ratio_reference_over_fast_bf16'].get(stage, float('nan')):>10.2f}")
    for name, row in acc.items():
        worst = min(row["groups"].items(), key=lambda kv: kv[1]["pcc"])
        print(f"bf16 vs fp32 reference, {name}: chunk PCC {row['chunk_pcc']:.6f}, lowest group {worst[0]} PCC "
              f"{worst[1]['pcc']:.6f}, max |d| {max(g['max_abs'] for g in row['groups'].values()):.3g}")
    write_result(args.json or RESULTS / f"backend_cpu_bf16_{args.version}_{args.scale}.json", result)
    return 0
