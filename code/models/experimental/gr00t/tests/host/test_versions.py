# SPDX-License-Identifier: Apache-2.0
"""The version registry is the one source of per-version facts, and every row points at real code."""

from __future__ import annotations

import subprocess
import sys

import pytest

from models.experimental.gr00t.common.errors import ConfigError
from models.experimental.gr00t.common.layouts import LAYOUTS
from models.experimental.gr00t.common.versions import SPECS, get_spec, load, spec_for_model_type


def test_importing_the_registry_imports_neither_torch_nor_ttnn():
    code = ("import sys, models.experimental.gr00t.common.versions; "
            "bad = [m for m in ('torch', 'ttnn', 'numpy') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("version", sorted(SPECS))
def test_each_row_names_classes_that_exist_and_agree_with_it(version, tiny_checkpoints):
    from models.experimental.gr00t.reference.policies import checkpoint_version

    spec = get_spec(version)
    assert load(spec.config_cls).preset("tiny").version == version
    # the written config.json carries this row's model_type
    assert checkpoint_version(tiny_checkpoints[version]) == version
    assert spec_for_model_type(spec.model_type) is spec
    assert callable(load(spec.policy_cls).from_checkpoint) and callable(load(spec.fast_cls).from_reference)
    config = load(spec.config_cls).preset("tiny")
    assert load(spec.inventory)(config) and "config.json" not in load(spec.synthetic_sidecars)(0)
    assert LAYOUTS[spec.layout].embodiment == spec.embodiment
    assert "config.json" in spec.allow_patterns and "model-*.safetensors" in spec.allow_patterns
    assert len(spec.revision) == 40 and spec.hf_repo.startswith("nvidia/GR00T-")


def test_unknown_versions_and_model_types_are_named():
    with pytest.raises(ConfigError, match=r"unknown GR00T version 'n99'.*\['n15', 'n17'\]"):
        get_spec("n99")
    with pytest.raises(ConfigError, match=r"x/config.json: model_type 'gr00t_n9' is not a supported GR00T version"):
        spec_for_model_type("gr00t_n9", "x/config.json")
