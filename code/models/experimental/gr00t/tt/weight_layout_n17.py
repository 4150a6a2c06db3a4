# SPDX-License-Identifier: Apache-2.0
"""N1.7 checkpoint tensors → the tensors the N1.7 TT-NN modules consume (pure torch, no ttnn, no device).

The shared exact rewrites of ``weight_layout.py`` (transposed linears, [1, D] rows, fused head-padded
attention), applied to the Qwen3-VL vision tower, plus two load-time rewrites for its static geometry:
- the checkpoint already fuses ``attn.qkv`` as [Q | K | V] blocks with heads-major columns, which is the
  order ``split_query_key_value_and_split_heads`` reads; only heads whose width is not a tile multiple
  (tiny test configs) are zero-padded;
- the Conv3d patch embedding (kernel = stride = one whole patch) is the matmul [C·T·p·p, D] over the
  processor's flattened patch rows;
- the learned 48×48 position grid is interpolated once to the static image grids
  (``common.embeddings.vision_position_embedding``): ``pos_embed.static`` [P, D] is what gets added.

The Qwen3 text decoder's layers get the N1.5 rules (``weight_layout_n15.device_tensors``): fused Q/K/V for
grouped-query attention, per-head q/k RMSNorm with the padding compensation, a row-major embedding table.
Its final ``norm`` is in the checkpoint but never applied by GR00T N1.7, so it is not converted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from ..common.configs import ActionHeadConfig, DiTConfig, Qwen3VLTextConfig, Qwen3VLVisionConfig
from ..common.configs_n17 import Gr00tN17Config
from ..common.embeddings import vision_position_embedding
from ..common.layouts import Layout
from ..common.preprocessing_n17 import droid_patch_grid
from .weight_layout import DIT, HEAD, TILE, VLSA, _attention, category_row, generic, linear_t, row, tile_up

VISUAL = "backbone.model.model.visual."
TEXT = "backbone.model.model.language_model."
STATIC_POS = "pos_embed.static"  # the interpolated position rows of the static grids (not a checkpoint name)


def vision_device_tensors(load: Callable[[str], torch.Tensor], names: list[str], c: Qwen3VLVisionConfig,
                          grids: list[list[int]], prefix: str = VISUAL) -> Iterator[tuple[str, torch.Tensor, str]]:
    """(name, tensor, "tile") for every vision-tower tensor the TT module reads, from the fp32 loader over
    the checkpoint's ``names`` (those outside ``prefix`` are ignored)."""
    for width, what in ((c.hidden_size, "hidden_size"), (c.intermediate_size, "intermediate_size"),
                        (c.out_hidden_size, "out_hidden_size"), (c.patch_dim, "patch_dim")):
        if width % TILE:
            raise ValueError(f"Qwen3-VL vision {what}={width} is not a multiple of the {TILE}-wide tile")
    hd, fused = c.head_dim, set()
    for i in range(c.depth):
        p = f"{prefix}blocks.{i}.attn."
        fused.update(p + n for n in ("qkv.weight", "qkv.bias", "proj.weight", "proj.bias"))
        split = dict(zip((p + "q.weight", p + "k.weight", p + "v.weight"), load(p + "qkv.weight").chunk(3)))
        split.update(zip((p + "q.bias", p + "k.bias", p + "v.bias"), load(p + "qkv.bias").chunk(3)))
        yield from _attention(lambda n, split=split: split[n] if n in split else load(n), p, "proj", ("q", "k", "v"),
                              c.num_heads, c.num_heads, hd, bias=True)
    for name in names:
        if not name.startswith(prefix) or name in fused:
            continue
        w = load(name)
        if name == prefix + "patch_embed.proj.weight":  # Conv3d [D, C, T, p, p] → [C·T·p·p, D]
            yield name, linear_t(w.reshape(w.shape[0], -1)), "tile"
        elif name == prefix + "pos_embed.weight":
            yield prefix + STATIC_POS, vision_position_embedding(w, grids, c.spatial_merge_size), "tile"
        else:
            yield generic(name, w)


def text_device_tensors(load: Callable[[str], torch.Tensor], names: list[str], c: Qwen3VLTextConfig,
                        num_layers: int, prefix: str = TEXT) -> Iterator[tuple[str, torch.Tensor, str]]:
    """(name, tensor, "tile" | "row_major") for the first ``num_layers`` text layers and the embedding table."""
    hd, fused = c.head_dim, set()
    qk_norm_scale = (tile_up(hd) / hd) ** 0.5  # see weight_layout_n15.device_tensors: 1 for real 128-wide heads
    kept = tuple(f"{prefix}layers.{i}." for i in range(num_layers))
    for p in (k + "self_attn." for k in kept):
        fused.update(p + n + ".weight" for n in ("q_proj", "k_proj", "v_proj", "o_proj"))
        yield from _attention(load, p, "o_proj", ("q_proj", "k_proj", "v_proj"), c.num_attention_heads,
                              c.num_key_value_heads, hd, bias=False, qk_scale=(qk_norm_scale, qk_norm_scale, 1.0))
    for name in names:
        if not name.startswith(kept) and name != prefix + "embed_tokens.weight" or name in fused:
            continue
        w = load(name)
        if name == prefix + "embed_tokens.weight":
            yield name, w, "row_major"  # ttnn.embedding reads a row-major table
        elif name.endswith(("self_attn.q_norm.weight", "self_attn.k_norm.weight")):
            yield name, row(w / qk_norm_scale, tile_up(hd) - hd), "tile"
        else:
            yield generic(name, w)


def dit_device_tensors(load: Callable[[str], torch.Tensor], names: list[str], c: DiTConfig,
                       prefix: str = DIT) -> Iterator[tuple[str, torch.Tensor, str]]:
    """The AlternateVLDiT's tensors: the N1.5 DiT rules (fused, head-padded ``qkv`` in self-attention blocks,
    per-head batched ``q``, ``k``, ``v`` in cross-attention ones, the softmax scale folded into q, generic linears
    and rows for the rest)."""
    fused = set()
    for i in range(c.num_layers):
        p = f"{prefix}transformer_blocks.{i}.attn1."
        fused.update(p + n + s for n in ("to_q", "to_k", "to_v", "to_out.0") for s in (".weight", ".bias"))
        yield from _attention(load, p, "to_out.0", ("to_q", "to_k", "to_v"), c.num_attention_heads,
                              c.num_attention_heads, c.attention_head_dim, bias=True, cross=c.cross_attends(i),
                              fold_softmax_scale=True)
    for name in names:
        if not name.startswith(prefix) or name in fused:
            continue
        yield generic(name, load(name))


def head_device_tensors(load: Callable[[str], torch.Tensor], names: list[str], c: ActionHeadConfig,
                        embodiment_id: int) -> Iterator[tuple[str, torch.Tensor, str]]:
    """The action head (``action_head.``): the AlternateVLDiT as ``dit_device_tensors``, the VL self-attention
    fused, and the served embodiment's rows of the category-specific encoders / decoder ([n, in, out] →
    [in, out]); the position table keeps the horizon's rows."""
    yield from dit_device_tensors(load, names, c.dit, DIT)
    sa, fused = c.vl_self_attention, set()
    for i in range(sa.num_layers):
        p = f"{VLSA}transformer_blocks.{i}.attn1."
        fused.update(p + n + s for n in ("to_q", "to_k", "to_v", "to_out.0") for s in (".weight", ".bias"))
        yield from _attention(load, p, "to_out.0", ("to_q", "to_k", "to_v"), sa.num_attention_heads,
                              sa.num_attention_heads, sa.attention_head_dim, bias=True, fold_softmax_scale=True)
    for name in names:
        if not name.startswith(HEAD) or name.startswith(DIT) or name in fused:
            continue
        w = load(name)
        if name.endswith((".W", ".b")):
            yield name, category_row(w, embodiment_id), "tile"
        elif name == HEAD + "position_embedding.weight":
            yield name, w[: c.action_horizon].contiguous(), "tile"
        else:
            yield generic(name, w)


def static_grids(config: Gr00tN17Config, layout: Layout) -> list[list[int]]:
    """The [t, h, w] patch grid of every image of the layout, for frames of the DROID client's size (every
    frame inside the layout's aspect range lands on it); the TT model is built for these grids."""
    v = config.backbone.vision
    return [list(droid_patch_grid(patch_size=v.patch_size, merge_size=v.spatial_merge_size))
            for _ in range(layout.n_images)]


def device_tensors(load: Callable[[str], torch.Tensor], names: list[str], config: Gr00tN17Config,
                   layout: Layout) -> Iterator[tuple[str, torch.Tensor, str]]:
    """Every tensor the N1.7 TT model reads (``weight_layout_n15.device_tensors``' counterpart): the vision tower at
    the layout's static patch grids, the kept text layers with the embedding table, the action head with the
    layout's embodiment rows. The stored ``lm_head`` and the text layers past ``select_layer`` are skipped."""
    b = config.backbone
    yield from vision_device_tensors(load, names, b.vision, static_grids(config, layout))
    yield from text_device_tensors(load, names, b.text, b.select_layer)
    yield from head_device_tensors(load, names, config.action_head, layout.embodiment_id)
