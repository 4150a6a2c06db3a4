# SPDX-License-Identifier: Apache-2.0
"""Frozen component configs (one dataclass per component), what every top-level config offers
(``CheckpointConfig``) and the helpers that read a ``config.json`` naming what is wrong. Each version's
top-level config is in ``configs_n15.py`` / ``configs_n17.py``.

The SigLIP / Qwen3 defaults are the published N1.5 Eagle backbone's (its ``config.json`` does not carry
them; NVIDIA ships them with the model code).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .versions import SPECS

HF_REPOS = {v: s.hf_repo for v, s in SPECS.items()}
HF_SNAPSHOT_SHAS = {v: s.revision for v, s in SPECS.items()}

# Qwen3 / Eagle 2.5 token ids (Qwen3's tokenizer_config.json, NVIDIA's Eagle added_tokens.json); the tokenizer
# tests pin them against the BPE files.
IMG_CONTEXT_TOKEN_ID = 151669


@dataclass(frozen=True)
class SiglipConfig:
    """SigLIP vision tower (HF ``SiglipVisionConfig`` field names)."""

    hidden_size: int = 1152
    intermediate_size: int = 4304
    num_attention_heads: int = 16
    num_hidden_layers: int = 27
    image_size: int = 224
    patch_size: int = 14
    num_channels: int = 3
    layer_norm_eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    def to_hf_dict(self) -> dict[str, Any]:
        return {"model_type": "siglip_vision_model", "hidden_act": "gelu_pytorch_tanh", **dataclasses.asdict(self)}


@dataclass(frozen=True)
class Qwen3Config:
    """Qwen3 text decoder (HF ``Qwen3Config`` field names). ``num_hidden_layers`` is the full depth
    of the published LLM; GR00T keeps only the first ``select_layer`` of them."""

    hidden_size: int = 2048
    intermediate_size: int = 6144
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 128
    num_hidden_layers: int = 28
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1e6
    vocab_size: int = 151680
    max_position_embeddings: int = 40960

    def to_hf_dict(self) -> dict[str, Any]:
        return {
            "model_type": "qwen3",
            "architectures": ["Qwen3ForCausalLM"],
            "hidden_act": "silu",
            "attention_bias": False,
            "tie_word_embeddings": True,
            "rope_scaling": None,
            **dataclasses.asdict(self),
        }


@dataclass(frozen=True)
class EagleConfig:
    """Eagle 2.5 VL backbone as GR00T uses it: SigLIP → Linear projector → truncated Qwen3."""

    vision: SiglipConfig = field(default_factory=SiglipConfig)
    text: Qwen3Config = field(default_factory=Qwen3Config)
    select_layer: int = 12
    image_token_index: int = IMG_CONTEXT_TOKEN_ID

    @property
    def tokens_per_image(self) -> int:
        return self.vision.num_patches


@dataclass(frozen=True)
class Qwen3VLVisionConfig:
    """Qwen3-VL vision tower (HF ``Qwen3VLVisionConfig`` field names; Cosmos-Reason2-2B values)."""

    depth: int = 24
    hidden_size: int = 1024
    intermediate_size: int = 4096
    num_heads: int = 16
    patch_size: int = 16
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    in_channels: int = 3
    num_position_embeddings: int = 2304  # a 48 × 48 learned grid, interpolated to each image's grid
    out_hidden_size: int = 2048
    deepstack_visual_indexes: tuple[int, ...] = (5, 11, 17)
    layer_norm_eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def patch_dim(self) -> int:
        return self.in_channels * self.temporal_patch_size * self.patch_size**2

    def to_hf_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("layer_norm_eps")
        return {"model_type": "qwen3_vl", "hidden_act": "gelu_pytorch_tanh", **d,
                "deepstack_visual_indexes": list(self.deepstack_visual_indexes)}


@dataclass(frozen=True)
class Qwen3VLTextConfig:
    """Qwen3-VL text decoder (HF ``Qwen3VLTextConfig`` field names). GR00T N1.7 keeps the first
    ``select_layer`` layers and uses the last one's raw output (no final norm)."""

    hidden_size: int = 2048
    intermediate_size: int = 6144
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 128
    num_hidden_layers: int = 28
    rms_norm_eps: float = 1e-6
    rope_theta: float = 5e6
    mrope_section: tuple[int, int, int] = (24, 20, 20)  # frequencies per T / H / W axis, interleaved
    vocab_size: int = 151936
    max_position_embeddings: int = 262144

    def to_hf_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("mrope_section")
        d.pop("rope_theta")
        return {"model_type": "qwen3_vl_text", "hidden_act": "silu", "attention_bias": False, **d,
                "rope_scaling": {"rope_type": "default", "mrope_interleaved": True,
                                 "mrope_section": list(self.mrope_section)},
                "rope_theta": self.rope_theta, "tie_word_embeddings": True}


@dataclass(frozen=True)
class Qwen3VLConfig:
    """The N1.7 backbone (Cosmos-Reason2-2B, Qwen3-VL-2B layout) as GR00T uses it."""

    vision: Qwen3VLVisionConfig = field(default_factory=Qwen3VLVisionConfig)
    text: Qwen3VLTextConfig = field(default_factory=Qwen3VLTextConfig)
    select_layer: int = 16
    image_token_id: int = 151655
    video_token_id: int = 151656
    vision_start_token_id: int = 151652
    vision_end_token_id: int = 151653


@dataclass(frozen=True)
class DiTConfig:
    num_attention_heads: int = 32
    attention_head_dim: int = 48
    num_layers: int = 16
    output_dim: int = 1024
    cross_attention_dim: int = 2048
    interleave_self_attention: bool = True
    norm_eps: float = 1e-5  # block LayerNorms (no affine)
    out_norm_eps: float = 1e-6  # norm_out before proj_out_2
    timestep_channels: int = 256  # diffusers Timesteps(256) feeding the timestep MLP
    # N1.7's AlternateVLDiT: cross-attention blocks alternate between the text tokens and the image
    # tokens of the VL sequence, text every n-th cross block; 0 = every cross block sees all (N1.5).
    attend_text_every_n_blocks: int = 0

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    def cross_attends(self, block: int) -> bool:
        """Even blocks cross-attend to the VL tokens, odd blocks self-attend (when interleaved)."""
        return block % 2 == 0 or not self.interleave_self_attention

    def cross_keys(self, block: int) -> str:
        """Which VL tokens a cross-attention block sees: "all", "text" or "image"."""
        n = self.attend_text_every_n_blocks
        if n == 0:
            return "all"
        return "text" if block % (2 * n) == 0 else "image"


@dataclass(frozen=True)
class VLSelfAttentionConfig:
    num_attention_heads: int = 32
    attention_head_dim: int = 64
    num_layers: int = 4
    norm_eps: float = 1e-5

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim


@dataclass(frozen=True)
class ActionHeadConfig:
    action_dim: int = 32
    max_action_dim: int = 32
    action_horizon: int = 16
    max_state_dim: int = 64
    input_embedding_dim: int = 1536
    hidden_size: int = 1024
    backbone_embedding_dim: int = 2048
    num_target_vision_tokens: int = 32
    num_inference_timesteps: int = 4
    num_timestep_buckets: int = 1000
    max_seq_len: int = 1024
    max_num_embodiments: int = 32
    add_pos_embed: bool = True
    use_vlln: bool = True
    vlln_eps: float = 1e-5
    dit: DiTConfig = field(default_factory=DiTConfig)
    vl_self_attention: VLSelfAttentionConfig = field(default_factory=VLSelfAttentionConfig)

    def __post_init__(self) -> None:
        # The module wiring relies on these equalities (they hold in the published config).
        require(self.dit.inner_dim == self.input_embedding_dim, "DiT heads*head_dim must equal input_embedding_dim")
        require(self.dit.output_dim == self.hidden_size, "DiT output_dim must equal action head hidden_size")
        require(self.dit.cross_attention_dim == self.backbone_embedding_dim, "DiT cross_attention_dim mismatch")
        require(
            self.vl_self_attention.inner_dim == self.backbone_embedding_dim,
            "VL self-attention heads*head_dim must equal backbone_embedding_dim",
        )


class CheckpointConfig:
    """What every top-level model config offers: named presets and reading a checkpoint's config.json
    (subclasses provide ``tiny``, ``full`` and ``from_dict``)."""

    @classmethod
    def preset(cls, scale: str):
        if scale not in ("tiny", "full"):
            raise ConfigError(f"unknown scale {scale!r}: expected 'tiny' or 'full'")
        return cls.tiny() if scale == "tiny" else cls.full()

    @classmethod
    def from_checkpoint(cls, path: str | Path):
        from .checkpoint import read_json  # checkpoint imports torch; configs stays light

        config_path = Path(path) / "config.json"
        data = read_json(config_path, "is this a GR00T checkpoint directory?")
        return cls.from_dict(data, source=str(config_path))


def require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def section_of(data: dict[str, Any], key: str, source: str) -> dict[str, Any]:
    value = data.get(key)
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: missing or malformed section {key!r}")
    return value


def get_key(data: dict[str, Any], key: str, source: str) -> Any:
    if key not in data:
        raise ConfigError(f"{source}: missing field {key!r}")
    return data[key]


def build(cls: type, values: dict[str, Any], source: str) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    try:
        return cls(**{k: v for k, v in values.items() if k in names})
    except (TypeError, ConfigError) as exc:
        raise ConfigError(f"{source}: {exc}") from None
