# SPDX-License-Identifier: Apache-2.0
"""Explicit matmul program configs for the p150a's 13×10 worker grid, one rule per shape class.

**Short activations (M ≤ 64 rows: the DiT's 64-row token block, the action head's encoders).** ttnn's default
for them is a 1-D multicast whose K block is ``ceil(Kt / 130)`` tiles: one or two tiles per step, so each core
pulls 1–2 weight tiles per in0 handshake across 48–192 K steps (``ttnn_audit.md`` §1.2). The rule here keeps the
1-D multicast of the activation (every core holds all M rows and a slice of N) and sets:

- ``per_core_N = ceil(Nt / 130)``: as many cores as N allows (FF1 / QKV 1536 → 6144 or 4608: 96 / 72 cores);
- ``in0_block_w``: the largest divisor of Kt up to 16 tiles (K steps of 16 tiles for K = 1536, 2048, 6144);
- the output sub-block: the largest h·w ≤ 4 tiles (the fp32 accumulator's limit) with h | Mt and w | per_core_N;
- the activation after the matmul (FF1's tanh GELU, the action encoder's SiLU, the MLPs' ReLU) fused into the same
  program.

A 1-D multicast over N cannot use more cores than N has tiles: FF2 and the attention output (→ 1536 = 48 tiles)
stay on 48 cores, and a 2-D split of 2 tile rows reaches no more. The mock P150 accepts every config here at full
size (``make test-tt-full``); what they gain is for a card to measure.
"""

from __future__ import annotations

import math

import ttnn

GRID = (13, 10)
TILE = 32
SHORT_M_TILES = 2  # activations of up to 64 rows take the short-activation rule
MAX_K_BLOCK = 16
MAX_SUBBLOCK = 4  # output tiles per sub-block with fp32 accumulation
ACTIVATIONS = {"gelu_tanh": ttnn.UnaryOpType.GELU_TANH, "silu": ttnn.UnaryOpType.SILU, "relu": ttnn.UnaryOpType.RELU}


def _largest_divisor(n: int, limit: int) -> int:
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def short_m_config(m: int, k: int, n: int, activation: str | None = None):
    """The short-activation config of an [M, K] × [K, N] matmul, or ``None`` when M is not short (ttnn's default
    then, and the caller runs the activation as its own op)."""
    mt, kt, nt = math.ceil(m / TILE), math.ceil(k / TILE), math.ceil(n / TILE)
    if mt > SHORT_M_TILES:
        return None
    per_core_n = math.ceil(nt / (GRID[0] * GRID[1]))
    h, w = max(((h, w) for h in range(1, mt + 1) if mt % h == 0 for w in range(1, per_core_n + 1)
                if per_core_n % w == 0 and h * w <= MAX_SUBBLOCK), key=lambda hw: (hw[0] * hw[1], hw[1]))
    return ttnn.MatmulMultiCoreReuseMultiCast1DProgramConfig(
        compute_with_storage_grid_size=ttnn.CoreCoord(*GRID), in0_block_w=_largest_divisor(kt, MAX_K_BLOCK),
        out_subblock_h=h, out_subblock_w=w, per_core_M=mt, per_core_N=per_core_n, fuse_batch=True,
        fused_activation=ttnn.UnaryWithParam(ACTIVATIONS[activation]) if activation else None, mcast_in0=True)
