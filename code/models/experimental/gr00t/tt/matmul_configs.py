# SPDX-License-Identifier: Apache-2.0
"""Explicit matmul and SDPA program configs for the p150a's 13×10 worker grid, one rule per shape class.

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

**Mid-length activations (3–4 tile rows, ≤ 128: N1.6's ``mlp1`` connector over GR1's 81 image tokens, a G1
frame's 108, a batch-2 bucket's 128-row DiT block).** A 2-D layout splits M over at most 3–4 rows of the grid, so
it reaches 39–52 cores; ``mid_m_config`` takes the short rule's 1-D multicast instead (every core holds all the
activation's rows, N split over the grid: the connector's 2048 outputs on 64 cores) wherever that reaches more
cores, its K block cut to ``L1_MATMUL_BUDGET`` as below, the output sub-block spanning the core's width.

**Long activations (more rows than the 1-D rules serve: SigLIP / the Qwen3-VL and Eagle 3 vision towers, the Qwen3
decoders, the adapter's self-attention).** ttnn's default for them is a 2-D or 1-D multicast whose K block is again
``ceil(Kt / 130)``. ``long_m_config`` keeps the 2-D multicast (activation rows multicast along one grid axis, weight
columns along the other) and picks the orientation that puts more cores to work: M over the 10 rows and N over the
13 columns, or (``transpose_mcast``) the other way (Qwen3 at S = 384: 12 M tiles on 12 columns × 10 rows of N = 120
cores instead of 6 × 13 = 78). ``per_core_M`` is the ceiling of the M tiles over its axis, ``per_core_N`` the
ceiling of the N tiles over the other or up to 3 tiles more, and the K block the largest divisor of Kt up to 16
tiles whose double-buffered input blocks, output, fp32 partials and bias row fit ``L1_MATMUL_BUDGET`` per core.
Among these layouts the rule prefers, in order: at least ``MIN_CORES`` cores at work, K blocks of 4 tiles or more,
the widest output sub-block (of ≤ 4 tiles), the most cores (Qwen3's o_proj: 8 N tiles a core on 96 cores in 1×4
sub-blocks rather than 7 on 120 in 1×1 ones). Where no layout reaches ``MIN_CORES`` (the Qwen3-VL mergers' 14 M
tiles) the most cores win. The activation after the matmul (SigLIP's and the vision tower's tanh GELU, the
adapter's) is fused into the program.

**SDPA.** Without a program config ttnn's SDPA runs 32×32 flash blocks (``ttnn_audit.md`` §1.2): at S = 384 that
is 12 K chunks per query tile row, each with its own max/rescale step. ``sdpa_config`` takes the largest chunk of
128, 64 or 32 rows that divides each (tile-padded) sequence: Qwen3 at S = 384 and Qwen3-VL at 512 run 128/128,
the DiT cross-attention 64 query rows over 128-row key chunks, its self-attention 64/64. Chunking changes only
the order of the online-softmax rescaling, not what is computed. ``exp_approx_mode`` is off: the approximate
exponential is a precision loss no golden models, and the first card run can say whether it costs time.
"""

from __future__ import annotations

import math

import ttnn

GRID = (13, 10)
TILE = 32
SHORT_M_TILES = 2  # activations of up to 64 rows take the short-activation rule
MID_M_TILES = 4  # up to 128 rows: the 1-D rule where it reaches more cores than the 2-D one (``mid_m_config``)
MAX_K_BLOCK = 16
MAX_SUBBLOCK = 4  # output tiles per sub-block with fp32 accumulation
MIN_CORES = 96  # a long-M layout on at least this many cores may trade a few cores for a wider sub-block
L1_MATMUL_BUDGET = 640 * 1024  # bytes of a core's 1,536 KB L1 a long-M matmul's buffers may take
BF16_TILE, BFP8_TILE, FP32_TILE = 2048, 1088, 4096
ACTIVATIONS = {"gelu_tanh": ttnn.UnaryOpType.GELU_TANH, "silu": ttnn.UnaryOpType.SILU, "relu": ttnn.UnaryOpType.RELU}


def _largest_divisor(n: int, limit: int) -> int:
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def _subblock(m_tiles: int, n_tiles: int, tall_spans_width: bool = False) -> tuple[int, int]:
    """The output sub-block (h, w) of a core's m_tiles × n_tiles block: the largest h·w ≤ ``MAX_SUBBLOCK`` with
    h | m_tiles and w | n_tiles, the wider on a tie; ``tall_spans_width`` (the 2-D rule, conservative) allows
    h > 1 only where w spans the whole block."""
    return max(((h, w) for h in range(1, m_tiles + 1) if m_tiles % h == 0 for w in range(1, n_tiles + 1)
                if n_tiles % w == 0 and h * w <= MAX_SUBBLOCK and (h == 1 or w == n_tiles or not tall_spans_width)),
               key=lambda hw: (hw[0] * hw[1], hw[1]))


def short_m_config(m: int, k: int, n: int, activation: str | None = None):
    """The short-activation config of an [M, K] × [K, N] matmul, or ``None`` when M is not short
    (``long_m_config`` then)."""
    mt, kt, nt = math.ceil(m / TILE), math.ceil(k / TILE), math.ceil(n / TILE)
    if mt > SHORT_M_TILES:
        return None
    per_core_n = math.ceil(nt / (GRID[0] * GRID[1]))
    h, w = _subblock(mt, per_core_n)
    return ttnn.MatmulMultiCoreReuseMultiCast1DProgramConfig(
        compute_with_storage_grid_size=ttnn.CoreCoord(*GRID), in0_block_w=_largest_divisor(kt, MAX_K_BLOCK),
        out_subblock_h=h, out_subblock_w=w, per_core_M=mt, per_core_N=per_core_n, fuse_batch=True,
        fused_activation=_fused(activation), mcast_in0=True)


def _buffers(pcm: int, pcn: int, kb: int, weight_tile_bytes: int) -> int:
    """A core's matmul buffers: double-buffered in0 / in1 blocks, the output and its fp32 partials, the bias row."""
    return (2 * pcm * kb * BF16_TILE + 2 * pcn * kb * weight_tile_bytes
            + pcm * pcn * (BF16_TILE + FP32_TILE) + pcn * BF16_TILE)


def mid_m_config(m: int, k: int, n: int, activation: str | None = None, weight_tile_bytes: int = BF16_TILE):
    """The 1-D multicast config of a mid-length activation (3–4 tile rows: N1.6's connector over GR1's 81 image
    tokens, a G1 frame's 108, a batch-2 bucket's 128-row DiT block) where it puts more cores to work than any 2-D
    layout, else ``None`` (``long_m_config`` then). A 2-D layout of 3 M tiles reaches at most 3 × 13 = 39 cores;
    multicasting the whole activation (every core holds its 3–4 tile rows, ≤ 4 × 16 tiles of K a step) and
    splitting N alone reaches ``ceil(Nt / per_core_N)`` (the connector's 2048 outputs: 64)."""
    mt, kt, nt = math.ceil(m / TILE), math.ceil(k / TILE), math.ceil(n / TILE)
    if not SHORT_M_TILES < mt <= MID_M_TILES:
        return None
    two_d = long_m_config(m, k, n, activation, weight_tile_bytes)
    per_core_n = math.ceil(nt / (GRID[0] * GRID[1]))
    if math.ceil(nt / per_core_n) <= math.ceil(mt / two_d.per_core_M) * math.ceil(nt / two_d.per_core_N):
        return None
    h, w = _subblock(mt, per_core_n, tall_spans_width=True)
    kb = max(d for d in range(1, min(kt, MAX_K_BLOCK) + 1)
             if kt % d == 0 and (d == 1 or _buffers(mt, per_core_n, d, weight_tile_bytes) <= L1_MATMUL_BUDGET))
    return ttnn.MatmulMultiCoreReuseMultiCast1DProgramConfig(
        compute_with_storage_grid_size=ttnn.CoreCoord(*GRID), in0_block_w=kb, out_subblock_h=h, out_subblock_w=w,
        per_core_M=mt, per_core_N=per_core_n, fuse_batch=True, fused_activation=_fused(activation), mcast_in0=True)


def _fused(activation: str | None):
    return ttnn.UnaryWithParam(ACTIVATIONS[activation]) if activation else None


def long_m_config(m: int, k: int, n: int, activation: str | None = None, weight_tile_bytes: int = BF16_TILE):
    """The long-activation 2-D multicast config of an [M, K] × [K, N] matmul (see the module docstring), or
    ``None`` when M is short (``short_m_config`` then)."""
    mt, kt, nt = math.ceil(m / TILE), math.ceil(k / TILE), math.ceil(n / TILE)
    if mt <= SHORT_M_TILES:
        return None

    def k_block(pcm: int, pcn: int) -> int:
        return max(d for d in range(1, min(kt, MAX_K_BLOCK) + 1)
                   if kt % d == 0 and (d == 1 or _buffers(pcm, pcn, d, weight_tile_bytes) <= L1_MATMUL_BUDGET))

    def layouts():
        for transpose in (False, True):
            m_cores, n_cores = (GRID[0], GRID[1]) if transpose else (GRID[1], GRID[0])
            pcm = math.ceil(mt / m_cores)
            for pcn in range(math.ceil(nt / n_cores), math.ceil(nt / n_cores) + MAX_SUBBLOCK):
                cores = math.ceil(mt / pcm) * math.ceil(nt / pcn)
                (h, w), kb = _subblock(pcm, pcn, tall_spans_width=True), k_block(pcm, pcn)
                enough = cores >= MIN_CORES
                # enough cores first, then K blocks of 4+ tiles (or all of a short K), then sub-block width, then cores
                yield (enough, kb >= min(kt, 4), h * w if enough else 0, cores), transpose, pcm, pcn, h, w, kb

    _, transpose, pcm, pcn, h, w, kb = max(layouts(), key=lambda layout: layout[0])
    return ttnn.MatmulMultiCoreReuseMultiCastProgramConfig(
        compute_with_storage_grid_size=ttnn.CoreCoord(*GRID), in0_block_w=kb, out_subblock_h=h, out_subblock_w=w,
        per_core_M=pcm, per_core_N=pcn, transpose_mcast=transpose, fused_activation=_fused(activation),
        fuse_batch=True)


def matmul_config(m: int, k: int, n: int, activation: str | None = None, weight_tile_bytes: int = BF16_TILE):
    """The program config of an [M, K] × [K, N] ``ttnn.linear`` (or ``ttnn.matmul`` of two activations: N1.6's
    placement, ``weight_tile_bytes`` bf16): short, mid or long by M."""
    return (short_m_config(m, k, n, activation) or mid_m_config(m, k, n, activation, weight_tile_bytes)
            or long_m_config(m, k, n, activation, weight_tile_bytes))


SDPA_CHUNKS = (128, 64, 32)


def _chunk(rows: int) -> int:
    padded = math.ceil(rows / TILE) * TILE
    return next(c for c in SDPA_CHUNKS if padded % c == 0)


def sdpa_config(q_rows: int, kv_rows: int) -> ttnn.SDPAProgramConfig:
    """The SDPA program config for ``q_rows`` queries over ``kv_rows`` keys (see the module docstring)."""
    return ttnn.SDPAProgramConfig(compute_with_storage_grid_size=ttnn.CoreCoord(*GRID), q_chunk_size=_chunk(q_rows),
                                  k_chunk_size=_chunk(kv_rows), exp_approx_mode=False)
