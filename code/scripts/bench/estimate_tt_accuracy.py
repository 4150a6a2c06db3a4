#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Estimate, without a Tenstorrent card, how far the TT-NN port's actions will be from the fp32 reference.

For each precision policy (mixed_dit, bf16) the TT modules run on the host with ttnn's golden op
functions (``tt/tools/golden_ops.py``), in two device models:
- ``device``: every weight rounded exactly as ttnn's host conversion stores it on the device (bfloat8_b for
  the DiT block matmuls under mixed_dit, bf16 elsewhere), every activation rounded to bf16 after each op,
  the Euler state kept in fp32, matmuls accumulated in fp32;
- ``device_hifi2``: the same plus HiFi2's truncation of the activation's last mantissa bit in every matmul
  on a bfloat8_b weight (``ttnn_audit.md`` §1.3), reported beside it (for bf16 it changes nothing: no
  bfloat8_b weight, no HiFi2 matmul).
The fp32 reference runs on the same inputs. Reported: PCC and max |d| of the normalised chunk (its valid
dims) and of each action group (physical units; N1.7: the absolute actions composed onto the request's
state), and PCC of the stage taps.

THIS IS AN ESTIMATE, not a device measurement, and a lower bound on the error: it does not model the SFPU
approximations (``math_approx_mode``), SDPA's internal formats, the packer's rounding, or real-checkpoint
outliers. Random synthetic weights, not a policy.

    estimate_tt_accuracy.py [--version n15|n17] [--scale full|tiny] [--seeds 0 1 2] [--policies mixed_dit bf16]
                            [--json out.json]
"""

import argparse
import gc
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path


from bench_reference import ensure_checkpoint, peak_rss_gib
from models.experimental.gr00t.common.demo import load_demo_request
from models.experimental.gr00t.common.cli import run_cli
from models.experimental.gr00t.tt.tools.mock_runtime import cluster_description_env

TAPS = {"n15": ("vision_features", "backbone_features", "vl_embs", "velocity_0", "action_pred"),
        "n17": ("vision_embeds", "backbone_features", "vl_embs", "velocity_0", "action_pred")}
PRECISIONS = ("device", "device_hifi2")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", default="n15", choices=["n15", "n17"])
    ap.add_argument("--scale", default="full", choices=["tiny", "full"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="initial-noise seeds (demo observation)")
    ap.add_argument("--policies", nargs="+", default=["mixed_dit", "bf16"], choices=["mixed_dit", "bf16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, help="write the results here too")
    args = ap.parse_args()
    os.environ.update(cluster_description_env(tempfile.mkdtemp(prefix="gr00t-tt-desc-")))  # before ttnn's import
    os.environ.setdefault("TT_LOGGER_LEVEL", "error")

    import numpy as np
    import torch

    from models.experimental.gr00t.common.checkpoint import LazyCheckpoint
    from models.experimental.gr00t.common.observation import parse_observation
    from models.experimental.gr00t.common.quality import max_abs_diff, pcc
    from models.experimental.gr00t.common.versions import get_spec, load
    from models.experimental.gr00t.tt.tools.golden_ops import golden_tt_model
    from models.experimental.gr00t.tt.policy import TTPolicy

    torch.set_num_threads(args.threads)
    version, tap_names = args.version, TAPS[args.version]
    ckpt = ensure_checkpoint(version, args.scale, 0)
    request = load_demo_request(version)

    # fp32 reference first, then freed: both models at once would not fit next to each other at full size.
    t0 = time.perf_counter()
    ref = load(get_spec(version).policy_cls).from_checkpoint(ckpt)
    obs = parse_observation(request, ref.layout)
    cases = []
    for seed in args.seeds:
        inputs = ref.prepare(obs, seed=seed)
        taps = ref.infer(inputs)
        cases.append((seed, inputs, {k: taps[k].float().clone() for k in tap_names}))
    config, layout, finish = ref.config, ref.layout, ref.finish  # finish: host-only (statistics, composition)
    print(f"fp32 reference: {len(cases)} inputs in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    ref.model = None
    del taps
    gc.collect()

    seq_len = cases[0][1].input_ids.shape[1]
    results = {}
    for name, precision in ((n, p) for n in args.policies for p in PRECISIONS if not (n == "bf16" and p != "device")):
        t0 = time.perf_counter()
        model = golden_tt_model(LazyCheckpoint(ckpt), config, layout, precision, TTPolicy(dtype_policy=name))
        rows = []
        for seed, inputs, want in cases:
            with model.execution():
                model.write_inputs(model.host_inputs_for(inputs))
                got = {}
                model.forward(got)
            chunk_tt, act_tt = finish(got["action_pred"].float(), inputs)
            chunk_ref, act_ref = finish(want["action_pred"], inputs)
            taps = {}
            for tap in tap_names:
                g = got[tap].float()
                if tap in ("backbone_features", "vl_embs"):
                    g = g[:, :seq_len]
                taps[tap] = round(pcc(g.reshape(want[tap].shape).numpy(), want[tap].numpy()), 6)
            valid = sum(d for _, d in layout.action_groups)
            rows.append({
                "seed": seed,
                "normalized": {"pcc": round(pcc(chunk_tt[:, :valid], chunk_ref[:, :valid]), 6),
                               "max_abs": round(max_abs_diff(chunk_tt[:, :valid], chunk_ref[:, :valid]), 5)},
                "groups": {k: {"pcc": round(pcc(act_tt[k], act_ref[k]), 6),
                               "max_abs": round(max_abs_diff(act_tt[k], act_ref[k]), 5),
                               "spread": round(float(np.ptp(act_ref[k])), 4)} for k in layout.action_keys},
                "taps_pcc": taps,
            })
        results[f"{name}/{precision}"] = rows
        print(f"{name}/{precision}: {len(rows)} inputs in {time.perf_counter() - t0:.0f} s", file=sys.stderr,
              flush=True)
        del model
        gc.collect()

    out = {"what": "ESTIMATE of TT-NN vs fp32 reference from host golden execution (weights rounded by ttnn's host "
                   "conversion, bf16 activations; device_hifi2 adds HiFi2's activation-bit truncation on bfloat8_b "
                   "matmuls); not a device measurement; random synthetic weights",
           "version": version, "scale": args.scale, "seq_len": int(seq_len), "seeds": args.seeds,
           "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                       "python": platform.python_version(), "torch": torch.__version__},
           "peak_rss_gib": round(peak_rss_gib(), 2), "policies": results}
    print(f"\nTT-NN accuracy ESTIMATE (host golden execution, {args.scale} synthetic {version}, demo observation; "
          "median over seeds)")
    keys = layout.action_keys
    print(f"{'policy':<23}{'chunk pcc':>11}{'max|d|':>9}  " + "  ".join(f"{k + ' pcc/max|d|':>24}" for k in keys))
    for name, rows in results.items():
        med = lambda f, rows=rows: float(np.median([f(r) for r in rows]))  # noqa: E731
        line = (f"{name:<23}{med(lambda r: r['normalized']['pcc']):>11.6f}"
                f"{med(lambda r: r['normalized']['max_abs']):>9.4f}  ")
        line += "  ".join(f"{med(lambda r, k=k: r['groups'][k]['pcc']):>14.6f}/"
                          f"{med(lambda r, k=k: r['groups'][k]['max_abs']):<9.4f}" for k in keys)
        print(line)
        print(f"{'':<23}taps pcc: " + ", ".join(f"{t} {med(lambda r, t=t: r['taps_pcc'][t]):.6f}"
                                                for t in tap_names))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    run_cli(main, "estimate_tt_accuracy")
