#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Estimate, without a Tenstorrent card, how far the TT-NN port's actions will be from the fp32 reference.

For each precision policy (mixed_dit, bf16) the TT modules run on the host with ttnn's golden op
functions (``tt/tools/golden_ops.py``), in two device models:
- ``device``: every weight rounded exactly as ttnn's host conversion stores it on the device (bfloat8_b for
  the DiT block matmuls under mixed_dit, bf16 elsewhere), every activation rounded to bf16 after each op,
  the Euler state kept in fp32, matmuls accumulated in fp32;
- ``device_fidelity``: the same plus every matmul's math fidelity as its compute config sets it, emulated exactly
  (``golden_ops.fidelity_product``): HiFi2 on the bfloat8_b DiT weights, the vision towers' per-block table of
  ``tt/policy.py`` (``vit_fork`` on, the default), HiFi4 elsewhere.
The fp32 reference runs on the same inputs. Reported: PCC and max |d| of the normalised chunk (its valid
dims) and of each action group (physical units; N1.7: the absolute actions composed onto the request's
state), and PCC of the stage taps, with the gates they answer to. N1.6 has no stage gate table (no published
gate file, no device run): its taps (image tokens, backbone features, vl_embs, first velocity, action_pred) are
reported without pass/fail, and only the boot gate (chunk and action-group PCC, version-independent) is judged.

``--fidelity SPEC ...`` searches the vision tower's per-block fidelity instead: each candidate (a
``tt/policy.fidelity_of`` spec, e.g. ``HiFi4``, ``HiFi2``, ``HiFi3:0-5,HiFi2``) runs under ``device_fidelity`` on
one model (the first of ``--policies``), the backbone once and the denoise per seed. Each is held to the boot gate
(normalised chunk PCC >= GR00T_WARMUP_PCC_MIN's default 0.999, every action group whose reference spread exceeds
SERVE_GROUP_SPREAD_MIN at SERVE_GROUP_PCC_MIN) and to the p150a stage gates of ``common/quality.py`` that the
vision tower feeds (N1.5 ``vit_block_first``, N1.7 ``deepstack_0``; N1.6: none, the boot gate only, and its
Eagle3 tower has no tuned table: its default is HiFi4 throughout); ``budget`` is the largest share of a gate's
1 - PCC allowance used, over seeds (<= 0.5 is the margin asked for).

THIS IS AN ESTIMATE, not a device measurement, and a lower bound on the error: it does not model the SFPU
approximations (``math_approx_mode``), SDPA's internal formats, the packer's rounding, or real-checkpoint
outliers. Random synthetic weights, not a policy.

    estimate_tt_accuracy.py [--version n15|n16|n17] [--scale full|tiny] [--seeds 0 1 2] [--policies mixed_dit bf16]
                            [--fidelity SPEC ...] [--json out.json]
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
        "n16": ("image_tokens", "backbone_features", "vl_embs", "velocity_0", "action_pred"),
        "n17": ("vision_embeds", "backbone_features", "vl_embs", "velocity_0", "action_pred")}
PRECISIONS = ("device", "device_fidelity")
# the vision tower whose per-block fidelity ``--fidelity`` searches
TOWER = {"n15": "siglip", "n16": "eagle3", "n17": "qwen3vl"}
WARMUP_PCC_MIN = 0.999  # the boot gate's chunk PCC floor (GR00T_WARMUP_PCC_MIN's default, server/settings.py)
VERBATIM_FIDELITY = "HiFi4"  # a tower without a tuned table (``tt/policy.VIT_FORK_FIDELITY``) runs its blocks at HiFi4
STAGE_GATES_NOTE = {"n16": "no N1.6 stage PCC gates exist (no published gate file, no device run; common/quality.py "
                           "has none): the taps are reported without pass/fail; only the boot gate (chunk PCC, "
                           "action groups) is judged"}


def stage_gates(version: str) -> dict[str, float]:
    """The p150a stage gates (``common/quality.py``) on the taps the vision fidelity reaches, by tap name."""
    from models.experimental.gr00t.common.quality import TT_STAGE_PCC_GATES, TT_STAGE_PCC_GATES_N17

    gates = {"n15": TT_STAGE_PCC_GATES, "n16": {}, "n17": TT_STAGE_PCC_GATES_N17}[version]
    return {k: v for k, v in gates.items() if k != "action_pred"}


def reference_taps(version: str, ref, inputs) -> dict:
    """The fp32 reference's taps, with the gated intermediate ones (first vision block, DeepStack, first LLM layer)."""
    from models.experimental.gr00t.tests import device_fixtures

    taps = {"n15": device_fixtures.reference_taps_n15, "n16": reference_taps_n16,
            "n17": device_fixtures.reference_taps_n17}[version]
    return taps(ref, inputs)


def reference_taps_n16(ref, inputs) -> dict:
    """The fp32 reference's taps for N1.6: ``infer``'s stage boundaries (no gated intermediate tap to add)."""
    import torch

    with torch.inference_mode():
        taps = ref.infer(inputs)
    return {k: v.float() for k, v in taps.items() if isinstance(v, torch.Tensor)}


def budget_used(pcc_value: float, gate: float) -> float:
    """The share of a PCC gate's allowance (1 - gate) that 1 - PCC uses; > 1 fails the gate."""
    return (1.0 - pcc_value) / (1.0 - gate)


def gate_report(rows: list[dict], gates: dict[str, float]) -> dict:
    """Worst case over seeds of every gated quantity: the chunk PCC (boot gate), each action group with a
    spread above SERVE_GROUP_SPREAD_MIN (boot gate), the stage-gated taps; budget = the largest share used."""
    from models.experimental.gr00t.common.quality import SERVE_GROUP_PCC_MIN, SERVE_GROUP_SPREAD_MIN

    worst = {"chunk": (min(r["normalized"]["pcc"] for r in rows), WARMUP_PCC_MIN)}
    for k in rows[0]["groups"]:
        if min(r["groups"][k]["spread"] for r in rows) > SERVE_GROUP_SPREAD_MIN:
            worst[k] = (min(r["groups"][k]["pcc"] for r in rows), SERVE_GROUP_PCC_MIN)
    for tap, gate in gates.items():
        worst[tap] = (min(r["taps_pcc"][tap] for r in rows), gate)
    used = {k: round(budget_used(p, g), 4) for k, (p, g) in worst.items()}
    return {"worst_pcc": {k: p for k, (p, _) in worst.items()}, "gate": {k: g for k, (_, g) in worst.items()},
            "budget_used": used, "budget": max(used.values()), "passes": max(used.values()) <= 1.0}


def run_cases(model, cases, finish, layout, tap_names, seq_len, backbone_once: bool) -> list[dict]:
    """The TT model on every case against its reference taps. ``backbone_once``: the vision, llm and adapter stages
    run for the first case only (the cases differ only in their noise), the denoise for each."""
    from models.experimental.gr00t.common.quality import max_abs_diff, pcc

    import numpy as np

    rows, shared = [], {}
    for n, (seed, inputs, want) in enumerate(cases):
        with model.execution():
            model.write_inputs(model.host_inputs_for(inputs))
            got = dict(shared)
            if backbone_once and n:
                model.denoise(got)
            else:
                for stage in ("vision", "llm", "adapter", "denoise"):
                    getattr(model, stage)(got)
            got.update({k: v for k, v in model.outputs.items() if k != "cross_kv" and k not in got})
            if backbone_once and not n:
                shared = {k: v for k, v in got.items() if not k.startswith("velocity") and k not in (
                    "action_pred", "euler_state")}
        chunk_tt, act_tt = finish(got["action_pred"].float(), inputs)
        chunk_ref, act_ref = finish(want["action_pred"], inputs)
        taps, taps_max = {}, {}
        for tap in tap_names:
            g, w = got[tap].float(), want[tap]
            if g.ndim == 3 and g.shape[1] > seq_len and w.shape[-2] == seq_len:
                g = g[:, :seq_len]
            taps[tap] = round(pcc(g.reshape(w.shape).numpy(), w.numpy()), 6)
            taps_max[tap] = round(max_abs_diff(g.reshape(w.shape).numpy(), w.numpy()), 5)
        valid = sum(d for _, d in layout.action_groups)
        rows.append({
            "seed": seed,
            "normalized": {"pcc": round(pcc(chunk_tt[:, :valid], chunk_ref[:, :valid]), 6),
                           "max_abs": round(max_abs_diff(chunk_tt[:, :valid], chunk_ref[:, :valid]), 5)},
            "groups": {k: {"pcc": round(pcc(act_tt[k], act_ref[k]), 6),
                           "max_abs": round(max_abs_diff(act_tt[k], act_ref[k]), 5),
                           "spread": round(float(np.ptp(act_ref[k])), 4)} for k in layout.action_keys},
            "taps_pcc": taps, "taps_max_abs": taps_max,
        })
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", default="n15", choices=["n15", "n16", "n17"])
    ap.add_argument("--scale", default="full", choices=["tiny", "full"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="initial-noise seeds (demo observation)")
    ap.add_argument("--policies", nargs="+", default=["mixed_dit", "bf16"], choices=["mixed_dit", "bf16"])
    ap.add_argument("--fidelity", nargs="+", metavar="SPEC",
                    help="vision per-block fidelity candidates (tt/policy.fidelity_of specs), device_fidelity only")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, help="write the results here too")
    args = ap.parse_args()
    os.environ.update(cluster_description_env(tempfile.mkdtemp(prefix="gr00t-tt-desc-")))  # before ttnn's import
    os.environ.setdefault("TT_LOGGER_LEVEL", "error")

    import numpy as np
    import torch

    from models.experimental.gr00t.common.checkpoint import LazyCheckpoint
    from models.experimental.gr00t.common.observation import parse_observation
    from models.experimental.gr00t.common.versions import get_spec, load
    from models.experimental.gr00t.tt.policy import TTPolicy, fidelity_of
    from models.experimental.gr00t.tt.tools.golden_ops import golden_tt_model

    torch.set_num_threads(args.threads)
    version, gates = args.version, stage_gates(args.version)
    tap_names = TAPS[version] + tuple(t for t in gates if t not in TAPS[version])
    for spec in args.fidelity or []:
        fidelity_of(spec, 0)  # a bad spec fails before the long runs
    ckpt = ensure_checkpoint(version, args.scale, 0)
    request = load_demo_request(version)

    # fp32 reference first, then freed: both models at once would not fit next to each other at full size.
    t0 = time.perf_counter()
    ref = load(get_spec(version).policy_cls).from_checkpoint(ckpt)
    obs = parse_observation(request, ref.layout)
    cases = []
    for seed in args.seeds:
        inputs = ref.prepare(obs, seed=seed)
        taps = reference_taps(version, ref, inputs)
        cases.append((seed, inputs, {k: taps[k].float().clone() for k in tap_names}))
    config, layout, finish = ref.config, ref.layout, ref.finish  # finish: host-only (statistics, composition)
    print(f"fp32 reference: {len(cases)} inputs in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    ref.model = None
    del taps
    gc.collect()

    seq_len = cases[0][1].input_ids.shape[1]
    results, gate_reports = {}, {}
    if args.fidelity:
        name = args.policies[0]
        model = golden_tt_model(LazyCheckpoint(ckpt), config, layout, "device_fidelity", TTPolicy(dtype_policy=name))
        for spec in args.fidelity:
            t0 = time.perf_counter()
            model.weights.vision_fidelity[TOWER[version]] = spec
            key = f"{name}/device_fidelity/{TOWER[version]}={spec}"
            results[key] = run_cases(model, cases, finish, layout, tap_names, seq_len, backbone_once=True)
            gate_reports[key] = gate_report(results[key], gates)
            print(f"{key}: {len(cases)} inputs in {time.perf_counter() - t0:.0f} s, gate budget used "
                  f"{gate_reports[key]['budget']:.3f}", file=sys.stderr, flush=True)
        del model
    for name, precision in ((n, p) for n in args.policies for p in PRECISIONS
                            if not args.fidelity and not (n == "bf16" and p != "device")):
        t0 = time.perf_counter()
        model = golden_tt_model(LazyCheckpoint(ckpt), config, layout, precision, TTPolicy(dtype_policy=name))
        results[f"{name}/{precision}"] = run_cases(model, cases, finish, layout, tap_names, seq_len, False)
        gate_reports[f"{name}/{precision}"] = gate_report(results[f"{name}/{precision}"], gates)
        print(f"{name}/{precision}: {len(cases)} inputs in {time.perf_counter() - t0:.0f} s", file=sys.stderr,
              flush=True)
        del model
        gc.collect()

    out = {"what": "ESTIMATE of TT-NN vs fp32 reference from host golden execution (weights rounded by ttnn's host "
                   "conversion, bf16 activations; device_fidelity adds each matmul's math fidelity, emulated "
                   "exactly); not a device measurement; random synthetic weights",
           "version": version, "scale": args.scale, "seq_len": int(seq_len), "seeds": args.seeds,
           "vision_fidelity_default": TTPolicy().vision_fidelity().get(TOWER[version], VERBATIM_FIDELITY),
           "gates": {"chunk_pcc_min": WARMUP_PCC_MIN, **gates},
           **({"stage_gates_note": STAGE_GATES_NOTE[version]} if version in STAGE_GATES_NOTE else {}),
           "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                       "python": platform.python_version(), "torch": torch.__version__},
           "peak_rss_gib": round(peak_rss_gib(), 2), "policies": results, "gate_reports": gate_reports}
    print(f"\nTT-NN accuracy ESTIMATE (host golden execution, {args.scale} synthetic {version}, demo observation; "
          "median over seeds; budget: the largest share of a gate's 1 - PCC allowance used, worst seed)")
    keys = layout.action_keys
    width = max(23, *(len(k) + 2 for k in results))
    print(f"{'policy':<{width}}{'chunk pcc':>11}{'max|d|':>9}{'budget':>8}  "
          + "  ".join(f"{k + ' pcc/max|d|':>24}" for k in keys))
    for name, rows in results.items():
        med = lambda f, rows=rows: float(np.median([f(r) for r in rows]))  # noqa: E731
        line = (f"{name:<{width}}{med(lambda r: r['normalized']['pcc']):>11.6f}"
                f"{med(lambda r: r['normalized']['max_abs']):>9.4f}{gate_reports[name]['budget']:>8.3f}  ")
        line += "  ".join(f"{med(lambda r, k=k: r['groups'][k]['pcc']):>14.6f}/"
                          f"{med(lambda r, k=k: r['groups'][k]['max_abs']):<9.4f}" for k in keys)
        print(line)
        print(f"{'':<{width}}taps pcc/max|d|: " + ", ".join(
            f"{t} {med(lambda r, t=t: r['taps_pcc'][t]):.6f}/{med(lambda r, t=t: r['taps_max_abs'][t]):.4f}"
            for t in tap_names))
    if version in STAGE_GATES_NOTE:
        print(f"note: {STAGE_GATES_NOTE[version]}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    run_cli(main, "estimate_tt_accuracy")
