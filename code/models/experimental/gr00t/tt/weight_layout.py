# SPDX-License-Identifier: Apache-2.0
"""Checkpoint tensors → the tensors the TT-NN modules consume: the rules every version shares (pure torch, no
ttnn, no device). Each version's ``device_tensors`` applies them to its checkpoint (``weight_layout_n15.py``,
``weight_layout_n17.py``; named by its ``VersionSpec.tt_device_tensors``).

Every rule here is an exact rewrite of the checkpoint, not an approximation:
- ``nn.Linear`` weights [out, in] are stored transposed, [in, out], as ``ttnn.linear`` wants them;
  1-D parameters become [1, D] rows.
- Attention Q/K/V projections are fused into one ``qkv`` weight whose columns are heads-major, the order
  ``ttnn.transformer.split_query_key_value_and_split_heads`` reads (cross-attention: per-head batched ``q``,
  ``k``, ``v``; ``_attention`` says why, and how the action head's softmax scale is folded into q).
  Head dims that are not a multiple of the 32-wide tile (SigLIP 72, DiT 48) are zero-padded per head to the
  next multiple (96, 64): padded q·k terms are 0·0 and padded value columns meet zero rows of the padded output
  projection, so attention is unchanged. (ttnn's SDPA refuses padded head dims.)
- Other widths that are not tile multiples get zero columns / rows that the next matmul multiplies by zero.
- Embodiment-specific layers keep only the served embodiment's row (``category_row``).

Names of fused or reshaped tensors end in a suffix that says so (``.qkv.weight``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

TILE = 32
HEAD = "action_head."
DIT = "action_head.model."
VLSA = "action_head.vl_self_attention."


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
