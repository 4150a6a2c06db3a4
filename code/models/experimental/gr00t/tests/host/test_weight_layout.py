# SPDX-License-Identifier: Apache-2.0
"""The TT converter's attention rewrites are exact: the converted tensors, used the way the TT modules use them,
give torch's own attention over the checkpoint's tensors (``F.scaled_dot_product_attention`` with every bias and
the 1/√hd scale), in float64 over the converter's float32 output: its rounding is ~1e-8 here, a wrong rule ~1e-1."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from models.experimental.gr00t.common.checkpoint import LazyCheckpoint
from models.experimental.gr00t.common.configs_n15 import Gr00tN15Config
from models.experimental.gr00t.common.layouts import GR1
from models.experimental.gr00t.tt.weight_layout import DIT, VLSA
from models.experimental.gr00t.tt.weight_layout_n15 import device_tensors


@pytest.fixture(scope="module")
def converted(tiny_checkpoint):
    ckpt = LazyCheckpoint(tiny_checkpoint)
    tensors = {n: t.double() for n, t, _ in device_tensors(lambda n: ckpt.load(n, torch.float32), ckpt.names,
                                                           Gr00tN15Config.tiny(), GR1)}
    return ckpt, tensors


def _reference(ckpt, p: str, x: torch.Tensor, ctx: torch.Tensor, heads: int, mask: torch.Tensor) -> torch.Tensor:
    def proj(name, y):
        return F.linear(y, ckpt.load(p + name + ".weight", torch.float64), ckpt.load(p + name + ".bias", torch.float64))

    def split(y):
        return y.unflatten(-1, (heads, -1)).transpose(1, 2)

    q, k, v = split(proj("to_q", x)), split(proj("to_k", ctx)), split(proj("to_v", ctx))
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).flatten(2)
    return proj("to_out.0", o)


def _masked_keys(rows: int, keys: int, valid: int) -> torch.Tensor:
    mask = torch.zeros(1, 1, rows, keys, dtype=torch.float64)
    mask[..., valid:] = float("-inf")
    return mask


def test_cross_attention_rewrite_is_exact(converted):
    """Batched per-head q/k/v, K's bias dropped, V's bias in the output bias, the softmax scale in q: the DiT's
    cross-attention as ``TtDiT`` computes it equals the checkpoint's attention."""
    ckpt, t = converted
    c = Gr00tN15Config.tiny().action_head.dit
    p = f"{DIT}transformer_blocks.0.attn1."
    assert c.cross_attends(0) and p + "k.bias" not in t and p + "kv.weight" not in t
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 64, c.inner_dim, generator=g, dtype=torch.float64)
    ctx = torch.randn(1, 96, c.cross_attention_dim, generator=g, dtype=torch.float64)
    mask = _masked_keys(64, 96, 80)
    q = x[:, None] @ t[p + "q.weight"] + t[p + "q.bias"]  # [1, H, S, hd']
    k, v = ctx[:, None] @ t[p + "k.weight"], ctx[:, None] @ t[p + "v.weight"]
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0).transpose(1, 2).flatten(2)
    ours = o @ t[p + "to_out.0.weight"] + t[p + "to_out.0.bias"]
    want = _reference(ckpt, p, x, ctx, c.num_attention_heads, mask)
    assert (ours - want).abs().max().item() < 1e-6
    # the dropped K bias is not zero in the checkpoint, so dropping it is a real rewrite, not a no-op
    assert ckpt.load(p + "to_k.bias", torch.float32).abs().max() > 0


@pytest.mark.parametrize("prefix", [f"{DIT}transformer_blocks.1.attn1.", f"{VLSA}transformer_blocks.0.attn1."])
def test_self_attention_scale_fold_is_exact(converted, prefix):
    """The action head's fused qkv carries the softmax scale in its q columns: SDPA at scale 1 over it equals the
    checkpoint's attention (the DiT's self-attention blocks and the VL self-attention)."""
    ckpt, t = converted
    h = Gr00tN15Config.tiny().action_head
    heads = (h.dit if prefix.startswith(DIT + "transformer") else h.vl_self_attention).num_attention_heads
    width = ckpt.load(prefix + "to_q.weight", torch.float32).shape[1]
    x = torch.randn(1, 64, width, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    mask = _masked_keys(64, 64, 49)
    qkv = (x @ t[prefix + "qkv.weight"] + t[prefix + "qkv.bias"]).unflatten(-1, (3, heads, -1))
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0).transpose(1, 2).flatten(2)
    ours = o @ t[prefix + "to_out.0.weight"] + t[prefix + "to_out.0.bias"]
    assert (ours - _reference(ckpt, prefix, x, x, heads, mask)).abs().max().item() < 1e-6
