# SPDX-License-Identifier: Apache-2.0
"""The version registry is the one source of per-version facts, and every row points at real code."""

from __future__ import annotations

import subprocess
import sys

import pytest

from models.experimental.gr00t.common.demo import DEMO_DIR
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
    for served in spec.served:  # every served embodiment has its layout row and its shipped demo folder
        assert LAYOUTS[served.layout].embodiment == served.embodiment and LAYOUTS[served.layout].version == version
        assert served.demo.noise_shape and (DEMO_DIR / spec.demo_dir(served.layout) / "observation.json").is_file()
    assert spec.layout == spec.served[0].layout and spec.embodiment == spec.served[0].embodiment
    if spec.ttnn:
        assert all(callable(load(p)) for p in (spec.tt_policy_cls, spec.tt_model_builder, spec.tt_device_tensors,
                                               spec.tt_blank_inputs))
    else:
        assert spec.ttnn_refusal and spec.tt_policy_cls is None
    assert "config.json" in spec.allow_patterns and "model-*.safetensors" in spec.allow_patterns
    assert len(spec.revision) == 40 and spec.hf_repo.startswith("nvidia/GR00T-")


def test_unknown_versions_and_model_types_are_named():
    with pytest.raises(ConfigError, match=r"unknown GR00T version 'n99'.*\['n15', 'n16', 'n17'\]"):
        get_spec("n99")
    with pytest.raises(ConfigError, match=r"x/config.json: model_type 'gr00t_n9' is not a supported GR00T version"):
        spec_for_model_type("gr00t_n9", "x/config.json")


def test_a_row_is_either_ported_to_ttnn_or_says_why_not():
    from dataclasses import replace

    n16 = get_spec("n16")
    assert all(spec.ttnn for spec in SPECS.values())  # N1.6 is ported too (issue 46)
    assert (n16.tt_num_cqs, n16.tt_max_batch) == (1, 1) and get_spec("n17").tt_max_batch == 4
    # the refusal mechanism, for a future version without a port: a row with a reason and no tt_* paths
    refused = replace(n16, ttnn_refusal="not ported yet", tt_policy_cls=None, tt_model_builder=None,
                      tt_device_tensors=None, tt_blank_inputs=None)
    assert not refused.ttnn and refused.ttnn_refusal == "not ported yet"
    with pytest.raises(ValueError, match="TT-NN row"):
        replace(refused, tt_policy_cls="x:y")  # a half-filled TT-NN row
    with pytest.raises(ValueError, match="TT-NN row"):
        replace(n16, tt_blank_inputs=None)  # a TT-NN row missing a path
    with pytest.raises(ValueError, match="TT-NN row"):
        replace(get_spec("n15"), ttnn_refusal="no")  # a reason beside a port
    with pytest.raises(ConfigError, match=r"GR00T_EMBODIMENT='droid': version n16 serves \['gr1', 'unitree_g1'"):
        n16.serving("droid")
    assert [n16.demo_dir(lay) for lay in n16.layouts] == ["n16", "n16_unitree_g1", "n16_oxe_widowx"]
