# SPDX-License-Identifier: Apache-2.0
"""N1.6 checkpoint tensors → the tensors the N1.6 TT-NN modules consume (pure torch, no ttnn, no device).

Today: the image side of ``backbone.model.`` (Eagle 3's SigLIP2 tower ``vision_model.vision_model.*`` and the
connector ``mlp1.*``, spec ``gr00t_n16.md`` §5.1–5.2) for ``tt/ttnn_eagle3.TtEagle3Vision``. The Qwen3 decoder
(``language_model.model.*``, 16 kept layers + the final norm N1.6 applies) and the action head
(``action_head.*``, AlternateVLDiT) come next as ``text_device_tensors`` / ``head_device_tensors`` beside
``vision_device_tensors``, and ``device_tensors`` (the version's ``tt_device_tensors``) will chain the three, as
``weight_layout_n17.device_tensors`` does.

The shared exact rewrites of ``weight_layout.py`` (transposed linears, [1, D] rows, fused head-padded attention:
72-wide heads → 96, tiny 16 → 32), plus the tower's static geometry (``VisionGeometry``), all exact:
- **Patch rows in merge order.** The device's patch rows are every image's patches with each 2×2 unshuffle window
  consecutive (windows row-major, inside a window (dy, dx) = (0,0), (0,1), (1,0), (1,1): ``embeddings.merge_order``),
  images in order, then zero rows up to a tile multiple. The tower treats tokens one by one except in attention,
  which sees an image's tokens as a set (no RoPE in this checkpoint; positions are added rows), so this order gives
  the same per-token results as the reference's row-major one, and the 2×2 pixel-unshuffle becomes a free
  reshape [P, D] → [P/4, 4·D] on the device. Each row is one patch flattened (py, px, c), channel fastest — the
  reference's ``Siglip2VisionEmbeddings.patchify`` — zero-padded from 588 to 608 columns (``patch_rows``).
- **Positions.** The learned 16×16 table is resized to every image's grid on the host, with the reference's call
  (``F.interpolate(bilinear, align_corners=False, antialias=True)`` in fp32), put in the device row order, zero rows
  for the padding: ``embeddings.position_embedding.static`` [P_pad, D], added after the patch matmul.
- **Connector columns.** The reshape writes an unshuffled token as the four window patches' D-vectors side by side
  (column ``k·D + c``, k = 2·dy + dx), where NVIDIA's ``pixel_unshuffle`` is channel-major (``c·4 + k``). The
  permutation is folded into ``mlp1``: LayerNorm(4·D)'s weight and bias and the first Linear's input rows are
  permuted (``connector_columns``); LayerNorm's mean and variance do not depend on the column order.
- SigLIP's MLP width 4304 is zero-padded to 4320 (tiny widths are tile multiples already); the softmax scale is
  folded into q (``_attention``'s ``fold_softmax_scale``), so SDPA runs with scale 1 and an unscaled additive mask.
The stored pooling ``head`` is never computed and not converted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..common.configs_n16 import Eagle3Config
from ..common.embeddings import merge_order
from .weight_layout import _attention, generic, linear_t, row, tile_up

MODEL = "backbone.model."  # the Eagle3_VLForConditionalGeneration inside GR00T's backbone
VISION = "vision_model.vision_model."  # under MODEL: the SigLIP2 tower
CONNECTOR = "mlp1."  # under MODEL: LayerNorm (0), Linear (1), GELU (2, no tensors), Linear (3)
STATIC_POS = "embeddings.position_embedding.static"  # under VISION: resized, reordered rows (not a checkpoint name)


@dataclass(frozen=True)
class VisionGeometry:
    """The static image geometry one TT vision call is built for: each image's (h, w) patch grid (GR1: one
    252×252 frame → (18, 18); a 320×240 G1 frame snapped to 252×336 → (18, 24)), unshuffle ``factor`` 2."""

    grids: tuple[tuple[int, int], ...]
    factor: int = 2

    def __post_init__(self) -> None:
        if not self.grids:
            raise ValueError("no images")
        for h, w in self.grids:
            if h <= 0 or w <= 0 or h % self.factor or w % self.factor:
                raise ValueError(f"patch grid {h}×{w} is not a positive multiple of {self.factor} on both sides")

    @property
    def seq_lens(self) -> list[int]:
        return [h * w for h, w in self.grids]

    @property
    def patches(self) -> int:
        """Real patch rows (all images)."""
        return sum(self.seq_lens)

    @property
    def padded(self) -> int:
        """Device patch rows: ``patches`` up to a tile multiple (a multiple of factor² too)."""
        return tile_up(self.patches)

    @property
    def tokens(self) -> int:
        """Image tokens after the unshuffle: Σ (h/2)·(w/2)."""
        return self.patches // self.factor**2

    def order(self) -> torch.Tensor:
        """[patches] int64: device row r holds the packed row-major patch ``order[r]`` (images in order, each in
        merge order)."""
        out, start = [], 0
        for h, w in self.grids:
            out.append(start + merge_order(h, w, self.factor, torch.device("cpu")))
            start += h * w
        return torch.cat(out)

    def segments(self) -> list[int]:
        """Row runs that attend only among themselves: each image, then the padding (its own block, so padded
        rows stay finite and no real row sees them)."""
        pad = self.padded - self.patches
        return self.seq_lens + ([pad] if pad else [])


def patch_rows(images: Sequence[torch.Tensor], patch_size: int, geometry: VisionGeometry) -> torch.Tensor:
    """Normalised images [C, H, W] → the device input [1, P_pad, tile_up(C·p·p)]: each row one patch flattened
    (py, px, c), channel fastest (the reference's ``patchify``), rows in the device order (``VisionGeometry.order``),
    zero rows and columns as padding."""
    rows = []
    for img, (h, w) in zip(images, geometry.grids, strict=True):
        ch = img.shape[0]
        if tuple(img.shape[1:]) != (h * patch_size, w * patch_size):
            raise ValueError(f"image {tuple(img.shape)} is not the static grid {h}×{w} of {patch_size}-px patches")
        x = img.float().reshape(ch, h, patch_size, w, patch_size).permute(1, 3, 2, 4, 0)  # [h, w, py, px, C]
        rows.append(x.reshape(h * w, patch_size * patch_size * ch))
    x = torch.cat(rows)[geometry.order()]
    return F.pad(x, (0, tile_up(x.shape[1]) - x.shape[1], 0, geometry.padded - x.shape[0]))[None]


def resized_positions(table: torch.Tensor, geometry: VisionGeometry) -> torch.Tensor:
    """The learned [g·g, D] table → [P_pad, D]: per image resized to its grid exactly as the reference does
    (``F.interpolate`` bilinear, ``align_corners=False``, ``antialias=True``, fp32), row-major, then put in the
    device row order with zero padding rows."""
    g, d = round(table.shape[0] ** 0.5), table.shape[1]
    grid = table.float().reshape(g, g, d).permute(2, 0, 1)[None]  # [1, D, g, g]
    rows = [F.interpolate(grid, size=(h, w), mode="bilinear", align_corners=False, antialias=True)[0]
            .reshape(d, h * w).t() for h, w in geometry.grids]
    x = torch.cat(rows)[geometry.order()]
    return F.pad(x, (0, 0, 0, geometry.padded - x.shape[0])).contiguous()


def connector_columns(width: int, factor: int = 2) -> torch.Tensor:
    """[factor²·width] int64: device column ``k·width + c`` of an unshuffled token (the window's k-th patch,
    channel c) is NVIDIA's channel-major column ``c·factor² + k``."""
    j = torch.arange(factor**2 * width)
    return (j % width) * factor**2 + j // width


def vision_device_tensors(load: Callable[[str], torch.Tensor], names: list[str], c: Eagle3Config,
                          geometry: VisionGeometry, prefix: str = MODEL) -> Iterator[tuple[str, torch.Tensor, str]]:
    """(name, tensor, "tile") for every tower and connector tensor ``TtEagle3Vision`` reads, from the fp32 loader
    over the checkpoint's ``names`` (those outside ``prefix + VISION`` and ``prefix + CONNECTOR`` are ignored)."""
    v, vis, mlp = c.vision, prefix + VISION, prefix + CONNECTOR
    if geometry.factor != c.unshuffle_factor:
        raise ValueError(f"geometry unshuffles by {geometry.factor}, the config by {c.unshuffle_factor}")
    fused = set()
    for i in range(v.num_hidden_layers):
        p = f"{vis}encoder.layers.{i}.self_attn."
        fused.update(p + n + s for n in ("q_proj", "k_proj", "v_proj", "out_proj") for s in (".weight", ".bias"))
        yield from _attention(load, p, "out_proj", ("q_proj", "k_proj", "v_proj"), v.num_attention_heads,
                              v.num_attention_heads, v.head_dim, bias=True, fold_softmax_scale=True)
    mlp_pad = tile_up(v.intermediate_size) - v.intermediate_size
    perm = connector_columns(v.hidden_size, c.unshuffle_factor)
    for name in names:
        if not name.startswith((vis, mlp)) or name in fused or name.startswith(vis + "head."):
            continue
        w = load(name)
        if name == vis + "embeddings.patch_embedding.weight":  # Linear [D, 588] → [608, D]
            yield name, linear_t(w, in_pad=tile_up(v.patch_dim) - v.patch_dim), "tile"
        elif name == vis + "embeddings.position_embedding.weight":
            yield vis + STATIC_POS, resized_positions(w, geometry), "tile"
        elif ".mlp.fc1." in name:
            yield name, (linear_t(w, out_pad=mlp_pad) if w.ndim == 2 else row(w, mlp_pad)), "tile"
        elif ".mlp.fc2.weight" in name:
            yield name, linear_t(w, in_pad=mlp_pad), "tile"
        elif name in (mlp + "0.weight", mlp + "0.bias"):  # LayerNorm(4·D) in the device's column order
            yield name, row(w[perm]), "tile"
        elif name == mlp + "1.weight":  # Linear(4·D → out): its input rows in the device's column order
            yield name, linear_t(w[:, perm]), "tile"
        else:
            yield generic(name, w)
