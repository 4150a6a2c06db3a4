# SPDX-License-Identifier: Apache-2.0
"""GR00T N1.6's image side on TT-NN: Eagle 3's SigLIP2 vision tower, the 2×2 pixel-unshuffle and the connector
``mlp1`` (twin of ``Eagle3VisionConnector`` in ``reference/torch_eagle3_n16.py``; spec ``gr00t_n16.md`` §5.1–5.2).

Static geometry: the images' patch grids are fixed when the module is built (``weight_layout_n16.VisionGeometry``;
GR1 one 252×252 frame = 18×18 patches → 81 tokens, a 252×336 G1 frame = 18×24 → 108 tokens; several images may
share one call), so what depends only on positions is made once on the host: the position rows (the 16×16 table
resized per grid, a converted weight) and the additive attention mask.

Input: host-unfolded patch rows [1, P_pad, 608] (``weight_layout_n16.patch_rows``): one patch per row, flattened
(py, px, c) as the reference's ``patchify``, zero-padded from 588 columns, so the Linear patch embedding is one
matmul. Rows are in *merge order*: every image's 2×2 unshuffle windows row-major, the window's four patches
consecutive ((0,0), (0,1), (1,0), (1,1)); images in order; zero rows up to a tile multiple.

Layers: ``num_hidden_layers`` pre-LN blocks as N1.5's SigLIP (fused head-padded QKV with the softmax scale folded
into q, SDPA, out_proj; tanh-GELU MLP), then ``post_layernorm``. Attention keeps every image to itself with an
additive block-diagonal mask [1, 1, P_pad, P_pad] (0 within an image, −inf across); the padding rows form their
own block, so no real row sees them and they stay finite. With one image whose patches fill whole tiles no mask is
built. The matmuls run HiFi4 (no reduced-fidelity table for this tower in ``policy.VIT_FORK_FIDELITY`` yet; an
``"eagle3"`` entry there would be picked up per block).

Unshuffle: a ``ttnn.reshape`` [1, P_pad, D] → [1, P_pad/4, 4·D], not a 0/1 permutation matmul. Because the rows
already arrive in merge order (attention treats an image's tokens as a set and everything else is per token, so
the order costs nothing upstream), each window's four rows are consecutive and the reshape is the whole
unshuffle: no [P, P] matrix to store or multiply (a 0/1 gather would cost a P×P×D matmul and, in bf16 on a card,
exact copies only because each row has a single 1). A tiled tensor cannot be regrouped by a strided view — tiles
are 32×32 blocks, so a row-major (h, w) grid would need a gather across tiles — but regrouping consecutive rows
into one wider row is what ``ttnn.reshape`` does (the N1.7 mergers use the same). The result's columns are
k-major (``k·D + c``); ``mlp1``'s LayerNorm and first Linear are converted in that column order
(``weight_layout_n16.connector_columns``). The padding's tokens are sliced off, then ``mlp1``: LayerNorm(4·D,
eps 1e-5) → Linear → exact-erf GELU → Linear.

Output: image tokens [1, N_tokens, llm_hidden] in image order, each image row-major over its (h/2, w/2) grid —
the rows the Qwen3 splice writes over ``<IMG_CONTEXT>``.
"""

from __future__ import annotations

import ttnn

from ..common.configs_n16 import Eagle3Config
from .ttnn_common import DeviceWeights, fused_self_attention, gelu_exact, layer_norm, linear
from .ttnn_qwen3vl import block_diagonal_mask
from .weight_layout_n16 import CONNECTOR, MODEL, STATIC_POS, VISION, VisionGeometry


class TtEagle3Vision:
    def __init__(self, w: DeviceWeights, c: Eagle3Config, geometry: VisionGeometry, prefix: str = MODEL):
        if geometry.factor != c.unshuffle_factor:
            raise ValueError(f"geometry unshuffles by {geometry.factor}, the config by {c.unshuffle_factor}")
        self.w, self.c, self.g = w, c, geometry
        self.vis, self.mlp = prefix + VISION, prefix + CONNECTOR
        segments = geometry.segments()
        self.mask = None if len(segments) == 1 else ttnn.from_torch(
            block_diagonal_mask(segments)[None, None], dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=w.device)

    def _fidelity(self, i: int) -> str | None:
        return self.w.block_fidelity("eagle3", i) if "eagle3" in self.w.vision_fidelity else None

    def layer(self, x: ttnn.Tensor, i: int) -> ttnn.Tensor:
        w, v, p = self.w, self.c.vision, f"{self.vis}encoder.layers.{i}."
        fid = self._fidelity(i)
        h = layer_norm(w, x, p + "layer_norm1", v.layer_norm_eps)
        x = ttnn.add(x, fused_self_attention(w, h, p + "self_attn.", "out_proj", v.num_attention_heads, scale=1.0,
                                             bias=True, mask=self.mask, fidelity=fid))  # hd^-½ folded into q
        h = layer_norm(w, x, p + "layer_norm2", v.layer_norm_eps)
        h = linear(w, linear(w, h, p + "mlp.fc1", activation="gelu_tanh", fidelity=fid), p + "mlp.fc2", fidelity=fid)
        return ttnn.add(x, h)

    def tower(self, patches: ttnn.Tensor) -> ttnn.Tensor:
        """[1, P_pad, 608] patch rows → post_layernorm features [1, P_pad, D] (device row order)."""
        w, v, p = self.w, self.c.vision, self.vis
        x = ttnn.add(linear(w, patches, p + "embeddings.patch_embedding"), w[p + STATIC_POS])
        for i in range(v.num_hidden_layers):
            x = self.layer(x, i)
        return layer_norm(w, x, p + "post_layernorm", v.layer_norm_eps)

    def unshuffle(self, x: ttnn.Tensor) -> ttnn.Tensor:
        """[1, P_pad, D] in merge order → the real tokens [1, N_tokens, 4·D] (columns k-major, see the docstring)."""
        f2, g = self.c.unshuffle_factor**2, self.g
        x = ttnn.reshape(x, [x.shape[0], g.padded // f2, x.shape[-1] * f2])
        if g.padded != g.patches:
            x = ttnn.slice(x, [0, 0, 0], [x.shape[0], g.tokens, x.shape[-1]])
        return x

    def connector(self, x: ttnn.Tensor) -> ttnn.Tensor:
        """``mlp1``: [1, N, 4·D] → [1, N, llm_hidden]."""
        w, p = self.w, self.mlp
        x = layer_norm(w, x, p + "0", self.c.connector_norm_eps)
        return linear(w, gelu_exact(linear(w, x, p + "1")), p + "3")

    def __call__(self, patches: ttnn.Tensor, *, taps: dict | None = None) -> ttnn.Tensor:
        """[1, P_pad, 608] patch rows → image tokens [1, N_tokens, llm_hidden]. ``taps`` (when given) receives
        ``vision_tower`` (post_layernorm, device row order), ``unshuffled`` (the connector's input, k-major
        columns) and ``image_tokens``."""
        x = self.tower(patches)
        merged = self.unshuffle(x)
        tokens = self.connector(merged)
        if taps is not None:
            taps.update(vision_tower=x, unshuffled=merged, image_tokens=tokens)
        return tokens
