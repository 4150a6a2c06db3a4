# SPDX-License-Identifier: Apache-2.0
"""Configs round-trip through config.json and refuse what the port cannot serve, and the full-scale tensor
inventories are the published checkpoints': NVIDIA's N1.5 parameter table (898 tensors) and N1.7's
1,031 bf16 tensors of 6,910,361,856 bytes."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from models.experimental.gr00t.common.configs import HF_REPOS, HF_SNAPSHOT_SHAS
from models.experimental.gr00t.common.configs_n15 import Gr00tN15Config
from models.experimental.gr00t.common.configs_n17 import Gr00tN17Config
from models.experimental.gr00t.common.errors import ConfigError
from models.experimental.gr00t.common.versions import SPECS, VERSIONS, load
from models.experimental.gr00t.common.weights import n15_inventory, n17_inventory
from safetensors import safe_open

FIXTURE = Path(__file__).parent / "fixtures" / "gr00t_n15_params.tsv"
SCRIPTS = Path(__file__).resolve().parents[5] / "scripts" / "operate"

VISION = "backbone.model.model.visual."
TEXT = "backbone.model.model.language_model."
DIT = "action_head.model.transformer_blocks."
VLSA = "action_head.vl_self_attention.transformer_blocks."

# The released checkpoint's (nvidia/GR00T-N1.7-3B) config.json values for the fields that shape the model.
PUBLISHED_CONFIG_FIELDS = {
    "model_type": "Gr00tN1d7", "architectures": ["Gr00tN1d7"], "model_name": "nvidia/Cosmos-Reason2-2B",
    "backbone_model_type": "qwen", "backbone_embedding_dim": 2048, "select_layer": 16, "hidden_size": 1024,
    "input_embedding_dim": 1536, "max_state_dim": 132, "max_action_dim": 132, "action_horizon": 40,
    "state_history_length": 1, "max_num_embodiments": 32, "add_pos_embed": True, "max_seq_len": 1024,
    "use_vlln": True, "use_alternate_vl_dit": True, "attend_text_every_n_blocks": 2,
    "diffusion_model_cfg": {"num_layers": 32, "num_attention_heads": 32, "attention_head_dim": 48, "output_dim": 1024,
                            "norm_type": "ada_norm", "interleave_self_attention": True,
                            "positional_embeddings": None, "dropout": 0.2, "final_dropout": True},
    "vl_self_attention_cfg": {"num_layers": 4, "num_attention_heads": 32, "attention_head_dim": 64,
                              "positional_embeddings": None, "dropout": 0.2, "final_dropout": True},
    "num_inference_timesteps": 4, "num_timestep_buckets": 1000,
}


def config_class(version: str):
    return load(SPECS[version].config_cls)


def edit_key(data: dict, path: tuple[str, ...], value=None) -> dict:
    """``data`` with the key at ``path`` set to ``value``, or deleted where ``value`` is None."""
    section = data
    for key in path[:-1]:
        section = section[key]
    if value is None:
        del section[path[-1]]
    else:
        section[path[-1]] = value
    return data


# ---- both versions ----------------------------------------------------------------------------------
@pytest.mark.parametrize("scale", ["tiny", "full"])
@pytest.mark.parametrize("version", VERSIONS)
def test_config_json_round_trips_with_the_backbone_recorded(version, scale):
    config = config_class(version).preset(scale)
    data = json.loads(json.dumps(config.to_checkpoint_json(record_backbone=True)))
    assert config_class(version).from_dict(data) == config


@pytest.mark.parametrize("version", VERSIONS)
def test_config_rebuilds_from_the_written_tiny_checkpoint_directory_alone(version, tiny_checkpoints):
    assert config_class(version).from_checkpoint(tiny_checkpoints[version]) == config_class(version).tiny()


# (version, the key's path in config.json, its value: None deletes it (where NVIDIA's code default would differ
# from the published value), what the refusal must name)
HEAD_VARIANTS = [
    pytest.param("n15", ("action_head_cfg", "diffusion_model_cfg", "interleave_self_attention"), None,
                 "interleave_self_attention", id="n15-interleave_missing"),
    pytest.param("n15", ("action_head_cfg", "diffusion_model_cfg", "positional_embeddings"), None,
                 "positional_embeddings", id="n15-pos_embed_missing"),
    pytest.param("n15", ("action_head_cfg", "diffusion_model_cfg", "norm_type"), "layer_norm", "norm_type",
                 id="n15-norm_type"),
    pytest.param("n15", ("action_head_cfg", "use_vlln"), False, "use_vlln", id="n15-no_vlln"),
    pytest.param("n17", ("use_alternate_vl_dit",), False, "use_alternate_vl_dit=False is not supported",
                 id="n17-no_alternate_vl_dit"),
    pytest.param("n17", ("use_vlln",), False, "use_vlln=False is not supported", id="n17-no_vlln"),
    pytest.param("n17", ("add_pos_embed",), False, "add_pos_embed=False is not supported", id="n17-no_pos_embed"),
    pytest.param("n17", ("diffusion_model_cfg", "positional_embeddings"), "sinusoidal", "positional_embeddings",
                 id="n17-sinusoidal_pos_embed"),
    pytest.param("n17", ("diffusion_model_cfg", "norm_type"), "layer_norm", "norm_type", id="n17-norm_type"),
]


@pytest.mark.parametrize("version, path, value, message", HEAD_VARIANTS)
def test_unsupported_or_ambiguous_head_variants_are_refused_naming_the_key(version, path, value, message):
    data = edit_key(config_class(version).tiny().to_checkpoint_json(record_backbone=True), path, value)
    with pytest.raises(ConfigError, match=message):
        config_class(version).from_dict(data)


# ---- N1.5 -------------------------------------------------------------------------------------------
def nvidia_inventory() -> list[tuple[str, str, str]]:
    rows = [line.split("\t") for line in FIXTURE.read_text().splitlines() if line and not line.startswith("#")]
    assert rows[0] == ["name", "shape", "dtype"]
    return [tuple(r) for r in rows[1:]]


def test_pinned_snapshot():
    assert HF_REPOS["n15"] == "nvidia/GR00T-N1.5-3B"
    assert HF_SNAPSHOT_SHAS["n15"] == "869830fc749c35f34771aa5209f923ac57e4564e"


def test_published_config_json_uses_published_eagle_constants():
    data = Gr00tN15Config.full().to_checkpoint_json(record_backbone=False)
    assert "eagle_config" not in data["backbone_cfg"]
    c = Gr00tN15Config.from_dict(data)
    assert (c.backbone.vision.hidden_size, c.backbone.vision.num_hidden_layers,
            c.backbone.vision.num_patches) == (1152, 27, 256)
    assert (c.backbone.text.hidden_size, c.backbone.text.num_key_value_heads, c.backbone.select_layer) == (2048, 8, 12)
    assert (c.action_head.dit.num_layers, c.action_head.dit.inner_dim,
            c.action_head.vl_self_attention.num_layers) == (16, 1536, 4)


def test_config_errors_name_the_field():
    data = Gr00tN15Config.tiny().to_checkpoint_json(record_backbone=True)
    del data["action_head_cfg"]["diffusion_model_cfg"]["num_layers"]
    with pytest.raises(ConfigError, match="num_layers"):
        Gr00tN15Config.from_dict(data)
    with pytest.raises(ConfigError, match="model_type"):
        Gr00tN15Config.from_dict({"model_type": "llama"})


def test_full_inventory_equals_nvidia_parameter_table():
    ours = [(s.name, str(tuple(s.shape)), str(s.dtype).removeprefix("torch."))
            for s in n15_inventory(Gr00tN15Config.full())]
    theirs = [row for row in nvidia_inventory() if not row[0].endswith("lm_head.weight")]  # tied, not saved
    assert len(ours) == 898
    assert ours == theirs  # names, shapes, dtypes and state-dict order
    assert sum(s.numel for s in n15_inventory(Gr00tN15Config.full())) == 2_413_522_880  # 2.414 B, no lm_head


def test_list_cli_prints_the_inventory():
    out = subprocess.run([sys.executable, str(SCRIPTS / "make_synthetic_checkpoint.py"), "--version", "n15",
                          "--scale", "full", "--list"], capture_output=True, text=True, check=True).stdout
    rows = [tuple(line.split("\t")) for line in out.splitlines()]
    assert rows == [row for row in nvidia_inventory() if not row[0].endswith("lm_head.weight")]


# ---- N1.7: inventory ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def full_inventory():
    return n17_inventory(Gr00tN17Config.full())


def _indices(names: list[str], prefix: str) -> set[int]:
    return {int(n[len(prefix):].split(".")[0]) for n in names if n.startswith(prefix)}


def test_full_inventory_has_the_published_1031_bf16_tensors_and_6_910_361_856_bytes(full_inventory):
    assert len(full_inventory) == 1031
    assert len({s.name for s in full_inventory}) == 1031  # no name twice
    assert {s.dtype for s in full_inventory} == {torch.bfloat16}
    assert sum(s.nbytes for s in full_inventory) == 6_910_361_856
    assert sum(s.numel for s in full_inventory) == 6_910_361_856 // 2  # 2 bytes per bf16 element


def test_full_inventory_group_counts_follow_the_spec_tables(full_inventory):
    names = [s.name for s in full_inventory]
    # Vision: 315 tensors; text 16 layers × 11 + embed + norm, plus the separate lm_head.
    assert sum(n.startswith(VISION) for n in names) == 315
    assert sum(n.startswith(TEXT) for n in names) == 16 * 11 + 2
    # Action head: timestep MLP 4, DiT 32 × 14, proj_out 4, 7 category linears × 2, vlln 2, VL self-attn 4 × 16,
    # position embedding 1.
    assert sum(n.startswith("action_head.") for n in names) == 4 + 32 * 14 + 4 + 7 * 2 + 2 + 4 * 16 + 1


def test_full_inventory_keeps_the_separate_lm_head_and_the_unused_final_norm(full_inventory):
    shapes = {s.name: s.shape for s in full_inventory}
    assert shapes["backbone.model.lm_head.weight"] == (151936, 2048)
    assert shapes[TEXT + "embed_tokens.weight"] == (151936, 2048)
    assert shapes[TEXT + "norm.weight"] == (2048,)


def test_full_inventory_has_24_vision_blocks_16_llm_layers_32_dit_and_4_vl_attention_blocks(full_inventory):
    names = [s.name for s in full_inventory]
    assert _indices(names, VISION + "blocks.") == set(range(24))
    assert _indices(names, TEXT + "layers.") == set(range(16))  # truncated at select_layer = 16
    assert _indices(names, DIT) == set(range(32))
    assert _indices(names, VLSA) == set(range(4))
    assert _indices(names, VISION + "deepstack_merger_list.") == {0, 1, 2}


def test_even_dit_blocks_cross_attend_from_2048_and_odd_blocks_self_attend_at_1536(full_inventory):
    shapes = {s.name: s.shape for s in full_inventory}
    for i in range(32):
        kv_in = 2048 if i % 2 == 0 else 1536
        for proj in ("to_k", "to_v"):
            assert shapes[f"{DIT}{i}.attn1.{proj}.weight"] == (1536, kv_in), (i, proj)
            assert shapes[f"{DIT}{i}.attn1.{proj}.bias"] == (1536,)
        assert shapes[f"{DIT}{i}.attn1.to_q.weight"] == (1536, 1536)
        assert f"{DIT}{i}.norm1.norm.weight" not in shapes  # AdaLN: no affine LayerNorm parameters


@pytest.mark.parametrize("name, shape", [
    (VISION + "patch_embed.proj.weight", (1024, 3, 2, 16, 16)),
    (VISION + "pos_embed.weight", (2304, 1024)),
    (VISION + "merger.linear_fc1.weight", (4096, 4096)),
    (VISION + "deepstack_merger_list.2.norm.weight", (4096,)),
    (TEXT + "layers.15.self_attn.k_proj.weight", (1024, 2048)),
    (TEXT + "layers.0.self_attn.q_norm.weight", (128,)),
    (TEXT + "layers.7.mlp.down_proj.weight", (2048, 6144)),
    ("action_head.state_encoder.layer1.W", (32, 132, 1024)),
    ("action_head.action_encoder.W2.W", (32, 3072, 1536)),
    ("action_head.action_decoder.layer2.b", (32, 132)),
    ("action_head.model.proj_out_2.weight", (1024, 1536)),
    ("action_head.position_embedding.weight", (1024, 1536)),
    (VLSA + "3.ff.net.0.proj.weight", (8192, 2048)),
], ids=["patch_embed", "vision_pos_embed", "merger_fc1", "deepstack_norm", "llm_k_proj", "llm_q_norm",
        "llm_down_proj", "state_encoder", "action_encoder_w2", "action_decoder_b", "dit_proj_out_2",
        "position_embedding", "vl_self_attention_ff"])
def test_full_inventory_shapes_match_the_spec_tables(full_inventory, name, shape):
    assert {s.name: s.shape for s in full_inventory}[name] == shape


# ---- N1.7: config.json --------------------------------------------------------------------------------
def test_published_config_json_has_the_spec_values_and_rebuilds_with_published_backbone_constants():
    data = json.loads(json.dumps(Gr00tN17Config.full().to_checkpoint_json(record_backbone=False)))
    assert "backbone_config" not in data  # the real config.json does not carry the Qwen3-VL configs
    assert {k: data[k] for k in PUBLISHED_CONFIG_FIELDS} == PUBLISHED_CONFIG_FIELDS
    c = Gr00tN17Config.from_dict(data)
    assert c == Gr00tN17Config.full()
    assert (c.backbone.vision.depth, c.backbone.vision.hidden_size,
            c.backbone.vision.deepstack_visual_indexes) == (24, 1024, (5, 11, 17))
    assert (c.backbone.text.hidden_size, c.backbone.text.num_key_value_heads,
            c.backbone.text.head_dim) == (2048, 8, 128)
    assert (c.backbone.select_layer, c.backbone.image_token_id) == (16, 151655)


def test_tiny_config_without_its_backbone_record_is_refused():
    """Tiny geometry is not the published one: dropping backbone_config must not silently give a
    2048-wide backbone under a 64-wide head."""
    data = Gr00tN17Config.tiny().to_checkpoint_json(record_backbone=False)
    with pytest.raises(ConfigError, match="backbone_embedding_dim"):
        Gr00tN17Config.from_dict(data)


def test_tiny_checkpoint_tensors_are_exactly_the_tiny_inventory(tiny_checkpoint_n17):
    index = json.loads((tiny_checkpoint_n17 / "model.safetensors.index.json").read_text())
    stored = {}
    for shard in sorted(set(index["weight_map"].values())):
        with safe_open(str(tiny_checkpoint_n17 / shard), framework="pt") as f:
            for name in f.keys():  # safe_open is not iterable
                t = f.get_slice(name)
                stored[name] = (tuple(t.get_shape()), t.get_dtype())
    expected = {s.name: (s.shape, "BF16") for s in n17_inventory(Gr00tN17Config.tiny())}
    assert stored == expected
    assert set(index["weight_map"]) == set(expected)
    assert index["metadata"]["total_size"] == sum(s.nbytes for s in n17_inventory(Gr00tN17Config.tiny()))


# ---- N1.7: refusals -----------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [("diffusion_model_cfg", "num_layers"), ("select_layer",),
                                  ("vl_self_attention_cfg", "num_attention_heads"), ("action_horizon",),
                                  ("attend_text_every_n_blocks",), ("max_state_dim",),
                                  ("diffusion_model_cfg", "interleave_self_attention"), ("use_alternate_vl_dit",)],
                         ids=["dit_num_layers", "select_layer", "vl_attention_heads", "action_horizon",
                              "attend_text_every_n", "max_state_dim", "interleave", "alternate_vl_dit"])
@pytest.mark.parametrize("record_backbone", [True, False], ids=["recorded_backbone", "published_backbone"])
def test_a_missing_structural_key_is_refused_naming_it(path, record_backbone):
    data = edit_key(Gr00tN17Config.preset("tiny" if record_backbone else "full").to_checkpoint_json(
        record_backbone=record_backbone), path)
    with pytest.raises(ConfigError, match=re.escape(repr(path[-1]))):
        Gr00tN17Config.from_dict(data)


def test_a_missing_section_is_refused_naming_it():
    data = Gr00tN17Config.tiny().to_checkpoint_json(record_backbone=True)
    del data["vl_self_attention_cfg"]  # NVIDIA's code default has none; N1.7 released weights need it
    with pytest.raises(ConfigError, match="vl_self_attention_cfg"):
        Gr00tN17Config.from_dict(data)


@pytest.mark.parametrize("select_layer", [0, 7], ids=["zero", "past_the_decoder"])
def test_select_layer_outside_the_decoder_is_refused(select_layer):
    data = Gr00tN17Config.tiny().to_checkpoint_json(record_backbone=True)  # tiny decoder has 6 layers
    data["select_layer"] = select_layer
    with pytest.raises(ConfigError, match=f"select_layer {select_layer} outside 1..6"):
        Gr00tN17Config.from_dict(data)


def test_other_model_types_and_scales_are_refused(tmp_path):
    data = copy.deepcopy(PUBLISHED_CONFIG_FIELDS) | {"model_type": "Gr00tN1d6"}
    with pytest.raises(ConfigError, match="model_type.*Gr00tN1d6"):
        Gr00tN17Config.from_dict(data)
    with pytest.raises(ConfigError, match="unknown scale 'huge'"):
        Gr00tN17Config.preset("huge")
    with pytest.raises(ConfigError, match="config.json: not found"):
        Gr00tN17Config.from_checkpoint(tmp_path)
