#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Write a GR00T checkpoint directory in exactly the real snapshot's format, with deterministic random
weights (never a policy: the directory is marked SYNTHETIC.json).

    make_synthetic_checkpoint.py --version n15 --scale tiny --seed 0 --out /tmp/gr00t-tiny
    make_synthetic_checkpoint.py --version n15 --scale full --list      # name<TAB>shape<TAB>dtype
    make_synthetic_checkpoint.py --version n17 --scale tiny --out /tmp/gr00t-n17-tiny
"""

import argparse
from pathlib import Path


from models.experimental.gr00t.common.cli import run_cli
from models.experimental.gr00t.common.errors import Gr00tError
from models.experimental.gr00t.common.synthetic import write_checkpoint
from models.experimental.gr00t.common.versions import SPECS, load
from models.experimental.gr00t.common.weights import inventory

DTYPE_NAMES = {"torch.bfloat16": "bfloat16", "torch.float32": "float32"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", default="n15", choices=list(SPECS))
    ap.add_argument("--scale", default="tiny", choices=["tiny", "full"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="directory to write (created)")
    ap.add_argument("--list", action="store_true", help="print the tensor inventory and write nothing")
    ap.add_argument("--max-shard-bytes", type=int, default=None,
                    help="shard size limit (default: tiny 16 MiB, full 5 GB)")
    args = ap.parse_args()
    specs = inventory(load(SPECS[args.version].config_cls).preset(args.scale))
    if args.list:
        for spec in specs:
            print(f"{spec.name}\t{tuple(spec.shape)}\t{DTYPE_NAMES[str(spec.dtype)]}")
        return 0
    if args.out is None:
        raise Gr00tError("--out DIR is required unless --list is given")
    if args.out.exists() and any(args.out.iterdir()):
        raise Gr00tError(f"--out {args.out} exists and is not empty")
    write_checkpoint(args.out, scale=args.scale, seed=args.seed, max_shard_bytes=args.max_shard_bytes,
                     version=args.version)
    return 0


if __name__ == "__main__":
    run_cli(main, "make_synthetic_checkpoint")
