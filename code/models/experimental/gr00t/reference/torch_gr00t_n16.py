# SPDX-License-Identifier: Apache-2.0
"""The GR00T N1.6 action head (NVIDIA's ``Gr00tN1d6`` head, ``gr00t/model/gr00t_n1d6/gr00t_n1d6.py`` +
``gr00t/model/modules/dit.py``; spec ``gr00t_n16.md`` §6): backbone features → the (B, 50, 128) chunk in model
space.

It is the shared ``FlowmatchingActionHead`` configured from ``Gr00tN16Config.action_head``; what makes it N1.6
is the configuration, checked here so that a mis-read config cannot slip through silently:

* VL adapter = ``vlln`` only: the VL self-attention stack has zero layers (so no tensors, and ``condition`` is
  exactly the LayerNorm);
* no ``future_tokens``: the DiT sees 1 state token + ``action_horizon`` (50) action tokens, and the position
  embedding (rows 0..49) is added to the action tokens only;
* AlternateVLDiT (32 blocks): odd blocks self-attend over those 51 tokens; even blocks cross-attend to the VL
  tokens, the **text** tokens when ``i % (2·n) == 0`` (blocks 0, 4, …; so the first cross block sees text) and
  the **image** tokens otherwise (2, 6, …), n = ``attend_text_every_n_blocks`` = 2. "Text" is every real
  (``attention_mask``) token that is not ``<IMG_CONTEXT>``; "image" every real ``<IMG_CONTEXT>`` token;
* 4 Euler steps of ``x += v / 4`` at buckets 0, 250, 500, 750 from the caller's noise (B, 50, 128): NVIDIA draws
  it from the device's global RNG (§9), so it is always an input here.

Submodule names equal the checkpoint's tensor names under ``action_head.`` (473 tensors at full size), loaded
strictly by ``from_checkpoint``; the backbone is not part of this module.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from ..common.checkpoint import LazyCheckpoint, load_module
from ..common.configs import ActionHeadConfig
from ..common.configs_n16 import Gr00tN16Config
from ..common.errors import ConfigError
from ..common.weights import ACTION_HEAD_PREFIX
from .torch_action_head import FlowmatchingActionHead

# Stored only by fine-tunes trained with state dropout (``state_dropout_prob > 0``, e.g. bridge); never used at
# inference (spec §2.2), so a checkpoint may carry it or not.
MASK_TOKEN = ACTION_HEAD_PREFIX + "mask_token"


def check_n16_head(c: ActionHeadConfig) -> None:
    """Refuse an action-head config that is not N1.6-shaped (the module would silently compute another model)."""
    problems = []
    if c.vl_self_attention.num_layers:
        problems.append(f"{c.vl_self_attention.num_layers} VL self-attention layers (N1.6 has vlln only)")
    if c.num_target_vision_tokens:
        problems.append(f"{c.num_target_vision_tokens} future tokens (N1.6 has none)")
    if not c.dit.interleave_self_attention:
        problems.append("a DiT without interleaved self-attention")
    if c.dit.attend_text_every_n_blocks <= 0:
        problems.append("a DiT whose cross blocks see all VL tokens (N1.6 alternates text / image)")
    if not (c.add_pos_embed and c.use_vlln):
        problems.append("add_pos_embed / use_vlln off")
    if problems:
        raise ConfigError("not an N1.6 action head: " + "; ".join(problems))


class Gr00tN16ActionHead(FlowmatchingActionHead):
    """``action_head`` of N1.6. ``forward`` runs the whole head; ``condition`` / ``state_encoder`` / ``sample``
    (inherited) are its stages, as the other versions' policies use them."""

    def __init__(self, c: ActionHeadConfig):
        check_n16_head(c)
        super().__init__(c)

    @classmethod
    def from_checkpoint(cls, checkpoint: LazyCheckpoint | str | Path, config: Gr00tN16Config | None = None,
                        dtype: torch.dtype = torch.float32) -> "Gr00tN16ActionHead":
        """Built on the meta device and assigned every ``action_head.`` tensor of ``checkpoint`` (cast to
        ``dtype``), strictly: a missing, unexpected or mis-shaped one is a ``CheckpointError`` (the backbone's
        tensors are not looked at). ``config`` defaults to the checkpoint's own."""
        if not isinstance(checkpoint, LazyCheckpoint):
            checkpoint = LazyCheckpoint(checkpoint)
        config = config or Gr00tN16Config.from_checkpoint(checkpoint.directory)
        with torch.device("meta"):
            head = cls(config.action_head)
        load_module(head, checkpoint, prefix=ACTION_HEAD_PREFIX, dtype=dtype, optional=(MASK_TOKEN,))
        return head.eval()

    @staticmethod
    def key_masks(image_mask: torch.Tensor, attention_mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """The cross blocks' boolean key masks [B, S] (True = attend): text = real non-image tokens, image = real
        image tokens. A row without a token of either kind would make its attention undefined (NaN): refused."""
        image_mask = image_mask.to(torch.bool)
        real = torch.ones_like(image_mask) if attention_mask is None else attention_mask.to(torch.bool)
        masks = {"text": ~image_mask & real, "image": image_mask & real}
        for kind, mask in masks.items():
            if not bool(mask.any(dim=-1).all()):
                raise ValueError(f"a batch row has no {kind} token to cross-attend to")
        return masks

    def forward(self, backbone_features: torch.Tensor, image_mask: torch.Tensor, state: torch.Tensor,
                embodiment_id: int | torch.Tensor, noise: torch.Tensor, attention_mask: torch.Tensor | None = None,
                on_step: Callable[[int, torch.Tensor], None] | None = None) -> torch.Tensor:
        """backbone features [B, S, 2048], ``image_mask`` [B, S] (``input_ids == <IMG_CONTEXT>``), encoded state
        [B, 1, 128], embodiment id (int or [B]), noise [B, 50, 128], optional ``attention_mask`` [B, S] (False =
        padding) → ``action_pred`` [B, 50, 128] (normalised, model space; the tag's rows/columns are sliced by the
        post-processing). ``on_step(i, velocity)`` after each Euler step."""
        c = self.config
        b, s, width = backbone_features.shape
        envelope = {"image_mask": (image_mask, (b, s)), "state": (state, (b, 1, c.max_state_dim)),
                    "noise": (noise, (b, c.action_horizon, c.action_dim))}
        if attention_mask is not None:
            envelope["attention_mask"] = (attention_mask, (b, s))
        if width != c.backbone_embedding_dim:
            raise ValueError(f"backbone_features width {width}, expected {c.backbone_embedding_dim}")
        for name, (tensor, shape) in envelope.items():
            if tuple(tensor.shape) != shape:
                raise ValueError(f"{name} has shape {list(tensor.shape)}, expected {list(shape)}")
        device = backbone_features.device
        cat_ids = torch.as_tensor(embodiment_id, dtype=torch.int64, device=device).reshape(-1).expand(b)
        masks = {k: m.to(device) for k, m in self.key_masks(image_mask, attention_mask).items()}
        vl_embs = self.condition(backbone_features)  # vlln only (zero VL self-attention layers)
        state_features = self.state_encoder(state.to(device, vl_embs.dtype), cat_ids)  # [B, 1, E]
        return self.sample(vl_embs, state_features, cat_ids, noise.to(device), on_step, masks)
