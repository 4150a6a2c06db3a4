# SPDX-License-Identifier: Apache-2.0
"""Qwen3 decoder on TT-NN, truncated to GR00T's ``select_layer`` layers + final norm (twin of
``reference/torch_qwen3.py``).

The sequence is right-padded to a fixed length (384 for GR1). Causal attention already keeps every
real row from seeing the padding after it, so no extra mask is needed here; the padded rows carry
values nobody reads (the adapter masks them as keys). RoPE ("rotate half") runs as ttnn's fused
``rotary_embedding_hf`` (one program) where the head width allows it, else as ``x·cos + (x @ R)·sin`` with R
the signed permutation that rotates the halves (exact in bf16, one small matmul).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import ttnn

from ..common.configs import Qwen3Config
from ..common.embeddings import rope_cos_sin
from .ttnn_common import DeviceWeights, attend, linear, rms_norm
from .weight_layout import tile_up
from .weight_layout_n15 import LLM


def rotate_half_matrix(head_dim: int, padded: int | None = None) -> torch.Tensor:
    """R with ``x @ R == cat(-x[half:], x[:half])`` on the first ``head_dim`` columns of a head
    zero-padded to ``padded``; padding columns map to zero."""
    padded = padded or head_dim
    half, r = head_dim // 2, torch.zeros(padded, padded)
    idx = torch.arange(half)
    r[idx + half, idx] = -1.0
    r[idx, idx + half] = 1.0
    return r


def fused_rope_applies(head_dim: int, padded: int) -> bool:
    """Whether ttnn's ``rotary_embedding_hf`` computes this RoPE: it rotates the halves of the stored head
    width, which it needs to be 32 or a multiple of 64. Right for unpadded heads of such widths (every
    full-size config: 128 and 64), wrong for heads zero-padded to a tile (the tiny test configs' 16 → 32)."""
    return head_dim == padded and (head_dim == 32 or head_dim % 64 == 0)


class TtQwen3:
    def __init__(self, w: DeviceWeights, c: Qwen3Config, num_layers: int, seq_len: int, prefix: str = LLM):
        self.w, self.c, self.n, self.p = w, c, num_layers, prefix
        hd, padded = c.head_dim, tile_up(c.head_dim)  # padded heads (tiny test configs) keep zeros in the padding
        cos, sin = (F.pad(t, (0, padded - hd)) for t in rope_cos_sin(torch.arange(seq_len), hd, c.rope_theta))

        def put(t):
            return ttnn.from_torch(t[None, None], dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=w.device)

        self.cos, self.sin = put(cos), put(sin)
        self.rot = None if fused_rope_applies(hd, padded) else put(rotate_half_matrix(hd, padded))

    def rope(self, x: ttnn.Tensor) -> ttnn.Tensor:
        """RoPE ("rotate half") over heads [1, H, S, hd'] with this module's tables (subclasses and the Qwen3-VL
        vision tower set other ``cos`` / ``sin``): ttnn's fused ``rotary_embedding_hf`` where it applies (one
        program), else ``x·cos + (x @ R)·sin`` (a matmul, two multiplies and an add)."""
        if self.rot is None:
            return ttnn.experimental.rotary_embedding_hf(x, self.cos, self.sin, memory_config=ttnn.DRAM_MEMORY_CONFIG,
                                                         compute_kernel_config=self.w.norm_config)
        rotated = ttnn.matmul(x, self.rot, memory_config=ttnn.DRAM_MEMORY_CONFIG,
                              compute_kernel_config=self.w.norm_config)
        return ttnn.add(ttnn.mul(x, self.cos), ttnn.mul(rotated, self.sin))

    def layer(self, x: ttnn.Tensor, i: int) -> ttnn.Tensor:
        w, c, p = self.w, self.c, f"{self.p}layers.{i}."
        h = rms_norm(w, x, p + "input_layernorm", c.rms_norm_eps)
        qkv = linear(w, h, p + "self_attn.qkv", bias=False)
        q, k, v = ttnn.transformer.split_query_key_value_and_split_heads(
            qkv, num_heads=c.num_attention_heads, num_kv_heads=c.num_key_value_heads, transpose_key=False,
            memory_config=ttnn.DRAM_MEMORY_CONFIG)
        q = self.rope(rms_norm(w, q, p + "self_attn.q_norm", c.rms_norm_eps))  # per-head norms, then RoPE
        k = self.rope(rms_norm(w, k, p + "self_attn.k_norm", c.rms_norm_eps))
        o = attend(w, q, k, v, scale=c.head_dim**-0.5, causal=True)  # grouped-query: 16 q heads on 8 kv heads
        x = ttnn.add(x, linear(w, o, p + "self_attn.o_proj", bias=False))
        h = rms_norm(w, x, p + "post_attention_layernorm", c.rms_norm_eps)
        # SwiGLU: the SiLU runs on the gate inside the multiply's program (one program and one rounding fewer)
        gate, up = linear(w, h, p + "mlp.gate_proj", bias=False), linear(w, h, p + "mlp.up_proj", bias=False)
        h = ttnn.mul(gate, up, input_tensor_a_activations=[ttnn.UnaryWithParam(ttnn.UnaryOpType.SILU)],
                     memory_config=ttnn.DRAM_MEMORY_CONFIG)
        return ttnn.add(x, linear(w, h, p + "mlp.down_proj", bias=False))

    def __call__(self, embeds: ttnn.Tensor) -> ttnn.Tensor:
        """[1, S_pad, D] embeddings → normed hidden state of the last kept layer [1, S_pad, D]."""
        x = embeds
        for i in range(self.n):
            x = self.layer(x, i)
        return rms_norm(self.w, x, self.p + "norm", self.c.rms_norm_eps)
