# SPDX-License-Identifier: Apache-2.0
"""GR00T N1.6 backbone (NVIDIA's ``EagleBackbone`` over the vendored ``Eagle3_VLForConditionalGeneration``,
Eagle-Block2A-2B-v2), fp32 PyTorch: image tokens from the SigLIP2 tower + connector
(``torch_eagle3_n16.Eagle3VisionConnector``) written over the ``<IMG_CONTEXT>`` embeddings of the prompt, then
Qwen3-1.7B cut to ``select_layer`` (16) layers (``torch_qwen3``). Spec ``gr00t_n16.md`` §5.2–5.3.

* Splice: all images' tokens are concatenated in image order (each image row-major over its unshuffled grid) and
  replace, in row-major (batch, position) order, the embeddings at ``input_ids == image_token_index`` (NVIDIA writes
  ``emb * 0 + vit``: a plain replacement).
* Feature: ``hidden_states[-1]`` of HF's ``Qwen3Model`` = the final RMSNorm (``model.norm``) applied to the output of
  the last kept layer (layer 15), [B, S, 2048]. (N1.7 takes the pre-norm state; N1.6, like N1.5, the normed one.)
* Positions 0..S−1, causal attention. Left padding (B > 1 with different prompt lengths) is not supported here:
  every row must be a full prompt (``attention_mask`` all ones when given), as the N1.7 reference assumes.
* Masks for the action head's AlternateVLDiT (spec §6): ``image_mask`` = ``<IMG_CONTEXT>`` positions,
  ``text_mask`` = every other real token (template, text, ``<image N>``, ``<img>``, ``</img>``).

Module names equal the checkpoint's tensor names: ``Eagle3Backbone`` is ``backbone.``, its ``model`` is
``backbone.model.`` with ``vision_model.vision_model.*``, ``mlp1.*`` and ``language_model.model.*``. The stored
``language_model.lm_head.weight`` (151680 × 2048, never computed, not tied in NVIDIA's loaded module: spec
Corrections 1) is not held; loaders pass ``LM_HEAD_KEY`` as optional.
"""

from __future__ import annotations

import torch
from torch import nn

from ..common.checkpoint import LazyCheckpoint, load_module
from ..common.configs_n16 import Eagle3Config
from ..common.weights import N16_LM_HEAD
from .torch_eagle3_n16 import Eagle3VisionConfig, Eagle3VisionConnector
from .torch_qwen3 import Qwen3LanguageModel

BACKBONE_PREFIX = "backbone."
LM_HEAD_KEY = N16_LM_HEAD  # stored, never computed: tolerated by the loader, not held by the module


def vision_config(c: Eagle3Config) -> Eagle3VisionConfig:
    """The image side's sizes from the N1.6 backbone config."""
    v = c.vision
    return Eagle3VisionConfig(hidden_size=v.hidden_size, intermediate_size=v.intermediate_size,
                              num_attention_heads=v.num_attention_heads, num_hidden_layers=v.num_hidden_layers,
                              patch_size=v.patch_size, num_channels=v.num_channels, num_patches=v.num_patches,
                              layer_norm_eps=v.layer_norm_eps, downsample_ratio=c.downsample_ratio,
                              llm_hidden_size=c.text.hidden_size, connector_layer_norm_eps=c.connector_norm_eps)


class Eagle3VLModel(Eagle3VisionConnector):
    """``backbone.model.``: the image side (``vision_model``, ``mlp1``, inherited) + ``language_model`` (Qwen3 cut to
    ``select_layer`` layers, lm_head omitted)."""

    def __init__(self, c: Eagle3Config):
        if not 0 < c.select_layer <= c.text.num_hidden_layers:
            raise ValueError(f"select_layer {c.select_layer} outside 1..{c.text.num_hidden_layers}")
        super().__init__(vision_config(c))
        self.eagle_config = c
        self.language_model = Qwen3LanguageModel(c.text, c.select_layer)

    def image_tokens(self, images: list[torch.Tensor]) -> list[torch.Tensor]:
        """Normalised images [3, H, W] (sides multiples of 28) → per image [(H/28)(W/28), D_llm]."""
        return Eagle3VisionConnector.forward(self, images)

    def splice(self, input_ids: torch.Tensor, image_tokens: list[torch.Tensor]) -> torch.Tensor:
        """Token embeddings [B, S, D] with the ``<IMG_CONTEXT>`` rows replaced by the image tokens (images in order,
        each row-major), filled in row-major (batch, position) order."""
        embeds = self.language_model.model.embed_tokens(input_ids)
        mask = input_ids == self.eagle_config.image_token_index
        flat = torch.cat(image_tokens) if image_tokens else embeds.new_zeros(0, embeds.shape[-1])
        if int(mask.sum()) != flat.shape[0]:
            raise ValueError(f"prompt has {int(mask.sum())} <IMG_CONTEXT> tokens but the images gave "
                             f"{flat.shape[0]} tokens ({[t.shape[0] for t in image_tokens]} per image)")
        embeds = embeds.clone()
        embeds[mask] = flat.to(embeds.dtype)
        return embeds

    def forward(self, input_ids: torch.Tensor, images: list[torch.Tensor],
                attention_mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """input_ids [B, S] int64 (full prompts, no padding), images: every image of every sample in splice order
        (the samples' ``<IMG_CONTEXT>`` runs in order) → ``backbone_features`` [B, S, D_llm] (final norm of the last
        kept layer), ``backbone_attention_mask`` / ``image_mask`` / ``text_mask`` [B, S] bool, ``image_tokens``
        (the connector's output, [Σ n_i, D_llm])."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be [B, S], got {tuple(input_ids.shape)}")
        valid = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        if valid.shape != input_ids.shape or not bool(valid.all()):
            raise ValueError("padded prompts are not supported by the N1.6 reference backbone (attention_mask must be "
                             "all ones, the shape of input_ids)")
        tokens = self.image_tokens(images)
        embeds = self.splice(input_ids, tokens)
        features = self.language_model.model(embeds)
        image_mask = (input_ids == self.eagle_config.image_token_index) & valid
        return {"backbone_features": features, "backbone_attention_mask": valid, "image_mask": image_mask,
                "text_mask": valid & ~image_mask, "image_tokens": torch.cat(tokens)}


class Eagle3Backbone(nn.Module):
    """``backbone.`` of GR00T N1.6 (NVIDIA's ``EagleBackbone``; no extra projection)."""

    def __init__(self, c: Eagle3Config):
        super().__init__()
        self.config = c
        self.model = Eagle3VLModel(c)

    def forward(self, input_ids: torch.Tensor, images: list[torch.Tensor],
                attention_mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        return self.model(input_ids, images, attention_mask)

    @classmethod
    def from_checkpoint(cls, checkpoint: LazyCheckpoint, c: Eagle3Config,
                        dtype: torch.dtype = torch.float32) -> "Eagle3Backbone":
        """Build on the meta device and load strictly every ``backbone.`` tensor of ``checkpoint`` (the stored
        lm_head tolerated, not loaded); the action head's tensors are not read."""
        with torch.device("meta"):
            model = cls(c)
        load_module(model, checkpoint, prefix=BACKBONE_PREFIX, dtype=dtype, optional=(LM_HEAD_KEY,))
        return model.eval()
