# SPDX-License-Identifier: Apache-2.0
"""Fast path of the flow-matching action head (N1.5 and N1.7), computed with the reference modules'
own parameter tensors.

Per request the reference evaluates the whole DiT once per Euler step. Several things in it do not
depend on the step, so they are computed once instead:

- the cross-attention K/V of the VL tokens (``to_k``/``to_v`` of every cross block on ``vl_embs``):
  once per request. N1.7's text-only / image-only cross blocks project only the rows they see;
- the AdaLN modulations of every block, the output layer's shift/scale and the action encoder's
  time sinusoid: functions of the four fixed timestep buckets only, computed at load, in fp32.

Only the action rows of the last block, the output layer and the decoder are computed (the
reference decodes every token and keeps the last ``action_horizon``). With bf16 blocks the
modulation, the output layer, the encoders/decoder and the Euler state stay fp32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..common.embeddings import action_sinusoid
from ..common.flow_matching import step_size, timestep_buckets
from ..reference.torch_action_head import CategorySpecificLinear, FlowmatchingActionHead


class Fusions:
    """Concatenated projection weights (QKV, K/V, gate/up), built once. The reference modules'
    weights are rebound as row views into the concatenation, so no weight is held twice and the
    reference still computes with the same values."""

    def __init__(self) -> None:
        self.fused: dict[nn.Linear, tuple[torch.Tensor, torch.Tensor | None, list[int]]] = {}

    @torch.no_grad()
    def fuse(self, linears: list[nn.Linear]) -> None:
        w = torch.cat([lin.weight for lin in linears])
        b = None if linears[0].bias is None else torch.cat([lin.bias for lin in linears])
        sizes, start = [], 0
        for lin in linears:
            n = lin.out_features
            lin.weight = nn.Parameter(w[start:start + n], requires_grad=False)
            if b is not None:
                lin.bias = nn.Parameter(b[start:start + n], requires_grad=False)
            sizes.append(n)
            start += n
        self.fused[linears[0]] = (w, b, sizes)

    def project(self, linears: tuple[nn.Linear, ...], x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``tuple(lin(x) for lin in linears)``, as one GEMM when they were fused."""
        if linears[0] in self.fused:
            w, b, sizes = self.fused[linears[0]]
            return F.linear(x, w, b).split(sizes, dim=-1)
        return tuple(lin(x) for lin in linears)


def heads(x: torch.Tensor, n: int, head_dim: int) -> torch.Tensor:
    """[B, S, n·hd] → [B, n, S, hd]."""
    b, s, _ = x.shape
    return x.view(b, s, n, head_dim).transpose(1, 2)


def merge_heads(o: torch.Tensor) -> torch.Tensor:
    """[B, H, S, hd] → [B, S, H·hd]."""
    b, h, s, hd = o.shape
    return o.transpose(1, 2).reshape(b, s, h * hd)


def key_mask(valid: torch.Tensor | None) -> torch.Tensor | None:
    """[B, S_kv] bool (True = attend) → SDPA's broadcastable [B, 1, 1, S_kv]; None = all keys."""
    return None if valid is None else valid[:, None, None, :]


@dataclass
class StepTables:
    """What the reference recomputes at every step from the bucket alone (fp32, device of the head)."""

    ada: list[list[tuple[torch.Tensor, torch.Tensor]]]  # [step][block] → (scale, shift) [1, D]
    out: list[tuple[torch.Tensor, torch.Tensor]]  # [step] → (shift, scale) [1, D] of proj_out_1
    tau: list[torch.Tensor]  # [step] → action sinusoid [1, H, w]

    @classmethod
    @torch.no_grad()
    def build(cls, head: FlowmatchingActionHead) -> "StepTables":
        """Computed once per step exactly as the reference does (batch 1), from the head's weights;
        build it before the blocks are cast to bf16 so the tables keep fp32 weights."""
        c, dit = head.config, head.model
        dev = dit.proj_out_1.weight.device
        ada, out, tau = [], [], []
        for bucket in timestep_buckets(c.num_inference_timesteps, c.num_timestep_buckets):
            temb = dit.timestep_encoder(torch.full((1,), bucket, dtype=torch.int64, device=dev)).float()  # [1, D]
            silu = F.silu(temb)
            ada.append([tuple(F.linear(silu, blk.norm1.linear.weight.float(),
                                       blk.norm1.linear.bias.float()).chunk(2, -1))
                        for blk in dit.transformer_blocks])
            out.append(tuple(F.linear(silu, dit.proj_out_1.weight.float(), dit.proj_out_1.bias.float()).chunk(2, -1)))
            buckets = torch.full((1, c.action_horizon), bucket, dtype=torch.int64, device=dev)
            tau.append(action_sinusoid(buckets, c.input_embedding_dim))
        return cls(ada, out, tau)

    def to(self, device: torch.device) -> "StepTables":
        return StepTables([[(s.to(device), h.to(device)) for s, h in step] for step in self.ada],
                          [(s.to(device), h.to(device)) for s, h in self.out], [t.to(device) for t in self.tau])


def category_linear(lin: CategorySpecificLinear, x: torch.Tensor, eid: int) -> torch.Tensor:
    """The served embodiment's slice as a view (the reference gathers ``W[cat_ids]``, a copy)."""
    return torch.matmul(x, lin.W[eid]) + lin.b[eid]


class FastActionHead:
    """VL conditioning, state encoding, per-request cross K/V and the Euler steps of the fast path."""

    def __init__(self, head: FlowmatchingActionHead, embodiment_id: int, fusions: Fusions,
                 tables: StepTables | None = None):
        self.head, self.c, self.eid, self.fz = head, head.config, embodiment_id, fusions
        self.tables = tables or StepTables.build(head)
        self.dt = step_size(self.c.num_inference_timesteps)
        self.num_steps = self.c.num_inference_timesteps

    @property
    def dit_dtype(self) -> torch.dtype:
        return self.head.model.transformer_blocks[0].attn1.to_q.weight.dtype

    def fuse(self) -> None:
        """QKV of every self-attention block, K/V of every cross block: one GEMM each."""
        for blk in self.head.vl_self_attention.transformer_blocks:
            self.fz.fuse([blk.attn1.to_q, blk.attn1.to_k, blk.attn1.to_v])
        for i, blk in enumerate(self.head.model.transformer_blocks):
            a = blk.attn1
            self.fz.fuse([a.to_k, a.to_v] if self.c.dit.cross_attends(i) else [a.to_q, a.to_k, a.to_v])

    # ---- adapter ------------------------------------------------------------------------------------
    def condition(self, features: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
        """vlln + VL self-attention; ``valid`` [B, S] masks padded keys (None: no padding)."""
        x = self.head.vlln(features)
        mask = key_mask(valid)
        for blk in self.head.vl_self_attention.transformer_blocks:
            a = blk.attn1
            q, k, v = self.fz.project((a.to_q, a.to_k, a.to_v), blk.norm1(x))
            o = F.scaled_dot_product_attention(heads(q, a.heads, a.head_dim), heads(k, a.heads, a.head_dim),
                                               heads(v, a.heads, a.head_dim), attn_mask=mask, scale=a.head_dim**-0.5)
            x = x + a.to_out[0](merge_heads(o))
            x = x + blk.ff(blk.norm3(x))
        return x

    def state_prefix(self, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(state_features [B, 1, w] fp32, the step-invariant token prefix [B, 1 (+32), w] in the DiT dtype)."""
        enc = self.head.state_encoder
        sf = category_linear(enc.layer2, F.relu(category_linear(enc.layer1, state.float(), self.eid)), self.eid)
        parts = [sf]
        if self.c.num_target_vision_tokens:
            parts.append(self.head.future_tokens.weight.float().unsqueeze(0).expand(sf.shape[0], -1, -1))
        return sf, torch.cat(parts, dim=1).to(self.dit_dtype)

    def cross_kv(self, vl_embs: torch.Tensor, rows: dict[str, tuple[torch.Tensor | None, torch.Tensor | None]]):
        """K/V [B, H, S_kv, hd] of every cross block, with its key mask. ``rows[keys]`` = (row index into
        ``vl_embs`` or None for all rows, valid mask over those rows or None)."""
        out = {}
        for i, blk in enumerate(self.head.model.transformer_blocks):
            if not self.c.dit.cross_attends(i):
                continue
            idx, valid = rows[self.c.dit.cross_keys(i)]
            ctx = vl_embs if idx is None else vl_embs.index_select(1, idx)
            a = blk.attn1
            k, v = self.fz.project((a.to_k, a.to_v), ctx)
            out[i] = (heads(k, a.heads, a.head_dim), heads(v, a.heads, a.head_dim), key_mask(valid))
        return out

    # ---- DiT ------------------------------------------------------------------------------------------
    def velocity(self, step: int, x: torch.Tensor, prefix: torch.Tensor, kv: dict) -> torch.Tensor:
        """Noisy actions [B, H, A] fp32 at Euler step ``step`` → velocity [B, H, A] fp32."""
        c, t, enc, dit = self.c, self.tables, self.head.action_encoder, self.head.model
        horizon, eid = c.action_horizon, self.eid
        a = category_linear(enc.W1, x, eid)
        tau = t.tau[step].expand(a.shape[0], -1, -1)
        a = category_linear(enc.W3, F.silu(category_linear(enc.W2, torch.cat([a, tau], dim=-1), eid)), eid)
        a = a + self.head.position_embedding.weight[:horizon].float().unsqueeze(0)
        h = torch.cat([prefix, a.to(prefix.dtype)], dim=1)  # [B, T, w]
        last = len(dit.transformer_blocks) - 1
        for i, blk in enumerate(dit.transformer_blocks):
            h = self._block(blk, h, t.ada[step][i], kv.get(i), horizon if i == last else None)
        shift, scale = t.out[step]
        h = F.layer_norm(h.float(), h.shape[-1:], eps=dit.norm_out.eps) * (1 + scale[:, None]) + shift[:, None]
        out = dit.proj_out_2(h.to(dit.proj_out_2.weight.dtype))  # [1, H, hidden]
        dec = self.head.action_decoder
        return category_linear(dec.layer2, F.relu(category_linear(dec.layer1, out.float(), eid)), eid).float()

    def _block(self, blk: nn.Module, x: torch.Tensor, mod: tuple[torch.Tensor, torch.Tensor], kv, rows: int | None):
        """One DiT block; with ``rows``, only the last ``rows`` query rows are computed."""
        scale, shift = mod
        n = F.layer_norm(x.float(), x.shape[-1:], eps=blk.norm1.norm.eps) * (1 + scale[:, None]) + shift[:, None]
        n = n.to(x.dtype)
        a = blk.attn1
        if kv is None:  # self-attention over the action-side tokens
            q, k, v = self.fz.project((a.to_q, a.to_k, a.to_v), n)
            k, v, mask = heads(k, a.heads, a.head_dim), heads(v, a.heads, a.head_dim), None
            if rows is not None:
                q = q[:, -rows:]
        else:
            k, v, mask = kv
            q = a.to_q(n if rows is None else n[:, -rows:])
        o = F.scaled_dot_product_attention(heads(q, a.heads, a.head_dim), k, v, attn_mask=mask, scale=a.head_dim**-0.5)
        x = (x if rows is None else x[:, -rows:]) + a.to_out[0](merge_heads(o))
        return x + blk.ff(blk.norm3(x))
