# SPDX-License-Identifier: Apache-2.0
"""Frozen model configs, built from a checkpoint's ``config.json``.

One dataclass per component. The published GR00T N1.5 ``config.json`` does not carry the Eagle
backbone's dimensions (NVIDIA ships them with the model code), so the SigLIP / Qwen3 constants below
are those published values; a checkpoint that records ``backbone_cfg.eagle_config`` (HF-style
``vision_config`` / ``text_config``, as our tiny synthetic checkpoints do) overrides them.
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
        _require(self.dit.inner_dim == self.input_embedding_dim, "DiT heads*head_dim must equal input_embedding_dim")
        _require(self.dit.output_dim == self.hidden_size, "DiT output_dim must equal action head hidden_size")
        _require(self.dit.cross_attention_dim == self.backbone_embedding_dim, "DiT cross_attention_dim mismatch")
        _require(
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


@dataclass(frozen=True)
class Gr00tN15Config(CheckpointConfig):
    eagle: EagleConfig = field(default_factory=EagleConfig)
    action_head: ActionHeadConfig = field(default_factory=ActionHeadConfig)
    version: str = "n15"

    def __post_init__(self) -> None:
        _require(
            self.eagle.text.hidden_size == self.action_head.backbone_embedding_dim,
            "backbone_embedding_dim must equal the LLM hidden size (project_to_dim is null)",
        )
        _require(
            0 < self.eagle.select_layer <= self.eagle.text.num_hidden_layers,
            f"select_layer {self.eagle.select_layer} outside 1..{self.eagle.text.num_hidden_layers}",
        )

    # ---- presets ---------------------------------------------------------------------------
    @classmethod
    def full(cls) -> "Gr00tN15Config":
        return cls()

    @classmethod
    def tiny(cls) -> "Gr00tN15Config":
        """Same structure and token geometry (224² image → 256 tokens, vocab 151680, 16×32 actions,
        embodiment slot 24) with small widths and depths, for tests."""
        vision = SiglipConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_hidden_layers=2)
        text = Qwen3Config(
            hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            num_hidden_layers=4,
        )
        head = ActionHeadConfig(
            input_embedding_dim=64, hidden_size=32, backbone_embedding_dim=64,
            dit=DiTConfig(num_attention_heads=4, attention_head_dim=16, num_layers=4, output_dim=32,
                          cross_attention_dim=64),
            vl_self_attention=VLSelfAttentionConfig(num_attention_heads=4, attention_head_dim=16, num_layers=2),
        )
        return cls(eagle=EagleConfig(vision=vision, text=text, select_layer=2), action_head=head)

    # ---- config.json -----------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config.json") -> "Gr00tN15Config":
        if data.get("model_type") != "gr00t_n1_5":
            raise ConfigError(f"{source}: model_type is {data.get('model_type')!r}, expected 'gr00t_n1_5'")
        backbone = _section(data, "backbone_cfg", source)
        head = _section(data, "action_head_cfg", source)
        dit = _section(head, "diffusion_model_cfg", source)
        vlsa = _section(head, "vl_self_attention_cfg", source)
        dit_src, vlsa_src = (f"{source}: action_head_cfg.diffusion_model_cfg",
                             f"{source}: action_head_cfg.vl_self_attention_cfg")
        if backbone.get("project_to_dim") is not None:
            raise ConfigError(f"{source}: backbone_cfg.project_to_dim must be null (got {backbone['project_to_dim']})")
        eagle_json = backbone.get("eagle_config")
        if eagle_json is None:
            vision, text = SiglipConfig(), Qwen3Config()
        else:
            vision = _build(SiglipConfig, _section(eagle_json, "vision_config", source),
                            f"{source}: eagle vision_config")
            text = _build(Qwen3Config, _section(eagle_json, "text_config", source), f"{source}: eagle text_config")
        eagle = EagleConfig(
            vision=vision, text=text, select_layer=_get(backbone, "select_layer", source),
            image_token_index=(eagle_json.get("image_token_index", IMG_CONTEXT_TOKEN_ID) if eagle_json
                               else IMG_CONTEXT_TOKEN_ID),
        )
        dit_cfg = DiTConfig(
            num_attention_heads=_get(dit, "num_attention_heads", dit_src),
            attention_head_dim=_get(dit, "attention_head_dim", dit_src),
            num_layers=_get(dit, "num_layers", dit_src),
            output_dim=_get(dit, "output_dim", dit_src),
            cross_attention_dim=_get(dit, "cross_attention_dim", dit_src),
            interleave_self_attention=_get(dit, "interleave_self_attention", dit_src),  # NVIDIA's default is False
        )
        # Variants the published checkpoint does not use and this reference does not implement. A missing
        # key takes NVIDIA's code default (positional_embeddings defaults to "sinusoidal" there).
        for section, key, nvidia_default, supported in (
                (dit, "norm_type", "ada_norm", "ada_norm"), (dit, "positional_embeddings", "sinusoidal", None),
                (vlsa, "positional_embeddings", "sinusoidal", None), (head, "use_vlln", True, True),
                (head, "add_pos_embed", True, True)):
            if section.get(key, nvidia_default) != supported:
                raise ConfigError(f"{source}: {key}={section.get(key, nvidia_default)!r} is not supported "
                                  f"(only {supported!r})")
        vlsa_cfg = VLSelfAttentionConfig(
            num_attention_heads=_get(vlsa, "num_attention_heads", vlsa_src),
            attention_head_dim=_get(vlsa, "attention_head_dim", vlsa_src),
            num_layers=_get(vlsa, "num_layers", vlsa_src),
        )
        head_fields = {
            f.name: head[f.name]
            for f in dataclasses.fields(ActionHeadConfig)
            if f.name in head and f.name not in ("dit", "vl_self_attention")
        }
        action_head = _build(ActionHeadConfig, {**head_fields, "dit": dit_cfg, "vl_self_attention": vlsa_cfg}, source)
        try:
            return cls(eagle=eagle, action_head=action_head)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    def to_checkpoint_json(self, *, record_eagle: bool) -> dict[str, Any]:
        """The ``config.json`` NVIDIA publishes for N1.5 (``nvidia/GR00T-N1.5-3B``), with this config's dimensions.

        ``record_eagle`` adds ``backbone_cfg.eagle_config`` so that a non-published geometry (tiny)
        can be rebuilt from the directory alone.
        """
        head, dit, vlsa = self.action_head, self.action_head.dit, self.action_head.vl_self_attention
        backbone: dict[str, Any] = {
            "eagle_path": "NVEagle/eagle_er-qwen3_1_7B-Siglip2_400M_stage1_5_128gpu_er_v7_1mlp_nops",
            "load_bf16": False,
            "project_to_dim": None,
            "reproject_vision": False,
            "select_layer": self.eagle.select_layer,
            "tune_llm": False,
            "tune_visual": True,
            "use_flash_attention": True,
        }
        if record_eagle:
            backbone["eagle_config"] = {
                "model_type": "eagle_2_5_vl",
                "image_token_index": self.eagle.image_token_index,
                "select_layer": -1,
                "use_pixel_shuffle": False,
                "mlp_connector_layers": 1,
                "force_image_size": self.eagle.vision.image_size,
                "vision_config": self.eagle.vision.to_hf_dict(),
                "text_config": self.eagle.text.to_hf_dict(),
            }
        return {
            "action_dim": head.action_dim,
            "action_head_cfg": {
                "action_dim": head.action_dim,
                "action_horizon": head.action_horizon,
                "add_pos_embed": head.add_pos_embed,
                "backbone_embedding_dim": head.backbone_embedding_dim,
                "diffusion_model_cfg": {
                    "attention_head_dim": dit.attention_head_dim,
                    "cross_attention_dim": dit.cross_attention_dim,
                    "dropout": 0.2,
                    "final_dropout": True,
                    "interleave_self_attention": dit.interleave_self_attention,
                    "norm_type": "ada_norm",
                    "num_attention_heads": dit.num_attention_heads,
                    "num_layers": dit.num_layers,
                    "output_dim": dit.output_dim,
                    "positional_embeddings": None,
                },
                "hidden_size": head.hidden_size,
                "input_embedding_dim": head.input_embedding_dim,
                "max_action_dim": head.max_action_dim,
                "max_state_dim": head.max_state_dim,
                "model_dtype": "float32",
                "noise_beta_alpha": 1.5,
                "noise_beta_beta": 1.0,
                "noise_s": 0.999,
                "num_inference_timesteps": head.num_inference_timesteps,
                "num_target_vision_tokens": head.num_target_vision_tokens,
                "num_timestep_buckets": head.num_timestep_buckets,
                "tune_diffusion_model": True,
                "tune_projector": True,
                "use_vlln": head.use_vlln,
                "vl_self_attention_cfg": {
                    "attention_head_dim": vlsa.attention_head_dim,
                    "dropout": 0.2,
                    "final_dropout": True,
                    "num_attention_heads": vlsa.num_attention_heads,
                    "num_layers": vlsa.num_layers,
                    "positional_embeddings": None,
                },
            },
            "action_horizon": head.action_horizon,
            "architectures": ["GR00T_N1_5"],
            "attn_implementation": None,
            "backbone_cfg": backbone,
            "hidden_size": head.backbone_embedding_dim,
            "model_dtype": "float32",
            "model_type": "gr00t_n1_5",
            "torch_dtype": "bfloat16",
            "transformers_version": "4.51.3",
        }


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _section(data: dict[str, Any], key: str, source: str) -> dict[str, Any]:
    value = data.get(key)
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: missing or malformed section {key!r}")
    return value


def _get(data: dict[str, Any], key: str, source: str) -> Any:
    if key not in data:
        raise ConfigError(f"{source}: missing field {key!r}")
    return data[key]


def _build(cls: type, values: dict[str, Any], source: str) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    try:
        return cls(**{k: v for k, v in values.items() if k in names})
    except (TypeError, ConfigError) as exc:
        raise ConfigError(f"{source}: {exc}") from None
