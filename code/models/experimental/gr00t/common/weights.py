# SPDX-License-Identifier: Apache-2.0
"""The checkpoint's tensor inventory: every name, shape and stored dtype, in NVIDIA's state-dict order.

This is the one literal description of the real N1.5 safetensors format (NVIDIA's N1.5 model code
instantiated on the meta device, as recorded in the test fixture ``tests/host/fixtures/gr00t_n15_params.tsv``).
The synthetic-checkpoint generator writes exactly this list; the reference modules load it with
``strict=True`` and no renames.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .configs import ActionHeadConfig, Qwen3Config, Qwen3VLVisionConfig, SiglipConfig
from .configs_n15 import Gr00tN15Config
from .configs_n16 import Siglip2VisionConfig

VISION_PREFIX = "backbone.eagle_model.vision_model.vision_model."
MLP1_PREFIX = "backbone.eagle_model.mlp1."
LLM_PREFIX = "backbone.eagle_model.language_model.model."
ACTION_HEAD_PREFIX = "action_head."

# Present in the module but never computed; a checkpoint may or may not carry it. The tied lm_head
# is dropped by transformers' save_pretrained, but a loader must not choke if a snapshot has it.
OPTIONAL_UNUSED_KEYS = ("backbone.eagle_model.language_model.lm_head.weight", "backbone.model.lm_head.weight")

# N1.7: the backbone is a whole Qwen3VLForConditionalGeneration under ``backbone.model.``.
N17_VISION_PREFIX = "backbone.model.model.visual."
N17_LLM_PREFIX = "backbone.model.model.language_model."
N17_LM_HEAD = "backbone.model.lm_head.weight"

# N1.6: an Eagle 3 ``Eagle3_VLForConditionalGeneration`` under ``backbone.model.`` (vision tower, Qwen3ForCausalLM,
# connector ``mlp1``).
N16_VISION_PREFIX = "backbone.model.vision_model.vision_model."
N16_LLM_PREFIX = "backbone.model.language_model.model."
N16_LM_HEAD = "backbone.model.language_model.lm_head.weight"
N16_MLP1_PREFIX = "backbone.model.mlp1."

# NVIDIA builds the Eagle backbone in bf16 (Eagle config torch_dtype) and the action head in fp32.
BACKBONE_DTYPE = torch.bfloat16
ACTION_HEAD_DTYPE = torch.float32


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


Shapes = list[tuple[str, tuple[int, ...]]]


def _linear(name: str, out_dim: int, in_dim: int, bias: bool = True) -> Shapes:
    rows = [(f"{name}.weight", (out_dim, in_dim))]
    return rows + [(f"{name}.bias", (out_dim,))] if bias else rows


def _layer_norm(name: str, dim: int, bias: bool = True) -> Shapes:
    return [(f"{name}.weight", (dim,))] + ([(f"{name}.bias", (dim,))] if bias else [])


def siglip_shapes(c: SiglipConfig) -> Shapes:
    d, f = c.hidden_size, c.intermediate_size
    rows: Shapes = [
        ("embeddings.patch_embedding.weight", (d, c.num_channels, c.patch_size, c.patch_size)),
        ("embeddings.patch_embedding.bias", (d,)),
        ("embeddings.position_embedding.weight", (c.num_patches, d)),
    ]
    for i in range(c.num_hidden_layers):
        p = f"encoder.layers.{i}."
        rows += _layer_norm(p + "layer_norm1", d)
        for proj in ("k_proj", "v_proj", "q_proj", "out_proj"):  # HF SiglipAttention definition order
            rows += _linear(p + "self_attn." + proj, d, d)
        rows += _layer_norm(p + "layer_norm2", d)
        rows += _linear(p + "mlp.fc1", f, d) + _linear(p + "mlp.fc2", d, f)
    rows += _layer_norm("post_layernorm", d)
    # Multi-head attention pooling head: saved, never computed by GR00T.
    rows += [("head.probe", (1, 1, d)), ("head.attention.in_proj_weight", (3 * d, d)),
             ("head.attention.in_proj_bias", (3 * d,))]
    rows += _linear("head.attention.out_proj", d, d) + _layer_norm("head.layernorm", d)
    rows += _linear("head.mlp.fc1", f, d) + _linear("head.mlp.fc2", d, f)
    return rows


def qwen3_shapes(c: Qwen3Config, num_layers: int) -> Shapes:
    d, f, hd = c.hidden_size, c.intermediate_size, c.head_dim
    rows: Shapes = [("embed_tokens.weight", (c.vocab_size, d))]
    for i in range(num_layers):
        p = f"layers.{i}."
        rows += _linear(p + "self_attn.q_proj", c.num_attention_heads * hd, d, bias=False)
        rows += _linear(p + "self_attn.k_proj", c.num_key_value_heads * hd, d, bias=False)
        rows += _linear(p + "self_attn.v_proj", c.num_key_value_heads * hd, d, bias=False)
        rows += _linear(p + "self_attn.o_proj", d, c.num_attention_heads * hd, bias=False)
        rows += [(p + "self_attn.q_norm.weight", (hd,)), (p + "self_attn.k_norm.weight", (hd,))]
        rows += _linear(p + "mlp.gate_proj", f, d, bias=False) + _linear(p + "mlp.up_proj", f, d, bias=False)
        rows += _linear(p + "mlp.down_proj", d, f, bias=False)
        rows += [(p + "input_layernorm.weight", (d,)), (p + "post_attention_layernorm.weight", (d,))]
    rows += [("norm.weight", (d,))]
    return rows


def _category(name: str, n: int, in_dim: int, out_dim: int) -> Shapes:
    # CategorySpecificLinear stores W as [embodiment, in, out] (not nn.Linear's [out, in]).
    return [(f"{name}.W", (n, in_dim, out_dim)), (f"{name}.b", (n, out_dim))]


def action_head_shapes(c: ActionHeadConfig) -> Shapes:
    dit, vl, n = c.dit, c.vl_self_attention, c.max_num_embodiments
    inner, w = dit.inner_dim, c.input_embedding_dim
    rows: Shapes = []
    rows += _linear("model.timestep_encoder.timestep_embedder.linear_1", inner, dit.timestep_channels)
    rows += _linear("model.timestep_encoder.timestep_embedder.linear_2", inner, inner)
    for i in range(dit.num_layers):
        p = f"model.transformer_blocks.{i}."
        kv_in = dit.cross_attention_dim if dit.cross_attends(i) else inner
        rows += _linear(p + "norm1.linear", 2 * inner, inner)
        rows += _linear(p + "attn1.to_q", inner, inner)
        rows += _linear(p + "attn1.to_k", inner, kv_in) + _linear(p + "attn1.to_v", inner, kv_in)
        rows += _linear(p + "attn1.to_out.0", inner, inner)
        rows += _linear(p + "ff.net.0.proj", 4 * inner, inner) + _linear(p + "ff.net.2", inner, 4 * inner)
    rows += _linear("model.proj_out_1", 2 * inner, inner) + _linear("model.proj_out_2", dit.output_dim, inner)
    rows += _category("state_encoder.layer1", n, c.max_state_dim, c.hidden_size)
    rows += _category("state_encoder.layer2", n, c.hidden_size, w)
    rows += _category("action_encoder.W1", n, c.action_dim, w)
    rows += _category("action_encoder.W2", n, 2 * w, w)
    rows += _category("action_encoder.W3", n, w, w)
    rows += _category("action_decoder.layer1", n, c.hidden_size, c.hidden_size)
    rows += _category("action_decoder.layer2", n, c.hidden_size, c.action_dim)
    if c.num_target_vision_tokens:  # N1.5's learned future tokens; N1.7 has none
        rows += [("future_tokens.weight", (c.num_target_vision_tokens, w))]
    d = c.backbone_embedding_dim
    rows += _layer_norm("vlln", d)
    for i in range(vl.num_layers):
        p = f"vl_self_attention.transformer_blocks.{i}."
        rows += _layer_norm(p + "norm1", d)
        for proj in ("to_q", "to_k", "to_v", "to_out.0"):
            rows += _linear(p + "attn1." + proj, vl.inner_dim, d)
        rows += _layer_norm(p + "norm3", d)
        rows += _linear(p + "ff.net.0.proj", 4 * d, d) + _linear(p + "ff.net.2", d, 4 * d)
    rows += [("position_embedding.weight", (c.max_seq_len, w))]
    return rows


def n15_inventory(config: Gr00tN15Config) -> list[TensorSpec]:
    """Every tensor of an N1.5 checkpoint with ``config``'s dimensions, as saved (no lm_head)."""
    e = config.backbone
    groups = [
        (VISION_PREFIX, siglip_shapes(e.vision), BACKBONE_DTYPE),
        (LLM_PREFIX, qwen3_shapes(e.text, e.select_layer), BACKBONE_DTYPE),
        (MLP1_PREFIX, _linear("0", e.text.hidden_size, e.vision.hidden_size), BACKBONE_DTYPE),
        (ACTION_HEAD_PREFIX, action_head_shapes(config.action_head), ACTION_HEAD_DTYPE),
    ]
    return [TensorSpec(prefix + name, shape, dtype) for prefix, rows, dtype in groups for name, shape in rows]


def qwen3vl_vision_shapes(c: Qwen3VLVisionConfig) -> Shapes:
    d, f, merged = c.hidden_size, c.intermediate_size, c.hidden_size * c.spatial_merge_size**2
    rows: Shapes = [("patch_embed.proj.weight", (d, c.in_channels, c.temporal_patch_size, c.patch_size, c.patch_size)),
                    ("patch_embed.proj.bias", (d,)), ("pos_embed.weight", (c.num_position_embeddings, d))]
    for i in range(c.depth):  # HF Qwen3VLVisionBlock definition order: norm1, norm2, attn, mlp
        p = f"blocks.{i}."
        rows += _layer_norm(p + "norm1", d) + _layer_norm(p + "norm2", d)
        rows += _linear(p + "attn.qkv", 3 * d, d) + _linear(p + "attn.proj", d, d)
        rows += _linear(p + "mlp.linear_fc1", f, d) + _linear(p + "mlp.linear_fc2", d, f)
    rows += _layer_norm("merger.norm", d)
    rows += _linear("merger.linear_fc1", merged, merged) + _linear("merger.linear_fc2", c.out_hidden_size, merged)
    for j in range(len(c.deepstack_visual_indexes)):
        p = f"deepstack_merger_list.{j}."
        rows += _layer_norm(p + "norm", merged)
        rows += _linear(p + "linear_fc1", merged, merged) + _linear(p + "linear_fc2", c.out_hidden_size, merged)
    return rows


def n17_inventory(config) -> list[TensorSpec]:
    """Every tensor of an N1.7 checkpoint with ``config``'s dimensions (a ``Gr00tN17Config``), all bf16
    as released (the published manifest counts 1,031 bf16 tensors, lm_head included)."""
    b, bf16 = config.backbone, torch.bfloat16
    groups = [
        (N17_VISION_PREFIX, qwen3vl_vision_shapes(b.vision)),
        (N17_LLM_PREFIX, qwen3_shapes(b.text, b.select_layer)),
        ("", [(N17_LM_HEAD, (b.text.vocab_size, b.text.hidden_size))]),
        (ACTION_HEAD_PREFIX, action_head_shapes(config.action_head)),
    ]
    return [TensorSpec(prefix + name, shape, bf16) for prefix, rows in groups for name, shape in rows]


def siglip2_shapes(c: Siglip2VisionConfig) -> Shapes:
    """SigLIP's rows with the patch embedding a Linear over the flattened patch ([hidden, 14·14·3])."""
    conv_patch_embedding, *rows = siglip_shapes(c)
    return [(conv_patch_embedding[0], (c.hidden_size, c.patch_dim)), *rows]


def eagle3_connector_shapes(in_dim: int, out_dim: int) -> Shapes:
    """``mlp1``: LayerNorm(in) → Linear(in → out) → GELU (no parameters, index 2) → Linear(out → out)."""
    return _layer_norm("0", in_dim) + _linear("1", out_dim, in_dim) + _linear("3", out_dim, out_dim)


def n16_inventory(config) -> list[TensorSpec]:
    """Every tensor of an N1.6 checkpoint with ``config``'s dimensions (a ``Gr00tN16Config``), all bf16 as released
    (spec ``gr00t_n16.md`` §2: 1,106 tensors = 633 backbone + 473 action head). The stored ``lm_head`` and the
    SigLIP pooling head are never computed; there is no VL self-attention and no future tokens."""
    b, bf16 = config.backbone, torch.bfloat16
    groups = [
        (N16_VISION_PREFIX, siglip2_shapes(b.vision)),
        (N16_LLM_PREFIX, qwen3_shapes(b.text, b.select_layer)),
        ("", [(N16_LM_HEAD, (b.text.vocab_size, b.text.hidden_size))]),
        (N16_MLP1_PREFIX, eagle3_connector_shapes(b.connector_in_dim, b.text.hidden_size)),
        (ACTION_HEAD_PREFIX, action_head_shapes(config.action_head)),
    ]
    return [TensorSpec(prefix + name, shape, bf16) for prefix, rows in groups for name, shape in rows]


def inventory(config) -> list[TensorSpec]:
    """The checkpoint inventory of any version's config (its registry row names the function)."""
    from .versions import get_spec, load

    return load(get_spec(config.version).inventory)(config)
