# SPDX-License-Identifier: Apache-2.0
"""GR00T N1.6 config, read from the checkpoint's ``config.json`` (``model_type: Gr00tN1d6``) and
``processor_config.json``.

The code defaults of NVIDIA's ``Gr00tN1d6Config`` (``gr00t/configs/model/gr00t_n1d6.py``) differ from the released
``nvidia/GR00T-N1.6-3B`` (defaults 29/29 state/action dims and a 16-step horizon; the checkpoint has 128/128/50), so
every structural value is read from the file and a missing one is an error, never a default.

The Eagle-Block2A-2B-v2 ("Eagle 3") backbone is not described by the checkpoint at all: NVIDIA vendors its
``config.json`` with the model code (``gr00t/model/modules/nvidia/Eagle-Block2A-2B-v2/``) and loads it whatever the
checkpoint. Its values are the defaults of ``Siglip2VisionConfig`` / ``Qwen3Config`` / ``Eagle3Config`` below (the
"vendored backbone" section); they apply unless a checkpoint records its own ``backbone_config`` (our tiny synthetic
ones do). Spec: ``gr00t_n16.md`` §1.2, §1.3, §1.6.

``processor_config.json`` carries the pre/post-processing flags (``Gr00tN16ProcessorConfig``); the model needs only its
envelope (state/action dims, horizon), which ``Gr00tN16Config.from_checkpoint`` checks against ``config.json``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .configs import (IMG_CONTEXT_TOKEN_ID, ActionHeadConfig, CheckpointConfig, DiTConfig, Qwen3Config,
                      VLSelfAttentionConfig, build, get_key, require, section_of)
from .errors import ConfigError

MODEL_TYPE = "Gr00tN1d6"
BACKBONE_NAME = "nvidia/Eagle-Block2A-2B-v2"
PROCESSOR_CLASS = "Gr00tN1d6Processor"
PROCESSOR_FILE = "processor_config.json"


# ---- vendored backbone: Eagle-Block2A-2B-v2/config.json (not in the checkpoint) ------------------------------------
@dataclass(frozen=True)
class Siglip2VisionConfig:
    """The SigLIP2-style vision tower of Eagle 3 (HF ``siglip2_vision_model`` field names; vendored values).

    The patch embedding is a Linear over the flattened 14×14×3 patch; the learned ``num_patches`` table is a square
    position grid (16×16) resized per image. Windowed attention and RoPE exist in NVIDIA's module but are off."""

    hidden_size: int = 1152
    intermediate_size: int = 4304
    num_attention_heads: int = 16  # head_dim 72
    num_hidden_layers: int = 27
    patch_size: int = 14
    num_channels: int = 3
    num_patches: int = 256  # a 16 × 16 learned grid
    layer_norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        require(self.hidden_size % self.num_attention_heads == 0, "vision hidden_size must divide into its heads")
        require(math.isqrt(self.num_patches) ** 2 == self.num_patches, "vision num_patches must be a square grid")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def patch_dim(self) -> int:
        """Input width of the Linear patch embedding (14 · 14 · 3 = 588)."""
        return self.patch_size**2 * self.num_channels

    @property
    def position_grid(self) -> int:
        """Side of the learned position grid (16)."""
        return math.isqrt(self.num_patches)

    def to_hf_dict(self) -> dict[str, Any]:
        return {"model_type": "siglip2_vision_model", "hidden_act": "gelu_pytorch_tanh", "use_rope": False,
                "use_windows_attn": False, **dataclasses.asdict(self)}


@dataclass(frozen=True)
class Eagle3Config:
    """The N1.6 backbone as GR00T uses it: SigLIP2 tower (last layer + post-LayerNorm) → 2×2 pixel-unshuffle →
    LayerNorm-MLP connector (``mlp1``) → Qwen3-1.7B cut to ``select_layer`` layers, final RMSNorm applied.

    ``text`` is Qwen3-1.7B (``configs.Qwen3Config``'s defaults are exactly its vendored ``text_config``);
    ``select_layer`` comes from the checkpoint's ``config.json``."""

    vision: Siglip2VisionConfig = field(default_factory=Siglip2VisionConfig)
    text: Qwen3Config = field(default_factory=Qwen3Config)
    select_layer: int = 16
    image_token_index: int = IMG_CONTEXT_TOKEN_ID  # <IMG_CONTEXT> 151669, as in N1.5
    downsample_ratio: float = 0.5  # pixel-unshuffle by 1 / 0.5 = 2 per side
    connector_norm_eps: float = 1e-5  # mlp1.0, the LayerNorm over the unshuffled 4608-vector

    def __post_init__(self) -> None:
        require(1 / self.downsample_ratio == self.unshuffle_factor, "downsample_ratio must be 1 / an integer")

    @property
    def unshuffle_factor(self) -> int:
        return round(1 / self.downsample_ratio)

    @property
    def connector_in_dim(self) -> int:
        """Width of one unshuffled token: 1152 · 2 · 2 = 4608."""
        return self.vision.hidden_size * self.unshuffle_factor**2

    @property
    def image_factor(self) -> int:
        """Image sides are snapped to multiples of this (patch 14 × unshuffle 2 = 28 px)."""
        return self.vision.patch_size * self.unshuffle_factor

    def to_hf_dict(self) -> dict[str, Any]:
        """The vendored ``Eagle-Block2A-2B-v2/config.json`` fields that shape the model, with this geometry."""
        return {"model_type": "eagle_3_vl", "select_layer": -1, "downsample_ratio": self.downsample_ratio,
                "use_pixel_shuffle": True, "mlp_connector_layers": 2, "image_token_index": self.image_token_index,
                "dynamic_image_size": False, "use_thumbnail": False,
                "vision_config": self.vision.to_hf_dict(), "text_config": self.text.to_hf_dict()}


# ---- the model config ------------------------------------------------------------------------------------------------
def _no_vl_self_attention(width: int) -> VLSelfAttentionConfig:
    # N1.6 has vlln only: an empty VL self-attention stack (0 layers, no tensors) whose width matches the backbone.
    return VLSelfAttentionConfig(num_attention_heads=1, attention_head_dim=width, num_layers=0)


def _n16_head(**overrides) -> ActionHeadConfig:
    values = dict(action_dim=128, max_action_dim=128, action_horizon=50, max_state_dim=128, input_embedding_dim=1536,
                  hidden_size=1024, backbone_embedding_dim=2048, num_target_vision_tokens=0,
                  dit=DiTConfig(num_layers=32, attend_text_every_n_blocks=2))
    values.update(overrides)
    values.setdefault("vl_self_attention", _no_vl_self_attention(values["backbone_embedding_dim"]))
    return ActionHeadConfig(**values)


@dataclass(frozen=True)
class Gr00tN16Config(CheckpointConfig):
    backbone: Eagle3Config = field(default_factory=Eagle3Config)
    action_head: ActionHeadConfig = field(default_factory=_n16_head)
    version: str = "n16"

    def __post_init__(self) -> None:
        require(self.backbone.text.hidden_size == self.action_head.backbone_embedding_dim,
                "backbone_embedding_dim must equal the LLM hidden size")
        require(0 < self.backbone.select_layer <= self.backbone.text.num_hidden_layers,
                f"select_layer {self.backbone.select_layer} outside 1..{self.backbone.text.num_hidden_layers}")
        require(self.action_head.vl_self_attention.num_layers == 0 and self.action_head.num_target_vision_tokens == 0,
                "N1.6 has no VL self-attention and no future tokens")

    @classmethod
    def full(cls) -> "Gr00tN16Config":
        return cls()

    @classmethod
    def tiny(cls) -> "Gr00tN16Config":
        """Same structure and token geometry (patch 14, 16×16 position grid, 2×2 unshuffle → 28 px factor, real
        token ids and vocabulary, 50×128 action envelope, 32 embodiment rows, text/image-alternating DiT) with small
        widths and depths; the LLM is cut (6 → 4 layers) like the real one (28 → 16)."""
        vision = Siglip2VisionConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_hidden_layers=2)
        text = Qwen3Config(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                           head_dim=16, num_hidden_layers=6)
        head = _n16_head(input_embedding_dim=64, hidden_size=32, backbone_embedding_dim=64,
                         dit=DiTConfig(num_attention_heads=4, attention_head_dim=16, num_layers=8, output_dim=32,
                                       cross_attention_dim=64, attend_text_every_n_blocks=2))
        return cls(backbone=Eagle3Config(vision=vision, text=text, select_layer=4), action_head=head)

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "config.json") -> "Gr00tN16Config":
        if d.get("model_type") != MODEL_TYPE:
            raise ConfigError(f"{source}: model_type is {d.get('model_type')!r}, expected {MODEL_TYPE!r}")
        dit = section_of(d, "diffusion_model_cfg", source)
        dit_src = f"{source}: diffusion_model_cfg"  # errors name the section
        for key, want in (("use_vlln", True), ("add_pos_embed", True), ("use_alternate_vl_dit", True)):
            if get_key(d, key, source) is not want:
                raise ConfigError(f"{source}: {key}={d[key]!r} is not supported (only {want!r})")
        if d.get("backbone_model_type", "eagle") != "eagle":
            raise ConfigError(f"{source}: backbone_model_type={d['backbone_model_type']!r} is not supported "
                              "(only 'eagle')")
        if dit.get("positional_embeddings", "sinusoidal") is not None or dit.get("norm_type", "ada_norm") != "ada_norm":
            raise ConfigError(f"{source}: diffusion_model_cfg must have positional_embeddings null "
                              "and norm_type ada_norm")
        backbone = _backbone_from(d, source)
        width = get_key(d, "backbone_embedding_dim", source)
        head = _n16_head(
            action_dim=get_key(d, "max_action_dim", source), max_action_dim=get_key(d, "max_action_dim", source),
            action_horizon=get_key(d, "action_horizon", source), max_state_dim=get_key(d, "max_state_dim", source),
            input_embedding_dim=get_key(d, "input_embedding_dim", source),
            hidden_size=get_key(d, "hidden_size", source), backbone_embedding_dim=width,
            max_num_embodiments=get_key(d, "max_num_embodiments", source),
            max_seq_len=get_key(d, "max_seq_len", source),
            num_inference_timesteps=get_key(d, "num_inference_timesteps", source),
            num_timestep_buckets=get_key(d, "num_timestep_buckets", source),
            dit=DiTConfig(num_attention_heads=get_key(dit, "num_attention_heads", dit_src),
                          attention_head_dim=get_key(dit, "attention_head_dim", dit_src),
                          num_layers=get_key(dit, "num_layers", dit_src),
                          output_dim=get_key(dit, "output_dim", dit_src), cross_attention_dim=width,
                          interleave_self_attention=get_key(dit, "interleave_self_attention", dit_src),
                          attend_text_every_n_blocks=get_key(d, "attend_text_every_n_blocks", source)),
        )
        try:
            return cls(backbone=backbone, action_head=head)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    @classmethod
    def from_checkpoint(cls, path: str | Path) -> "Gr00tN16Config":
        """``config.json`` of ``path``, checked against its ``processor_config.json`` envelope (both are read by
        NVIDIA's loader: the processor pads states / slices actions with its own dims and horizon)."""
        config = super().from_checkpoint(path)
        processor = Gr00tN16ProcessorConfig.from_checkpoint(path)
        h = config.action_head
        for key, mine, theirs in (("max_state_dim", h.max_state_dim, processor.max_state_dim),
                                  ("max_action_dim", h.max_action_dim, processor.max_action_dim),
                                  ("action_horizon / max_action_horizon", h.action_horizon,
                                   processor.max_action_horizon)):
            if mine != theirs:
                raise ConfigError(f"{Path(path) / PROCESSOR_FILE}: {key} is {theirs}, config.json has {mine}")
        return config

    def to_checkpoint_json(self, *, record_backbone: bool) -> dict[str, Any]:
        """The released checkpoint's (``nvidia/GR00T-N1.6-3B``) ``config.json`` fields (spec §1.2) with this config's
        values; ``record_backbone`` adds the Eagle 3 ``backbone_config`` for a non-vendored geometry."""
        h, b = self.action_head, self.backbone
        out: dict[str, Any] = {
            "model_type": MODEL_TYPE, "architectures": [MODEL_TYPE], "model_name": BACKBONE_NAME,
            "backbone_model_type": "eagle", "backbone_embedding_dim": h.backbone_embedding_dim,
            "select_layer": b.select_layer, "tune_top_llm_layers": 4, "use_flash_attention": True, "load_bf16": True,
            "hidden_size": h.hidden_size, "input_embedding_dim": h.input_embedding_dim,
            "max_state_dim": h.max_state_dim, "max_action_dim": h.max_action_dim, "action_horizon": h.action_horizon,
            "max_num_embodiments": h.max_num_embodiments, "add_pos_embed": True, "max_seq_len": h.max_seq_len,
            "use_vlln": True, "use_alternate_vl_dit": True,
            "attend_text_every_n_blocks": h.dit.attend_text_every_n_blocks,
            "diffusion_model_cfg": {"num_layers": h.dit.num_layers, "num_attention_heads": h.dit.num_attention_heads,
                                    "attention_head_dim": h.dit.attention_head_dim, "output_dim": h.dit.output_dim,
                                    "norm_type": "ada_norm",
                                    "interleave_self_attention": h.dit.interleave_self_attention,
                                    "positional_embeddings": None, "dropout": 0.2, "final_dropout": True},
            "num_inference_timesteps": h.num_inference_timesteps, "num_timestep_buckets": h.num_timestep_buckets,
            "noise_beta_alpha": 1.5, "noise_beta_beta": 1.0, "noise_s": 0.999, "state_dropout_prob": 0.0,
            "use_relative_action": True, "apply_sincos_state_encoding": True, "shortest_image_edge": 256,
            "crop_fraction": 0.95, "use_albumentations_transforms": True, "formalize_language": True,
            "model_dtype": "bfloat16",
        }
        if record_backbone:
            out["backbone_config"] = b.to_hf_dict()
        return out


def _backbone_from(d: dict[str, Any], source: str) -> Eagle3Config:
    select_layer = get_key(d, "select_layer", source)
    bb = d.get("backbone_config")
    if bb is None:  # the released checkpoints: the vendored Eagle-Block2A-2B-v2 applies, and only to that backbone
        if get_key(d, "model_name", source) != BACKBONE_NAME:
            raise ConfigError(f"{source}: model_name {d['model_name']!r} has no known backbone geometry "
                              f"(only {BACKBONE_NAME!r}, whose config NVIDIA vendors) and no backbone_config")
        return Eagle3Config(select_layer=select_layer)
    src = f"{source}: backbone_config"
    for key, want in (("model_type", "eagle_3_vl"), ("use_pixel_shuffle", True), ("mlp_connector_layers", 2),
                      ("select_layer", -1)):
        if get_key(bb, key, src) != want:
            raise ConfigError(f"{src}: {key}={bb[key]!r} is not supported (only {want!r})")
    vision_json = section_of(bb, "vision_config", src)
    for key in ("use_rope", "use_windows_attn"):
        if vision_json.get(key, False):
            raise ConfigError(f"{src}.vision_config: {key}=true is not supported")
    vision = build(Siglip2VisionConfig, vision_json, f"{src}.vision_config")
    text = build(Qwen3Config, section_of(bb, "text_config", src), f"{src}.text_config")
    try:
        return Eagle3Config(vision=vision, text=text, select_layer=select_layer,
                            image_token_index=get_key(bb, "image_token_index", src),
                            downsample_ratio=get_key(bb, "downsample_ratio", src))
    except ConfigError as exc:
        raise ConfigError(f"{src}: {exc}") from None


# ---- processor_config.json -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Gr00tN16ProcessorConfig:
    """The ``Gr00tN1d6Processor`` kwargs that shape pre/post-processing (spec §1.3), read from
    ``processor_config.json``; the defaults are the released base checkpoint's, for the synthetic writer only
    (``from_dict`` requires every key). Per-tag modality configs stay in the file (``embodiments_n16`` writes them)."""

    max_state_dim: int = 128
    max_action_dim: int = 128
    max_action_horizon: int = 50
    use_albumentations: bool = True
    shortest_image_edge: int = 256
    crop_fraction: float = 0.95
    formalize_language: bool = True
    use_percentiles: bool = False  # min/max
    clip_outliers: bool = True
    apply_sincos_state_encoding: bool = True  # [INFER] for the base checkpoint (spec §1.3, open item 1)
    use_relative_action: bool = True
    model_name: str = BACKBONE_NAME
    model_type: str = "eagle"

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = PROCESSOR_FILE) -> "Gr00tN16ProcessorConfig":
        if d.get("processor_class") != PROCESSOR_CLASS:
            raise ConfigError(f"{source}: processor_class is {d.get('processor_class')!r}, "
                              f"expected {PROCESSOR_CLASS!r}")
        kwargs = section_of(d, "processor_kwargs", source)
        section_of(kwargs, "modality_configs", f"{source}: processor_kwargs")
        return cls(**{f.name: get_key(kwargs, f.name, f"{source}: processor_kwargs")
                      for f in dataclasses.fields(cls)})

    @classmethod
    def from_checkpoint(cls, path: str | Path) -> "Gr00tN16ProcessorConfig":
        from .checkpoint import read_json  # checkpoint imports torch; configs stays light

        file = Path(path) / PROCESSOR_FILE
        return cls.from_dict(read_json(file, "the N1.6 processor config"), source=str(file))

    def to_processor_kwargs(self) -> dict[str, Any]:
        """This config's ``processor_kwargs`` fields (``modality_configs`` and the training-only augmentation keys are
        added by the writer)."""
        return dataclasses.asdict(self)
