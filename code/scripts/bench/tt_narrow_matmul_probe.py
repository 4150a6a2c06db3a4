#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Probe, on the mock P150, the alternatives for the DiT's narrow matmuls (M = 64 rows, N = 1536 = 48 tiles: FF2
with K = 6144 and the attention outputs with K = 1536 / 2048), which the port's 1-D multicast config spreads over
48 cores only (``tt/matmul_configs.py``):

- ``oned``: today's config (``matmul_configs.short_m_config``), the baseline;
- ``dram_sharded``: ``MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig`` (activation width-sharded in L1 over
  the reader cores, weight width-sharded over the DRAM banks, output width-sharded), tt_transformers' decode idiom;
- ``ksplit<k>``: K split into k slices as a batched matmul ([k, 64, K/k] × [k, K/k, N], fp32 partials, the batch
  folded into the output tiles the factory spreads over the grid) and the partials summed by ``ttnn.sum``.

For each: accepted or the mock's refusal (first line), device programs, program factories, and the census floor
(``tt/tools/census.py``: bytes ÷ 512 GB/s against FLOPs ÷ the peak at the op's fidelity). Floors, not measurements:
the census does not model how many cores stream the weight, which is the only thing a K split changes.

    tt_narrow_matmul_probe.py [--json out.json]
"""

import argparse
import json
import os
from pathlib import Path

from models.experimental.gr00t.common.cli import run_cli

SHAPES = {"ff2": (64, 6144, 1536), "attn_out_dit": (64, 1536, 1536), "attn_out_vl": (64, 2048, 1536)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    from gr00t_p150.backends.ttnn_backend import prepare_runtime

    prepare_runtime(True, Path(os.environ.get("GR00T_CACHE_DIR") or Path.home() / ".cache" / "gr00t_p150"))
    import torch
    import ttnn

    from models.experimental.gr00t.tt.matmul_configs import BFP8_TILE, matmul_config
    from models.experimental.gr00t.tt.tools.trace_safety import captured

    device = ttnn.open_device(device_id=0)
    cfg = ttnn.init_device_compute_kernel_config(device.arch(), math_fidelity=ttnn.MathFidelity.HiFi2,
                                                 fp32_dest_acc_en=True, packer_l1_acc=True)
    dram = ttnn.DRAM_MEMORY_CONFIG

    def put(shape, dtype=ttnn.bfloat16, memory_config=dram):
        return ttnn.from_torch(torch.zeros(shape), dtype=dtype, layout=ttnn.TILE_LAYOUT, device=device,
                               memory_config=memory_config)

    def oned(m, k, n):
        x, w = put([1, m, k]), put([k, n], ttnn.bfloat8_b)
        return lambda: ttnn.linear(x, w, program_config=matmul_config(m, k, n, None, BFP8_TILE), memory_config=dram,
                                   compute_kernel_config=cfg)

    def dram_sharded(m, k, n):
        banks = device.dram_grid_size().x  # DRAM banks the weight is width-sharded over
        cores = 8  # activation K-shards: 6144 / 8 = 24 tiles, 1536 / 8 = 6, 2048 / 8 = 8
        grid = ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(cores - 1, 0))})
        def width_sharded(shard):
            return ttnn.create_sharded_memory_config(shard, grid, ttnn.ShardStrategy.WIDTH,
                                                     ttnn.ShardOrientation.ROW_MAJOR,
                                                     use_height_and_width_as_shard_shape=True)

        in0_mem, out_mem = width_sharded((m, k // cores)), width_sharded((m, n // cores))
        n_per_bank = -(-n // (banks * 32)) * 32
        w_mem = ttnn.MemoryConfig(ttnn.TensorMemoryLayout.WIDTH_SHARDED, ttnn.BufferType.DRAM, ttnn.ShardSpec(
            ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(banks - 1, 0))}),
            [k, n_per_bank], ttnn.ShardOrientation.ROW_MAJOR))
        x, w = put([1, m, k], memory_config=in0_mem), put([k, n_per_bank * banks], ttnn.bfloat8_b, w_mem)
        pc = ttnn.MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig(
            in0_block_w=k // cores // 32, per_core_M=m // 32, per_core_N=n // cores // 32)
        return lambda: ttnn.linear(x, w, program_config=pc, memory_config=out_mem, compute_kernel_config=cfg)

    def ksplit(parts):
        def build(m, k, n):
            x, w = put([1, m, k]), put([parts, k // parts, n], ttnn.bfloat8_b)

            def run():
                xs = ttnn.permute(ttnn.reshape(x, [m, parts, k // parts]), (1, 0, 2), memory_config=dram)
                partial = ttnn.matmul(xs, w, dtype=ttnn.float32, memory_config=dram, compute_kernel_config=cfg)
                return ttnn.sum(partial, dim=0, keepdim=True, memory_config=dram)
            return run
        return build

    variants = {"oned": oned, "dram_sharded": dram_sharded, "ksplit2": ksplit(2), "ksplit4": ksplit(4)}
    out = {}
    try:
        for shape_name, (m, k, n) in SHAPES.items():
            for name, build in variants.items():
                try:
                    g = captured(name, build(m, k, n))
                    ops = g.ops
                    row = {"accepted": True, "programs": len(ops),
                           "factories": [f"{op.name}/{op.factory}" for op in ops],
                           "bytes": sum(op.bytes for op in ops),
                           "floor_us": round(sum(op.floor_s for op in ops) * 1e6, 2)}
                except Exception as exc:  # the mock's validation refused it
                    row = {"accepted": False, "error": (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]}
                out[f"{shape_name}/{name}"] = row
                print(f"{shape_name:<13}{name:<14}", row, flush=True)
    finally:
        ttnn.close_device(device)
    if args.json:
        args.json.write_text(json.dumps({"what": "mock P150 probe of the DiT's narrow matmuls; floors from "
                                         "census.py, not measurements", "shapes": SHAPES, "results": out},
                                        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    run_cli(main, "tt_narrow_matmul_probe.py")
