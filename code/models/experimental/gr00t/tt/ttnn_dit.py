# SPDX-License-Identifier: Apache-2.0
"""The action head's transformers on TT-NN (twin of ``reference/torch_dit.py``).

``TtSelfAttentionTransformer``: the 4 affine pre-LN blocks over the VL tokens (the adapter), with the
padded LLM positions masked as keys.

``TtDiT``: 16 AdaLN blocks over the 49 action-side tokens, padded to 64 rows. Even blocks attend to
the VL tokens (their K/V heads are computed once per request by ``cross_kv``, not once per Euler step),
odd blocks to the 64 rows with the 15 padding rows masked as keys. The AdaLN modulation and the
output layer's shift/scale depend only on the timestep bucket, so ``modulation`` computes them once
at load for the 4 buckets; each step reads them.

N1.7's AlternateVLDiT is the same module: its cross-attention blocks alternate between the text and the
image tokens (``DiTConfig.cross_keys``), which is one K/V per block over all VL tokens and one of two
additive key masks.
"""

from __future__ import annotations

import torch
import ttnn

from ..common.configs import DiTConfig, VLSelfAttentionConfig
from ..common.embeddings import timestep_sinusoid
from .ttnn_common import DeviceWeights, attend, fused_self_attention, layer_norm, linear, modulated_layer_norm
from .weight_layout import DIT, VLSA

# The action head's attentions run SDPA at scale 1: the converter folded hd^-½ into q (``weight_layout._attention``).
FOLDED_SCALE = 1.0


def heads_matmul(w: DeviceWeights, x: ttnn.Tensor, name: str) -> ttnn.Tensor:
    """[1, 1, S, D] @ per-head weights [1, H, D, hd'] → heads [1, H, S, hd'] in one batched matmul (ttnn reuses the
    activation for every head: its batch dims are 1)."""
    weight = w[name]
    return ttnn.matmul(x, weight, memory_config=ttnn.DRAM_MEMORY_CONFIG, compute_kernel_config=w.compute_config(weight))


def packed(x: ttnn.Tensor) -> ttnn.Tensor:
    """[B, S, D] → [1, 1, B·S, D], a view: the per-head weights [1, H, D, hd'] of ``heads_matmul`` take an activation
    whose batch dims are 1 only, so B requests' rows go side by side and their attention is kept apart by a
    block-diagonal mask (the cross masks of a batched model are built packed)."""
    return ttnn.reshape(x, [1, 1, x.shape[0] * x.shape[1], x.shape[2]])


def feed_forward(w: DeviceWeights, x: ttnn.Tensor, p: str) -> ttnn.Tensor:
    return linear(w, linear(w, x, p + "ff.net.0.proj", activation="gelu_tanh"), p + "ff.net.2")


class TtSelfAttentionTransformer:
    def __init__(self, w: DeviceWeights, c: VLSelfAttentionConfig, prefix: str = VLSA):
        self.w, self.c, self.p = w, c, prefix

    def __call__(self, x: ttnn.Tensor, key_mask: ttnn.Tensor) -> ttnn.Tensor:
        """[1, S_pad, D] → [1, S_pad, D]; ``key_mask`` [1, 1, S_pad, S_pad] additive."""
        w, c = self.w, self.c
        for i in range(c.num_layers):
            p = f"{self.p}transformer_blocks.{i}."
            h = layer_norm(w, x, p + "norm1", c.norm_eps)
            x = ttnn.add(x, fused_self_attention(w, h, p + "attn1.", "to_out.0", c.num_attention_heads,
                                                 scale=FOLDED_SCALE, bias=True, mask=key_mask))
            x = ttnn.add(x, feed_forward(w, layer_norm(w, x, p + "norm3", c.norm_eps), p))
        return x


class Modulation:
    """Per-bucket constants: (1 + scale, shift) rows [1, D] of every block's AdaLN and of the output layer,
    the affine weight and bias of ``modulated_layer_norm``."""

    def __init__(self, blocks: list[tuple[ttnn.Tensor, ttnn.Tensor]], out: tuple[ttnn.Tensor, ttnn.Tensor]):
        self.blocks, self.out = blocks, out


class TtDiT:
    def __init__(self, w: DeviceWeights, c: DiTConfig, prefix: str = DIT):
        self.w, self.c, self.p = w, c, prefix

    def modulation(self, bucket: int) -> Modulation:
        """AdaLN constants for one timestep bucket (run once per bucket at load)."""
        w, c, d = self.w, self.c, self.c.inner_dim
        sinusoid = timestep_sinusoid(torch.tensor([float(bucket)]), c.timestep_channels)  # [1, 256]
        t = ttnn.from_torch(sinusoid[None], dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=w.device)
        e = self.p + "timestep_encoder.timestep_embedder."
        temb = ttnn.silu(linear(w, ttnn.silu(linear(w, t, e + "linear_1")), e + "linear_2"))  # silu(temb) [1, 1, D]

        def halves(y: ttnn.Tensor) -> tuple[ttnn.Tensor, ttnn.Tensor]:
            y = ttnn.reshape(y, [1, 2 * d])
            return ttnn.slice(y, [0, 0], [1, d]), ttnn.slice(y, [0, d], [1, 2 * d])

        blocks = []
        for i in range(c.num_layers):
            scale, shift = halves(linear(w, temb, f"{self.p}transformer_blocks.{i}.norm1.linear"))  # scale first
            blocks.append((ttnn.add(scale, 1.0), shift))
        shift, scale = halves(linear(w, temb, self.p + "proj_out_1"))  # shift first in the output layer
        return Modulation(blocks, (ttnn.add(scale, 1.0), shift))

    def cross_kv(self, vl_embs: ttnn.Tensor) -> list[tuple[ttnn.Tensor, ttnn.Tensor] | None]:
        """K/V heads [1, H, B·S_pad, hd'] of every cross-attention block, from the VL tokens [B, S_pad, D]: one batched
        matmul each (K without its bias, V's bias folded into the output projection: ``weight_layout._attention``).
        B requests are packed along the key axis (``packed``); the cross mask keeps each to its own keys."""
        w, c, out = self.w, self.c, []
        vl = packed(vl_embs)
        for i in range(c.num_layers):
            p = f"{self.p}transformer_blocks.{i}.attn1."
            out.append((heads_matmul(w, vl, p + "k.weight"), heads_matmul(w, vl, p + "v.weight"))
                       if c.cross_attends(i) else None)
        return out

    def __call__(self, x: ttnn.Tensor, mod: Modulation, kv: list, cross_mask: ttnn.Tensor | dict[str, ttnn.Tensor],
                 self_mask: ttnn.Tensor) -> ttnn.Tensor:
        """Tokens [B, T_pad, D] → [B, T_pad, output_dim]. ``cross_mask``: one additive [1, 1, B·T_pad, B·S_pad] mask
        for every cross block (N1.5), or {"text": …, "image": …} picked per block by ``cross_keys`` (N1.7), packed
        block-diagonally for B requests (``packed``)."""
        w, c = self.w, self.c
        for i in range(c.num_layers):
            p = f"{self.p}transformer_blocks.{i}."
            scale, shift = mod.blocks[i]
            n = modulated_layer_norm(w, x, scale, shift, c.norm_eps)
            if c.cross_attends(i):
                q = ttnn.add(heads_matmul(w, packed(n), p + "attn1.q.weight"), w[p + "attn1.q.bias"],
                             memory_config=ttnn.DRAM_MEMORY_CONFIG)
                k, v = kv[i]
                mask = cross_mask[c.cross_keys(i)] if isinstance(cross_mask, dict) else cross_mask
                o = attend(w, q, k, v, scale=FOLDED_SCALE, mask=mask)  # [1, B·T_pad, H·hd']
                if x.shape[0] > 1:  # back to one row block per request (a view)
                    o = ttnn.reshape(o, [x.shape[0], x.shape[1], o.shape[-1]])
                o = linear(w, o, p + "attn1.to_out.0")
            else:
                o = fused_self_attention(w, n, p + "attn1.", "to_out.0", c.num_attention_heads, scale=FOLDED_SCALE,
                                         bias=True, mask=self_mask)
            x = ttnn.add(x, o)
            x = ttnn.add(x, feed_forward(w, layer_norm(w, x, None, c.norm_eps), p))
        scale, shift = mod.out
        return linear(w, modulated_layer_norm(w, x, scale, shift, c.out_norm_eps), self.p + "proj_out_2")
