# SPDX-License-Identifier: Apache-2.0
"""Qwen3-VL backbone of GR00T N1.7 on TT-NN (twins of ``Qwen3VLVisionModel`` and ``Qwen3VLTextModel`` in
``reference/torch_qwen3vl.py``).

Static geometry: the images' patch grids are fixed when the module is built (DROID: 4 images of
16×28 patches, 448 patches each), so everything that depends only on positions is computed once on the
host: the position rows interpolated from the learned grid (a converted weight, see
``weight_layout_n17``), the 2-D RoPE tables, and the attention mask that keeps every image to itself.

Input: the processor's flattened patch rows [1, P, C·T·p·p] in merge order, so the Conv3d patch
embedding is one matmul. Each of the ``depth`` blocks is pre-LN attention (fused QKV, 2-D RoPE through
``TtQwen3.rope``, SDPA with an additive block-diagonal mask) and a tanh-GELU MLP; its four matmuls run at the
block's math fidelity (``DeviceWeights.block_fidelity``: the published package's ``GR00T_VIT_FORK`` tuning).
After the blocks listed in ``deepstack_visual_indexes`` a DeepStack merger (shuffle 2×2 patches into one row, LayerNorm
over the shuffled row, fc1, erf GELU, fc2) taps the stream; the final merger normalises each patch first.

The text decoder is the Qwen3 layer of the N1.5 port (``TtQwen3.layer``) with other RoPE tables: the
static DROID prompt fixes every position id (images first, at fixed offsets; text after), so the
interleaved 3-axis M-RoPE cos/sin are computed once for the padded sequence. DeepStack features are added
after the first layers at the image rows, as one matmul with a 0/1 placement matrix [S, N_image] (one 1 per
image row: an exact scatter). The feature is the raw output of the last kept layer (no final norm).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import ttnn

from ..common.configs import Qwen3VLConfig, Qwen3VLTextConfig, Qwen3VLVisionConfig
from ..common.embeddings import mrope_cos_sin, vision_rope_cos_sin
from .ttnn_common import NEG_INF, DeviceWeights, attend, gelu_exact, layer_norm, linear
from .ttnn_qwen3 import TtQwen3, fused_rope_applies, rotate_half_matrix
from .weight_layout import tile_up
from .weight_layout_n17 import STATIC_POS, TEXT, VISUAL


def block_diagonal_mask(seq_lens: list[int]) -> torch.Tensor:
    """Additive [P, P] mask: 0 within each image's own patches, −inf across images."""
    n = sum(seq_lens)
    mask = torch.full((n, n), NEG_INF)
    start = 0
    for length in seq_lens:
        mask[start:start + length, start:start + length] = 0.0
        start += length
    return mask


class TtQwen3VLVision:
    def __init__(self, w: DeviceWeights, c: Qwen3VLVisionConfig, grids: list[list[int]], prefix: str = VISUAL):
        self.w, self.c, self.p = w, c, prefix
        self.patches = sum(t * h * ww for t, h, ww in grids)
        hd, padded = c.head_dim, tile_up(c.head_dim)  # padded heads (tiny test configs) keep zeros in the padding
        cos, sin = (F.pad(t, (0, padded - hd))
                    for t in vision_rope_cos_sin(grids, hd, c.spatial_merge_size, torch.device("cpu")))
        seq_lens = [h * ww for t, h, ww in grids for _ in range(t)]

        def put(t):
            return ttnn.from_torch(t[None, None], dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=w.device)

        self.cos, self.sin = put(cos), put(sin)
        self.rot = None if fused_rope_applies(hd, padded) else put(rotate_half_matrix(hd, padded))
        self.mask = put(block_diagonal_mask(seq_lens))

    rope = TtQwen3.rope  # the same rotation, over this tower's 2-D tables

    def block(self, x: ttnn.Tensor, i: int) -> ttnn.Tensor:
        w, c, p = self.w, self.c, f"{self.p}blocks.{i}."
        fid = w.block_fidelity("qwen3vl", i)  # the block's matmul fidelity (``policy.VIT_FORK_FIDELITY``)
        h = layer_norm(w, x, p + "norm1", c.layer_norm_eps)
        q, k, v = ttnn.transformer.split_query_key_value_and_split_heads(
            linear(w, h, p + "attn.qkv", fidelity=fid), num_heads=c.num_heads, transpose_key=False,
            memory_config=ttnn.DRAM_MEMORY_CONFIG)
        o = attend(w, self.rope(q), self.rope(k), v, scale=c.head_dim**-0.5, mask=self.mask)
        x = ttnn.add(x, linear(w, o, p + "attn.proj", fidelity=fid))
        h = layer_norm(w, x, p + "norm2", c.layer_norm_eps)
        h = linear(w, h, p + "mlp.linear_fc1", activation="gelu_tanh", fidelity=fid)
        return ttnn.add(x, linear(w, h, p + "mlp.linear_fc2", fidelity=fid))

    def merger(self, x: ttnn.Tensor, p: str, *, postshuffle: bool) -> ttnn.Tensor:
        """[1, P, D] → [1, P/merge², out]: ``merge²`` consecutive patches (merge order) become one row."""
        c = self.c
        shuffled = [x.shape[0], self.patches // c.spatial_merge_size**2, c.hidden_size * c.spatial_merge_size**2]
        if postshuffle:
            x = layer_norm(self.w, ttnn.reshape(x, shuffled), p + "norm", c.layer_norm_eps)
        else:
            x = ttnn.reshape(layer_norm(self.w, x, p + "norm", c.layer_norm_eps), shuffled)
        return linear(self.w, gelu_exact(linear(self.w, x, p + "linear_fc1")), p + "linear_fc2")

    def __call__(self, patches: ttnn.Tensor, *, taps: dict | None = None) -> tuple[ttnn.Tensor, list[ttnn.Tensor]]:
        """[1, P, C·T·p·p] patch rows → (image tokens [1, P/merge², out], one DeepStack feature of the same
        shape per ``deepstack_visual_indexes`` entry)."""
        w, c, p = self.w, self.c, self.p
        x = ttnn.add(linear(w, patches, p + "patch_embed.proj"), w[p + STATIC_POS])
        deepstack = []
        for i in range(c.depth):
            x = self.block(x, i)
            if taps is not None and i == 0:
                taps["vision_block_first"] = x
            if i in c.deepstack_visual_indexes:
                j = c.deepstack_visual_indexes.index(i)
                deepstack.append(self.merger(x, f"{p}deepstack_merger_list.{j}.", postshuffle=True))
        return self.merger(x, p + "merger.", postshuffle=False), deepstack


class TtQwen3VLText(TtQwen3):
    """The first ``num_layers`` Qwen3-VL text layers over a padded static sequence."""

    def __init__(self, w: DeviceWeights, c: Qwen3VLTextConfig, num_layers: int, position_ids: torch.Tensor,
                 image_rows: list[int], prefix: str = TEXT):
        """``position_ids`` [3, S_pad] (T, H, W) of the padded prompt; ``image_rows``: the prompt rows that
        hold image tokens, in the order of the vision tower's tokens."""
        self.w, self.c, self.n, self.p = w, c, num_layers, prefix
        hd, padded = c.head_dim, tile_up(c.head_dim)
        cos, sin = (F.pad(t[0], (0, padded - hd)) for t in mrope_cos_sin(position_ids[:, None, :], c, torch.float32))
        placement = torch.zeros(position_ids.shape[1], len(image_rows))
        placement[torch.tensor(image_rows), torch.arange(len(image_rows))] = 1.0

        def put(t):
            return ttnn.from_torch(t, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=w.device)

        self.cos, self.sin = put(cos[None, None]), put(sin[None, None])
        self.rot = None if fused_rope_applies(hd, padded) else put(rotate_half_matrix(hd, padded)[None, None])
        self.placement = put(placement[None])

    def __call__(self, embeds: ttnn.Tensor, deepstack: list[ttnn.Tensor], taps: dict | None = None) -> ttnn.Tensor:
        """[1, S_pad, D] embeddings, DeepStack features [1, N_image, D] → last kept layer's output [1, S_pad, D];
        ``taps["llm_layer_first"]``: the first layer's output, before its DeepStack add."""
        x = embeds
        for i in range(self.n):
            x = self.layer(x, i)
            if taps is not None and i == 0:
                taps["llm_layer_first"] = x
            if i < len(deepstack):
                placed = ttnn.matmul(self.placement, deepstack[i], memory_config=ttnn.DRAM_MEMORY_CONFIG,
                                     compute_kernel_config=self.w.norm_config)
                x = ttnn.add(x, placed)
        return x


class TtQwen3VLBackbone:
    """Vision tower → splice into the embedded prompt → text decoder: ``backbone_features`` [1, S_pad, D].

    The splice is exact and static: the embedded prompt is multiplied by a 0/1 column that zeroes the image
    rows, and the image tokens are added there through the text decoder's placement matrix."""

    def __init__(self, w: DeviceWeights, c: Qwen3VLConfig, grids: list[list[int]], position_ids: torch.Tensor,
                 image_rows: list[int], vision_prefix: str = VISUAL, text_prefix: str = TEXT):
        self.w, self.c, self.table = w, c, text_prefix + "embed_tokens.weight"
        self.vision = TtQwen3VLVision(w, c.vision, grids, vision_prefix)
        self.text = TtQwen3VLText(w, c.text, c.select_layer, position_ids, image_rows, text_prefix)
        keep = torch.ones(1, position_ids.shape[1], 1)
        keep[0, image_rows] = 0.0
        self.keep = ttnn.from_torch(keep, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=w.device)

    def splice(self, input_ids: ttnn.Tensor, image_tokens: ttnn.Tensor) -> ttnn.Tensor:
        """Prompt ids [1, S_pad] (uint32, row-major) + image tokens [1, N_image, D] → embeddings [1, S_pad, D]."""
        emb = ttnn.embedding(input_ids, self.w[self.table], layout=ttnn.TILE_LAYOUT,
                             memory_config=ttnn.DRAM_MEMORY_CONFIG)
        placed = ttnn.matmul(self.text.placement, image_tokens, memory_config=ttnn.DRAM_MEMORY_CONFIG,
                             compute_kernel_config=self.w.norm_config)
        return ttnn.add(ttnn.mul(emb, self.keep), placed)

    def __call__(self, patches: ttnn.Tensor, input_ids: ttnn.Tensor, *, taps: dict | None = None) -> ttnn.Tensor:
        tokens, deepstack = self.vision(patches, taps=taps)
        if taps is not None:
            taps["vision_embeds"] = tokens
        return self.text(self.splice(input_ids, tokens), deepstack)
