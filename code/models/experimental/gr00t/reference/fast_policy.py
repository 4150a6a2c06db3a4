# SPDX-License-Identifier: Apache-2.0
"""Fast path of the GR00T N1.5 policy: the reference's host side and its very parameter tensors,
with an ``infer`` that does less work and can run on static buffers / CUDA graphs.

Versus ``ReferencePolicy.infer`` (the golden, unchanged):

- the action head's step-invariant work is hoisted (``fast_dit``): cross-attention K/V once per
  request, AdaLN / output modulations and time sinusoids once at load, only the action rows decoded;
- the embodiment's category weights are used as views (the reference gathers a copy per call);
- GQA attention without ``repeat_interleave`` copies;
- optional fused projections (``fuse``): QKV and gate/up as one GEMM, the reference's weights
  rebound as views into the concatenation. On the 2-core CPU they measured no faster (GEMM-bound),
  and fusing the mmap-backed fp32 action-head weights costs resident memory, so CPU leaves them off;
- optional static shapes (``pad``): the prompt right-padded to ``padded_length`` (N1.5 GR1: 384 =
  the 282 fixed prompt tokens + the 102-token instruction limit). The LLM is causal, so padding after
  the prompt leaves every real row unchanged; the VL self-attention and the DiT cross-attention mask
  the padded keys; padded rows are dropped from every tap. CPU does not pad (it would only add work);
  CUDA graphs need it (``graphs``).

Stage laps match the reference's (vision / llm / adapter / dit_step_i); the per-request cross K/V
is counted in ``dit_step_0``, where the reference spends it too.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F

from ..common.policy import PreparedInputs
from ..common.timing import Stopwatch
from .fast_dit import FastActionHead, Fusions, StepTables, heads, merge_heads
from .torch_policy import ReferencePolicy
from .torch_qwen3 import Qwen3DecoderLayer, apply_rope, rope_cos_sin
from .torch_siglip import SiglipVisionTransformer

PAD_TOKEN_ID = 0  # any id works: padded rows never reach a real row (causal LLM, masked keys)
PAD_MULTIPLE = 16


def padded_length(seq_len: int, prompt_tokens: int, max_text_tokens: int) -> int:
    """The static sequence length for a layout: the prompt without its instruction, plus the longest
    instruction the layout accepts, rounded up to ``PAD_MULTIPLE``."""
    n = max(seq_len, seq_len - prompt_tokens + max_text_tokens)
    return -(-n // PAD_MULTIPLE) * PAD_MULTIPLE


def siglip_features(vt: SiglipVisionTransformer, pixel_values: torch.Tensor, fz: Fusions) -> torch.Tensor:
    """SigLIP ``post_layernorm`` features [N, 256, D], QKV through ``fz``."""
    x = vt.embeddings(pixel_values)
    for layer in vt.encoder.layers:
        a = layer.self_attn
        q, k, v = fz.project((a.q_proj, a.k_proj, a.v_proj), layer.layer_norm1(x))
        o = F.scaled_dot_product_attention(heads(q, a.heads, a.head_dim), heads(k, a.heads, a.head_dim),
                                           heads(v, a.heads, a.head_dim), scale=a.head_dim**-0.5)
        x = x + a.out_proj(merge_heads(o))
        x = x + layer.mlp(layer.layer_norm2(x))
    return vt.post_layernorm(x)


def qwen3_layer(layer: Qwen3DecoderLayer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                fz: Fusions) -> torch.Tensor:
    """One Qwen3 decoder layer (causal): QKV and gate/up through ``fz``, GQA inside SDPA."""
    a, m = layer.self_attn, layer.mlp
    b, s, _ = x.shape
    q, k, v = fz.project((a.q_proj, a.k_proj, a.v_proj), layer.input_layernorm(x))
    q = a.q_norm(q.view(b, s, a.heads, a.head_dim)).transpose(1, 2)  # [B, H, S, hd]
    k = a.k_norm(k.view(b, s, a.kv_heads, a.head_dim)).transpose(1, 2)  # [B, KV, S, hd]
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    o = F.scaled_dot_product_attention(q, k, heads(v, a.kv_heads, a.head_dim), is_causal=True,
                                       scale=a.head_dim**-0.5, enable_gqa=True)
    x = x + a.o_proj(merge_heads(o))
    g, u = fz.project((m.gate_proj, m.up_proj), layer.post_attention_layernorm(x))
    return x + m.down_proj(F.silu(g) * u)


class FastInfer:
    """What both versions' fast policies share: buffers (fresh per request, or static and reused),
    the stage list, optional CUDA graphs and the taps. Mixed into a reference policy class."""

    fz: Fusions
    fast_head: FastActionHead

    def _init_fast(self, *, pad: bool, fuse: bool, graphs: bool, tables: StepTables | None) -> None:
        if graphs and self.device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device")
        self.pad, self.graphs = pad or graphs, graphs
        self.fz = Fusions()
        self.fast_head = FastActionHead(self.model.action_head, self.layout.embodiment_id, self.fz, tables)
        self.fused = False
        self._static: dict[tuple, list] = {}  # signature → [buffers, StageGraphs | None]
        if fuse:
            self.fuse()

    @classmethod
    def from_reference(cls, ref: ReferencePolicy, *, pad: bool = False, fuse: bool = False, graphs: bool = False,
                       tables: StepTables | None = None):
        """A fast policy on ``ref``'s model object (no weight is copied)."""
        return cls(ref.model, ref.config, ref.layout, ref.stats, ref.checkpoint_dir, ref.synthetic,
                   pad=pad, fuse=fuse, graphs=graphs, tables=tables)

    @property
    def act_dtype(self) -> torch.dtype:
        return next(self.model.backbone.parameters()).dtype

    def fuse_decoder(self, layers) -> None:
        """Fuse each decoder layer's QKV and gate/up, then the action head's projections."""
        for layer in layers:
            a, m = layer.self_attn, layer.mlp
            self.fz.fuse([a.q_proj, a.k_proj, a.v_proj])
            self.fz.fuse([m.gate_proj, m.up_proj])
        self.fast_head.fuse()
        self.fused = True

    def options(self) -> dict:
        return {"padded": self.pad, "fused": self.fused, "cuda_graphs": self.graphs, "dtype": str(self.act_dtype)}

    @torch.inference_mode()
    def infer(self, inputs: PreparedInputs, clock: Stopwatch | None = None) -> dict[str, torch.Tensor]:
        clock = clock or Stopwatch()
        b, graphs = self._buffers(inputs)
        if graphs is not None:
            for name, ms in graphs.replay().items():
                clock.add(name, ms)
        else:
            for name, fn in self._stages(b):
                fn()
                clock.lap(name, self.device)
        keep = (lambda t: t.clone()) if self.pad else (lambda t: t)  # static buffers are overwritten next call
        return {"pixel_values": inputs.pixel_values, "input_ids": inputs.input_ids, "state": inputs.state,
                "noise": inputs.noise, **{k: keep(v) for k, v in self._taps(b).items()}}

    def _buffers(self, inputs: PreparedInputs):
        key = self._signature(inputs)
        if not self.pad:
            b = self._new_buffers(inputs, key)
            self._fill(b, inputs)
            return b, None
        if key not in self._static:
            self._static[key] = [self._new_buffers(inputs, key), None]
        entry = self._static[key]
        self._fill(entry[0], inputs)
        if self.graphs and entry[1] is None:
            from .fast_cuda import StageGraphs

            entry[1] = StageGraphs(self._stages(entry[0]), self.device)
        return entry[0], entry[1]

    def _fill_common(self, b: SimpleNamespace, inputs: PreparedInputs, image_token: int) -> None:
        """Prompt ids (right-padded), image-token positions, valid mask, state and noise."""
        ids = inputs.input_ids
        s = ids.shape[1]
        if s > b.input_ids.shape[1]:
            raise ValueError(f"prompt of {s} tokens exceeds the static length {b.input_ids.shape[1]}")
        pos = (ids[0] == image_token).nonzero().flatten()
        if pos.numel() != b.image_pos.numel():
            raise ValueError(f"prompt has {pos.numel()} image tokens but the images give {b.image_pos.numel()}")
        b.seq_len = s
        b.input_ids.fill_(PAD_TOKEN_ID)
        b.input_ids[:, :s] = ids
        b.image_pos.copy_(pos)
        if b.valid is not None:
            b.valid.zero_()
            b.valid[:, :s] = True
        b.state.copy_(inputs.state)
        b.noise.copy_(inputs.noise)

    def _new_common(self, inputs: PreparedInputs, length: int, n_image_tokens: int) -> SimpleNamespace:
        dev, h = self.device, self.config.action_head
        return SimpleNamespace(
            input_ids=torch.full((1, length), PAD_TOKEN_ID, dtype=torch.int64, device=dev),
            image_pos=torch.empty(n_image_tokens, dtype=torch.int64, device=dev),
            valid=torch.zeros(1, length, dtype=torch.bool, device=dev) if self.pad else None,
            state=torch.empty(1, 1, h.max_state_dim, device=dev),
            noise=torch.empty(1, h.action_horizon, h.action_dim, device=dev),
            velocity=[None] * self.fast_head.num_steps, seq_len=0)

    def _dit_stages(self, b: SimpleNamespace, rows: dict) -> list:
        fh = self.fast_head

        def step(i: int):
            def run() -> None:
                if i == 0:
                    b.kv = fh.cross_kv(b.vl_embs, rows)
                    b.x = b.noise
                v = fh.velocity(i, b.x, b.prefix, b.kv)
                b.velocity[i] = v
                b.x = b.x + fh.dt * v
            return run

        return [(f"dit_step_{i}", step(i)) for i in range(fh.num_steps)]

    def _head_taps(self, b: SimpleNamespace) -> dict[str, torch.Tensor]:
        s = b.seq_len
        return {"backbone_features": b.features[:, :s], "vl_embs": b.vl_embs[:, :s], "state_features": b.state_features,
                **{f"velocity_{i}": v for i, v in enumerate(b.velocity)}, "action_pred": b.x}


class FastPolicy(FastInfer, ReferencePolicy):
    """N1.5 GR1 fast path; ``prepare`` / ``finish`` / ``get_action`` are the reference's."""

    def __init__(self, model, config, layout, stats, checkpoint_dir, synthetic, *, pad: bool = False,
                 fuse: bool = False, graphs: bool = False, tables: StepTables | None = None):
        super().__init__(model, config, layout, stats, checkpoint_dir, synthetic)
        self._init_fast(pad=pad, fuse=fuse, graphs=graphs, tables=tables)

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

    def _new_buffers(self, inputs: PreparedInputs, key: tuple) -> SimpleNamespace:
        length, e = key[0], self.config.eagle
        b = self._new_common(inputs, length, inputs.pixel_values.shape[0] * e.tokens_per_image)
        b.pixel_values = torch.empty(key[1], dtype=self.act_dtype, device=self.device)
        cos, sin = rope_cos_sin(torch.arange(length, device=self.device), e.text.head_dim, e.text.rope_theta)
        b.cos, b.sin = cos.to(self.act_dtype), sin.to(self.act_dtype)
        return b

    def _fill(self, b: SimpleNamespace, inputs: PreparedInputs) -> None:
        self._fill_common(b, inputs, self.config.eagle.image_token_index)
        b.pixel_values.copy_(inputs.pixel_values)

    def _stages(self, b: SimpleNamespace) -> list:
        eagle, fh, fz = self.model.backbone.eagle_model, self.fast_head, self.fz
        llm = eagle.language_model.model

        def vision() -> None:
            b.vision = siglip_features(eagle.vision_model.vision_model, b.pixel_values, fz)
            b.vit = eagle.mlp1(b.vision)  # [N_img, 256, D_llm]

        def language() -> None:
            x = llm.embed_tokens(b.input_ids)
            x.index_copy_(1, b.image_pos, b.vit.reshape(1, -1, b.vit.shape[-1]).to(x.dtype))  # the splice
            for layer in llm.layers:
                x = qwen3_layer(layer, x, b.cos, b.sin, fz)
            b.features = llm.norm(x)

        def adapter() -> None:
            b.vl_embs = fh.condition(b.features, b.valid)
            b.state_features, b.prefix = fh.state_prefix(b.state)

        return [("vision", vision), ("llm", language), ("adapter", adapter),
                *self._dit_stages(b, {"all": (None, b.valid)})]

    def _taps(self, b: SimpleNamespace) -> dict[str, torch.Tensor]:
        return {"vision_features": b.vision, "vit_embeds": b.vit, **self._head_taps(b)}
