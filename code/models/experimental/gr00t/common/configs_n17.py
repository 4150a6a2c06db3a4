# SPDX-License-Identifier: Apache-2.0
"""GR00T N1.7 config, read from the checkpoint's ``config.json`` (``model_type: Gr00tN1d7``).

The code defaults of NVIDIA's ``Gr00tN1d7Config`` (``gr00t/configs/model/gr00t_n1d7.py``, ``n1.7-release``)
differ from the released checkpoint (select_layer 12, 16 DiT layers, no VL self-attention); every structural
value is therefore read from the file and a missing one is an error, never a default. The Qwen3-VL backbone
dimensions are not in the real ``config.json`` (they come from ``nvidia/Cosmos-Reason2-2B``): the published
values below apply unless the checkpoint records its own under ``backbone_config`` (our tiny synthetic ones do).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .configs import (ActionHeadConfig, CheckpointConfig, DiTConfig, Qwen3VLConfig, Qwen3VLTextConfig,
                      Qwen3VLVisionConfig, VLSelfAttentionConfig, build, get_key, section_of)
from .errors import ConfigError

MODEL_TYPE = "Gr00tN1d7"
BACKBONE_NAME = "nvidia/Cosmos-Reason2-2B"


def _n17_head(**overrides) -> ActionHeadConfig:
    values = dict(action_dim=132, max_action_dim=132, action_horizon=40, max_state_dim=132, input_embedding_dim=1536,
                  hidden_size=1024, backbone_embedding_dim=2048, num_target_vision_tokens=0,
                  dit=DiTConfig(num_layers=32, attend_text_every_n_blocks=2), vl_self_attention=VLSelfAttentionConfig())
    return ActionHeadConfig(**{**values, **overrides})


@dataclass(frozen=True)
class Gr00tN17Config(CheckpointConfig):
    backbone: Qwen3VLConfig = field(default_factory=Qwen3VLConfig)
    action_head: ActionHeadConfig = field(default_factory=_n17_head)
    version: str = "n17"

    def __post_init__(self) -> None:
        if self.backbone.text.hidden_size != self.action_head.backbone_embedding_dim:
            raise ConfigError("backbone_embedding_dim must equal the LLM hidden size")
        if not 0 < self.backbone.select_layer <= self.backbone.text.num_hidden_layers:
            raise ConfigError(f"select_layer {self.backbone.select_layer} "
                              f"outside 1..{self.backbone.text.num_hidden_layers}")

    @classmethod
    def full(cls) -> "Gr00tN17Config":
        return cls()

    @classmethod
    def tiny(cls) -> "Gr00tN17Config":
        """Same structure and token geometry (patch 16, merge 2, 48×48 position grid, real token ids and
        vocabulary, 40×132 actions, slot 24) with small widths and depths."""
        vision = Qwen3VLVisionConfig(depth=4, hidden_size=64, intermediate_size=128, num_heads=4, out_hidden_size=64,
                                     deepstack_visual_indexes=(1, 2, 3))
        text = Qwen3VLTextConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                                 head_dim=16, num_hidden_layers=6, mrope_section=(4, 2, 2))
        head = _n17_head(input_embedding_dim=64, hidden_size=32, backbone_embedding_dim=64,
                         dit=DiTConfig(num_attention_heads=4, attention_head_dim=16, num_layers=8, output_dim=32,
                                       cross_attention_dim=64, attend_text_every_n_blocks=2),
                         vl_self_attention=VLSelfAttentionConfig(num_attention_heads=4, attention_head_dim=16,
                                                                 num_layers=2))
        return cls(backbone=Qwen3VLConfig(vision=vision, text=text, select_layer=4), action_head=head)

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "config.json") -> "Gr00tN17Config":
        if d.get("model_type") != MODEL_TYPE:
            raise ConfigError(f"{source}: model_type is {d.get('model_type')!r}, expected {MODEL_TYPE!r}")
        dit, vlsa = section_of(d, "diffusion_model_cfg", source), section_of(d, "vl_self_attention_cfg", source)
        dit_src, vlsa_src = (f"{source}: diffusion_model_cfg",
                             f"{source}: vl_self_attention_cfg")  # errors name the section
        for key, want in (("use_vlln", True), ("add_pos_embed", True), ("use_alternate_vl_dit", True)):
            if get_key(d, key, source) is not want:
                raise ConfigError(f"{source}: {key}={d[key]!r} is not supported (only {want!r})")
        if dit.get("positional_embeddings", "sinusoidal") is not None or dit.get("norm_type", "ada_norm") != "ada_norm":
            raise ConfigError(f"{source}: diffusion_model_cfg must have positional_embeddings null "
                              "and norm_type ada_norm")
        bb = d.get("backbone_config")
        if bb is None:
            backbone = Qwen3VLConfig(select_layer=get_key(d, "select_layer", source))
        else:
            vision = build(Qwen3VLVisionConfig, {**section_of(bb, "vision_config", source),
                                                  "deepstack_visual_indexes":
                                                      tuple(bb["vision_config"].get("deepstack_visual_indexes", ()))},
                            f"{source}: backbone_config.vision_config")
            text_json = section_of(bb, "text_config", source)
            rope = text_json.get("rope_scaling") or text_json.get("rope_parameters") or {}
            text = build(Qwen3VLTextConfig, {**text_json,
                                              "mrope_section": tuple(rope.get("mrope_section", (24, 20, 20))),
                                              "rope_theta": text_json.get("rope_theta", rope.get("rope_theta", 5e6))},
                          f"{source}: backbone_config.text_config")
            ids = {k: bb[k] for k in ("image_token_id", "video_token_id", "vision_start_token_id",
                                      "vision_end_token_id") if k in bb}
            backbone = Qwen3VLConfig(vision=vision, text=text, select_layer=get_key(d, "select_layer", source), **ids)
        head = _n17_head(
            action_dim=get_key(d, "max_action_dim", source), max_action_dim=get_key(d, "max_action_dim", source),
            action_horizon=get_key(d, "action_horizon", source), max_state_dim=get_key(d, "max_state_dim", source),
            input_embedding_dim=get_key(d, "input_embedding_dim", source),
            hidden_size=get_key(d, "hidden_size", source),
            backbone_embedding_dim=get_key(d, "backbone_embedding_dim", source),
            max_num_embodiments=get_key(d, "max_num_embodiments", source),
            max_seq_len=get_key(d, "max_seq_len", source),
            num_inference_timesteps=get_key(d, "num_inference_timesteps", source),
            num_timestep_buckets=get_key(d, "num_timestep_buckets", source),
            dit=DiTConfig(num_attention_heads=get_key(dit, "num_attention_heads", dit_src),
                          attention_head_dim=get_key(dit, "attention_head_dim", dit_src),
                          num_layers=get_key(dit, "num_layers", dit_src),
                          output_dim=get_key(dit, "output_dim", dit_src),
                          cross_attention_dim=get_key(d, "backbone_embedding_dim", source),
                          interleave_self_attention=get_key(dit, "interleave_self_attention", dit_src),
                          attend_text_every_n_blocks=get_key(d, "attend_text_every_n_blocks", source)),
            vl_self_attention=VLSelfAttentionConfig(num_attention_heads=get_key(vlsa, "num_attention_heads", vlsa_src),
                                                    attention_head_dim=get_key(vlsa, "attention_head_dim", vlsa_src),
                                                    num_layers=get_key(vlsa, "num_layers", vlsa_src)),
        )
        try:
            return cls(backbone=backbone, action_head=head)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    def to_checkpoint_json(self, *, record_backbone: bool) -> dict[str, Any]:
        """The released checkpoint's (``nvidia/GR00T-N1.7-3B``) ``config.json`` fields with this config's values;
        ``record_backbone`` adds an HF-style Qwen3-VL ``backbone_config`` for non-published geometry."""
        h, b = self.action_head, self.backbone
        out: dict[str, Any] = {
            "model_type": MODEL_TYPE, "architectures": [MODEL_TYPE], "model_name": BACKBONE_NAME,
            "backbone_model_type": "qwen", "backbone_embedding_dim": h.backbone_embedding_dim,
            "select_layer": b.select_layer, "reproject_vision": False, "use_flash_attention": False, "load_bf16": True,
            "hidden_size": h.hidden_size, "input_embedding_dim": h.input_embedding_dim,
            "max_state_dim": h.max_state_dim, "max_action_dim": h.max_action_dim, "action_horizon": h.action_horizon,
            "state_history_length": 1, "max_num_embodiments": h.max_num_embodiments, "add_pos_embed": True,
            "max_seq_len": h.max_seq_len, "use_vlln": True, "use_alternate_vl_dit": True,
            "attend_text_every_n_blocks": h.dit.attend_text_every_n_blocks,
            "diffusion_model_cfg": {"num_layers": h.dit.num_layers, "num_attention_heads": h.dit.num_attention_heads,
                                    "attention_head_dim": h.dit.attention_head_dim, "output_dim": h.dit.output_dim,
                                    "norm_type": "ada_norm",
                                    "interleave_self_attention": h.dit.interleave_self_attention,
                                    "positional_embeddings": None, "dropout": 0.2, "final_dropout": True},
            "vl_self_attention_cfg": {"num_layers": h.vl_self_attention.num_layers,
                                      "num_attention_heads": h.vl_self_attention.num_attention_heads,
                                      "attention_head_dim": h.vl_self_attention.attention_head_dim,
                                      "positional_embeddings": None, "dropout": 0.2, "final_dropout": True},
            "num_inference_timesteps": h.num_inference_timesteps, "num_timestep_buckets": h.num_timestep_buckets,
            "noise_beta_alpha": 1.5, "noise_beta_beta": 1.0, "noise_s": 0.999, "state_dropout_prob": 0.2,
            "image_target_size": [256, 256], "image_crop_size": [230, 230], "model_dtype": "bfloat16",
        }
        if record_backbone:
            out["backbone_config"] = {"model_type": "qwen3_vl", "image_token_id": b.image_token_id,
                                      "video_token_id": b.video_token_id,
                                      "vision_start_token_id": b.vision_start_token_id,
                                      "vision_end_token_id": b.vision_end_token_id, "tie_word_embeddings": True,
                                      "vision_config": b.vision.to_hf_dict(), "text_config": b.text.to_hf_dict()}
        return out
