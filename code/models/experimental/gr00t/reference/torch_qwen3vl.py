# SPDX-License-Identifier: Apache-2.0
"""Qwen3-VL backbone of GR00T N1.7 (Cosmos-Reason2-2B; HF transformers ``models/qwen3_vl/modeling_qwen3_vl.py``).

Vision tower (Conv3d patch embed + interpolated learned 48×48 position grid + 2-D RoPE, per-image
attention, DeepStack mergers) → image tokens scattered into the prompt embeddings → the first
``select_layer`` Qwen3 decoder layers with interleaved 3-axis M-RoPE and DeepStack injection after
the first layers. The feature is the raw output of the last kept layer: ``language_model.norm`` is
loaded but not applied. NVIDIA (``gr00t/model/modules/qwen3_backbone.py``) reads ``hidden_states[-1]`` of
the HF wrapper and documents it as pre-norm; under transformers 5.12.1 that tensor is tied to the normed
``last_hidden_state``, so HF's output_hidden_states is not a drop-in oracle for this feature.

Module names equal the checkpoint keys under ``backbone.`` (``model.model.visual.*``,
``model.model.language_model.*``). There are no registered buffers (RoPE tables are computed per
call), so the whole tree can be built on the meta device and loaded with ``assign=True``. Numerics
follow transformers 5.12.1 ``modeling_qwen3_vl.py``, except that the RoPE frequencies stay fp32 when
the weights are bf16 (HF's ``.to(bfloat16)`` rounds its ``inv_freq`` buffers; NVIDIA's loader
re-derives them in fp32 after loading).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..common.configs import Qwen3VLConfig, Qwen3VLTextConfig, Qwen3VLVisionConfig
from ..common.embeddings import mrope_cos_sin, rope_index, vision_position_embedding, vision_rope_cos_sin
from .torch_qwen3 import Qwen3DecoderLayer, Qwen3RMSNorm, rotate_half


# ---- vision tower ---------------------------------------------------------------------------------


class Qwen3VLVisionPatchEmbed(nn.Module):
    def __init__(self, c: Qwen3VLVisionConfig):
        super().__init__()
        self.config = c
        kernel = (c.temporal_patch_size, c.patch_size, c.patch_size)
        # Kernel = stride = the whole flattened patch: a Linear stored in Conv3d layout.
        self.proj = nn.Conv3d(c.in_channels, c.hidden_size, kernel_size=kernel, stride=kernel)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        c = self.config
        x = pixel_values.view(-1, c.in_channels, c.temporal_patch_size, c.patch_size, c.patch_size)
        return self.proj(x.to(self.proj.weight.dtype)).view(-1, c.hidden_size)  # [N, D]


class Qwen3VLVisionAttention(nn.Module):
    def __init__(self, c: Qwen3VLVisionConfig):
        super().__init__()
        self.heads, self.head_dim = c.num_heads, c.head_dim
        self.qkv = nn.Linear(c.hidden_size, 3 * c.hidden_size)
        self.proj = nn.Linear(c.hidden_size, c.hidden_size)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, seq_lens: list[int]) -> torch.Tensor:
        n = x.shape[0]
        q, k, v = self.qkv(x).view(n, 3, self.heads, self.head_dim).unbind(1)  # 3 × [N, H, hd]
        # HF rotates in fp32 and casts back to the activation dtype.
        cos, sin = cos[:, None, :], sin[:, None, :]
        q = (q.float() * cos + rotate_half(q.float()) * sin).to(x.dtype)
        k = (k.float() * cos + rotate_half(k.float()) * sin).to(x.dtype)
        q, k, v = (y.transpose(0, 1)[None] for y in (q, k, v))  # [1, H, N, hd]
        # Block-diagonal attention: every image (every temporal slice) attends only to itself.
        out = [
            F.scaled_dot_product_attention(qi, ki, vi, scale=self.head_dim**-0.5)
            for qi, ki, vi in zip(q.split(seq_lens, 2), k.split(seq_lens, 2), v.split(seq_lens, 2))
        ]
        o = torch.cat(out, dim=2)[0].transpose(0, 1).reshape(n, -1)  # [N, D]
        return self.proj(o)


class Qwen3VLVisionMLP(nn.Module):
    def __init__(self, c: Qwen3VLVisionConfig):
        super().__init__()
        self.linear_fc1 = nn.Linear(c.hidden_size, c.intermediate_size)
        self.linear_fc2 = nn.Linear(c.intermediate_size, c.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # hidden_act "gelu_pytorch_tanh" in the Qwen3-VL vision config (the mergers use exact GELU).
        return self.linear_fc2(F.gelu(self.linear_fc1(x), approximate="tanh"))


class Qwen3VLVisionBlock(nn.Module):
    def __init__(self, c: Qwen3VLVisionConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.norm2 = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.attn = Qwen3VLVisionAttention(c)
        self.mlp = Qwen3VLVisionMLP(c)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, seq_lens: list[int]) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), cos, sin, seq_lens)
        return x + self.mlp(self.norm2(x))


class Qwen3VLVisionPatchMerger(nn.Module):
    """``merge²`` consecutive patches → one LLM token: LayerNorm, view(-1, merge²·D), fc1, exact
    GELU, fc2. The final merger normalises each patch before the shuffle (LN over D); the DeepStack
    mergers normalise after it (LN over merge²·D)."""

    def __init__(self, c: Qwen3VLVisionConfig, use_postshuffle_norm: bool):
        super().__init__()
        self.merged_size = c.hidden_size * c.spatial_merge_size**2
        self.use_postshuffle_norm = use_postshuffle_norm
        self.norm = nn.LayerNorm(self.merged_size if use_postshuffle_norm else c.hidden_size, eps=c.layer_norm_eps)
        self.linear_fc1 = nn.Linear(self.merged_size, self.merged_size)
        self.linear_fc2 = nn.Linear(self.merged_size, c.out_hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_postshuffle_norm:
            x = self.norm(x.view(-1, self.merged_size))
        else:
            x = self.norm(x).view(-1, self.merged_size)  # [N/merge², merge²·D]
        return self.linear_fc2(F.gelu(self.linear_fc1(x)))  # [N/merge², out]


class Qwen3VLVisionModel(nn.Module):
    def __init__(self, c: Qwen3VLVisionConfig):
        super().__init__()
        self.config = c
        self.patch_embed = Qwen3VLVisionPatchEmbed(c)
        self.pos_embed = nn.Embedding(c.num_position_embeddings, c.hidden_size)
        self.blocks = nn.ModuleList(Qwen3VLVisionBlock(c) for _ in range(c.depth))
        self.merger = Qwen3VLVisionPatchMerger(c, use_postshuffle_norm=False)
        self.deepstack_merger_list = nn.ModuleList(
            Qwen3VLVisionPatchMerger(c, use_postshuffle_norm=True) for _ in c.deepstack_visual_indexes
        )

    def forward(self, pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Flattened patches [P, C·T·p·p] in the processor's merge order, grids [N_img, 3] (t, h, w in
        patches) → merged image tokens [P/merge², out] and one DeepStack feature of the same shape
        per ``deepstack_visual_indexes`` entry."""
        c = self.config
        grids = [[int(v) for v in g] for g in grid_thw.tolist()]
        if pixel_values.shape != (sum(t * h * w for t, h, w in grids), c.patch_dim):
            raise ValueError(f"pixel_values {tuple(pixel_values.shape)} do not match image_grid_thw {grids}")
        x = self.patch_embed(pixel_values)  # [P, D]
        x = x + vision_position_embedding(self.pos_embed.weight, grids, c.spatial_merge_size).to(x.dtype)
        cos, sin = vision_rope_cos_sin(grids, c.head_dim, c.spatial_merge_size, x.device)  # [P, hd] fp32
        seq_lens = [h * w for t, h, w in grids for _ in range(t)]
        deepstack = []
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, seq_lens)
            if i in c.deepstack_visual_indexes:
                deepstack.append(self.deepstack_merger_list[c.deepstack_visual_indexes.index(i)](x))
        return self.merger(x), deepstack


# ---- text decoder ---------------------------------------------------------------------------------


class Qwen3VLTextModel(nn.Module):
    """Embeddings + the first ``num_layers`` decoder layers (+ the unused final norm). Qwen3-VL's text
    layer is the Qwen3 layer (q/k RMSNorm before RoPE, GQA, causal, SwiGLU); only the RoPE tables
    differ, so the N1.5 layer is reused with M-RoPE cos/sin."""

    def __init__(self, c: Qwen3VLTextConfig, num_layers: int):
        super().__init__()
        self.config = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(Qwen3DecoderLayer(c) for _ in range(num_layers))
        self.norm = Qwen3RMSNorm(c.hidden_size, c.rms_norm_eps)  # in the checkpoint; GR00T skips it

    def forward(self, inputs_embeds: torch.Tensor, position_ids: torch.Tensor, visual_mask: torch.Tensor,
                deepstack: list[torch.Tensor]) -> torch.Tensor:
        """[1, S, D] embeddings, [3, 1, S] positions → raw output of the last kept layer [1, S, D].
        After layer i < len(deepstack), ``deepstack[i]`` is added at the image-token positions."""
        cos, sin = mrope_cos_sin(position_ids, self.config, inputs_embeds.dtype)  # [1, S, hd]
        cos, sin = cos[:, None], sin[:, None]  # broadcast over heads
        x = inputs_embeds
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin)
            if i < len(deepstack):
                x = x.clone()
                x[visual_mask] = x[visual_mask] + deepstack[i].to(x.dtype)
        return x


# ---- wiring ---------------------------------------------------------------------------------------


class Qwen3VLModel(nn.Module):
    def __init__(self, c: Qwen3VLConfig):
        super().__init__()
        self.config = c
        self.visual = Qwen3VLVisionModel(c.vision)
        self.language_model = Qwen3VLTextModel(c.text, c.select_layer)

    def forward(self, input_ids: torch.Tensor, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor,
                after_vision=None) -> dict[str, torch.Tensor | list[torch.Tensor]]:
        vision_embeds, deepstack = self.visual(pixel_values, image_grid_thw)  # [N_tok, D_llm], list of same
        if after_vision is not None:  # lets a caller time the vision tower and the LLM separately
            after_vision()
        image_mask = input_ids == self.config.image_token_id  # [B, S]
        n_tokens = int(image_mask.sum())
        if n_tokens != vision_embeds.shape[0]:
            raise ValueError(f"prompt has {n_tokens} image tokens but the images give {vision_embeds.shape[0]}")
        embeds = self.language_model.embed_tokens(input_ids)  # [B, S, D]
        embeds = embeds.masked_scatter(image_mask[..., None], vision_embeds.to(embeds.dtype))
        # [3, B, S]: one row per stacked request, each with its own images' grids (rope_index is batch-1)
        grids = image_grid_thw.chunk(input_ids.shape[0])
        position_ids = torch.cat([rope_index(input_ids[b:b + 1], grids[b], self.config)
                                  for b in range(input_ids.shape[0])], dim=1)
        features = self.language_model(embeds, position_ids, image_mask, deepstack)
        return {"vision_embeds": vision_embeds, "deepstack": deepstack, "backbone_features": features,
                "image_mask": image_mask, "position_ids": position_ids}


class Qwen3VLForConditionalGeneration(nn.Module):
    """Wrapper level for the checkpoint's ``model.model.`` prefix; ``lm_head`` is omitted (its logits
    are never used, the loader treats a stored one as optional)."""

    def __init__(self, c: Qwen3VLConfig):
        super().__init__()
        self.model = Qwen3VLModel(c)


class Qwen3VLBackbone(nn.Module):
    """``backbone.`` of GR00T N1.7."""

    def __init__(self, c: Qwen3VLConfig):
        super().__init__()
        if not 0 < c.select_layer <= c.text.num_hidden_layers:
            raise ValueError(f"select_layer {c.select_layer} outside 1..{c.text.num_hidden_layers}")
        self.config = c
        self.model = Qwen3VLForConditionalGeneration(c)

    def forward(self, input_ids: torch.Tensor, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor,
                after_vision=None) -> dict[str, torch.Tensor | list[torch.Tensor]]:
        """input_ids [1, S] int64, pixel_values [P, C·T·p·p], image_grid_thw [N_img, 3] int64 →
        ``vision_embeds`` [N_tok, D], ``deepstack`` (list of [N_tok, D]), ``backbone_features``
        [1, S, D] (pre-norm output of layer ``select_layer - 1``), ``image_mask`` [1, S] bool,
        ``position_ids`` [3, 1, S]."""
        return self.model.model(input_ids, pixel_values, image_grid_thw, after_vision)
