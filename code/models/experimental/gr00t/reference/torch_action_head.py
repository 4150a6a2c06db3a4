# SPDX-License-Identifier: Apache-2.0
"""Flow-matching action head of GR00T N1.5 (NVIDIA's ``FlowmatchingActionHead``,
``gr00t/model/action_head/flow_matching_action_head.py``, ``n1.5-release``): VL conditioning, embodiment-specific
encoders/decoder, and the Euler loop around the DiT. Names equal the checkpoint keys under
``action_head.``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..common.configs import ActionHeadConfig
from ..common.embeddings import action_sinusoid
from ..common.flow_matching import step_size, timestep_buckets
from ..common.rtc import GuidedPrefix, InpaintPrefix, guided_step
from .torch_dit import DiT, SelfAttentionTransformer


class CategorySpecificLinear(nn.Module):
    """One Linear per embodiment: ``y = x @ W[id] + b[id]`` with W stored [n, in, out] (no transpose)."""

    def __init__(self, n: int, in_dim: int, out_dim: int):
        super().__init__()
        self.W = nn.Parameter(torch.empty(n, in_dim, out_dim))
        self.b = nn.Parameter(torch.empty(n, out_dim))

    def forward(self, x: torch.Tensor, cat_ids: torch.Tensor) -> torch.Tensor:
        return torch.bmm(x, self.W[cat_ids]) + self.b[cat_ids].unsqueeze(1)


class CategorySpecificMLP(nn.Module):
    def __init__(self, n: int, in_dim: int, hidden: int, out_dim: int):
        super().__init__()
        self.layer1 = CategorySpecificLinear(n, in_dim, hidden)
        self.layer2 = CategorySpecificLinear(n, hidden, out_dim)

    def forward(self, x: torch.Tensor, cat_ids: torch.Tensor) -> torch.Tensor:
        return self.layer2(F.relu(self.layer1(x, cat_ids)), cat_ids)


class MultiEmbodimentActionEncoder(nn.Module):
    def __init__(self, n: int, action_dim: int, width: int):
        super().__init__()
        self.width = width
        self.W1 = CategorySpecificLinear(n, action_dim, width)
        self.W2 = CategorySpecificLinear(n, 2 * width, width)
        self.W3 = CategorySpecificLinear(n, width, width)

    def forward(self, actions: torch.Tensor, buckets: torch.Tensor, cat_ids: torch.Tensor) -> torch.Tensor:
        """actions [B, T, action_dim], buckets [B] → [B, T, width]."""
        b, t, _ = actions.shape
        a = self.W1(actions, cat_ids)
        tau = action_sinusoid(buckets.view(b, 1).expand(b, t), self.width).to(a.dtype)
        return self.W3(F.silu(self.W2(torch.cat([a, tau], dim=-1), cat_ids)), cat_ids)


class FlowmatchingActionHead(nn.Module):
    def __init__(self, c: ActionHeadConfig):
        super().__init__()
        self.config = c
        n, w = c.max_num_embodiments, c.input_embedding_dim
        # Definition order follows NVIDIA's so the state-dict order matches the checkpoint.
        self.model = DiT(c.dit)
        self.state_encoder = CategorySpecificMLP(n, c.max_state_dim, c.hidden_size, w)
        self.action_encoder = MultiEmbodimentActionEncoder(n, c.action_dim, w)
        self.action_decoder = CategorySpecificMLP(n, c.hidden_size, c.hidden_size, c.action_dim)
        if c.num_target_vision_tokens:  # N1.5's learned "future" tokens; N1.7 has none
            self.future_tokens = nn.Embedding(c.num_target_vision_tokens, w)
        self.vlln = nn.LayerNorm(c.backbone_embedding_dim, eps=c.vlln_eps)  # use_vlln is required (configs)
        self.vl_self_attention = SelfAttentionTransformer(c.vl_self_attention)
        self.position_embedding = nn.Embedding(c.max_seq_len, w)

    def condition(self, backbone_features: torch.Tensor) -> torch.Tensor:
        """backbone features [B, S, 2048] → vl_embs [B, S, 2048] (vlln + VL self-attention)."""
        return self.vl_self_attention(self.vlln(backbone_features))

    def velocity(self, x: torch.Tensor, bucket: int, vl_embs: torch.Tensor, state_features: torch.Tensor,
                 cat_ids: torch.Tensor, key_masks: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """One DiT evaluation: noisy actions [B, H, D] at ``bucket`` → velocity [B, H, D]."""
        b, horizon = x.shape[0], self.config.action_horizon
        buckets = torch.full((b,), bucket, dtype=torch.int64, device=x.device)
        action_features = self.action_encoder(x, buckets, cat_ids)  # [B, H, w]
        action_features = action_features + self.position_embedding.weight[:horizon].unsqueeze(0)  # add_pos_embed
        parts = [state_features, action_features]
        if self.config.num_target_vision_tokens:
            parts.insert(1, self.future_tokens.weight.unsqueeze(0).expand(b, -1, -1))
        tokens = torch.cat(parts, dim=1)  # N1.5: [B, 1 + 32 + 16, w]; N1.7: [B, 1 + 40, w]
        out = self.model(tokens, vl_embs, buckets, key_masks)  # [B, T, hidden]
        return self.action_decoder(out, cat_ids)[:, -horizon:]

    def sample(self, vl_embs: torch.Tensor, state_features: torch.Tensor, cat_ids: torch.Tensor, noise: torch.Tensor,
               on_step: Callable[[int, torch.Tensor], None] | None = None,
               key_masks: dict[str, torch.Tensor] | None = None, inpaint: InpaintPrefix | None = None,
               guide: GuidedPrefix | None = None) -> torch.Tensor:
        """Euler integration from ``noise`` [B, H, D] (t = 0) → normalised actions [B, H, D].
        ``on_step(i, velocity)`` is called after each step (taps, timing).

        ``inpaint`` (``common/rtc.py``): real-time chunking's forward-only variant. Before every step the masked
        (frozen) rows of the state are replaced by where the flow's straight path from the noise to the target
        stands at that time, ``(1 − τ)·noise + τ·target`` (τ = i / N), so the other rows are denoised seeing the
        frozen ones; after the last step those rows are the targets exactly. Fixed shapes, no gradient.

        ``guide`` (``common/rtc.py``): the guided variant, soft-masked guidance towards the previous chunk along a
        vector-Jacobian product through the DiT at every step (autograd; not combined with ``inpaint``)."""
        if guide is not None:
            if inpaint is not None:
                raise ValueError("inpaint and guide are two RTC variants: give one")
            return self._sample_guided(vl_embs, state_features, cat_ids, noise, on_step, key_masks, guide)
        c = self.config
        dt = step_size(c.num_inference_timesteps)
        x = noise.to(vl_embs.dtype)
        if inpaint is not None:
            target, mask, start = inpaint.target.to(x), inpaint.mask.to(x).unsqueeze(-1), x.clone()
        for i, bucket in enumerate(timestep_buckets(c.num_inference_timesteps, c.num_timestep_buckets)):
            if inpaint is not None:
                tau = i / c.num_inference_timesteps
                x = mask * ((1 - tau) * start + tau * target) + (1 - mask) * x
            v = self.velocity(x, bucket, vl_embs, state_features, cat_ids, key_masks)
            x = x + dt * v
            if on_step is not None:
                on_step(i, v)
        if inpaint is not None:
            x = mask * target + (1 - mask) * x
        return x

    def _sample_guided(self, vl_embs, state_features, cat_ids, noise, on_step, key_masks, guide) -> torch.Tensor:
        c = self.config
        dt = step_size(c.num_inference_timesteps)
        # The callers run under inference_mode, whose tensors autograd cannot save: leave it for this sampler and
        # copy the conditioning once into ordinary tensors (values unchanged).
        with torch.inference_mode(False), torch.enable_grad():
            vl, sf, ids = vl_embs.clone(), state_features.clone(), cat_ids.clone()
            masks = None if key_masks is None else {k: m.clone() for k, m in key_masks.items()}
            x = noise.to(vl.dtype).clone()
            for i, bucket in enumerate(timestep_buckets(c.num_inference_timesteps, c.num_timestep_buckets)):
                tau = i / c.num_inference_timesteps
                x, v = guided_step(lambda a, b=bucket: self.velocity(a, b, vl, sf, ids, masks), x, tau, dt, guide)
                if on_step is not None:
                    on_step(i, v)
        return x
