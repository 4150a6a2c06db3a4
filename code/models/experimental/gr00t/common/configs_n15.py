# SPDX-License-Identifier: Apache-2.0
"""GR00T N1.5's top-level config, built from its checkpoint's ``config.json``.

The published N1.5 ``config.json`` does not carry the Eagle backbone's dimensions, so the SigLIP / Qwen3
defaults of ``configs.py`` apply; a checkpoint that records ``backbone_cfg.eagle_config`` (HF-style
``vision_config`` / ``text_config``, as our tiny synthetic checkpoints do) overrides them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .configs import (IMG_CONTEXT_TOKEN_ID, ActionHeadConfig, CheckpointConfig, DiTConfig, EagleConfig, Qwen3Config,
                      SiglipConfig, VLSelfAttentionConfig, build, get_key, require, section_of)
from .errors import ConfigError


@dataclass(frozen=True)
class Gr00tN15Config(CheckpointConfig):
    backbone: EagleConfig = field(default_factory=EagleConfig)
    action_head: ActionHeadConfig = field(default_factory=ActionHeadConfig)
    version: str = "n15"

    def __post_init__(self) -> None:
        require(
            self.backbone.text.hidden_size == self.action_head.backbone_embedding_dim,
            "backbone_embedding_dim must equal the LLM hidden size (project_to_dim is null)",
        )
        require(
            0 < self.backbone.select_layer <= self.backbone.text.num_hidden_layers,
            f"select_layer {self.backbone.select_layer} outside 1..{self.backbone.text.num_hidden_layers}",
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
        return cls(backbone=EagleConfig(vision=vision, text=text, select_layer=2), action_head=head)

    # ---- config.json -----------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config.json") -> "Gr00tN15Config":
        if data.get("model_type") != "gr00t_n1_5":
            raise ConfigError(f"{source}: model_type is {data.get('model_type')!r}, expected 'gr00t_n1_5'")
        backbone = section_of(data, "backbone_cfg", source)
        head = section_of(data, "action_head_cfg", source)
        dit = section_of(head, "diffusion_model_cfg", source)
        vlsa = section_of(head, "vl_self_attention_cfg", source)
        dit_src, vlsa_src = (f"{source}: action_head_cfg.diffusion_model_cfg",
                             f"{source}: action_head_cfg.vl_self_attention_cfg")
        if backbone.get("project_to_dim") is not None:
            raise ConfigError(f"{source}: backbone_cfg.project_to_dim must be null (got {backbone['project_to_dim']})")
        eagle_json = backbone.get("eagle_config")
        if eagle_json is None:
            vision, text = SiglipConfig(), Qwen3Config()
        else:
            vision = build(SiglipConfig, section_of(eagle_json, "vision_config", source),
                            f"{source}: eagle vision_config")
            text = build(Qwen3Config, section_of(eagle_json, "text_config", source), f"{source}: eagle text_config")
        eagle = EagleConfig(
            vision=vision, text=text, select_layer=get_key(backbone, "select_layer", source),
            image_token_index=(eagle_json.get("image_token_index", IMG_CONTEXT_TOKEN_ID) if eagle_json
                               else IMG_CONTEXT_TOKEN_ID),
        )
        dit_cfg = DiTConfig(
            num_attention_heads=get_key(dit, "num_attention_heads", dit_src),
            attention_head_dim=get_key(dit, "attention_head_dim", dit_src),
            num_layers=get_key(dit, "num_layers", dit_src),
            output_dim=get_key(dit, "output_dim", dit_src),
            cross_attention_dim=get_key(dit, "cross_attention_dim", dit_src),
            interleave_self_attention=get_key(dit, "interleave_self_attention", dit_src),  # NVIDIA's default is False
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
            num_attention_heads=get_key(vlsa, "num_attention_heads", vlsa_src),
            attention_head_dim=get_key(vlsa, "attention_head_dim", vlsa_src),
            num_layers=get_key(vlsa, "num_layers", vlsa_src),
        )
        head_fields = {
            f.name: head[f.name]
            for f in dataclasses.fields(ActionHeadConfig)
            if f.name in head and f.name not in ("dit", "vl_self_attention")
        }
        action_head = build(ActionHeadConfig, {**head_fields, "dit": dit_cfg, "vl_self_attention": vlsa_cfg}, source)
        try:
            return cls(backbone=eagle, action_head=action_head)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    def to_checkpoint_json(self, *, record_backbone: bool) -> dict[str, Any]:
        """The ``config.json`` NVIDIA publishes for N1.5 (``nvidia/GR00T-N1.5-3B``), with this config's dimensions.

        ``record_backbone`` adds ``backbone_cfg.eagle_config`` so that a non-published geometry (tiny)
        can be rebuilt from the directory alone.
        """
        head, dit, vlsa = self.action_head, self.action_head.dit, self.action_head.vl_self_attention
        backbone: dict[str, Any] = {
            "eagle_path": "NVEagle/eagle_er-qwen3_1_7B-Siglip2_400M_stage1_5_128gpu_er_v7_1mlp_nops",
            "load_bf16": False,
            "project_to_dim": None,
            "reproject_vision": False,
            "select_layer": self.backbone.select_layer,
            "tune_llm": False,
            "tune_visual": True,
            "use_flash_attention": True,
        }
        if record_backbone:
            backbone["eagle_config"] = {
                "model_type": "eagle_2_5_vl",
                "image_token_index": self.backbone.image_token_index,
                "select_layer": -1,
                "use_pixel_shuffle": False,
                "mlp_connector_layers": 1,
                "force_image_size": self.backbone.vision.image_size,
                "vision_config": self.backbone.vision.to_hf_dict(),
                "text_config": self.backbone.text.to_hf_dict(),
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
