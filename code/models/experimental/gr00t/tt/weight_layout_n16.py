# SPDX-License-Identifier: Apache-2.0
"""N1.6 checkpoint tensors → the tensors the N1.6 TT-NN modules consume (pure torch, no ttnn, no device).

Three parts under one door, ``device_tensors`` (the version's ``tt_device_tensors``, as
``weight_layout_n17.device_tensors``):
- ``vision_device_tensors``: the image side of ``backbone.model.`` (Eagle 3's SigLIP2 tower
  ``vision_model.vision_model.*`` and the connector ``mlp1.*``, spec ``gr00t_n16.md`` §5.1–5.2) for
  ``tt/ttnn_eagle3.TtEagle3Vision``;
- ``text_device_tensors``: the Qwen3 decoder ``language_model.model.*`` (§5.3): the ``select_layer`` kept layers with
  N1.7's text rules (``weight_layout_n17.text_device_tensors``: fused grouped-query Q/K/V, the padded-head q/k norm
  compensation, the row-major embedding table), plus the final ``norm`` that N1.6 applies (N1.7 does not). The
  table's ``<IMG_CONTEXT>`` row is zeroed: every such prompt row is overwritten by an image token in the reference
  (NVIDIA's ``emb * 0 + vit``) and ``formalize_language`` keeps the instruction from forging one, so the row is never
  read; zero, it lets the TT splice be ``embedding + placement @ image_tokens`` with no keep mask (exact);
- ``head_device_tensors``: the action head ``action_head.*`` (§6) with N1.7's rules
  (``weight_layout_n17.head_device_tensors``: AlternateVLDiT, served embodiment's category rows, position table
  cut to the 50-row envelope); N1.6 has no VL self-attention and no future tokens, so none are emitted.
Stored and deliberately not converted (``UNUSED``, ``unused_tensors``): the ``lm_head``, the SigLIP pooling
``head``, a state-dropout ``mask_token``, and Qwen3 layers past ``select_layer`` if a checkpoint carries them.

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
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..common.configs import ActionHeadConfig, Qwen3Config
from ..common.configs_n16 import Eagle3Config, Gr00tN16Config, Gr00tN16ProcessorConfig
from ..common.embeddings import merge_order
from ..common.errors import ConfigError
from ..common.layouts import Layout
from ..common.weights import N16_LM_HEAD
from .weight_layout import HEAD, _attention, generic, linear_t, row, tile_up
from . import weight_layout_n17

MODEL = "backbone.model."  # the Eagle3_VLForConditionalGeneration inside GR00T's backbone
VISION = "vision_model.vision_model."  # under MODEL: the SigLIP2 tower
CONNECTOR = "mlp1."  # under MODEL: LayerNorm (0), Linear (1), GELU (2, no tensors), Linear (3)
STATIC_POS = "embeddings.position_embedding.static"  # under VISION: resized, reordered rows (not a checkpoint name)
LLM = MODEL + "language_model.model."  # the Qwen3 decoder (embed_tokens, layers, norm)
MASK_TOKEN = HEAD + "mask_token"  # state dropout's token (fine-tunes only), never used at inference
UNUSED = (N16_LM_HEAD, MASK_TOKEN)  # stored, never computed (plus VISION + "head.*" and layers past select_layer)


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


def text_device_tensors(load: Callable[[str], torch.Tensor], names: list[str], c: Qwen3Config, num_layers: int,
                        image_token_id: int, prefix: str = LLM) -> Iterator[tuple[str, torch.Tensor, str]]:
    """(name, tensor, "tile" | "row_major") for the first ``num_layers`` Qwen3 layers (N1.7's text rules), the
    embedding table with its ``image_token_id`` row zeroed (see the module docstring) and the final ``norm``."""
    for name, t, lay in weight_layout_n17.text_device_tensors(load, names, c, num_layers, prefix):
        if name == prefix + "embed_tokens.weight":
            t = t.clone()
            t[image_token_id] = 0.0
        yield name, t, lay
    yield generic(prefix + "norm.weight", load(prefix + "norm.weight"))


def head_device_tensors(load: Callable[[str], torch.Tensor], names: list[str], c: ActionHeadConfig,
                        embodiment_id: int) -> Iterator[tuple[str, torch.Tensor, str]]:
    """The action head as ``weight_layout_n17.head_device_tensors`` converts N1.7's (same module), without the
    ``mask_token`` a state-dropout fine-tune stores."""
    if c.vl_self_attention.num_layers or c.num_target_vision_tokens:
        raise ConfigError("not an N1.6 action head: it has VL self-attention layers or future tokens")
    yield from weight_layout_n17.head_device_tensors(load, [n for n in names if n != MASK_TOKEN], c, embodiment_id)


def unused_tensors(names: list[str], config: Gr00tN16Config) -> list[str]:
    """The checkpoint tensors ``device_tensors`` deliberately does not read: the lm_head, the pooling head, the
    mask_token and Qwen3 layers past ``select_layer``."""
    kept = tuple(f"{LLM}layers.{i}." for i in range(config.backbone.select_layer))
    return [n for n in names if n in UNUSED or n.startswith(MODEL + VISION + "head.")
            or (n.startswith(LLM + "layers.") and not n.startswith(kept))]


def static_grids(config: Gr00tN16Config, layout: Layout,
                 processor: Gr00tN16ProcessorConfig | None = None) -> VisionGeometry:
    """The patch grids the TT model is built for: the layout's own ``image_grids`` when it carries them (the TT policy
    puts there what the checkpoint's processor config gives: ``ttnn_policy_n16.TTGr00tPolicyN16.served_layout``),
    else every camera's frame of the layout's wire size (GR1 256×256) through the N1.6 image chain (``processor``'s
    shortest edge and crop fraction; the released defaults when None) → its (h, w) patch grid (GR1 252×252 → 18×18).
    A tag without a known frame size (unitree_g1) has no static grid."""
    from ..common.preprocessing_n16 import N16ImageChain

    if layout.image_grids is not None:
        return VisionGeometry(tuple(tuple(g) for g in layout.image_grids), config.backbone.unshuffle_factor)
    hw = layout.wire.image_hw if layout.wire is not None else None
    if hw is None:
        raise ConfigError(f"layout {layout.name!r} has no fixed frame size: the TT model needs static image grids")
    processor = processor or Gr00tN16ProcessorConfig()
    b = config.backbone
    chain = N16ImageChain(processor.shortest_image_edge, processor.crop_fraction, b.image_factor)
    h, w = chain.output_size(*hw)
    p = b.vision.patch_size
    return VisionGeometry(((h // p, w // p),) * (len(layout.cameras) * layout.frames_per_camera), b.unshuffle_factor)


def device_tensors(load: Callable[[str], torch.Tensor], names: list[str], config: Gr00tN16Config,
                   layout: Layout) -> Iterator[tuple[str, torch.Tensor, str]]:
    """Every tensor the N1.6 TT model reads (``weight_layout_n17.device_tensors``' counterpart): the vision tower and
    connector at the layout's static grids (``static_grids``: the checkpoint's, which the TT policy puts into the
    layout it converts for), the kept Qwen3 layers with the embedding table and
    the final norm, the action head with the layout's embodiment rows. ``unused_tensors`` lists what is skipped."""
    b = config.backbone
    yield from vision_device_tensors(load, names, b, static_grids(config, layout))
    yield from text_device_tensors(load, names, b.text, b.select_layer, b.image_token_index)
    yield from head_device_tensors(load, names, config.action_head, layout.embodiment_id)
