# SPDX-License-Identifier: Apache-2.0
"""SigLIP vision tower on TT-NN (twin of ``reference/torch_siglip.py``).

Input: host-unfolded patches [1, 256, 608] (588 pixel values per patch, tile-padded with zeros; see
``weight_layout_n15.patchify``), so the patch convolution is one matmul. 27 pre-LN encoder layers with
16 heads of 72 (zero-padded to 96 in the fused QKV weight), tanh-GELU MLP of 4304 (padded to 4320),
then ``post_layernorm``. No mask: all 256 tokens are real. The pooling head is never computed. Each layer's four
matmuls run at the layer's math fidelity (``DeviceWeights.block_fidelity``, ``policy.VIT_FORK_FIDELITY``).
"""

from __future__ import annotations

import ttnn

from ..common.configs import SiglipConfig
from .ttnn_common import DeviceWeights, fused_self_attention, layer_norm, linear
from .weight_layout_n15 import VISION


class TtSiglipVision:
    def __init__(self, w: DeviceWeights, c: SiglipConfig, prefix: str = VISION):
        self.w, self.c, self.p = w, c, prefix

    def layer(self, x: ttnn.Tensor, i: int) -> ttnn.Tensor:
        w, c, p = self.w, self.c, f"{self.p}encoder.layers.{i}."
        fid = w.block_fidelity("siglip", i)  # the layer's matmul fidelity (``policy.VIT_FORK_FIDELITY``)
        h = layer_norm(w, x, p + "layer_norm1", c.layer_norm_eps)
        x = ttnn.add(x, fused_self_attention(w, h, p + "self_attn.", "out_proj", c.num_attention_heads,
                                             scale=c.head_dim**-0.5, bias=True, fidelity=fid))
        h = layer_norm(w, x, p + "layer_norm2", c.layer_norm_eps)
        h = linear(w, linear(w, h, p + "mlp.fc1", activation="gelu_tanh", fidelity=fid), p + "mlp.fc2", fidelity=fid)
        return ttnn.add(x, h)

    def __call__(self, patches: ttnn.Tensor, *, taps: dict | None = None) -> ttnn.Tensor:
        """[1, 256, 608] patches → post_layernorm features [1, 256, 1152]."""
        w, p = self.w, self.p
        x = linear(w, patches, p + "embeddings.patch_embedding")
        x = ttnn.add(x, w[p + "embeddings.position_embedding.weight"])
        for i in range(self.c.num_hidden_layers):
            x = self.layer(x, i)
            if taps is not None and i == 0:
                taps["vit_block_first"] = x
        return layer_norm(w, x, p + "post_layernorm", self.c.layer_norm_eps)
