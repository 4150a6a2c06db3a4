# SPDX-License-Identifier: Apache-2.0
"""The whole GR00T N1.5 network on TT-NN (twin of ``reference/torch_gr00t_n15.py``), cut into the four
stages that become Metal traces: vision → llm → adapter → denoise.

Every request input lives in a persistent device buffer allocated once (``inputs``); each stage
reads buffers and the previous stage's output and leaves its own output on ``self``. A trace captured
over a stage therefore replays against the same addresses: writing new inputs and replaying the four
traces is a whole request. ``host_inputs`` builds the host tensors for those buffers and refuses any
input whose shape differs from the static one, before anything is written to the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import ttnn

from ..common.configs_n15 import Gr00tN15Config
from ..common.errors import InputError
from .ttnn_action_head import TtActionHead
from .ttnn_common import NEG_INF, DeviceWeights
from .ttnn_eagle import TtEagle
from .weight_layout import patchify, tile_up

STAGES = ("vision", "llm", "adapter", "denoise")
PAD_TOKEN_ID = 151643  # <|endoftext|>: what the padded prompt rows embed (causal attention never reads them)


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

    @classmethod
    def gr1(cls, config: Gr00tN15Config, image_offset: int, seq_len: int = 384) -> "StaticShapes":
        v, h = config.backbone.vision, config.action_head
        return cls(seq_len, image_offset, config.backbone.tokens_per_image, tile_up(v.num_channels * v.patch_size**2),
                   h.max_state_dim, h.action_horizon, h.action_dim,
                   tile_up(1 + h.num_target_vision_tokens + h.action_horizon))

    def buffers(self) -> dict[str, tuple[list[int], str, str]]:
        """name → (shape, dtype, layout) of the persistent input buffers."""
        return {
            "patches": ([1, self.image_tokens, self.patch_width], "bfloat16", "tile"),
            "input_ids": ([1, self.seq_len], "uint32", "row_major"),
            "vl_mask": ([1, 1, self.seq_len, self.seq_len], "bfloat16", "tile"),
            "cross_mask": ([1, 1, self.dit_tokens, self.seq_len], "bfloat16", "tile"),
            "state": ([1, 1, self.state_dim], "bfloat16", "tile"),
            "noise": ([1, self.horizon, self.action_dim], "float32", "tile"),
        }


def _layout(name: str):
    return ttnn.TILE_LAYOUT if name == "tile" else ttnn.ROW_MAJOR_LAYOUT


class TtGr00tN15:
    def __init__(self, weights: DeviceWeights, config: Gr00tN15Config, shapes: StaticShapes):
        if config.backbone.tokens_per_image != shapes.image_tokens:
            raise ValueError("static shapes were made for another image geometry")
        self.w, self.config, self.shapes, self.device = weights, config, shapes, weights.device
        self.eagle = TtEagle(weights, config.backbone, shapes.seq_len, shapes.image_offset)
        self.head = TtActionHead(weights, config.action_head)
        self.inputs = {name: ttnn.allocate_tensor_on_device(ttnn.Shape(shape), getattr(ttnn, dtype), _layout(lay),
                                                             self.device, ttnn.DRAM_MEMORY_CONFIG)
                       for name, (shape, dtype, lay) in shapes.buffers().items()}
        self.outputs: dict[str, object] = {}
        # Once traces are captured, their replays write into the stage outputs above; an untraced stage call
        # would replace (and free) those tensors under the traces, so it is refused from then on.
        self.frozen = False

    # ---- host side ---------------------------------------------------------------------------------
    def host_inputs(self, pixel_values: torch.Tensor, input_ids: torch.Tensor, state: torch.Tensor,
                    noise: torch.Tensor) -> dict[str, ttnn.Tensor]:
        """Host tensors for the input buffers; ``InputError`` when anything differs from the static shapes."""
        s = self.shapes
        n_real = int(input_ids.shape[-1])
        if tuple(pixel_values.shape) != (1, 3, *(2 * (self.config.backbone.vision.image_size,))):
            raise InputError("images", f"the TT model was captured for one {self.config.backbone.vision.image_size}² "
                                       f"image; got pixel tensor {tuple(pixel_values.shape)}")
        if input_ids.ndim != 2 or input_ids.shape[0] != 1 or n_real > s.seq_len:
            raise InputError("instruction", f"prompt of {n_real} tokens does not fit the captured length {s.seq_len}")
        image = (input_ids[0] == self.config.backbone.image_token_index).nonzero().flatten()
        if (image.numel() != s.image_tokens or int(image[0]) != s.image_offset
                or int(image[-1]) != s.image_offset + s.image_tokens - 1):
            raise InputError("instruction",
                             f"the image block must be {s.image_tokens} tokens at offset {s.image_offset}")
        if tuple(state.shape) != (1, 1, s.state_dim):
            raise InputError("state", f"encoded state must be [1, 1, {s.state_dim}], got {tuple(state.shape)}")
        if tuple(noise.shape) != (1, s.horizon, s.action_dim):
            raise InputError("noise", f"must be [1, {s.horizon}, {s.action_dim}], got {tuple(noise.shape)}")
        ids = torch.full((1, s.seq_len), PAD_TOKEN_ID, dtype=torch.int32)
        ids[0, :n_real] = input_ids[0].to(torch.int32)
        vl_mask = torch.zeros(1, 1, s.seq_len, s.seq_len)
        vl_mask[..., n_real:] = NEG_INF  # padded prompt rows are never keys
        cross_mask = torch.zeros(1, 1, s.dit_tokens, s.seq_len)
        cross_mask[..., n_real:] = NEG_INF
        host = {"patches": patchify(pixel_values.float(), self.config.backbone.vision.patch_size), "input_ids": ids,
                "vl_mask": vl_mask, "cross_mask": cross_mask, "state": state.float(), "noise": noise.float()}
        out = {}
        for name, (shape, dtype, lay) in s.buffers().items():
            t = host[name]
            if list(t.shape) != shape:
                raise InputError(name, f"expected shape {shape}, got {list(t.shape)}")
            out[name] = ttnn.from_torch(t, dtype=getattr(ttnn, dtype), layout=_layout(lay))
        return out

    def write_inputs(self, host: dict[str, ttnn.Tensor]) -> None:
        for name, tensor in host.items():
            ttnn.copy_host_to_device_tensor(tensor, self.inputs[name])

    # ---- the four stages ---------------------------------------------------------------------------
    def _check_unfrozen(self) -> None:
        if self.frozen:
            raise RuntimeError("this model has captured traces: run it through its traced TTRunner only")

    def vision(self, taps: dict | None = None) -> None:
        self._check_unfrozen()
        self.outputs["vit_embeds"] = self.eagle.vit_embeds(self.inputs["patches"], taps)

    def llm(self, taps: dict | None = None) -> None:
        self._check_unfrozen()
        self.outputs["backbone_features"] = self.eagle.backbone_features(self.inputs["input_ids"],
                                                                         self.outputs["vit_embeds"])

    def adapter(self, taps: dict | None = None) -> None:
        self._check_unfrozen()
        vl = self.head.condition(self.outputs["backbone_features"], self.inputs["vl_mask"])
        self.outputs["vl_embs"] = vl
        self.outputs["cross_kv"] = self.head.dit.cross_kv(vl)
        self.outputs["state_features"] = self.head.state_features(self.inputs["state"])

    def denoise(self, taps: dict | None = None) -> None:
        self._check_unfrozen()
        velocities = [] if taps is not None else None
        o = self.outputs
        o["action_pred"] = self.head.sample(self.inputs["noise"], o["state_features"], o["cross_kv"],
                                            self.inputs["cross_mask"], velocities)
        if taps is not None:
            taps.update({f"velocity_{i}": v for i, v in enumerate(velocities)})

    def forward(self, taps: dict | None = None) -> ttnn.Tensor:
        """The untraced model over the current input buffers; ``taps`` collects stage outputs."""
        for stage in STAGES:
            getattr(self, stage)(taps)
        if taps is not None:
            taps.update({k: v for k, v in self.outputs.items() if k != "cross_kv"})
        return self.outputs["action_pred"]

    def read_actions(self) -> torch.Tensor:
        """float32 normalised action chunk [1, H, D] (blocks until the device is done)."""
        return ttnn.to_torch(self.outputs["action_pred"]).float()
