# SPDX-License-Identifier: Apache-2.0
"""Fast path of the GR00T N1.5 (GR1) policy: SigLIP with fused QKV, the Qwen3 decoder and the shared
action head (see ``fast_policy`` for what is hoisted, fused and padded, and why)."""

from __future__ import annotations

import torch

from ..common.embeddings import rope_cos_sin
from ..common.policy import PreparedInputs
from ..reference.torch_siglip import SiglipVisionTransformer
from .fast_dit import Fusions
from .fast_policy import FastPolicy, StaticBuffers, padded_length, qwen3_layer, siglip_encode


def siglip_features(vt: SiglipVisionTransformer, pixel_values: torch.Tensor, fz: Fusions) -> torch.Tensor:
    """SigLIP ``post_layernorm`` features [N, 256, D], QKV through ``fz``."""
    return siglip_encode(vt, vt.embeddings(pixel_values), fz)


class FastPolicyN15(FastPolicy):
    """N1.5 GR1 fast path around a ``ReferencePolicy``; ``prepare`` / ``finish`` are the reference's."""

    def fuse(self) -> None:
        eagle = self.model.backbone.eagle_model
        for layer in eagle.vision_model.vision_model.encoder.layers:
            a = layer.self_attn
            self.fz.fuse([a.q_proj, a.k_proj, a.v_proj])
        self.fuse_decoder(eagle.language_model.model.layers)

    def _signature(self, inputs: PreparedInputs) -> tuple:
        s = inputs.input_ids.shape[1]
        length = padded_length(s, inputs.prompt_tokens, self.layout.max_text_tokens) if self.pad else s
        return (length, tuple(inputs.pixel_values.shape))

    def _new_buffers(self, inputs: PreparedInputs, key: tuple) -> StaticBuffers:
        length, e = key[0], self.config.backbone
        images_per_row = inputs.pixel_values.shape[0] // inputs.input_ids.shape[0]
        b = self._new_common(inputs, length, images_per_row * e.tokens_per_image)
        b.pixel_values = torch.empty(key[1], dtype=self.act_dtype, device=self.device)
        cos, sin = rope_cos_sin(torch.arange(length, device=self.device), e.text.head_dim, e.text.rope_theta)
        b.cos, b.sin = cos.to(self.act_dtype), sin.to(self.act_dtype)
        return b

    def _fill(self, b: StaticBuffers, inputs: PreparedInputs) -> None:
        self._fill_common(b, inputs, self.config.backbone.image_token_index)
        b.pixel_values.copy_(inputs.pixel_values)

    def _stages(self, b: StaticBuffers) -> list:
        eagle, fh, fz = self.model.backbone.eagle_model, self.fast_head, self.fz
        llm = eagle.language_model.model

        def vision() -> None:
            b.vision = siglip_features(eagle.vision_model.vision_model, b.pixel_values, fz)
            b.vit = eagle.mlp1(b.vision)  # [B·N_img, 256, D_llm]

        def language() -> None:
            x = llm.embed_tokens(b.input_ids)
            x.index_copy_(1, b.image_pos, b.vit.reshape(x.shape[0], -1, b.vit.shape[-1]).to(x.dtype))  # the splice
            for layer in llm.layers:
                x = qwen3_layer(layer, x, b.cos, b.sin, fz)
            b.features = llm.norm(x)

        def adapter() -> None:
            b.vl_embs = fh.condition(b.features, b.valid)
            b.state_features, b.prefix = fh.state_prefix(b.state)

        return [("vision", vision), ("llm", language), ("adapter", adapter),
                *self._dit_stages(b, {"all": (None, b.valid)})]

    def _taps(self, b: StaticBuffers) -> dict[str, torch.Tensor]:
        return {"vision_features": b.vision, "vit_embeds": b.vit, **self._head_taps(b)}
