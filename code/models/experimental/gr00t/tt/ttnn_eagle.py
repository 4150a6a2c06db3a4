# SPDX-License-Identifier: Apache-2.0
"""Eagle backbone on TT-NN (twin of ``reference/torch_eagle.py``): SigLIP → ``mlp1`` → splice the
image tokens into the prompt embeddings → truncated Qwen3.

The GR1 prompt puts its one image block at a fixed offset (the chat prefix before it never changes),
so the splice is two slices of the embedded prompt around the projected image tokens. The offset is
part of the captured shape: ``TtGr00tN15.check_inputs`` refuses a prompt that puts it elsewhere.
"""

from __future__ import annotations

import ttnn

from ..common.configs import EagleConfig
from .ttnn_common import DeviceWeights, linear
from .ttnn_qwen3 import TtQwen3
from .ttnn_siglip import TtSiglipVision
from .weight_layout_n15 import LLM, PROJECTOR


class TtEagle:
    def __init__(self, w: DeviceWeights, c: EagleConfig, seq_len: int, image_offset: int):
        self.w, self.c, self.seq_len, self.image_offset = w, c, seq_len, image_offset
        self.vision = TtSiglipVision(w, c.vision)
        self.llm = TtQwen3(w, c.text, c.select_layer, seq_len)

    def vit_embeds(self, patches: ttnn.Tensor, taps: dict | None = None) -> ttnn.Tensor:
        """[1, 256, 608] patches → projected image tokens [1, 256, D_llm]."""
        features = self.vision(patches, taps=taps)
        if taps is not None:
            taps["vision_features"] = features
        return linear(self.w, features, PROJECTOR[:-1])

    def splice(self, input_ids: ttnn.Tensor, vit: ttnn.Tensor) -> ttnn.Tensor:
        """Prompt ids [B, S_pad] (uint32, row-major) + image tokens [B, 256, D] → embeddings [B, S_pad, D]."""
        b, d, start = input_ids.shape[0], self.c.text.hidden_size, self.image_offset
        end = start + self.c.tokens_per_image
        emb = ttnn.embedding(input_ids, self.w[LLM + "embed_tokens.weight"], layout=ttnn.TILE_LAYOUT,
                             memory_config=ttnn.DRAM_MEMORY_CONFIG)
        parts = [ttnn.slice(emb, [0, 0, 0], [b, start, d])] if start else []
        parts.append(vit)
        if end < self.seq_len:
            parts.append(ttnn.slice(emb, [0, end, 0], [b, self.seq_len, d]))
        return ttnn.concat(parts, dim=1, memory_config=ttnn.DRAM_MEMORY_CONFIG)

    def backbone_features(self, input_ids: ttnn.Tensor, vit: ttnn.Tensor) -> ttnn.Tensor:
        return self.llm(self.splice(input_ids, vit))
