# SPDX-License-Identifier: Apache-2.0
"""The whole GR00T N1.5 network on TT-NN (twin of ``reference/torch_gr00t_n15.py``): the Eagle backbone's
vision and llm stages on top of ``ttnn_gr00t.TtGr00tModel`` (persistent inputs, adapter, denoise).

GR1 geometry: one 224² image whose 256 tokens sit at a fixed offset of a prompt padded to 384 rows.
``host_inputs`` refuses any input off it before anything is written to the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import ttnn  # noqa: F401  (unused here, but golden_ops swaps every TT module's ttnn)

from ..common.configs_n15 import Gr00tN15Config
from ..common.errors import InputError
from .ttnn_common import NEG_INF, DeviceWeights
from .ttnn_eagle import TtEagle
from .ttnn_gr00t import STAGES, TtGr00tModel, cross_buffer, head_buffers, prompt_buffers
from .weight_layout import tile_up
from .weight_layout_n15 import patchify

__all__ = ["STAGES", "StaticShapes", "TtGr00tN15"]


@dataclass(frozen=True)
class StaticShapes:
    """The one geometry a captured model serves (GR1: one 224² image, prompt ≤ 384 tokens)."""

    seq_len: int  # padded LLM length
    image_offset: int  # index of the first image token in every prompt
    image_tokens: int
    patch_width: int  # 588 pixel values per patch, tile-padded
    state_dim: int
    horizon: int
    action_dim: int
    dit_tokens: int  # padded DiT rows
    euler_steps: int  # denoising steps (one RTC path point before each step after the first)
    batch: int = 1  # requests per call (a micro-batching bucket)

    @classmethod
    def gr1(cls, config: Gr00tN15Config, image_offset: int, seq_len: int = 384, batch: int = 1) -> "StaticShapes":
        v, h = config.backbone.vision, config.action_head
        return cls(seq_len, image_offset, config.backbone.tokens_per_image, tile_up(v.num_channels * v.patch_size**2),
                   h.max_state_dim, h.action_horizon, h.action_dim,
                   tile_up(1 + h.num_target_vision_tokens + h.action_horizon), h.num_inference_timesteps, batch)

    def buffers(self) -> dict[str, tuple[list[int], str, str]]:
        """name → (shape, dtype, layout) of the persistent input buffers."""
        return {"patches": ([self.batch, self.image_tokens, self.patch_width], "bfloat16", "tile"),
                **prompt_buffers(self), "cross_mask": cross_buffer(self), **head_buffers(self)}


class TtGr00tN15(TtGr00tModel):
    STAGE_INPUTS = {"vision": ("patches",), "llm": ("input_ids",), "adapter": ("vl_mask", "state"),
                    "denoise": ("cross_mask", "noise")}
    PACKED_INPUTS = ("cross_mask",)

    def __init__(self, weights: DeviceWeights, config: Gr00tN15Config, shapes: StaticShapes):
        if config.backbone.tokens_per_image != shapes.image_tokens:
            raise ValueError("static shapes were made for another image geometry")
        super().__init__(weights, config, shapes)
        self.eagle = TtEagle(weights, config.backbone, shapes.seq_len, shapes.image_offset)

    # ---- host side ---------------------------------------------------------------------------------
    def host_tensors(self, pixel_values: torch.Tensor, input_ids: torch.Tensor, state: torch.Tensor,
                     noise: torch.Tensor, inpaint=None) -> dict[str, torch.Tensor]:
        """One request's torch host tensors; ``InputError`` when anything differs from the static shapes.
        ``inpaint``: RTC's inpainting prefix (``common/rtc.InpaintPrefix``) or None."""
        s = self.shapes
        if tuple(pixel_values.shape) != (1, 3, *(2 * (self.config.backbone.vision.image_size,))):
            raise InputError("images", f"the TT model was captured for one {self.config.backbone.vision.image_size}² "
                                       f"image; got pixel tensor {tuple(pixel_values.shape)}")
        n_real = self.prompt_length(input_ids)
        image = (input_ids[0] == self.config.backbone.image_token_index).nonzero().flatten()
        if (image.numel() != s.image_tokens or int(image[0]) != s.image_offset
                or int(image[-1]) != s.image_offset + s.image_tokens - 1):
            raise InputError("instruction",
                             f"the image block must be {s.image_tokens} tokens at offset {s.image_offset}")
        host = self.prompt_and_head(input_ids, n_real, state, noise, inpaint)
        cross_mask = torch.zeros(1, 1, s.dit_tokens, s.seq_len)
        cross_mask[..., n_real:] = NEG_INF
        return {"patches": patchify(pixel_values.float(), self.config.backbone.vision.patch_size),
                "cross_mask": cross_mask, **host}

    def host_tensors_for(self, inputs) -> dict[str, torch.Tensor]:
        return self.host_tensors(inputs.pixel_values, inputs.input_ids, inputs.state, inputs.noise,
                                 self.rtc_of(inputs))

    # ---- the backbone stages -----------------------------------------------------------------------
    def vision(self, taps: dict | None = None) -> None:
        self._check_unfrozen()
        self.outputs["vit_embeds"] = self.eagle.vit_embeds(self.inputs["patches"], taps)

    def llm(self, taps: dict | None = None) -> None:
        self._check_unfrozen()
        self.outputs["backbone_features"] = self.eagle.backbone_features(self.inputs["input_ids"],
                                                                         self.outputs["vit_embeds"])

    def cross_mask(self):
        return self.inputs["cross_mask"]
