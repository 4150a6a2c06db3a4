# SPDX-License-Identifier: Apache-2.0
"""Eagle 2.5 VL backbone of GR00T N1.5 (NVIDIA's ``EagleBackbone``, ``gr00t/model/backbone/eagle_backbone.py``
and ``eagle2_hg_model/modeling_eagle2_5_vl.py``, ``n1.5-release``): SigLIP → ``mlp1`` projector → splice the image
tokens into the prompt embeddings at the ``<IMG_CONTEXT>`` positions → truncated Qwen3.

Module names equal the checkpoint keys under ``backbone.``.
"""

from __future__ import annotations

import torch
from torch import nn

from ..common.configs import EagleConfig
from .torch_qwen3 import Qwen3LanguageModel
from .torch_siglip import SiglipVisionModel


class EagleModel(nn.Module):
    def __init__(self, c: EagleConfig):
        super().__init__()
        self.config = c
        self.vision_model = SiglipVisionModel(c.vision)
        self.language_model = Qwen3LanguageModel(c.text, c.select_layer)
        # mlp_connector_layers = 1 without pixel shuffle: one Linear, no norm, no activation.
        self.mlp1 = nn.Sequential(nn.Linear(c.vision.hidden_size, c.text.hidden_size))

    def vision_features(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """[N_img, 3, 224, 224] → post_layernorm features [N_img, 256, D_vit]."""
        return self.vision_model(pixel_values)

    def splice(self, input_ids: torch.Tensor, vit_embeds: torch.Tensor) -> torch.Tensor:
        """Token embeddings [B, S, D] with the ``<IMG_CONTEXT>`` rows replaced, in order, by the
        projected image tokens. (NVIDIA writes ``emb * 0 + vit``; a plain replacement is the same.)"""
        embeds = self.language_model.model.embed_tokens(input_ids)  # [B, S, D]
        mask = input_ids == self.config.image_token_index
        flat = vit_embeds.reshape(-1, vit_embeds.shape[-1])
        if int(mask.sum()) != flat.shape[0]:
            raise ValueError(f"prompt has {int(mask.sum())} image-context tokens but {flat.shape[0]} image tokens "
                             "were computed")
        embeds = embeds.clone()
        embeds[mask] = flat.to(embeds.dtype)
        return embeds

    def forward(self, pixel_values: torch.Tensor, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        vision = self.vision_features(pixel_values)
        vit_embeds = self.mlp1(vision)  # [N_img, 256, D_llm]
        embeds = self.splice(input_ids, vit_embeds)
        features = self.language_model.model(embeds)  # [B, S, D_llm]
        return {"vision_features": vision, "vit_embeds": vit_embeds, "backbone_features": features}


class EagleBackbone(nn.Module):
    """``backbone.``: GR00T's wrapper (``eagle_linear`` is Identity: project_to_dim is null)."""

    def __init__(self, c: EagleConfig):
        super().__init__()
        self.eagle_model = EagleModel(c)

    def forward(self, pixel_values: torch.Tensor, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.eagle_model(pixel_values, input_ids)
