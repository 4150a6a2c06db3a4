#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The roofline sheet of the full-size TT model, per stage, from the mock P150: device programs, matmul program
factories, bytes moved, FLOPs, the p150a floors they imply (512 GB/s DRAM, the grid's peak at each op's math
fidelity; see ``tt/tools/census.py``), and L1 per core. **Floors, not measurements**: a lower bound on what a card can
do with these ops, ignoring dispatch and program configs.

    tt_roofline.py [--version n15|n16|n17] [--batch 1|2|4] [--json benchmarks/results/tt_roofline_n15.json]
                   [--vision-fidelity SPEC] [--vision-candidates SPEC ... --candidates-json out.json]

``--batch B`` sheets the model of a micro-batching bucket (B requests per call; default file
``tt_roofline_<version>_b<B>.json``) and adds the DRAM it takes beside the weights: its constants and persistent
inputs (resident), and the largest stage's own buffers at once (scratch).
``--vision-fidelity``: the vision tower's per-block fidelity for the whole sheet instead of the port's table
(``tt/policy.py`` ``VIT_FORK_FIDELITY``; "HiFi4" is ``GR00T_VIT_FORK=0``). ``--vision-candidates``: after the sheet,
the vision stage alone recaptured under each spec (its programs, bytes, FLOPs and floors), for the fidelity search.

Needs the mock runtime (``apt-get install -y binutils-riscv64-unknown-elf``); no checkpoint: the weights are
allocated, uninitialised, in their real converted shapes and dtypes. About a minute per version.
"""

import argparse
from collections import Counter
import json
import os
import platform
import sys
import time
from pathlib import Path

from models.experimental.gr00t.common.cli import run_cli

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default="n15", choices=["n15", "n16", "n17"])
    ap.add_argument("--batch", type=int, default=1, choices=[1, 2, 4], help="requests per call (a bucket)")
    ap.add_argument("--json", type=Path, help=f"default {RESULTS}/tt_roofline_<version>[_b<batch>].json")
    ap.add_argument("--vision-fidelity", metavar="SPEC", help="the vision tower's fidelity spec for the whole sheet")
    ap.add_argument("--vision-candidates", nargs="+", metavar="SPEC", default=[],
                    help="recapture the vision stage under each spec")
    ap.add_argument("--candidates-json", type=Path, help="where --vision-candidates' floors go")
    args = ap.parse_args(argv)
    tower = {"n15": "siglip", "n16": "eagle3", "n17": "qwen3vl"}[args.version]
    from gr00t_p150.backends.ttnn_backend import prepare_runtime

    prepare_runtime(True, Path(os.environ.get("GR00T_CACHE_DIR") or Path.home() / ".cache" / "gr00t_p150"))
    import ttnn

    from models.experimental.gr00t.tt.tools import census
    from models.experimental.gr00t.tt.tools.stage_sheet import (allocated_model, demo_host_inputs, dram_in_use,
                                                                stage_sheet)
    from models.experimental.gr00t.tt.tools.trace_safety import capture_stage

    t0 = time.perf_counter()
    print(f"building the full-size {args.version} TT model (batch {args.batch}) on the mock P150 ...", file=sys.stderr)
    device = ttnn.open_device(device_id=0)
    try:
        model, config, layout = allocated_model(args.version, device, args.batch)
        weights, resident = model.w.stored_bytes(), dram_in_use(device)
        table = model.w.vision_fidelity
        if args.vision_fidelity:
            table[tower] = args.vision_fidelity
        print(f"capturing the stages ({time.perf_counter() - t0:.0f} s), {tower} fidelity "
              f"{table.get(tower, 'HiFi4')} ...",
              file=sys.stderr)
        sheet, report = stage_sheet(model, demo_host_inputs(model, config, layout))
        banks = int(ttnn.get_memory_view(device, ttnn.BufferType.DRAM).num_banks)
        sheet_spec, candidates = table.get(tower, "HiFi4"), {}  # N1.6's tower: no tuned table
        for spec in args.vision_candidates:  # the stage check left the vision stage's inputs in place
            table[tower] = spec
            ops = capture_stage(model, "vision").ops
            candidates[spec] = {k: v for k, v in census.roofline(ops).items() if k != "by_op"}
            candidates[spec]["fidelity_programs"] = dict(Counter(op.fidelity for op in ops
                                                                        if op.name.startswith("Matmul")))
            print(f"  vision at {spec}: floor {candidates[spec]['floor_us']:.1f} us (compute "
                  f"{candidates[spec]['compute_floor_us']:.1f}, memory {candidates[spec]['memory_floor_us']:.1f})")
    finally:
        ttnn.close_device(device)
    dram = {"weights_bytes": weights, "model_resident_bytes": resident - weights,
            "scratch_peak_bytes": max(r["dram_peak_per_bank"] for r in sheet.values()) * banks,
            "what": "allocator view on the mock: resident = the model's constants and persistent inputs beside the "
                    "weights; scratch = the largest stage's own buffers at once (outputs included)"}
    total = {k: sum(row[k] for row in sheet.values()) for k in ("programs", "bytes", "flops", "floor_us",
                                                                   "memory_floor_us", "compute_floor_us")}
    print(f"{args.version} full-size TT model, batch {args.batch} per call, from the mock P150 (floors, not "
          f"measurements); DRAM beside {weights / 1e9:.2f} GB of weights: resident "
          f"{dram['model_resident_bytes'] / 1e6:.1f} MB, scratch peak {dram['scratch_peak_bytes'] / 1e6:.1f} MB")
    print(f"{'stage':<9}{'programs':>9}{'GB':>8}{'GFLOP':>9}{'mem floor us':>14}{'compute us':>12}{'floor us':>10}"
          f"{'L1/core KB':>12}  top L1 op")
    for stage, r in sheet.items():
        print(f"{stage:<9}{r['programs']:>9}{r['bytes'] / 1e9:>8.3f}{r['flops'] / 1e9:>9.1f}"
              f"{r['memory_floor_us']:>14.1f}{r['compute_floor_us']:>12.1f}{r['floor_us']:>10.1f}"
              f"{r['l1_peak_per_core'] / 1024:>12.0f}  {r['l1_top_op']}")
    print(f"{'total':<9}{total['programs']:>9}{total['bytes'] / 1e9:>8.3f}{total['flops'] / 1e9:>9.1f}"
          f"{total['memory_floor_us']:>14.1f}{total['compute_floor_us']:>12.1f}{total['floor_us']:>10.1f}")
    for stage, r in sheet.items():
        print(f"  {stage} matmul factories: {r['matmul_factories']}")
    suffix = "" if args.batch == 1 else f"_b{args.batch}"
    out = args.json or RESULTS / f"tt_roofline_{args.version}{suffix}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "version": args.version, "what": "floors from the captured shapes, not measurements",
        "command": f"code/scripts/bench/tt_roofline.py --version {args.version}"
                   + (f" --batch {args.batch}" if args.batch > 1 else ""),
        "batch": args.batch, "dram": dram,
        "card": {"dram_bytes_per_s": census.DRAM_BYTES_PER_S, "grid_cores": census.GRID_CORES,
                 "peak_flops_lofi": census.PEAK_FLOPS, "fidelity_passes": census.FIDELITY_PASSES,
                 "l1_bytes_per_core": census.L1_BYTES_PER_CORE},
        "ttnn": getattr(ttnn, "__version__", "unknown"), "host": platform.machine(),
        "vision_fidelity": {tower: sheet_spec},
        "trace_safe": report.ok, "total": total, "stages": sheet}, indent=2) + "\n")
    print(f"wrote {out} ({time.perf_counter() - t0:.0f} s)")
    if candidates:
        path = args.candidates_json or RESULTS / f"tt_vit_fidelity_floors_{args.version}.json"
        path.write_text(json.dumps({"version": args.version, "tower": tower, "what": "the vision stage's floors "
                                    "per per-block fidelity spec (census.py), not measurements",
                                    "command": "code/scripts/bench/tt_roofline.py --version "
                                    f"{args.version} --vision-candidates " + " ".join(f"'{c}'" for c in candidates),
                                    "candidates": candidates}, indent=2) + "\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    run_cli(main, "tt_roofline.py")
