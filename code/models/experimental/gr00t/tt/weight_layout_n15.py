# SPDX-License-Identifier: Apache-2.0
"""N1.5 checkpoint tensors → the tensors the N1.5 TT-NN modules consume (pure torch, no ttnn, no device).

The shared exact rewrites of ``weight_layout.py`` (transposed linears, [1, D] rows, fused head-padded
attention), applied to the Eagle backbone (SigLIP, the projector, Qwen3) and the action head, plus:
- Qwen3's per-head RMSNorm gets a compensating scale (see ``device_tensors``); full-size Qwen3 heads
  (128) need no padding.
- Widths that are not tile multiples (SigLIP's MLP 4304, the 588-wide patch vector) get zero
  columns / rows that the next matmul multiplies by zero.
- The patch convolution becomes a [C·k·k, D] matmul on host-unfolded patches (``patchify``); embodiment-specific
  layers keep only the served embodiment's row; the action position table keeps the horizon's rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

from ..common.configs_n15 import Gr00tN15Config
from ..common.layouts import Layout
from .weight_layout import DIT, HEAD, VLSA, _attention, category_row, generic, linear_t, row, tile_up

VISION = "backbone.eagle_model.vision_model.vision_model."
LLM = "backbone.eagle_model.language_model.model."
PROJECTOR = "backbone.eagle_model.mlp1.0."
# Stored but never computed by GR00T: the SigLIP pooling head and a tied lm_head.
SKIPPED = (VISION + "head.", "backbone.eagle_model.language_model.lm_head.", "backbone.model.lm_head.")


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
