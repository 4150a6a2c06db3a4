# SPDX-License-Identifier: Apache-2.0
"""Configs round-trip through config.json, and the full-scale tensor inventory is NVIDIA's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from models.experimental.gr00t.common.configs import HF_REPOS, HF_SNAPSHOT_SHAS
from models.experimental.gr00t.common.configs_n15 import Gr00tN15Config
from models.experimental.gr00t.common.errors import ConfigError
from models.experimental.gr00t.common.weights import n15_inventory

FIXTURE = Path(__file__).parent / "fixtures" / "gr00t_n15_params.tsv"
SCRIPTS = Path(__file__).resolve().parents[5] / "scripts"


def nvidia_inventory() -> list[tuple[str, str, str]]:
    rows = [line.split("\t") for line in FIXTURE.read_text().splitlines() if line and not line.startswith("#")]
    assert rows[0] == ["name", "shape", "dtype"]
    return [tuple(r) for r in rows[1:]]


def test_pinned_snapshot():
    assert HF_REPOS["n15"] == "nvidia/GR00T-N1.5-3B"
    assert HF_SNAPSHOT_SHAS["n15"] == "869830fc749c35f34771aa5209f923ac57e4564e"


@pytest.mark.parametrize("scale", ["tiny", "full"])
def test_config_json_round_trips(scale):
    config = Gr00tN15Config.preset(scale)
    data = json.loads(json.dumps(config.to_checkpoint_json(record_backbone=True)))
    assert Gr00tN15Config.from_dict(data) == config


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


@pytest.mark.parametrize("path, value", [(("diffusion_model_cfg", "interleave_self_attention"), None),
                                          (("diffusion_model_cfg", "positional_embeddings"), None),
                                          (("diffusion_model_cfg", "norm_type"), "layer_norm"),
                                          (("use_vlln",), False)],
                         ids=["interleave_missing", "pos_embed_missing", "norm_type", "no_vlln"])
def test_unsupported_or_ambiguous_head_variants_are_refused(path, value):
    data = Gr00tN15Config.tiny().to_checkpoint_json(record_backbone=True)
    section = data["action_head_cfg"]
    for key in path[:-1]:
        section = section[key]
    if value is None:
        del section[path[-1]]  # missing: NVIDIA's default would differ from the published value
    else:
        section[path[-1]] = value
    with pytest.raises(ConfigError, match=path[-1]):
        Gr00tN15Config.from_dict(data)


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
