# SPDX-License-Identifier: Apache-2.0
"""GR00T N1.6's checkpoint format before its registry row exists (issue 45): the full tensor inventory is the released
``nvidia/GR00T-N1.6-3B``'s (spec ``gr00t_n16.md`` §2: 1,106 bf16 tensors, 3,286,608,832 parameters; and, byte for byte,
the manifest's index and shard sizes, §1.1), the config reads every structural value from ``config.json`` and the
vendored Eagle 3 constants, and a tiny synthetic checkpoint has the real file set with the three served tags."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch
from models.experimental.gr00t.common.configs_n16 import (BACKBONE_NAME, Eagle3Config, Gr00tN16Config,
                                                          Gr00tN16ProcessorConfig, Siglip2VisionConfig)
from models.experimental.gr00t.common.embodiments_n16 import EMBODIMENT_IDS, EMBODIMENTS
from models.experimental.gr00t.common.errors import ConfigError
from models.experimental.gr00t.common.synthetic import (DEFAULT_SHARD_BYTES, SYNTHETIC_MARKER, n16_processor_config,
                                                        plan_shards, synthetic_info, write_checkpoint)
from models.experimental.gr00t.common.versions import SPECS, VERSIONS
from models.experimental.gr00t.common.weights import n16_inventory
from safetensors import safe_open

VISION = "backbone.model.vision_model.vision_model."
MLP1 = "backbone.model.mlp1."
LLM = "backbone.model.language_model."
DIT = "action_head.model.transformer_blocks."

# nvidia/GR00T-N1.6-3B at d0814e7 (spec §1.1): the two shards and the index, in bytes.
SHARD_BYTES = [4_991_091_456, 1_582_283_096]
INDEX_BYTES = 121_820

# The released config.json values (spec §1.2) of the fields that shape the model.
PUBLISHED_CONFIG_FIELDS = {
    "model_type": "Gr00tN1d6", "model_name": "nvidia/Eagle-Block2A-2B-v2", "backbone_model_type": "eagle",
    "select_layer": 16, "backbone_embedding_dim": 2048, "hidden_size": 1024, "input_embedding_dim": 1536,
    "max_state_dim": 128, "max_action_dim": 128, "action_horizon": 50, "max_num_embodiments": 32,
    "add_pos_embed": True, "max_seq_len": 1024, "use_vlln": True, "use_alternate_vl_dit": True,
    "attend_text_every_n_blocks": 2, "num_inference_timesteps": 4, "num_timestep_buckets": 1000,
    "diffusion_model_cfg": {"num_layers": 32, "num_attention_heads": 32, "attention_head_dim": 48, "output_dim": 1024,
                            "norm_type": "ada_norm", "interleave_self_attention": True, "positional_embeddings": None,
                            "dropout": 0.2, "final_dropout": True},
}


@pytest.fixture(scope="module")
def full_inventory():
    return n16_inventory(Gr00tN16Config.full())


@pytest.fixture(scope="module")
def shapes(full_inventory):
    return {s.name: s.shape for s in full_inventory}


@pytest.fixture(scope="module")
def tiny_n16(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("n16") / "tiny", scale="tiny", seed=0, version="n16",
                            log=lambda _: None)


def _indices(names, prefix: str) -> set[int]:
    return {int(n[len(prefix):].split(".")[0]) for n in names if n.startswith(prefix)}


def safetensors_file_bytes(specs) -> int:
    """The size ``safetensors`` gives a file of these tensors (metadata ``{"format": "pt"}``): 8 bytes of length, the
    compact JSON header (tensors sorted by name, offsets in that order) padded to 8 with spaces, then the data."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for s in sorted(specs, key=lambda s: s.name):
        header[s.name] = {"dtype": "BF16", "shape": list(s.shape), "data_offsets": [offset, offset + s.nbytes]}
        offset += s.nbytes
    n = len(json.dumps(header, separators=(",", ":")))
    return 8 + n + (-n) % 8 + offset


# ---- the full inventory --------------------------------------------------------------------------------------------
def test_full_inventory_has_1106_bf16_tensors_633_backbone_473_action_head(full_inventory):
    names = [s.name for s in full_inventory]
    assert len(names) == len(set(names)) == 1106
    assert sum(n.startswith("backbone.") for n in names) == 633
    assert sum(n.startswith("action_head.") for n in names) == 473
    assert {s.dtype for s in full_inventory} == {torch.bfloat16}


def test_full_inventory_has_3_286_608_832_parameters_in_6_573_217_664_bytes(full_inventory):
    assert sum(s.numel for s in full_inventory) == 3_286_608_832
    assert sum(s.nbytes for s in full_inventory) == 6_573_217_664 == 2 * 3_286_608_832


@pytest.mark.parametrize("prefix, tensors, params", [
    (VISION, 448, 427_680_704), (MLP1, 6, 13_644_800), (LLM, 179, 1_426_659_328), ("backbone.", 633, 1_867_984_832),
    ("action_head.model.", 456, 1_091_722_240), ("action_head.state_encoder.", 4, 54_607_872),
    ("action_head.action_encoder.", 6, 232_931_328), ("action_head.action_decoder.", 4, 37_785_600),
    ("action_head.position_embedding.", 1, 1_572_864), ("action_head.vlln.", 2, 4_096),
    ("action_head.", 473, 1_418_624_000),
], ids=["vision", "connector", "llm", "backbone", "dit", "state_encoder", "action_encoder", "action_decoder",
        "position_embedding", "vlln", "action_head"])
def test_full_inventory_groups_have_the_spec_counts_and_parameters(full_inventory, prefix, tensors, params):
    group = [s for s in full_inventory if s.name.startswith(prefix)]
    assert (len(group), sum(s.numel for s in group)) == (tensors, params)


def test_full_inventory_has_27_vision_16_llm_and_32_dit_layers_and_nothing_of_n15_or_n17(full_inventory):
    names = [s.name for s in full_inventory]
    assert _indices(names, VISION + "encoder.layers.") == set(range(27))
    assert _indices(names, LLM + "model.layers.") == set(range(16))  # Qwen3-1.7B's 28 cut at select_layer 16
    assert _indices(names, DIT) == set(range(32))
    assert not [n for n in names if re.search(r"vl_self_attention|future_tokens|mask_token|eagle_model|visual\.", n)]


def test_even_dit_blocks_cross_attend_from_2048_and_odd_blocks_self_attend(shapes):
    for i in range(32):
        kv_in = 2048 if i % 2 == 0 else 1536
        for proj in ("to_k", "to_v"):
            assert shapes[f"{DIT}{i}.attn1.{proj}.weight"] == (1536, kv_in), (i, proj)
            assert shapes[f"{DIT}{i}.attn1.{proj}.bias"] == (1536,)


@pytest.mark.parametrize("name, shape", [
    (VISION + "embeddings.patch_embedding.weight", (1152, 588)),  # a Linear over the flattened 14×14×3 patch
    (VISION + "embeddings.position_embedding.weight", (256, 1152)),
    (VISION + "encoder.layers.26.mlp.fc1.weight", (4304, 1152)),
    (VISION + "encoder.layers.0.self_attn.q_proj.bias", (1152,)),
    (VISION + "post_layernorm.weight", (1152,)),
    (VISION + "head.attention.in_proj_weight", (3456, 1152)),
    (MLP1 + "0.weight", (4608,)),
    (MLP1 + "1.weight", (2048, 4608)),
    (MLP1 + "3.weight", (2048, 2048)),
    (LLM + "model.embed_tokens.weight", (151680, 2048)),
    (LLM + "lm_head.weight", (151680, 2048)),
    (LLM + "model.layers.15.self_attn.k_proj.weight", (1024, 2048)),
    (LLM + "model.layers.0.self_attn.q_norm.weight", (128,)),
    (LLM + "model.layers.7.mlp.down_proj.weight", (2048, 6144)),
    (LLM + "model.norm.weight", (2048,)),
    ("action_head.vlln.weight", (2048,)),
    ("action_head.state_encoder.layer1.W", (32, 128, 1024)),
    ("action_head.state_encoder.layer2.W", (32, 1024, 1536)),
    ("action_head.action_encoder.W1.W", (32, 128, 1536)),
    ("action_head.action_encoder.W2.W", (32, 3072, 1536)),
    ("action_head.action_decoder.layer2.b", (32, 128)),
    ("action_head.position_embedding.weight", (1024, 1536)),
    ("action_head.model.timestep_encoder.timestep_embedder.linear_1.weight", (1536, 256)),
    (DIT + "0.attn1.to_k.weight", (1536, 2048)),
    (DIT + "31.norm1.linear.weight", (3072, 1536)),
    (DIT + "31.ff.net.0.proj.weight", (6144, 1536)),
    ("action_head.model.proj_out_2.weight", (1024, 1536)),
], ids=lambda v: v if isinstance(v, str) else None)
def test_full_inventory_shapes_match_the_spec_tables(shapes, name, shape):
    assert shapes[name] == shape


def test_the_index_save_pretrained_writes_for_these_names_is_the_manifests_121_820_bytes(full_inventory):
    """HF writes the index with ``indent=2, sort_keys=True`` and a newline; every shard name has the same length, so
    the size pins the number and lengths of the tensor names."""
    index = {"metadata": {"total_size": sum(s.nbytes for s in full_inventory)},
             "weight_map": {s.name: "model-00001-of-00002.safetensors" for s in full_inventory}}
    assert len(json.dumps(index, indent=2, sort_keys=True) + "\n") == INDEX_BYTES


def test_the_full_writers_two_shards_have_the_manifests_exact_file_sizes(full_inventory, tiny_n16):
    """save_pretrained's greedy 5 GB split in state-dict order (backbone, then the action head from its DiT) and the
    safetensors headers give the released shards to the byte, so the shard boundary and every name and shape agree."""
    for shard in sorted(tiny_n16.glob("model-*.safetensors")):  # the size arithmetic, checked on real files
        with safe_open(str(shard), framework="pt") as f:
            specs = [s for s in n16_inventory(Gr00tN16Config.tiny()) if s.name in set(f.keys())]
        assert safetensors_file_bytes(specs) == shard.stat().st_size, shard.name
    shards = plan_shards(full_inventory, DEFAULT_SHARD_BYTES["full"])
    assert [safetensors_file_bytes(s) for s in shards] == SHARD_BYTES
    assert shards[1][0].name.startswith(DIT)  # the split falls inside the DiT blocks


def test_the_tiny_inventory_has_the_full_structure(full_inventory):
    def pattern(name: str) -> str:
        return re.sub(r"\.\d+\.", ".N.", name)

    tiny = n16_inventory(Gr00tN16Config.tiny())
    assert {pattern(s.name) for s in tiny} == {pattern(s.name) for s in full_inventory}
    tiny_shapes = {s.name: s.shape for s in tiny}
    assert tiny_shapes["action_head.state_encoder.layer1.W"] == (32, 128, 32)  # same 32 × 128 envelope
    assert tiny_shapes[VISION + "embeddings.position_embedding.weight"] == (256, 64)  # same 16 × 16 grid
    assert tiny_shapes[MLP1 + "1.weight"] == (64, 256)  # 2 × 2 unshuffle of a 64-wide tower
    assert tiny_shapes[LLM + "model.embed_tokens.weight"] == (151680, 64)  # real vocabulary


# ---- config.json ---------------------------------------------------------------------------------------------------
def test_published_config_json_has_the_spec_values_and_rebuilds_with_the_vendored_backbone():
    data = json.loads(json.dumps(Gr00tN16Config.full().to_checkpoint_json(record_backbone=False)))
    assert "backbone_config" not in data  # the real config.json does not carry the Eagle config
    assert {k: data[k] for k in PUBLISHED_CONFIG_FIELDS} == PUBLISHED_CONFIG_FIELDS
    c = Gr00tN16Config.from_dict(data)
    assert c == Gr00tN16Config.full()
    v, t, b = c.backbone.vision, c.backbone.text, c.backbone
    assert (v.num_hidden_layers, v.hidden_size, v.intermediate_size, v.head_dim) == (27, 1152, 4304, 72)
    assert (v.patch_size, v.patch_dim, v.position_grid) == (14, 588, 16)
    assert (b.unshuffle_factor, b.connector_in_dim, b.image_factor, b.image_token_index) == (2, 4608, 28, 151669)
    assert (t.hidden_size, t.num_hidden_layers, t.num_key_value_heads, t.head_dim, t.vocab_size) == \
        (2048, 28, 8, 128, 151680)
    assert (b.select_layer, t.rope_theta, t.rms_norm_eps) == (16, 1e6, 1e-6)
    h = c.action_head
    assert (h.action_horizon, h.max_state_dim, h.action_dim, h.dit.num_layers, h.dit.inner_dim) == \
        (50, 128, 128, 32, 1536)
    assert [h.dit.cross_keys(i) for i in (0, 2, 4, 6)] == ["text", "image", "text", "image"]


@pytest.mark.parametrize("scale", ["tiny", "full"])
def test_config_json_round_trips_with_the_backbone_recorded(scale):
    config = Gr00tN16Config.preset(scale)
    data = json.loads(json.dumps(config.to_checkpoint_json(record_backbone=True)))
    assert Gr00tN16Config.from_dict(data) == config
    assert data["backbone_config"]["vision_config"]["model_type"] == "siglip2_vision_model"


def test_tiny_config_without_its_backbone_record_is_refused():
    with pytest.raises(ConfigError, match="backbone_embedding_dim"):
        Gr00tN16Config.from_dict(Gr00tN16Config.tiny().to_checkpoint_json(record_backbone=False))


@pytest.mark.parametrize("path", [("select_layer",), ("max_state_dim",), ("max_action_dim",), ("action_horizon",),
                                  ("attend_text_every_n_blocks",), ("diffusion_model_cfg", "num_layers"),
                                  ("diffusion_model_cfg", "interleave_self_attention"), ("use_alternate_vl_dit",),
                                  ("model_name",)], ids=lambda p: ".".join(p))
def test_a_missing_structural_key_is_refused_naming_it(path):
    data = Gr00tN16Config.full().to_checkpoint_json(record_backbone=False)
    section = data
    for key in path[:-1]:
        section = section[key]
    del section[path[-1]]
    with pytest.raises(ConfigError, match=re.escape(repr(path[-1]))):
        Gr00tN16Config.from_dict(data)


@pytest.mark.parametrize("edit, message", [
    ({"model_type": "Gr00tN1d7"}, "model_type is 'Gr00tN1d7'"),
    ({"model_name": "nvidia/Cosmos-Reason2-2B"}, "no known backbone geometry"),
    ({"use_vlln": False}, "use_vlln=False is not supported"),
    ({"use_alternate_vl_dit": False}, "use_alternate_vl_dit=False is not supported"),
    ({"backbone_model_type": "qwen"}, "backbone_model_type"),
    ({"select_layer": 29}, "select_layer 29 outside 1..28"),
])
def test_unsupported_variants_are_refused(edit, message):
    with pytest.raises(ConfigError, match=message):
        Gr00tN16Config.from_dict(Gr00tN16Config.full().to_checkpoint_json(record_backbone=False) | edit)


def test_a_recorded_backbone_with_windows_or_rope_is_refused():
    data = Gr00tN16Config.tiny().to_checkpoint_json(record_backbone=True)
    data["backbone_config"]["vision_config"]["use_windows_attn"] = True
    with pytest.raises(ConfigError, match="use_windows_attn"):
        Gr00tN16Config.from_dict(data)


# ---- the tiny synthetic checkpoint ---------------------------------------------------------------------------------
def test_n16_writes_from_its_registry_row(tiny_n16):
    assert "n16" in SPECS and "n16" in VERSIONS
    assert synthetic_info(tiny_n16) == {**synthetic_info(tiny_n16), "version": "n16", "scale": "tiny", "seed": 0}


def test_tiny_checkpoint_has_the_real_file_set(tiny_n16):
    files = {p.name for p in tiny_n16.iterdir()}
    shards = {f for f in files if f.startswith("model-")}
    assert len(shards) > 1 and all(re.fullmatch(rf"model-\d{{5}}-of-{len(shards):05d}\.safetensors", f) for f in shards)
    assert files - shards == {"config.json", "model.safetensors.index.json", "processor_config.json",
                              "statistics.json", "embodiment_id.json", SYNTHETIC_MARKER}


def test_tiny_checkpoint_tensors_are_exactly_the_tiny_inventory(tiny_n16):
    index = json.loads((tiny_n16 / "model.safetensors.index.json").read_text())
    stored = {}
    for shard in sorted(set(index["weight_map"].values())):
        with safe_open(str(tiny_n16 / shard), framework="pt") as f:
            for name in f.keys():
                assert index["weight_map"][name] == shard
                t = f.get_slice(name)
                stored[name] = (tuple(t.get_shape()), t.get_dtype())
    inventory = n16_inventory(Gr00tN16Config.tiny())
    assert stored == {s.name: (s.shape, "BF16") for s in inventory}
    assert set(index["weight_map"]) == set(stored)
    assert index["metadata"]["total_size"] == sum(s.nbytes for s in inventory)


def test_tiny_checkpoint_config_and_processor_parse_back(tiny_n16):
    assert Gr00tN16Config.from_checkpoint(tiny_n16) == Gr00tN16Config.tiny()
    assert Gr00tN16ProcessorConfig.from_checkpoint(tiny_n16) == Gr00tN16ProcessorConfig()
    assert Gr00tN16Config.tiny().backbone == Eagle3Config(
        vision=Siglip2VisionConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_hidden_layers=2),
        text=Gr00tN16Config.tiny().backbone.text, select_layer=4)


def test_a_processor_envelope_that_disagrees_with_config_json_is_refused(tiny_n16, tmp_path):
    for name in ("config.json", "processor_config.json"):
        shutil.copy(tiny_n16 / name, tmp_path / name)
    data = json.loads((tmp_path / "processor_config.json").read_text())
    data["processor_kwargs"]["max_action_horizon"] = 16
    (tmp_path / "processor_config.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="max_action_horizon is 16, config.json has 50"):
        Gr00tN16Config.from_checkpoint(tmp_path)
    del data["processor_kwargs"]["clip_outliers"]
    (tmp_path / "processor_config.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="'clip_outliers'"):
        Gr00tN16ProcessorConfig.from_checkpoint(tmp_path)


def test_the_processor_config_writes_every_key_the_reader_needs_with_the_base_flags():
    kwargs = n16_processor_config()["processor_kwargs"]
    assert set(Gr00tN16ProcessorConfig().to_processor_kwargs()) < set(kwargs)
    assert {k: kwargs[k] for k in ("max_state_dim", "max_action_dim", "max_action_horizon", "use_percentiles",
                                   "clip_outliers", "use_relative_action", "apply_sincos_state_encoding",
                                   "model_name")} == {
        "max_state_dim": 128, "max_action_dim": 128, "max_action_horizon": 50, "use_percentiles": False,
        "clip_outliers": True, "use_relative_action": True, "apply_sincos_state_encoding": True,
        "model_name": BACKBONE_NAME}


def test_embodiment_ids_are_the_manifests_148_byte_table(tiny_n16):
    ids = json.loads((tiny_n16 / "embodiment_id.json").read_text())
    assert ids == EMBODIMENT_IDS and len(json.dumps(ids, indent=2)) == 148
    assert (ids["gr1"], ids["unitree_g1"], ids["oxe_widowx"]) == (20, 8, 1)


def test_gr1_sidecars_have_five_groups_sincos_state_relative_arms_and_hands_and_per_step_statistics(tiny_n16):
    modality = json.loads((tiny_n16 / "processor_config.json").read_text())["processor_kwargs"]["modality_configs"]
    stats = json.loads((tiny_n16 / "statistics.json").read_text())
    assert set(modality) == set(stats) == {"gr1", "unitree_g1", "oxe_widowx"}
    gr1, groups = modality["gr1"], ["left_arm", "right_arm", "left_hand", "right_hand", "waist"]
    assert gr1["video"]["modality_keys"] == ["ego_view_bg_crop_pad_res256_freq20"]
    assert gr1["state"]["modality_keys"] == gr1["state"]["sin_cos_embedding_keys"] == gr1["action"]["modality_keys"] \
        == groups
    assert gr1["action"]["delta_indices"] == list(range(16)) and gr1["language"]["modality_keys"] == ["task"]
    assert [c["rep"] for c in gr1["action"]["action_configs"]] == ["RELATIVE"] * 4 + ["ABSOLUTE"]
    assert {(c["type"], c["format"]) for c in gr1["action"]["action_configs"]} == {("NON_EEF", "DEFAULT")}
    dims = {"left_arm": 7, "right_arm": 7, "left_hand": 6, "right_hand": 6, "waist": 3}
    for kind in ("state", "action"):
        assert {k: len(v["min"]) for k, v in stats["gr1"][kind].items()} == dims
        assert all(set(v) == {"min", "max", "mean", "std", "q01", "q99"} for v in stats["gr1"][kind].values())
    relative = stats["gr1"]["relative_action"]
    assert {k: (len(v["min"]), len(v["min"][0])) for k, v in relative.items()} == \
        {k: (16, d) for k, d in dims.items() if k != "waist"}


def test_g1_and_widowx_sidecars_follow_the_spec_table(tiny_n16):
    modality = json.loads((tiny_n16 / "processor_config.json").read_text())["processor_kwargs"]["modality_configs"]
    stats = json.loads((tiny_n16 / "statistics.json").read_text())
    g1, widowx = modality["unitree_g1"], modality["oxe_widowx"]
    assert g1["state"]["modality_keys"] == ["left_leg", "right_leg", "waist", "left_arm", "right_arm", "left_hand",
                                            "right_hand"]
    assert [(k, c["rep"]) for k, c in zip(g1["action"]["modality_keys"], g1["action"]["action_configs"])] == [
        ("left_arm", "RELATIVE"), ("right_arm", "RELATIVE"), ("left_hand", "ABSOLUTE"), ("right_hand", "ABSOLUTE"),
        ("waist", "ABSOLUTE"), ("base_height_command", "ABSOLUTE"), ("navigate_command", "ABSOLUTE")]
    assert len(g1["action"]["delta_indices"]) == 30 and g1["video"]["modality_keys"] == ["ego_view"]
    assert g1["language"]["modality_keys"] == ["annotation.human.task_description"]
    assert {k: len(v["min"]) for k, v in stats["unitree_g1"]["relative_action"].items()} == \
        {"left_arm": 30, "right_arm": 30}
    assert widowx["video"]["modality_keys"] == ["image_0"] and len(widowx["action"]["delta_indices"]) == 8
    assert widowx["state"]["modality_keys"] == ["x", "y", "z", "roll", "pitch", "yaw", "pad", "gripper"]
    assert widowx["action"]["mean_std_embedding_keys"] == ["x", "y", "z", "roll", "pitch", "yaw"]
    assert widowx["action"]["action_configs"] is None  # NVIDIA's template: every key absolute
    assert stats["oxe_widowx"]["relative_action"] == {}
    assert all(min(v["std"]) > 0 for v in stats["oxe_widowx"]["action"].values())
    for tag, e in EMBODIMENTS.items():  # the envelope holds every tag
        assert e.horizon <= 50 and sum(d for _, d in e.action_groups) <= 128
        assert sum(2 * d if k in e.sin_cos_state else d for k, d in e.state_groups) <= 128, tag


def test_sidecars_depend_on_the_seed_only_through_the_statistics(tmp_path, tiny_n16):
    other = write_checkpoint(tmp_path / "seed1", scale="tiny", seed=1, version="n16", log=lambda _: None)
    for name in ("processor_config.json", "embodiment_id.json", "config.json"):
        assert (other / name).read_text() == (tiny_n16 / name).read_text()
    assert (other / "statistics.json").read_text() != (tiny_n16 / "statistics.json").read_text()


# ---- full scale (6.6 GB; -m slow) ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_full_synthetic_checkpoint_has_the_released_shard_and_index_sizes(tmp_path):
    out = write_checkpoint(tmp_path / "full", scale="full", seed=0, version="n16", log=lambda _: None)
    assert [p.stat().st_size for p in sorted(out.glob("model-*.safetensors"))] == SHARD_BYTES
    assert Gr00tN16Config.from_checkpoint(out) == Gr00tN16Config.full()
