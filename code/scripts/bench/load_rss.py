#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Peak host memory of loading the bf16 torch fast path, the way the server's torch backend loads it: the bf16
parts straight from the checkpoint (``torch_fast/fast_cuda.mixed_precision_dtypes``), against the fp32 load cast
afterwards (``--fp32-first``, the path before 2026-12-07). One load per process, so ``ru_maxrss`` is that load's.

    load_rss.py --version n15|n17 [--scale full|tiny] [--fp32-first] [--json out.json]

Prints and writes the peak RSS (GiB) after the load and after one request on the demo observation (which touches
every weight: tensors loaded zero-copy from the checkpoint's mapping count only once read), the load time and the
bf16 model's bytes.
"""

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from bench_reference import ensure_checkpoint, peak_rss_gib

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # code/scripts: bench_http's shared client helpers
from bench_http import cpu_model
from models.experimental.gr00t.common.cli import run_cli


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default="n15", choices=["n15", "n17"])
    ap.add_argument("--scale", default="full", choices=["tiny", "full"])
    ap.add_argument("--fp32-first", action="store_true", help="load fp32, then cast (the old path)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    import torch

    from models.experimental.gr00t.reference.policies import load_reference_policy
    from models.experimental.gr00t.torch_fast.build import fast_policy_from_reference
    from models.experimental.gr00t.torch_fast.build import load_mixed_fast_policy

    ckpt = ensure_checkpoint(args.version, args.scale, 0)
    base = peak_rss_gib()
    t = time.perf_counter()
    if args.fp32_first:
        fast = fast_policy_from_reference(load_reference_policy(ckpt, args.version), dtype="bfloat16")
    else:
        fast = load_mixed_fast_policy(ckpt, args.version)  # as the server's torch backend loads it
    seconds, after_load = time.perf_counter() - t, peak_rss_gib()
    from models.experimental.gr00t.common.demo import load_demo_request
    from models.experimental.gr00t.common.observation import parse_observation

    request = load_demo_request(args.version)
    fast.get_action(parse_observation(request, fast.layout), noise=request["noise"])
    model_bytes = sum(p.numel() * p.element_size() for p in fast.model.parameters())
    result = {"version": args.version, "scale": args.scale, "path": "fp32-first" if args.fp32_first else "mixed",
              "peak_rss_gib": round(peak_rss_gib(), 3), "peak_rss_gib_after_load": round(after_load, 3),
              "rss_before_load_gib": round(base, 3),
              "load_s": round(seconds, 1), "bf16_model_gib": round(model_bytes / 2**30, 3),
              "cpu": cpu_model(), "python": platform.python_version(), "torch": torch.__version__,
              "command": "code/scripts/bench/load_rss.py " + " ".join(sys.argv[1:])}
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    run_cli(main, "load_rss.py")
