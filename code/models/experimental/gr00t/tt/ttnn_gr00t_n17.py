# SPDX-License-Identifier: Apache-2.0
"""The whole GR00T N1.7 network on TT-NN (twin of ``reference/torch_gr00t_n17.py``): the Qwen3-VL backbone's
vision and llm stages on top of ``ttnn_gr00t.TtGr00tModel`` (persistent inputs, adapter, denoise).

DROID geometry, fixed when the model is built: 2 cameras × 2 frames, each on the 16×28 patch grid (448
patches, 112 merged tokens); the chat prompt puts the four image blocks first, so their rows never move,
and the instruction (≤ 51 tokens) follows; the prompt is padded to 512 rows. Everything that depends only
on positions is therefore computed once: the vision tower's position rows and 2-D RoPE, the per-image
attention mask, the M-RoPE tables of the padded prompt, the placement of image tokens and DeepStack
features, and the image-only cross-attention key mask. Per request only the patches, the prompt ids, the
masks that depend on the prompt's length (the VL self-attention keys and the text-only cross keys), the
state and the noise are written.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import ttnn

from ..common.configs import Qwen3VLConfig
from ..common.configs_n17 import Gr00tN17Config
from ..common.embeddings import rope_index
from ..common.errors import InputError
from .ttnn_common import NEG_INF, DeviceWeights
from .ttnn_gr00t import PAD_TOKEN_ID, STAGES, TtGr00tModel, block_diagonal, cross_buffer, head_buffers, prompt_buffers
from .ttnn_qwen3vl import TtQwen3VLBackbone
from .weight_layout import tile_up

__all__ = ["STAGES", "StaticShapesN17", "TtGr00tN17"]

SEQ_LEN = 512  # the longest DROID prompt: 3 + 4 × (112 + 2) + 51 + 2 rows


@dataclass(frozen=True)
class StaticShapesN17:
    """The one geometry a captured N1.7 model serves."""

    grids: tuple[tuple[int, int, int], ...]  # [t, h, w] patches per image, in prompt order
    image_rows: tuple[int, ...]  # prompt rows of the image tokens, in the vision tower's token order
    seq_len: int  # padded LLM length
    patch_dim: int  # C·T·p·p values per patch row
    state_dim: int
    horizon: int
    action_dim: int
    dit_tokens: int  # padded DiT rows
    euler_steps: int  # denoising steps (one RTC path point before each step after the first)
    batch: int = 1  # requests per call (a micro-batching bucket)

    @classmethod
    def droid(cls, config: Gr00tN17Config, grids: list[list[int]], image_rows: list[int],
              seq_len: int = SEQ_LEN, batch: int = 1) -> "StaticShapesN17":
        v, h = config.backbone.vision, config.action_head
        merged = sum(t * hh * w for t, hh, w in grids) // v.spatial_merge_size**2
        if len(image_rows) != merged or max(image_rows) >= seq_len:
            raise ValueError(f"{len(image_rows)} image rows for {merged} image tokens in a {seq_len}-row prompt")
        return cls(tuple(tuple(g) for g in grids), tuple(image_rows), seq_len, v.patch_dim, h.max_state_dim,
                   h.action_horizon, h.action_dim, tile_up(1 + h.num_target_vision_tokens + h.action_horizon),
                   h.num_inference_timesteps, batch)

    @property
    def patches(self) -> int:
        return sum(t * h * w for t, h, w in self.grids)

    def position_ids(self, c: Qwen3VLConfig) -> torch.Tensor:
        """M-RoPE position ids [3, S_pad] of every prompt of this geometry: they depend only on where the
        image runs are (text advances all three axes alike), and padded rows continue the text."""
        ids = torch.full((1, self.seq_len), PAD_TOKEN_ID, dtype=torch.int64)
        ids[0, list(self.image_rows)] = c.image_token_id
        return rope_index(ids, torch.tensor(self.grids), c)[:, 0]

    def buffers(self) -> dict[str, tuple[list[int], str, str]]:
        """name → (shape, dtype, layout) of the persistent input buffers."""
        return {"patches": ([self.batch, self.patches, self.patch_dim], "bfloat16", "tile"), **prompt_buffers(self),
                "text_keys": cross_buffer(self), **head_buffers(self)}


class TtGr00tN17(TtGr00tModel):
    STAGE_INPUTS = {"vision": ("patches",), "llm": ("input_ids",), "adapter": ("vl_mask", "state"),
                    "denoise": ("text_keys", "noise")}
    PACKED_INPUTS = ("text_keys",)

    def __init__(self, weights: DeviceWeights, config: Gr00tN17Config, shapes: StaticShapesN17):
        super().__init__(weights, config, shapes)
        c = config.backbone
        grids = [list(g) for g in shapes.grids]
        self.backbone = TtQwen3VLBackbone(weights, c, grids, shapes.position_ids(c),
                                          list(shapes.image_rows))
        image = torch.full((1, 1, shapes.dit_tokens, shapes.seq_len), NEG_INF)
        image[..., list(shapes.image_rows)] = 0.0  # the image-only cross blocks' keys never move
        self.image_keys = ttnn.from_torch(block_diagonal([image] * shapes.batch), dtype=ttnn.bfloat16,
                                          layout=ttnn.TILE_LAYOUT, device=self.device,
                                          memory_config=ttnn.DRAM_MEMORY_CONFIG)

    # ---- host side ---------------------------------------------------------------------------------
    def host_tensors(self, pixel_values: torch.Tensor, input_ids: torch.Tensor, image_grid_thw: torch.Tensor,
                     state: torch.Tensor, noise: torch.Tensor, inpaint=None) -> dict[str, torch.Tensor]:
        """One request's torch host tensors; ``InputError`` when anything differs from the static geometry.
        ``inpaint``: RTC's inpainting prefix (``common/rtc.InpaintPrefix``) or None."""
        s, c = self.shapes, self.config.backbone
        grids = tuple(tuple(int(v) for v in g) for g in image_grid_thw.tolist())
        if grids != s.grids:
            raise InputError("images", f"the TT model was built for {len(s.grids)} images on the patch grids "
                                       f"{[list(g) for g in s.grids]}; got {[list(g) for g in grids]}")
        if tuple(pixel_values.shape) != (s.patches, s.patch_dim):
            raise InputError("images", f"expected patch rows [{s.patches}, {s.patch_dim}], "
                                       f"got {list(pixel_values.shape)}")
        n_real = self.prompt_length(input_ids)
        image = (input_ids[0] == c.image_token_id).nonzero().flatten().tolist()
        if tuple(image) != s.image_rows:
            raise InputError("instruction", f"the prompt's image tokens must be the {len(s.image_rows)} rows of the "
                                            "static DROID layout (images first, then the instruction)")
        host = self.prompt_and_head(input_ids, n_real, state, noise, inpaint)
        text = torch.full((s.seq_len,), NEG_INF)
        text[:n_real] = 0.0
        text[list(s.image_rows)] = NEG_INF  # the text-only cross blocks see every real non-image row
        return {"patches": pixel_values.float()[None],
                "text_keys": text.expand(1, 1, s.dit_tokens, s.seq_len).contiguous(), **host}

    def host_tensors_for(self, inputs) -> dict[str, torch.Tensor]:
        return self.host_tensors(inputs.pixel_values, inputs.input_ids, inputs.image_grid_thw, inputs.state,
                                 inputs.noise, self.rtc_of(inputs))

    # ---- the backbone stages -----------------------------------------------------------------------
    def vision(self, taps: dict | None = None) -> None:
        """The vision tower, one request at a time in a batched model: at 4 × 1,792 patch rows its 2-D matmul
        blocks outgrow a core's L1 (the mock refuses them), and the tower is compute-bound already (its floor per
        request does not fall with the batch: ``tt_roofline.py --batch``); the requests' tokens are then stacked."""
        self._check_unfrozen()
        patches, b = self.inputs["patches"], self.shapes.batch
        if b == 1:
            tokens, deepstack = self.backbone.vision(patches, taps=taps)
        else:
            _, p, width = patches.shape
            rows = [self.backbone.vision(ttnn.slice(patches, [i, 0, 0], [i + 1, p, width]),
                                         taps=taps if i == 0 else None) for i in range(b)]
            tokens = ttnn.concat([r[0] for r in rows], dim=0)
            deepstack = [ttnn.concat([r[1][j] for r in rows], dim=0) for j in range(len(rows[0][1]))]
        self.outputs["vision_embeds"] = tokens
        self.outputs.update({f"deepstack_{i}": d for i, d in enumerate(deepstack)})

    def llm(self, taps: dict | None = None) -> None:
        self._check_unfrozen()
        o, b = self.outputs, self.backbone
        deepstack = [o[f"deepstack_{i}"] for i in range(len(self.config.backbone.vision.deepstack_visual_indexes))]
        o["backbone_features"] = b.text(b.splice(self.inputs["input_ids"], o["vision_embeds"]), deepstack, taps)

    def cross_mask(self):
        return {"text": self.inputs["text_keys"], "image": self.image_keys}
