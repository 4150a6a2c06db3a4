# SPDX-License-Identifier: Apache-2.0
"""Fast path of the GR00T N1.6 policies (every embodiment tag), on the reference's own tensors (see
``fast_policy`` for what is hoisted, fused and padded, and why).

N1.6 specifics, versus ``ReferencePolicyN16.infer``:

- vision (SigLIP2 tower + pixel-unshuffle connector): the learned position table resized to an image's
  patch grid (an antialiased bilinear ``F.interpolate`` per image and request in the reference) depends only on
  the grid, so it is built once per image shape; the images of one shape run as one batch whose attention
  is per image (the reference packs them and loops over images for its block-diagonal attention); patchify
  and the unshuffle are batched views; QKV fused with ``fuse``. Images of different shapes (several cameras)
  run as one batch per shape, their tokens put back in image order;
- the splice by index (``index_copy_`` at the image-token positions, no boolean-mask indexing, so the LLM
  stage can be captured); Qwen3 with 1-D RoPE tables built once per static length, GQA inside SDPA, the
  final norm applied (as the reference: ``hidden_states[-1]``);
- the head: vlln only (N1.6 has no VL self-attention), then the shared fast DiT. The AlternateVLDiT's
  text-only cross blocks (0, 4, …) and image-only ones (2, 6, …) project K/V for their own rows only, once
  per request (the reference projects every row at every step and masks them, ``Gr00tN16ActionHead.key_masks``:
  text = the real tokens that are not ``<IMG_CONTEXT>``, image = the ``<IMG_CONTEXT>`` ones).

Static length (``pad``): the prompt without its instruction plus the layout's 102-token instruction limit,
rounded up to 16; the padded rows are masked out of the text rows (they are never image rows).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..common.embeddings import rope_cos_sin
from ..common.policy import PreparedInputs
from ..reference.torch_eagle3_n16 import Siglip2VisionTransformer
from .fast_dit import Fusions
from .fast_policy import FastPolicy, StaticBuffers, padded_length, qwen3_layer, siglip_encode


def image_shapes(pixel_values) -> tuple:
    """The [3, H, W] shape of every image, in order: N1.6's ``prepare`` gives one stacked tensor when the images
    share a shape, else a list."""
    if isinstance(pixel_values, torch.Tensor):
        return (tuple(pixel_values.shape[1:]),) * pixel_values.shape[0]
    return tuple(tuple(im.shape) for im in pixel_values)


def siglip2_features(vt: Siglip2VisionTransformer, pixels: torch.Tensor, positions: torch.Tensor,
                     fz: Fusions) -> torch.Tensor:
    """Images of one shape [N, 3, H, W] → ``post_layernorm`` features [N, h·w, D]: each image attends to itself
    only (the reference's block-diagonal attention over packed images), QKV through ``fz``; ``positions`` [h·w, D]
    is the resized position table of that shape (in the tower's dtype)."""
    c = vt.config
    n, ch, hh, ww = pixels.shape
    p = c.patch_size
    h, w = hh // p, ww // p
    patches = pixels.reshape(n, ch, h, p, w, p).permute(0, 2, 4, 3, 5, 1).reshape(n, h * w, p * p * ch)
    return siglip_encode(vt, vt.embeddings.patch_embedding(patches) + positions, fz)


def unshuffle(x: torch.Tensor, h: int, w: int, factor: int) -> torch.Tensor:
    """[N, h·w, C] → [N, (h/f)·(w/f), C·f²], per image as ``torch_eagle3_n16.pixel_unshuffle_tokens``."""
    n, _, ch = x.shape
    fmap = x.transpose(1, 2).reshape(n, ch, h, w)
    return F.pixel_unshuffle(fmap, factor).flatten(2).transpose(1, 2)


class FastPolicyN16(FastPolicy):
    """N1.6 fast path around a ``ReferencePolicyN16`` (any tag); ``prepare`` / ``finish`` are the reference's."""

    @property
    def vlm(self):
        return self.model.backbone.model  # Eagle3VLModel

    def fuse(self) -> None:
        for layer in self.vlm.vision_model.vision_model.encoder.layers:
            a = layer.self_attn
            self.fz.fuse([a.q_proj, a.k_proj, a.v_proj])
        self.fuse_decoder(self.vlm.language_model.model.layers)

    def _signature(self, inputs: PreparedInputs) -> tuple:
        s = inputs.input_ids.shape[1]
        length = padded_length(s, inputs.prompt_tokens, self.layout.max_text_tokens) if self.pad else s
        return (length, image_shapes(inputs.pixel_values))

    def _new_buffers(self, inputs: PreparedInputs, key: tuple) -> StaticBuffers:
        length, shapes = key[:2]
        vt, dev, dt = self.vlm.vision_model.vision_model, self.device, self.act_dtype
        c = vt.config
        rows = inputs.input_ids.shape[0]
        # the images of a batch are its rows' images in turn (one batch_key: every row has the same shapes)
        n_image = sum((hh // c.image_factor) * (ww // c.image_factor) for _, hh, ww in shapes) // rows
        b = self._new_common(inputs, length, n_image)
        groups: dict[tuple, list[int]] = {}  # image shape → the indices of its images
        for i, shape in enumerate(shapes):
            groups.setdefault(shape, []).append(i)
        b.image_groups = []
        for (ch, hh, ww), idx in groups.items():
            h, w = hh // c.patch_size, ww // c.patch_size
            with torch.inference_mode():  # the resized position table once per shape (the reference: per image)
                positions = vt.embeddings.resized_positions(h, w).to(dt)
            pixels = torch.empty(len(idx), ch, hh, ww, dtype=dt, device=dev)  # patchify casts, as the reference
            b.image_groups.append(((h, w), idx, pixels, positions))
        cos, sin = rope_cos_sin(torch.arange(length, device=dev), self.config.backbone.text.head_dim,
                                self.config.backbone.text.rope_theta)
        b.cos, b.sin = cos.to(dt), sin.to(dt)
        b.text_idx = torch.empty(length - n_image, dtype=torch.int64, device=dev)
        b.text_valid = torch.zeros(rows, length - n_image, dtype=torch.bool, device=dev) if self.pad else None
        return b

    def _fill(self, b: StaticBuffers, inputs: PreparedInputs) -> None:
        token = self.config.backbone.image_token_index
        self._fill_common(b, inputs, token)
        images = inputs.pixel_values
        for _, idx, pixels, _ in b.image_groups:
            if isinstance(images, torch.Tensor):  # one shape: the stacked tensor as it is
                pixels.copy_(images)
            else:
                for j, i in enumerate(idx):
                    pixels[j].copy_(images[i])
        s, length = b.seq_len, b.input_ids.shape[1]
        is_image = torch.zeros(length, dtype=torch.bool)
        is_image[:s] = inputs.input_ids[0] == token  # the rows share their image positions (checked above)
        text = (~is_image).nonzero().flatten()
        b.text_idx.copy_(text)
        if b.text_valid is not None:
            b.text_valid.copy_((text < s)[None].expand(b.text_valid.shape[0], -1))

    def _stages(self, b: StaticBuffers) -> list:
        vlm, fh, fz = self.vlm, self.fast_head, self.fz
        vt, llm, factor = vlm.vision_model.vision_model, vlm.language_model.model, vlm.config.unshuffle_factor
        n_images = sum(len(idx) for _, idx, _, _ in b.image_groups)

        def vision() -> None:
            per_image: list = [None] * n_images
            for (h, w), idx, pixels, positions in b.image_groups:
                x = unshuffle(siglip2_features(vt, pixels, positions, fz), h, w, factor)
                for j, tokens in zip(idx, vlm.mlp1(x)):
                    per_image[j] = tokens
            b.vit = torch.cat(per_image)  # [Σ tokens, D_llm], images in order (the reference's splice order)

        def language() -> None:
            x = llm.embed_tokens(b.input_ids)
            x.index_copy_(1, b.image_pos, b.vit.view(x.shape[0], -1, b.vit.shape[-1]).to(x.dtype))  # the splice
            for layer in llm.layers:
                x = qwen3_layer(layer, x, b.cos, b.sin, fz)
            b.features = llm.norm(x)

        def adapter() -> None:
            b.vl_embs = fh.condition(b.features, b.valid)  # vlln only: N1.6 has no VL self-attention layers
            b.state_features, b.prefix = fh.state_prefix(b.state)

        rows = {"text": (b.text_idx, b.text_valid), "image": (b.image_pos, None)}
        return [("vision", vision), ("llm", language), ("adapter", adapter), *self._dit_stages(b, rows)]

    def _taps(self, b: StaticBuffers) -> dict[str, torch.Tensor]:
        s = b.seq_len
        image_mask = b.input_ids[:, :s] == self.config.backbone.image_token_index
        return {"image_tokens": b.vit, "image_mask": image_mask, **self._head_taps(b)}
