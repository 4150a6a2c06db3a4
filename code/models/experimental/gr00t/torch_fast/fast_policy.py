# SPDX-License-Identifier: Apache-2.0
"""Fast path of the GR00T policies (what both versions share; ``fast_policy_n15.py`` / ``_n17.py`` add
their stages): a ``FastPolicy`` wraps a reference policy, uses its host side (``prepare`` / ``finish``)
and its very parameter tensors, and brings an ``infer`` that does less work and can run on static
buffers / CUDA graphs.

Versus the reference's ``infer`` (the golden, unchanged):

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

Micro-batching: ``infer`` takes B stacked requests of one ``batch_key`` (same prompt length and images), whose
rows share their image-token positions. With static shapes B is rounded up to a power of two
(``batch_bucket``), the extra rows copies of the last request, so each bucket has its own buffers and graphs.

Stage laps match the reference's (vision / llm / adapter / dit_step_i); the per-request cross K/V
is counted in ``dit_step_0``, where the reference spends it too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from ..common.policy import PolicyResult, PreparedInputs, get_action
from ..common.rtc import InpaintPrefix
from ..common.timing import Stopwatch
from ..reference.policy import ReferencePolicyBase
from ..reference.torch_qwen3 import Qwen3DecoderLayer, apply_rope
from .fast_dit import FastActionHead, Fusions, StepTables, heads, merge_heads

PAD_TOKEN_ID = 0  # any id works: padded rows never reach a real row (causal LLM, masked keys)
PAD_MULTIPLE = 16


def padded_length(seq_len: int, prompt_tokens: int, max_text_tokens: int) -> int:
    """The static sequence length for a layout: the prompt without its instruction, plus the longest
    instruction the layout accepts, rounded up to ``PAD_MULTIPLE``."""
    n = max(seq_len, seq_len - prompt_tokens + max_text_tokens)
    return -(-n // PAD_MULTIPLE) * PAD_MULTIPLE


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


Tensor = torch.Tensor


def siglip_encode(vt, x: torch.Tensor, fz: Fusions) -> torch.Tensor:
    """A SigLIP-style tower's encoder layers and ``post_layernorm`` on embedded patches [N, P, D], each image attending
    to its own P patches, QKV through ``fz`` (N1.5's SigLIP and N1.6's SigLIP2 layers have the same parts)."""
    for layer in vt.encoder.layers:
        a = layer.self_attn
        q, k, v = fz.project((a.q_proj, a.k_proj, a.v_proj), layer.layer_norm1(x))
        o = F.scaled_dot_product_attention(heads(q, a.heads, a.head_dim), heads(k, a.heads, a.head_dim),
                                           heads(v, a.heads, a.head_dim), scale=a.head_dim**-0.5)
        x = x + a.out_proj(merge_heads(o))
        x = x + layer.mlp(layer.layer_norm2(x))
    return vt.post_layernorm(x)


def batch_bucket(rows: int) -> int:
    """The static batch size that ``rows`` requests run at: the next power of two. A server batching up to
    ``GR00T_MAX_BATCH`` = M then holds at most log2(M) + 1 sets of buffers (and CUDA graphs) per prompt shape."""
    if rows < 1:
        raise ValueError(f"a batch of {rows} requests")
    return 1 << (rows - 1).bit_length()


def pad_batch(inputs: PreparedInputs, bucket: int) -> PreparedInputs:
    """``inputs`` (B stacked requests) with copies of the last request appended up to ``bucket`` rows. The
    per-request image rows (and grids) are the last ``1 / B`` of those tensors."""
    rows = int(inputs.input_ids.shape[0])
    extra = bucket - rows

    def grow(t: Tensor | list | None) -> Tensor | list | None:  # N1.6's pixel_values may be a list of images
        if t is None:
            return None
        last = t[len(t) - len(t) // rows:]
        return torch.cat([t, *[last] * extra]) if isinstance(t, Tensor) else [*t, *last * extra]

    inpaint = None if inputs.inpaint is None else InpaintPrefix(grow(inputs.inpaint.target), grow(inputs.inpaint.mask))
    return replace(inputs, pixel_values=grow(inputs.pixel_values), input_ids=grow(inputs.input_ids),
                   state=grow(inputs.state), noise=grow(inputs.noise), image_grid_thw=grow(inputs.image_grid_thw),
                   inpaint=inpaint)


@dataclass
class StaticBuffers:
    """One request's device inputs, per-shape tables and stage outputs: fresh per request, or (padded)
    static and reused, so that the stages can be captured as CUDA graphs."""

    input_ids: Tensor  # [B, L] prompt ids, right-padded with PAD_TOKEN_ID
    image_pos: Tensor  # [N_image_tokens] positions of the image tokens (the same in every row)
    valid: Tensor | None  # [B, L] real (not padded) rows; None unpadded
    state: Tensor  # [B, 1, max_state_dim]
    noise: Tensor  # [B, H, D]
    velocity: list  # per Euler step
    seq_len: int = 0  # real prompt length of the current request
    pixel_values: Tensor | None = None
    cos: Tensor | None = None  # LLM RoPE tables
    sin: Tensor | None = None
    # N1.7: per-grid vision tables, M-RoPE and text rows
    grids: list | None = None
    pos_embeds: Tensor | None = None
    vcos: Tensor | None = None
    vsin: Tensor | None = None
    seq_lens: list | None = None
    # N1.6: per image shape ((h, w) patches, indices of its images, pixel buffer [n, 3, H, W], resized positions)
    image_groups: list | None = None
    text_idx: Tensor | None = None
    text_valid: Tensor | None = None
    # stage outputs
    vision: Tensor | None = None  # N1.5 SigLIP features
    vit: Tensor | None = None  # N1.5 projected image tokens
    vision_embeds: Tensor | None = None  # N1.7 merged image tokens
    deepstack: list | None = None  # N1.7 DeepStack features
    features: Tensor | None = None
    vl_embs: Tensor | None = None
    state_features: Tensor | None = None
    prefix: Tensor | None = None
    kv: object = None  # the action head's cross K/V, once per request
    x: Tensor | None = None  # the Euler state
    rtc_target: Tensor | None = None  # [B, H, D] RTC inpainting target (buffers keyed with RTC on)
    rtc_mask: Tensor | None = None  # [B, H, 1] 1 on the frozen rows


class FastPolicy:
    """What both versions' fast policies share: a reference policy's host side and weights, buffers
    (fresh per request, or static and reused), the stage list, optional CUDA graphs and the taps.
    Subclasses give the version's stages (``fuse``, ``_signature``, ``_new_buffers``, ``_fill``,
    ``_stages``, ``_taps``)."""

    def __init__(self, ref: ReferencePolicyBase, *, pad: bool = False, fuse: bool = False, graphs: bool = False,
                 tables: StepTables | None = None):
        if graphs and ref.device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device")
        self.ref = ref
        self.pad, self.graphs = pad or graphs, graphs
        self.fz = Fusions()
        self.fast_head = FastActionHead(ref.model.action_head, ref.layout.embodiment_id, self.fz, tables)
        self.fused = False
        self._static: dict[tuple, list] = {}  # signature → [buffers, StageGraphs | None]
        if fuse:
            self.fuse()

    @classmethod
    def from_reference(cls, ref: ReferencePolicyBase, *, pad: bool = False, fuse: bool = False,
                       graphs: bool = False, tables: StepTables | None = None):
        """A fast policy on ``ref``'s model object (no weight is copied)."""
        return cls(ref, pad=pad, fuse=fuse, graphs=graphs, tables=tables)

    # the reference's model, config and host side
    @property
    def model(self) -> torch.nn.Module:
        return self.ref.model

    @property
    def config(self):
        return self.ref.config

    @property
    def layout(self):
        return self.ref.layout

    @property
    def device(self) -> torch.device:
        return self.ref.device

    @property
    def chunk_shape(self) -> tuple[int, int]:
        return self.ref.chunk_shape

    def prepare(self, obs, *, noise=None, seed: int | None = None, state_dtype: str = "float64") -> PreparedInputs:
        return self.ref.prepare(obs, noise=noise, seed=seed, state_dtype=state_dtype)

    def finish(self, action_pred: Tensor, inputs: PreparedInputs):
        return self.ref.finish(action_pred, inputs)

    def frozen_prefix(self, last_normalized, last_actions, steps: slice, inputs):
        return self.ref.frozen_prefix(last_normalized, last_actions, steps, inputs)

    def checkpoint_modality_config(self) -> dict | None:
        return self.ref.checkpoint_modality_config()

    def get_action(self, obs, *, noise=None, seed: int | None = None, state_dtype: str = "float64") -> PolicyResult:
        return get_action(self, obs, noise=noise, seed=seed, state_dtype=state_dtype)

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
        """B stacked requests of one ``batch_key`` (``stack_inputs``) → the taps, batch rows in request order.
        Static shapes (``pad``) round B up to its bucket (``batch_bucket``) with copies of the last request,
        whose rows are computed and dropped, so a server sees one set of buffers and graphs per bucket."""
        clock = clock or Stopwatch()
        rows = int(inputs.input_ids.shape[0])
        bucket = batch_bucket(rows) if self.pad else rows
        b, graphs = self._buffers(inputs if bucket == rows else pad_batch(inputs, bucket))
        if graphs is not None:
            for name, ms in graphs.replay().items():
                clock.add(name, ms)
        else:
            for name, fn in self._stages(b):
                fn()
                clock.lap(name, self.device)

        def keep(t: torch.Tensor) -> torch.Tensor:  # the real requests' rows; static buffers are overwritten next call
            t = t if bucket == rows else t[:t.shape[0] // bucket * rows]
            return t.clone() if self.pad else t

        return {"pixel_values": inputs.pixel_values, "input_ids": inputs.input_ids, "state": inputs.state,
                "noise": inputs.noise, **{k: keep(v) for k, v in self._taps(b).items()}}

    def _buffers(self, inputs: PreparedInputs):
        if inputs.guide is not None:
            raise ValueError("the fast path runs RTC's inpaint variant only (guided needs the reference's autograd)")
        key = (*self._signature(inputs), inputs.inpaint is not None)  # RTC on: its own buffers (and graphs)
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

    def _fill_common(self, b: StaticBuffers, inputs: PreparedInputs, image_token: int) -> None:
        """Prompt ids (right-padded), image-token positions, valid mask, state and noise; the rows of a batch
        share their image-token positions (one ``batch_key``: same length and images), checked here."""
        ids = inputs.input_ids
        s = ids.shape[1]
        if s > b.input_ids.shape[1]:
            raise ValueError(f"prompt of {s} tokens exceeds the static length {b.input_ids.shape[1]}")
        is_image = ids == image_token
        if not bool((is_image == is_image[:1]).all()):
            raise ValueError("the requests of a batch place their image tokens differently")
        pos = is_image[0].nonzero().flatten()
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
        if b.rtc_target is not None:
            b.rtc_target.copy_(inputs.inpaint.target)
            b.rtc_mask.copy_(inputs.inpaint.mask.unsqueeze(-1))

    def _new_common(self, inputs: PreparedInputs, length: int, n_image_tokens: int) -> StaticBuffers:
        """Buffers for ``inputs``' batch of B rows; ``n_image_tokens`` per row."""
        dev, h = self.device, self.config.action_head
        rtc = inputs.inpaint is not None
        n = int(inputs.input_ids.shape[0])
        return StaticBuffers(
            input_ids=torch.full((n, length), PAD_TOKEN_ID, dtype=torch.int64, device=dev),
            image_pos=torch.empty(n_image_tokens, dtype=torch.int64, device=dev),
            valid=torch.zeros(n, length, dtype=torch.bool, device=dev) if self.pad else None,
            state=torch.empty(n, 1, h.max_state_dim, device=dev),
            noise=torch.empty(n, h.action_horizon, h.action_dim, device=dev),
            velocity=[None] * self.fast_head.num_steps, seq_len=0,
            rtc_target=torch.empty(n, h.action_horizon, h.action_dim, device=dev) if rtc else None,
            rtc_mask=torch.empty(n, h.action_horizon, 1, device=dev) if rtc else None)

    def _dit_stages(self, b: StaticBuffers, rows: dict) -> list:
        fh = self.fast_head

        def step(i: int):
            def run() -> None:
                if i == 0:
                    b.kv = fh.cross_kv(b.vl_embs, rows)
                    b.x = b.noise
                if b.rtc_mask is not None:  # RTC inpaint, as the reference sampler does it (exact for a 0/1 mask)
                    tau = i / fh.num_steps
                    b.x = b.rtc_mask * ((1 - tau) * b.noise + tau * b.rtc_target) + (1 - b.rtc_mask) * b.x
                v = fh.velocity(i, b.x, b.prefix, b.kv)
                b.velocity[i] = v
                b.x = b.x + fh.dt * v
                if b.rtc_mask is not None and i == fh.num_steps - 1:
                    b.x = b.rtc_mask * b.rtc_target + (1 - b.rtc_mask) * b.x
            return run

        return [(f"dit_step_{i}", step(i)) for i in range(fh.num_steps)]

    def _head_taps(self, b: StaticBuffers) -> dict[str, torch.Tensor]:
        s = b.seq_len
        return {"backbone_features": b.features[:, :s], "vl_embs": b.vl_embs[:, :s], "state_features": b.state_features,
                **{f"velocity_{i}": v for i, v in enumerate(b.velocity)}, "action_pred": b.x}


