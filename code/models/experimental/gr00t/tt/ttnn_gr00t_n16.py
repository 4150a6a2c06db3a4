# SPDX-License-Identifier: Apache-2.0
"""The whole GR00T N1.6 network on TT-NN (twin of ``reference/torch_policy_n16.ReferencePolicyN16.infer`` over
``torch_backbone_n16`` and ``torch_gr00t_n16``; spec ``gr00t_n16.md`` §4.3, §5, §6): Eagle 3's vision tower and
connector (``ttnn_eagle3.TtEagle3Vision``), the splice, Qwen3 cut to ``select_layer`` layers with its final norm
(``ttnn_qwen3.TtQwen3``), on top of ``ttnn_gr00t.TtGr00tModel`` (persistent inputs, adapter, denoise).

Static geometry, fixed when the model is built (``StaticShapesN16``): the images' patch grids (GR1: one 252×252
frame → 18×18 patches → 81 image tokens) and the padded prompt length. N1.6's prompt puts the instruction BEFORE
the images (§4.3), so the ``<IMG_CONTEXT>`` rows move with the instruction's length (N1.7's images-first prompt
kept them fixed). The prompt is right-padded to ``seq_len`` = the prompt without its instruction + the layout's
instruction limit, up to a tile multiple (GR1: 14 + 2 + (5 + 81 + 2) + 102 = 206 → 224 rows), with plain
positions 0..S_pad−1: the reference's positions on every real row, and causal attention keeps the padding after
the prompt from reaching a real row (``ttnn_qwen3``). Its RoPE tables are therefore built once.

Per request only what moves is written:
- ``patches``: the images' patch rows (``weight_layout_n16.patch_rows``);
- ``input_ids``: the padded prompt;
- ``placement`` [1, S_pad, K]: a 0/1 matrix with one 1 per image row (row r of the k-th ``<IMG_CONTEXT>`` has
  its 1 in column k). The splice is ``embedding(ids) + placement @ image_tokens``, exact: every output row is one
  product with a single 1 (the image token, copied) or none (zero), and the embedding table's ``<IMG_CONTEXT>`` row
  is zero on the device (``weight_layout_n16``), so no keep mask is needed. A matmul, because a per-request row
  gather of computed tile-layout tokens has no trace-safe ttnn op with a device index input, and N1.7's splice
  already runs this way (there with a constant placement); it costs S_pad·K·D MACs (GR1 224 × 96 × 2048).
  **K is the image-token count N tile-padded** (GR1 81 → 96): the device multiplies whole tiles, and the rows of the
  image tokens past N in their last tile are whatever the connector's slice and matmuls left there (on a card, not
  necessarily finite: 0 × NaN = NaN). So the tokens are padded to K rows with zeros (``ttnn.pad``, which writes its
  value into the new logical rows) and the placement carries zero columns N … K−1: every padding product is 0 × 0;
- ``text_keys`` / ``image_keys``: the AlternateVLDiT's additive cross-attention key masks [1, 1, T_pad, S_pad]
  (text = every real non-image row, image = the image rows; both move with the instruction now), as
  ``Gr00tN16ActionHead.key_masks`` builds them;
- state, noise and RTC's inpainting rows (``ttnn_gr00t.head_buffers``).
N1.6 has no VL self-attention, so no VL key mask is written (``vl_key_mask`` is None: the adapter is vlln only).
A request whose image geometry or prompt does not fit is refused with ``InputError`` before any device write.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import ttnn

from ..common.configs_n16 import Gr00tN16Config
from ..common.errors import InputError
from ..common.prompts_n16 import seq_len as n16_seq_len
from .matmul_configs import matmul_config
from .ttnn_common import NEG_INF, DeviceWeights
from .ttnn_eagle3 import TtEagle3Vision
from .ttnn_gr00t import STAGES, TtGr00tModel, cross_buffer, head_buffers
from .ttnn_qwen3 import TtQwen3
from .weight_layout import tile_up
from .weight_layout_n16 import LLM, VisionGeometry, patch_rows, static_grids

__all__ = ["STAGES", "StaticShapesN16", "TtGr00tN16", "build_model"]


@dataclass(frozen=True)
class StaticShapesN16:
    """The one geometry a captured N1.6 model serves."""

    grids: tuple[tuple[int, int], ...]  # (h, w) patches per image, in prompt order
    factor: int  # pixel-unshuffle per side (2)
    seq_len: int  # padded LLM length
    patch_width: int  # 608: C·p·p values per patch row, tile-padded
    state_dim: int
    horizon: int  # the model's action envelope (50 rows)
    action_dim: int
    dit_tokens: int  # padded DiT rows (state + 50 actions → 64)
    euler_steps: int  # denoising steps (one RTC path point before each step after the first)
    batch: int = 1  # requests per call (a micro-batching bucket; only 1 so far)

    @classmethod
    def build(cls, config: Gr00tN16Config, grids, max_text_tokens: int, batch: int = 1) -> "StaticShapesN16":
        """From the config, the images' (h, w) patch grids and the layout's instruction limit."""
        b, h = config.backbone, config.action_head
        f = b.unshuffle_factor
        geometry = VisionGeometry(tuple(tuple(int(v) for v in g) for g in grids), f)
        longest = n16_seq_len(max_text_tokens, [hh * w // f**2 for hh, w in geometry.grids])
        return cls(geometry.grids, f, tile_up(longest), tile_up(b.vision.patch_dim), h.max_state_dim,
                   h.action_horizon, h.action_dim, tile_up(1 + h.num_target_vision_tokens + h.action_horizon),
                   h.num_inference_timesteps, batch)

    @classmethod
    def for_layout(cls, config: Gr00tN16Config, layout, batch: int = 1, processor=None) -> "StaticShapesN16":
        return cls.build(config, static_grids(config, layout, processor).grids, layout.max_text_tokens, batch)

    @property
    def geometry(self) -> VisionGeometry:
        return VisionGeometry(self.grids, self.factor)

    @property
    def image_tokens(self) -> int:
        return self.geometry.tokens

    @property
    def placement_k(self) -> int:
        """The splice matmul's inner dimension: the image tokens tile-padded (GR1 81 → 96)."""
        return tile_up(self.image_tokens)

    def buffers(self) -> dict[str, tuple[list[int], str, str]]:
        """name → (shape, dtype, layout) of the persistent input buffers."""
        b, s = self.batch, self.seq_len
        return {"patches": ([b, self.geometry.padded, self.patch_width], "bfloat16", "tile"),
                "input_ids": ([b, s], "uint32", "row_major"),
                "placement": ([b, s, self.placement_k], "bfloat16", "tile"),
                "text_keys": cross_buffer(self), "image_keys": cross_buffer(self), **head_buffers(self)}


class TtGr00tN16(TtGr00tModel):
    STAGE_INPUTS = {"vision": ("patches",), "llm": ("input_ids", "placement"), "adapter": ("state",),
                    "denoise": ("text_keys", "image_keys", "noise")}
    PACKED_INPUTS = ("text_keys", "image_keys")

    def __init__(self, weights: DeviceWeights, config: Gr00tN16Config, shapes: StaticShapesN16):
        if shapes.batch != 1:
            raise ValueError("the N1.6 TT model runs one request per call so far (batch 1)")
        super().__init__(weights, config, shapes)
        b = config.backbone
        self.eagle = TtEagle3Vision(weights, b, shapes.geometry)
        self.qwen3 = TtQwen3(weights, b.text, b.select_layer, shapes.seq_len, LLM)  # final norm applied, as N1.6

    # ---- host side ---------------------------------------------------------------------------------
    def host_tensors(self, pixel_values, input_ids: torch.Tensor, state: torch.Tensor, noise: torch.Tensor,
                     inpaint=None) -> dict[str, torch.Tensor]:
        """One request's torch host tensors; ``InputError`` when anything differs from the static geometry.
        ``pixel_values``: the images [V, 3, H, W] (or a list of [3, H, W]) in prompt order; ``inpaint``: RTC's
        inpainting prefix (``common/rtc.InpaintPrefix``) or None."""
        s, b = self.shapes, self.config.backbone
        p = b.vision.patch_size
        images = list(pixel_values)
        want = [(3, h * p, w * p) for h, w in s.grids]
        if [tuple(im.shape) for im in images] != want:
            raise InputError("images", f"the TT model was built for {len(want)} image(s) of {[list(w) for w in want]}; "
                                       f"got {[list(im.shape) for im in images]}")
        n_real = self.prompt_length(input_ids)
        rows = (input_ids[0] == b.image_token_index).nonzero().flatten()
        if rows.numel() != s.image_tokens:
            raise InputError("instruction", f"the prompt has {rows.numel()} <IMG_CONTEXT> tokens; the static images "
                                            f"give {s.image_tokens}")
        host = self.prompt_and_head(input_ids, n_real, state, noise, inpaint)
        host.pop("vl_mask")  # no VL self-attention in N1.6
        placement = torch.zeros(1, s.seq_len, s.placement_k)  # columns image_tokens … K−1 stay zero
        placement[0, rows, torch.arange(s.image_tokens)] = 1.0
        text, image = torch.full((s.seq_len,), NEG_INF), torch.full((s.seq_len,), NEG_INF)
        text[:n_real] = 0.0
        text[rows] = NEG_INF
        image[rows] = 0.0

        def keys(m):
            return m.expand(1, 1, s.dit_tokens, s.seq_len).contiguous()

        return {"patches": patch_rows(images, p, s.geometry), "placement": placement, "text_keys": keys(text),
                "image_keys": keys(image), **host}

    def host_tensors_for(self, inputs) -> dict[str, torch.Tensor]:
        return self.host_tensors(inputs.pixel_values, inputs.input_ids, inputs.state, inputs.noise,
                                 self.rtc_of(inputs))

    # ---- the backbone stages -----------------------------------------------------------------------
    def vision(self, taps: dict | None = None) -> None:
        self._check_unfrozen()
        self.outputs["image_tokens"] = self.eagle(self.inputs["patches"], taps=taps)

    def splice(self, input_ids: ttnn.Tensor, placement: ttnn.Tensor, image_tokens: ttnn.Tensor) -> ttnn.Tensor:
        """Prompt ids [1, S_pad] + placement [1, S_pad, K] + image tokens [1, N, D] → embeddings [1, S_pad, D]; the
        tokens are zero-padded to K = tile_up(N) rows first, so the matmul's K is tile-aligned and no tile-padding
        row of theirs reaches an output (see the module docstring)."""
        emb = ttnn.embedding(input_ids, self.w[LLM + "embed_tokens.weight"], layout=ttnn.TILE_LAYOUT,
                             memory_config=ttnn.DRAM_MEMORY_CONFIG)
        n, k = self.shapes.image_tokens, self.shapes.placement_k
        if k != n:
            image_tokens = ttnn.pad(image_tokens, [(0, 0), (0, k - n), (0, 0)], 0.0,
                                    memory_config=ttnn.DRAM_MEMORY_CONFIG)
        placed = ttnn.matmul(placement, image_tokens, memory_config=ttnn.DRAM_MEMORY_CONFIG,
                             program_config=matmul_config(self.shapes.seq_len, k, image_tokens.shape[-1]),
                             compute_kernel_config=self.w.norm_config)
        return ttnn.add(emb, placed)

    def llm(self, taps: dict | None = None) -> None:
        self._check_unfrozen()
        x = self.splice(self.inputs["input_ids"], self.inputs["placement"], self.outputs["image_tokens"])
        self.outputs["backbone_features"] = self.qwen3(x)

    def vl_key_mask(self):
        return None  # vlln only: no VL self-attention, no key mask

    def cross_mask(self):
        return {"text": self.inputs["text_keys"], "image": self.inputs["image_keys"]}


def build_model(weights: DeviceWeights, config: Gr00tN16Config, layout, batch: int = 1) -> TtGr00tN16:
    """The TT model for ``layout``'s static geometry (its ``image_grids`` when the TT policy put the checkpoint's
    there: ``weight_layout_n16.static_grids``)."""
    return TtGr00tN16(weights, config, StaticShapesN16.for_layout(config, layout, batch))

