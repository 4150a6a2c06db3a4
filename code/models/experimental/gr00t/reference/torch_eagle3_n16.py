# SPDX-License-Identifier: Apache-2.0
"""GR00T N1.6 backbone, image side: the Eagle 3 ("Eagle-Block2A-2B-v2") SigLIP2-style vision tower and the
pixel-unshuffle + LayerNorm-MLP connector, in fp32 PyTorch. Everything the backbone computes from pixels before
the image tokens are written over the ``<IMG_CONTEXT>`` embeddings of the Qwen3 LLM (the LLM, prompt and action
head are elsewhere).

Written from NVIDIA's vendored files (``gr00t/model/modules/nvidia/Eagle-Block2A-2B-v2/`` of Isaac-GR00T, the
N1.6 release code the spec ``gr00t_n16.md`` reads at e29d8fc) and the spec's §5.1–5.2:

* ``modeling_siglip2.py`` (``Siglip2VisionModel`` → ``Siglip2VisionTransformer``): Linear patch embedding over
  (row, col, channel)-ordered 14×14×3 patches; the learned 16×16 position table resized per image with
  ``F.interpolate(bilinear, align_corners=False, antialias=True)`` (fp32) and added row-major; 27 pre-LN layers
  (16 heads, scale head_dim^-0.5, GELU-tanh MLP); ``post_layernorm``. NVIDIA's window regrouping, its 2-D RoPE
  tables and the window/full switch are inert for this checkpoint (``use_windows_attn = use_rope = false``): every
  layer is full attention inside one image, and the regroup is undone by ``reverse_mapping``, so tokens here stay
  row-major throughout. Images are packed into one token sequence and attention is block-diagonal, one block per
  image (NVIDIA: flash-attn varlen, ``flash_attention_forward_for_packing``). The pooling ``head`` is stored in the
  checkpoint and loaded, never run.
* ``modeling_eagle3_vl.py`` (``Eagle3_VLForConditionalGeneration``): ``select_layer = -1`` (the tower's
  post-LN output), ``pixel_shuffle_back`` (per image ``F.pixel_unshuffle`` by 1/downsample_ratio = 2, so the
  4608-vector is channel-major: index ``c·4 + 2·dy + dx`` holds ``x[c, 2r+dy, 2s+dx]``), then ``mlp1`` =
  LayerNorm(4608, eps 1e-5) → Linear(4608→2048) → GELU (exact erf) → Linear(2048→2048).

transformers' ``Siglip2VisionModel`` (5.12.1) computes the same tower function (the same resize call, fp32 on
CPU); it pads a batch and masks padded keys where NVIDIA packs, which gives the same per-image result
(``tests/test_n16_vision.py`` proves ours against it).

Input contract (preprocessing is not done here): each image is a float tensor [3, H', W'], RGB, H' and W' multiples
of 28 (= patch 14 × unshuffle 2; the Eagle processor's ``smart_resize`` snaps them, GR1 256² → 252²), normalised by
the Eagle image processor as ``(x_uint8 − 127.5) / 127.5`` (rescale 1/255, mean = std = 0.5), i.e. values in
[−1, 1]. Images in one call may differ in size; each gives (H'/28)·(W'/28) tokens of width 2048.

Module names equal the checkpoint's tensor names under ``backbone.model.`` (``vision_model.vision_model.*``,
``mlp1.*``); the module holds no buffers, so it can be built on the meta device and loaded with ``assign=True``.
Sizes come from ``Eagle3VisionConfig`` (defaults = the vendored ``config.json``, spec §1.6); ``configs_n16``
should build it from the checkpoint's values once it exists.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .torch_siglip import SiglipAttention, SiglipEncoderLayer, SiglipPoolingHead  # N1.5's shared parts

CHECKPOINT_PREFIX = "backbone.model."  # the Eagle3_VLForConditionalGeneration inside GR00T's backbone
VISION_PREFIX = "vision_model.vision_model."  # under CHECKPOINT_PREFIX
CONNECTOR_PREFIX = "mlp1."


@dataclass(frozen=True)
class Eagle3VisionConfig:
    """Vision tower (HF ``Siglip2VisionConfig`` field names) + connector sizes. Defaults: Eagle-Block2A-2B-v2."""

    hidden_size: int = 1152
    intermediate_size: int = 4304
    num_attention_heads: int = 16
    num_hidden_layers: int = 27
    patch_size: int = 14
    num_channels: int = 3
    num_patches: int = 256  # the learned position grid, a square (16 × 16)
    layer_norm_eps: float = 1e-6
    downsample_ratio: float = 0.5  # 2 × 2 pixel-unshuffle
    llm_hidden_size: int = 2048  # connector width and output = Qwen3-1.7B hidden size
    connector_layer_norm_eps: float = 1e-5  # nn.LayerNorm default in mlp1

    def __post_init__(self):
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by {self.num_attention_heads} heads")
        if math.isqrt(self.num_patches) ** 2 != self.num_patches:
            raise ValueError(f"num_patches {self.num_patches} is not a square grid")
        if abs(1 / self.downsample_ratio - round(1 / self.downsample_ratio)) > 1e-9:
            raise ValueError(f"downsample_ratio {self.downsample_ratio} is not 1/integer")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def grid_size(self) -> int:
        return math.isqrt(self.num_patches)

    @property
    def patch_dim(self) -> int:
        return self.num_channels * self.patch_size**2

    @property
    def unshuffle_factor(self) -> int:
        return round(1 / self.downsample_ratio)

    @property
    def connector_in_size(self) -> int:
        return self.hidden_size * self.unshuffle_factor**2

    @property
    def image_factor(self) -> int:
        """Image sides must be multiples of this (28 px)."""
        return self.patch_size * self.unshuffle_factor

    @classmethod
    def tiny(cls) -> Eagle3VisionConfig:
        """Real patch, grid and unshuffle; small widths and depth (tests)."""
        return cls(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_hidden_layers=3,
                   llm_hidden_size=96)

    def to_hf_siglip2_dict(self) -> dict[str, Any]:
        """The tower's fields as ``transformers.Siglip2VisionConfig`` kwargs."""
        d = {k: v for k, v in asdict(self).items()
             if k not in ("downsample_ratio", "llm_hidden_size", "connector_layer_norm_eps")}
        return {"hidden_act": "gelu_pytorch_tanh", "attention_dropout": 0.0, **d}


@dataclass
class VisionOutput:
    """Per-image results of the tower. ``hidden_states`` (when asked for): the embeddings, then each layer's
    output (before ``post_layernorm``), each a list over images of [h·w, D]."""

    last_hidden_state: list[torch.Tensor]  # post_layernorm, [h·w, D] per image, row-major over patches
    grids: list[tuple[int, int]]  # (h, w) in patches per image
    hidden_states: tuple[list[torch.Tensor], ...] | None = None


def _check_images(images: list[torch.Tensor], c: Eagle3VisionConfig) -> list[tuple[int, int]]:
    if not images:
        raise ValueError("no images")
    grids = []
    for i, img in enumerate(images):
        if img.dim() != 3 or img.shape[0] != c.num_channels:
            raise ValueError(f"image {i}: expected [{c.num_channels}, H, W], got {tuple(img.shape)}")
        _, h, w = img.shape
        if h % c.image_factor or w % c.image_factor or h == 0 or w == 0:
            raise ValueError(f"image {i}: {h}×{w} px is not a positive multiple of {c.image_factor} on both sides")
        grids.append((h // c.patch_size, w // c.patch_size))
    return grids


# ---- vision tower (modeling_siglip2.py) -----------------------------------------------------------


class Siglip2VisionEmbeddings(nn.Module):
    def __init__(self, c: Eagle3VisionConfig):
        super().__init__()
        self.config = c
        self.patch_embedding = nn.Linear(c.patch_dim, c.hidden_size)
        self.position_embedding = nn.Embedding(c.num_patches, c.hidden_size)

    def patchify(self, image: torch.Tensor) -> torch.Tensor:
        """[C, H, W] → [h·w, p·p·C]: patches row-major, each flattened (py, px, c) with the channel fastest."""
        p = self.config.patch_size
        ch, h, w = image.shape[0], image.shape[1] // p, image.shape[2] // p
        x = image.reshape(ch, h, p, w, p).permute(1, 3, 2, 4, 0)  # [h, w, py, px, C]
        return x.reshape(h * w, p * p * ch)

    def resized_positions(self, h: int, w: int) -> torch.Tensor:
        """The learned g × g table resized to the image's h × w patch grid → [h·w, D] (row-major), computed in
        fp32 as NVIDIA does on CPU. Exact identity for h = w = g; a separable triangle filter widened by the
        shrink factor when a side is under g (antialias), plain half-pixel bilinear when it is over g."""
        g, d = self.config.grid_size, self.config.hidden_size
        table = self.position_embedding.weight.float().reshape(g, g, d).permute(2, 0, 1)[None]  # [1, D, g, g]
        table = F.interpolate(table, size=(h, w), mode="bilinear", align_corners=False, antialias=True)
        return table[0].reshape(d, h * w).t()

    def forward(self, images: list[torch.Tensor], grids: list[tuple[int, int]]) -> torch.Tensor:
        """Images → packed embeddings [Σ h·w, D] (image order, each image row-major)."""
        dtype = self.patch_embedding.weight.dtype
        patches = torch.cat([self.patchify(img.to(dtype)) for img in images])
        positions = torch.cat([self.resized_positions(h, w) for h, w in grids]).to(dtype)
        return self.patch_embedding(patches) + positions


class Siglip2Attention(SiglipAttention):
    """N1.5's SigLIP attention (same projections, same definition order as the checkpoint), over packed images."""

    def forward(self, x: torch.Tensor, seq_lens: list[int]) -> torch.Tensor:
        """Packed [N, D] → [N, D]; every image (a run of ``seq_lens``) attends only to its own tokens."""
        n = x.shape[0]
        q, k, v = (proj(x).view(n, self.heads, self.head_dim).transpose(0, 1) for proj in
                   (self.q_proj, self.k_proj, self.v_proj))  # [H, N, hd]
        out = [F.scaled_dot_product_attention(qi[None], ki[None], vi[None], scale=self.head_dim**-0.5)[0]
               for qi, ki, vi in zip(q.split(seq_lens, 1), k.split(seq_lens, 1), v.split(seq_lens, 1))]
        return self.out_proj(torch.cat(out, dim=1).transpose(0, 1).reshape(n, -1))


class Siglip2EncoderLayer(SiglipEncoderLayer):
    attention = Siglip2Attention

    def forward(self, x: torch.Tensor, seq_lens: list[int]) -> torch.Tensor:
        x = x + self.self_attn(self.layer_norm1(x), seq_lens)
        return x + self.mlp(self.layer_norm2(x))


class Siglip2Encoder(nn.Module):
    def __init__(self, c: Eagle3VisionConfig):
        super().__init__()
        self.layers = nn.ModuleList(Siglip2EncoderLayer(c) for _ in range(c.num_hidden_layers))

    def forward(self, x: torch.Tensor, seq_lens: list[int],
                keep: list[torch.Tensor] | None = None) -> torch.Tensor:
        """``keep``: when given, each layer's output is appended to it."""
        for layer in self.layers:
            x = layer(x, seq_lens)
            if keep is not None:
                keep.append(x)
        return x


class Siglip2VisionTransformer(nn.Module):
    def __init__(self, c: Eagle3VisionConfig):
        super().__init__()
        self.config = c
        self.embeddings = Siglip2VisionEmbeddings(c)
        self.encoder = Siglip2Encoder(c)
        self.post_layernorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.head = SiglipPoolingHead(c)

    def forward(self, images: list[torch.Tensor], output_hidden_states: bool = False) -> VisionOutput:
        grids = _check_images(images, self.config)
        seq_lens = [h * w for h, w in grids]
        x = self.embeddings(images, grids)
        keep = [x] if output_hidden_states else None
        x = self.post_layernorm(self.encoder(x, seq_lens, keep))
        hidden = tuple(list(s.split(seq_lens)) for s in keep) if keep is not None else None
        return VisionOutput(last_hidden_state=list(x.split(seq_lens)), grids=grids, hidden_states=hidden)


class Siglip2VisionModel(nn.Module):
    """NVIDIA's wrapper level: gives the checkpoint its doubled ``vision_model.vision_model.`` prefix."""

    def __init__(self, c: Eagle3VisionConfig):
        super().__init__()
        self.vision_model = Siglip2VisionTransformer(c)

    def forward(self, images: list[torch.Tensor], output_hidden_states: bool = False) -> VisionOutput:
        return self.vision_model(images, output_hidden_states)


# ---- pixel-unshuffle + connector (modeling_eagle3_vl.py) ------------------------------------------


def pixel_unshuffle_tokens(x: torch.Tensor, h: int, w: int, factor: int = 2) -> torch.Tensor:
    """One image's row-major tokens [h·w, C] → [(h/f)·(w/f), C·f²] as NVIDIA's ``pixel_shuffle_back``: view as a
    [C, h, w] map, ``F.pixel_unshuffle`` (channel-major: out channel ``c·f² + f·dy + dx`` = ``x[c, f·r+dy,
    f·s+dx]``), flatten row-major over the (h/f, w/f) grid."""
    if h % factor or w % factor:
        raise ValueError(f"grid {h}×{w} is not divisible by the unshuffle factor {factor}")
    ch = x.shape[-1]
    fmap = x.t().reshape(ch, h, w)
    return F.pixel_unshuffle(fmap[None], factor)[0].flatten(1).t()


def make_connector(c: Eagle3VisionConfig) -> nn.Sequential:
    """``mlp1`` (mlp_connector_layers 2 with pixel shuffle): indices 0, 1, 3 hold the checkpoint's tensors."""
    return nn.Sequential(
        nn.LayerNorm(c.connector_in_size, eps=c.connector_layer_norm_eps),
        nn.Linear(c.connector_in_size, c.llm_hidden_size),
        nn.GELU(),  # exact erf
        nn.Linear(c.llm_hidden_size, c.llm_hidden_size),
    )


class Eagle3VisionConnector(nn.Module):
    """The image side of ``backbone.model``: ``vision_model`` (SigLIP2 tower) + ``mlp1`` (connector)."""

    def __init__(self, c: Eagle3VisionConfig | None = None):
        super().__init__()
        c = c or Eagle3VisionConfig()
        self.config = c
        self.vision_model = Siglip2VisionModel(c)
        self.mlp1 = make_connector(c)

    def unshuffle(self, vision: VisionOutput) -> list[torch.Tensor]:
        """Post-LN tower features → per-image [(h/2)·(w/2), 4·D] (the connector's input)."""
        f = self.config.unshuffle_factor
        return [pixel_unshuffle_tokens(x, h, w, f) for x, (h, w) in zip(vision.last_hidden_state, vision.grids)]

    def forward(self, images: list[torch.Tensor]) -> list[torch.Tensor]:
        """Normalised images [3, H, W] (sides multiples of 28, sizes may differ) → per image the LLM-ready tokens
        [(H/28)·(W/28), llm_hidden_size], row-major over the unshuffled grid. Concatenated in image order they are
        what replaces the ``<IMG_CONTEXT>`` embeddings."""
        merged = self.unshuffle(self.vision_model(images))
        lens = [t.shape[0] for t in merged]
        return list(self.mlp1(torch.cat(merged)).split(lens))


# ---- checkpoint names -----------------------------------------------------------------------------


def checkpoint_keys(c: Eagle3VisionConfig | None = None) -> dict[str, tuple[int, ...]]:
    """Full checkpoint names (with ``backbone.model.``) → shapes of every tensor this module loads."""
    with torch.device("meta"):
        model = Eagle3VisionConnector(c)
    return {CHECKPOINT_PREFIX + k: tuple(v.shape) for k, v in model.state_dict().items()}


def from_state_dict(state: Mapping[str, torch.Tensor], c: Eagle3VisionConfig | None = None,
                    prefix: str = CHECKPOINT_PREFIX,
                    dtype: torch.dtype | None = torch.float32) -> Eagle3VisionConnector:
    """Build on the meta device and load strictly from ``state``: exactly the tensors under
    ``prefix + "vision_model."`` and ``prefix + "mlp1."`` must match the module's keys and shapes (the LLM's
    ``language_model.*`` and anything outside ``prefix`` are ignored). ``dtype`` None keeps the stored dtypes."""
    ours = tuple(prefix + p for p in ("vision_model.", CONNECTOR_PREFIX))
    picked = {k[len(prefix):]: (v if dtype is None else v.to(dtype)) for k, v in state.items() if k.startswith(ours)}
    with torch.device("meta"):
        model = Eagle3VisionConnector(c)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    wrong = [k for k, s in expected.items() if k in picked and tuple(picked[k].shape) != s]
    if wrong:
        raise ValueError(f"{len(wrong)} shape mismatch(es), first {prefix + wrong[0]!r}: "
                         f"{list(picked[wrong[0]].shape)} vs {list(expected[wrong[0]])}")
    model.load_state_dict(picked, strict=True, assign=True)
    return model.eval()
