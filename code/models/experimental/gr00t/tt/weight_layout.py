# SPDX-License-Identifier: Apache-2.0
"""Checkpoint tensors → the tensors the TT-NN modules consume (pure torch, no ttnn, no device).

Every rule here is an exact rewrite of the checkpoint, not an approximation:
- ``nn.Linear`` weights [out, in] are stored transposed, [in, out], as ``ttnn.linear`` wants them;
  1-D parameters become [1, D] rows.
- Attention Q/K/V projections are fused into one ``qkv`` weight whose columns are heads-major, the order
  ``ttnn.transformer.split_query_key_value_and_split_heads`` reads (cross-attention: per-head batched ``q``,
  ``k``, ``v``; ``_attention`` says why, and how the action head's softmax scale is folded into q).
  Head dims that are not a multiple of the 32-wide tile (SigLIP 72, DiT 48) are zero-padded per head to the
  next multiple (96, 64): padded q·k terms are 0·0 and padded value columns meet zero rows of the padded output
  projection, so attention is unchanged. (ttnn's SDPA refuses padded head dims.)
  Qwen3's per-head RMSNorm gets a compensating scale (see ``device_tensors``); full-size Qwen3 heads
  (128) need no padding.
- Other widths that are not tile multiples (SigLIP's MLP 4304, the 588-wide patch vector) get zero
  columns / rows that the next matmul multiplies by zero.
- The patch convolution becomes a [C·k·k, D] matmul on host-unfolded patches; embodiment-specific
  layers keep only the served embodiment's row; the action position table keeps the horizon's rows.

Names of fused or reshaped tensors end in a suffix that says so (``.qkv.weight``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

from ..common.configs_n15 import Gr00tN15Config
from ..common.layouts import Layout

TILE = 32
VISION = "backbone.eagle_model.vision_model.vision_model."
LLM = "backbone.eagle_model.language_model.model."
PROJECTOR = "backbone.eagle_model.mlp1.0."
HEAD = "action_head."
DIT = "action_head.model."
VLSA = "action_head.vl_self_attention."
# Stored but never computed by GR00T: the SigLIP pooling head and a tied lm_head.
SKIPPED = (VISION + "head.", "backbone.eagle_model.language_model.lm_head.", "backbone.model.lm_head.")


def tile_up(n: int) -> int:
    return -(-n // TILE) * TILE


def pad_heads_out(w: torch.Tensor, heads: int, head_dim: int) -> torch.Tensor:
    """Projection weight [H·hd, in] or bias [H·hd] → [in, H·hd'] / [1, H·hd'] with each head zero-padded."""
    pad = tile_up(head_dim) - head_dim
    if w.ndim == 1:
        return F.pad(w.view(heads, head_dim), (0, pad)).reshape(1, -1)
    return F.pad(w.view(heads, head_dim, w.shape[1]), (0, 0, 0, pad)).reshape(-1, w.shape[1]).t().contiguous()


def pad_heads_in(w: torch.Tensor, heads: int, head_dim: int) -> torch.Tensor:
    """Output projection [out, H·hd] → [H·hd', out], zero rows where the padded head columns arrive."""
    pad = tile_up(head_dim) - head_dim
    return F.pad(w.view(w.shape[0], heads, head_dim), (0, pad)).reshape(w.shape[0], -1).t().contiguous()


def linear_t(w: torch.Tensor, in_pad: int = 0, out_pad: int = 0) -> torch.Tensor:
    """[out, in] → [in + in_pad, out + out_pad] with zero padding."""
    return F.pad(w, (0, in_pad, 0, out_pad)).t().contiguous()


def row(b: torch.Tensor, pad: int = 0) -> torch.Tensor:
    return F.pad(b, (0, pad)).unsqueeze(0)


def generic(name: str, w: torch.Tensor) -> tuple[str, torch.Tensor, str]:
    """The rule for every tensor without a special one: a linear weight transposed, a 1-D parameter a row."""
    if w.ndim == 2:
        return name, linear_t(w), "tile"
    if w.ndim == 1:
        return name, row(w), "tile"
    raise ValueError(f"{name}: no TT layout rule for a {w.ndim}-D tensor")


def category_row(w: torch.Tensor, embodiment_id: int) -> torch.Tensor:
    """A CategorySpecificLinear's ``W`` [n, in, out] / ``b`` [n, out] → the served embodiment's [in, out] / [1, out]."""
    r = w[embodiment_id]
    return (r if r.ndim == 2 else r.unsqueeze(0)).contiguous()


def heads_batched(w: torch.Tensor, heads: int, head_dim: int) -> torch.Tensor:
    """Projection weight [H·hd, in] → [1, H, in, hd'] (each head zero-padded): the per-head weights of one batched
    ``ttnn.matmul`` that broadcasts the activation [1, 1, S, in] over the heads and writes [1, H, S, hd'] heads."""
    return pad_heads_out(w, heads, head_dim).reshape(w.shape[1], heads, -1).permute(1, 0, 2).unsqueeze(0).contiguous()


def _attention(load: Callable[[str], torch.Tensor], p: str, out: str, names: tuple[str, str, str], heads: int,
               kv_heads: int, head_dim: int, bias: bool, cross: bool = False,
               qk_scale: tuple[float, float, float] = (1.0, 1.0, 1.0),
               fold_softmax_scale: bool = False) -> Iterator[tuple[str, torch.Tensor, str]]:
    """Fused, head-padded projections of one attention module whose Q/K/V/out names are ``p + names[i]``
    (``kv_heads`` < ``heads``: grouped-query attention; ``qk_scale`` multiplies each projection's weight).

    ``fold_softmax_scale``: q's weight and bias carry the softmax scale hd^-½, so the module runs SDPA with scale 1,
    the one value for which ttnn's SDPA does not pre-multiply an additive mask by 1/scale (one program per masked
    attention layer). q·k·s is the same product either way.

    ``cross``: the query comes from the action tokens (``q``), keys and values from the VL tokens once per request
    (``k``, ``v``); all three are per-head batched weights (``heads_batched``), so each projection writes its heads
    in one matmul with no head-split programs. K's bias is dropped: it adds q_i·b_k to every logit of query i, a
    constant per softmax row. V's bias is folded into the output bias: the attention weights of a row sum to 1, so
    the output gains exactly b_v·W_out^T."""
    names = [p + n for n in names]
    counts = (heads, kv_heads, kv_heads)
    scale = (head_dim**-0.5 if fold_softmax_scale else 1.0, 1.0, 1.0)
    raw = [load(n + ".weight") * s * f for n, s, f in zip(names, qk_scale, scale)]
    braw = [load(n + ".bias") * f for n, f in zip(names, scale)] if bias else None
    w_out = load(p + out + ".weight")
    if cross:
        for name, w, c in zip(("q", "k", "v"), raw, counts):
            yield f"{p}{name}.weight", heads_batched(w, c, head_dim), "tile"
        if bias:
            yield p + "q.bias", pad_heads_out(braw[0], heads, head_dim).reshape(1, heads, 1, -1), "tile"
            yield p + out + ".bias", row(load(p + out + ".bias") + w_out @ braw[2]), "tile"
    else:
        ws = [pad_heads_out(w, c, head_dim) for w, c in zip(raw, counts)]
        yield p + "qkv.weight", torch.cat(ws, dim=1), "tile"
        if bias:
            yield p + "qkv.bias", torch.cat([pad_heads_out(b, c, head_dim) for b, c in zip(braw, counts)], dim=1), \
                "tile"
            yield p + out + ".bias", row(load(p + out + ".bias")), "tile"
    yield p + out + ".weight", pad_heads_in(w_out, heads, head_dim), "tile"


def device_tensors(load: Callable[[str], torch.Tensor], names: list[str], config: Gr00tN15Config,
                   layout: Layout) -> Iterator[tuple[str, torch.Tensor, str]]:
    """(name, tensor, "tile" | "row_major") for every tensor the TT modules read, from the fp32 loader
    ``load(name)`` over the checkpoint's ``names``. Attention tensors are emitted fused; the rest one
    by one with the generic rules."""
    e, h = config.backbone, config.action_head
    v, t, dit, sa = e.vision, e.text, h.dit, h.vl_self_attention
    fused: set[str] = set()

    def attention(p: str, out: str, qkv: tuple[str, str, str], heads: int, hd: int, bias: bool, cross=False,
                  kv_heads: int | None = None, qk_scale=(1.0, 1.0, 1.0), fold_softmax_scale=False):
        fused.update(p + n + s for n in (*qkv, out) for s in (".weight", ".bias"))
        yield from _attention(load, p, out, qkv, heads, kv_heads or heads, hd, bias, cross, qk_scale,
                              fold_softmax_scale)

    # Qwen3 normalises each q/k head (RMSNorm over head_dim) before RoPE. Over a zero-padded head the
    # mean of squares shrinks by hd/hd'; scaling q and k by s = √(hd'/hd) restores it, and the norm's
    # weight (zero-padded) is divided by s. Real checkpoints have hd = 128: s = 1, nothing changes.
    qk_norm_scale = (tile_up(t.head_dim) / t.head_dim) ** 0.5

    for i in range(v.num_hidden_layers):
        yield from attention(f"{VISION}encoder.layers.{i}.self_attn.", "out_proj", ("q_proj", "k_proj", "v_proj"),
                             v.num_attention_heads, v.head_dim, True)
    for i in range(e.select_layer):
        yield from attention(f"{LLM}layers.{i}.self_attn.", "o_proj", ("q_proj", "k_proj", "v_proj"),
                             t.num_attention_heads, t.head_dim, False, kv_heads=t.num_key_value_heads,
                             qk_scale=(qk_norm_scale, qk_norm_scale, 1.0))
    for i in range(sa.num_layers):
        yield from attention(f"{VLSA}transformer_blocks.{i}.attn1.", "to_out.0", ("to_q", "to_k", "to_v"),
                             sa.num_attention_heads, sa.attention_head_dim, True, fold_softmax_scale=True)
    for i in range(dit.num_layers):
        yield from attention(f"{DIT}transformer_blocks.{i}.attn1.", "to_out.0", ("to_q", "to_k", "to_v"),
                             dit.num_attention_heads, dit.attention_head_dim, True, cross=dit.cross_attends(i),
                             fold_softmax_scale=True)
    # Qwen3's layers past select_layer are not in GR00T's checkpoint; tolerate them if present.
    kept_llm = tuple(f"{LLM}layers.{i}." for i in range(e.select_layer))
    mlp_pad = tile_up(v.intermediate_size) - v.intermediate_size
    patch_in = v.num_channels * v.patch_size**2
    for name in names:
        if name in fused or name.startswith(SKIPPED):
            continue
        if name.startswith(LLM + "layers.") and not name.startswith(kept_llm):
            continue
        w = load(name)
        if name == VISION + "embeddings.patch_embedding.weight":  # Conv2d [D, C, k, k] → [C·k·k (padded), D]
            yield name, linear_t(w.reshape(w.shape[0], -1), in_pad=tile_up(patch_in) - patch_in), "tile"
        elif name.startswith(VISION) and ".mlp.fc1." in name:
            yield name, (linear_t(w, out_pad=mlp_pad) if w.ndim == 2 else row(w, mlp_pad)), "tile"
        elif name.startswith(VISION) and ".mlp.fc2.weight" in name:
            yield name, linear_t(w, in_pad=mlp_pad), "tile"
        elif name.startswith(LLM) and name.endswith(("self_attn.q_norm.weight", "self_attn.k_norm.weight")):
            yield name, row(w / qk_norm_scale, tile_up(t.head_dim) - t.head_dim), "tile"
        elif name == LLM + "embed_tokens.weight":
            yield name, w, "row_major"  # ttnn.embedding reads a row-major table
        elif name == HEAD + "position_embedding.weight":
            yield name, w[: h.action_horizon].contiguous(), "tile"
        elif name in (VISION + "embeddings.position_embedding.weight", HEAD + "future_tokens.weight"):
            yield name, w, "tile"  # added to / concatenated with token rows as they are
        elif name.startswith(HEAD) and name.endswith((".W", ".b")):
            yield name, category_row(w, layout.embodiment_id), "tile"
        else:
            yield generic(name, w)


def patchify(pixel_values: torch.Tensor, patch: int) -> torch.Tensor:
    """[N, C, H, W] → [N, (H/p)·(W/p), C·p·p (tile-padded)], rows in SigLIP's token order (row-major
    over the patch grid) and columns in the conv weight's (c, ky, kx) order."""
    n, c, hgt, wid = pixel_values.shape
    x = pixel_values.reshape(n, c, hgt // patch, patch, wid // patch, patch)
    x = x.permute(0, 2, 4, 1, 3, 5).reshape(n, (hgt // patch) * (wid // patch), c * patch * patch)
    return F.pad(x, (0, tile_up(x.shape[-1]) - x.shape[-1]))
