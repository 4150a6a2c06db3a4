# SPDX-License-Identifier: Apache-2.0
"""Fast path of the GR00T N1.7 (DROID) policy, on the reference's own tensors (see ``fast_policy``
for what is hoisted, fused and padded, and why).

N1.7 specifics: the vision tower's interpolated position embeddings and 2-D RoPE tables depend only
on the image grids, so they are built once per grid (the reference rebuilds them per request); the
image tokens are placed and the DeepStack features added by index (no boolean-mask indexing, so
the LLM stage can be captured); M-RoPE positions stay host-side (``rope_index``) and are copied in
per request. The AlternateVLDiT's text-only and image-only cross blocks project K/V for their own
rows only, instead of all rows under a mask. Static length (``pad``): the prompt without its
instruction plus the 51-token instruction limit, rounded up to 16.
"""

from __future__ import annotations

import torch

from ..common.embeddings import mrope_cos_sin, rope_index, vision_position_embedding, vision_rope_cos_sin
from ..common.policy import PreparedInputs
from .fast_policy import FastPolicy, StaticBuffers, padded_length, qwen3_layer


class FastPolicyN17(FastPolicy):
    """N1.7 DROID fast path around a ``ReferencePolicyN17``; ``prepare`` / ``finish`` are the reference's."""

    @property
    def qwen(self):
        return self.model.backbone.model.model  # Qwen3VLModel

    def fuse(self) -> None:
        """The vision tower's QKV is one Linear in the checkpoint already; fuse the LLM's and the head's."""
        self.fuse_decoder(self.qwen.language_model.layers)

    def _signature(self, inputs: PreparedInputs) -> tuple:
        s = inputs.input_ids.shape[1]
        length = padded_length(s, inputs.prompt_tokens, self.layout.max_text_tokens) if self.pad else s
        grids = tuple(tuple(int(v) for v in g) for g in inputs.image_grid_thw.tolist())
        return (length, grids, tuple(inputs.pixel_values.shape))

    def _new_buffers(self, inputs: PreparedInputs, key: tuple) -> StaticBuffers:
        length, grids, pixel_shape = key[:3]
        vc, dev, dt = self.config.backbone.vision, self.device, self.act_dtype
        visual, rows = self.qwen.visual, inputs.input_ids.shape[0]
        # a batch's grids are its rows' grids in turn (one batch_key: every row has the same ones)
        n_image = sum(t * h * w for t, h, w in grids) // vc.spatial_merge_size**2 // rows
        b = self._new_common(inputs, length, n_image)
        b.grids = [list(g) for g in grids]
        # patch_embed casts, as in the reference
        b.pixel_values = torch.empty(pixel_shape, dtype=torch.float32, device=dev)
        with torch.inference_mode():
            b.pos_embeds = vision_position_embedding(visual.pos_embed.weight, b.grids, vc.spatial_merge_size).to(dt)
            b.vcos, b.vsin = vision_rope_cos_sin(b.grids, vc.head_dim, vc.spatial_merge_size, dev)
        b.seq_lens = [h * w for t, h, w in grids for _ in range(t)]
        hd = self.config.backbone.text.head_dim
        b.cos = torch.empty(1, 1, length, hd, dtype=dt, device=dev)
        b.sin = torch.empty(1, 1, length, hd, dtype=dt, device=dev)
        b.text_idx = torch.empty(length - n_image, dtype=torch.int64, device=dev)
        b.text_valid = torch.zeros(rows, length - n_image, dtype=torch.bool, device=dev) if self.pad else None
        return b

    def _fill(self, b: StaticBuffers, inputs: PreparedInputs) -> None:
        c = self.config.backbone
        self._fill_common(b, inputs, c.image_token_id)
        b.pixel_values.copy_(inputs.pixel_values)
        s, length = b.seq_len, b.input_ids.shape[1]
        # [3, 1, S] host-side, from row 0: the rows share image positions (checked above) and grids (batch_key)
        rows = inputs.input_ids.shape[0]
        pos = rope_index(inputs.input_ids[:1], inputs.image_grid_thw[:len(inputs.image_grid_thw) // rows], c)
        if length > s:  # padded rows continue the text positions (they never reach a real row)
            tail = torch.arange(1, length - s + 1).expand(3, 1, -1) + pos.max()
            pos = torch.cat([pos, tail], dim=2)
        cos, sin = mrope_cos_sin(pos.to(self.device), c.text, self.act_dtype)  # [1, L, hd]
        b.cos.copy_(cos[:, None])
        b.sin.copy_(sin[:, None])
        is_image = torch.zeros(length, dtype=torch.bool)
        is_image[:s] = inputs.input_ids[0] == c.image_token_id
        text = (~is_image).nonzero().flatten()
        b.text_idx.copy_(text)
        if b.text_valid is not None:
            b.text_valid.copy_((text < s)[None].expand(rows, -1))

    def _stages(self, b: StaticBuffers) -> list:
        visual, lm, fh, fz = self.qwen.visual, self.qwen.language_model, self.fast_head, self.fz
        vc = self.config.backbone.vision

        def vision() -> None:
            x = visual.patch_embed(b.pixel_values) + b.pos_embeds  # [P, D]
            deepstack = []
            for i, block in enumerate(visual.blocks):
                x = block(x, b.vcos, b.vsin, b.seq_lens)
                if i in vc.deepstack_visual_indexes:
                    deepstack.append(visual.deepstack_merger_list[vc.deepstack_visual_indexes.index(i)](x))
            b.vision_embeds, b.deepstack = visual.merger(x), deepstack  # [N_tok, D_llm]

        def language() -> None:
            x = lm.embed_tokens(b.input_ids)
            rows = x.shape[0]  # the merged tokens of a batch are its rows' in turn
            x.index_copy_(1, b.image_pos, b.vision_embeds.view(rows, -1, x.shape[-1]).to(x.dtype))
            for i, layer in enumerate(lm.layers):
                x = qwen3_layer(layer, x, b.cos, b.sin, fz)
                if i < len(b.deepstack):
                    x = x.index_add(1, b.image_pos, b.deepstack[i].view(rows, -1, x.shape[-1]).to(x.dtype))
            b.features = x  # raw output of the last kept layer (no final norm, as the reference)

        def adapter() -> None:
            b.vl_embs = fh.condition(b.features, b.valid)
            b.state_features, b.prefix = fh.state_prefix(b.state)

        rows = {"text": (b.text_idx, b.text_valid), "image": (b.image_pos, None)}
        return [("vision", vision), ("llm", language), ("adapter", adapter), *self._dit_stages(b, rows)]

    def _taps(self, b: StaticBuffers) -> dict[str, torch.Tensor]:
        return {"vision_embeds": b.vision_embeds, **self._head_taps(b)}
