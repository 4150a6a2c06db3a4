# SPDX-License-Identifier: Apache-2.0
"""The version axis lives only in the registry (``common/versions.py``, ``common/layouts.py``): no other source
under code/ branches on a version, layout or embodiment name (``if layout.version == "n15"``,
``version in ("n15", "n17")``, ``case "droid":``); what differs per version is a field of its row, and the
rows' TT-NN and demo fields point at real code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from models.experimental.gr00t.common.layouts import LAYOUTS, get_layout
from models.experimental.gr00t.common.versions import SPECS, get_spec, load

CODE = Path(__file__).resolve().parents[5]
REGISTRY = {CODE / "models" / "experimental" / "gr00t" / "common" / n for n in ("versions.py", "layouts.py")}
NAMES = frozenset({s.name for s in SPECS.values()} | {s.layout for s in SPECS.values()}
                  | {s.embodiment for s in SPECS.values()} | set(LAYOUTS)
                  | {lay.version for lay in LAYOUTS.values()} | {lay.embodiment for lay in LAYOUTS.values()})


def _literals(node: ast.AST) -> list[object]:
    """The constants a comparison operand spells out: itself, or the items of a literal tuple/list/set."""
    if isinstance(node, ast.Constant):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant)]
    return []


def version_branches(source: str) -> list[tuple[int, str]]:
    """(line, code) of every comparison or match case against a registered name in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            if any(v in NAMES for side in (node.left, *node.comparators) for v in _literals(side)
                   if isinstance(v, str)):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.MatchValue) and isinstance(node.value, ast.Constant) and node.value.value in NAMES:
            found.append((node.lineno, f"case {node.value.value!r}"))
    return found


def sources() -> list[Path]:
    return sorted(p for p in CODE.rglob("*.py")
                  if "tests" not in p.relative_to(CODE).parts and "__pycache__" not in p.parts and p not in REGISTRY)


def test_the_scan_knows_the_registered_names_and_finds_a_branch():
    assert {"n15", "n17", "gr1", "droid", "oxe_droid_relative_eef_relative_joint"} <= NAMES
    snippet = ('if layout.version == "n15":\n    pass\nok = spec.name != other\n'
               'x = version in ("n17", "n99")\nmatch v:\n    case "gr1":\n        pass\n')
    assert [line for line, _ in version_branches(snippet)] == [1, 4, 6]


def test_no_source_outside_the_registry_branches_on_a_version_name():
    files = sources()
    assert len(files) > 80  # the scan saw the whole tree
    offenders = [f"{p.relative_to(CODE)}:{line}: {code}"
                 for p in files for line, code in version_branches(p.read_text())]
    assert not offenders, "version branches outside common/versions.py and common/layouts.py (make them fields of " \
                          "the VersionSpec or Layout row):\n" + "\n".join(offenders)


@pytest.mark.parametrize("version", sorted(v for v, spec in SPECS.items() if spec.ttnn))
def test_each_row_names_its_tt_code(version):
    from models.experimental.gr00t.tt.ttnn_policy import TTGr00tPolicyBase
    from models.experimental.gr00t.tt.weight_cache import device_tensors_for

    spec = get_spec(version)
    policy = load(spec.tt_policy_cls)
    assert issubclass(policy, TTGr00tPolicyBase) and policy.spec() is spec
    assert load(spec.config_cls) is policy.config_cls
    assert callable(load(spec.tt_model_builder)) and callable(load(spec.tt_blank_inputs))
    assert device_tensors_for(version) is load(spec.tt_device_tensors)


@pytest.mark.parametrize("version,layout_name", [(v, lay) for v, spec in sorted(SPECS.items()) for lay in spec.layouts])
def test_each_row_names_a_demo_scene_that_fits_its_layout(version, layout_name):
    from models.experimental.gr00t.common.demo import load_demo_request

    spec, layout = get_spec(version), get_layout(layout_name)
    scene = next(s.demo for s in spec.served if s.layout == layout_name)
    frames = load(scene.frames)(layout)
    assert list(frames) == list(layout.cameras)
    assert all(len(f) == layout.frames_per_camera for f in frames.values())
    assert list(load(scene.state)) == [name for name, _ in layout.state_groups]
    h = load(spec.config_cls).full().action_head
    assert scene.noise_shape == (h.action_horizon, h.action_dim)
    shipped = load_demo_request(version, layout_name)  # what make_demo.py wrote from this row
    assert shipped["instruction"] == scene.instruction and shipped["state"] == load(scene.state)
    assert list(shipped["images"]) == list(layout.cameras)
