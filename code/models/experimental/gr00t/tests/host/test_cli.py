# SPDX-License-Identifier: Apache-2.0
"""The command-line tools: run_reference.py writes the actions, and bad inputs end with one clear line
and a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from models.experimental.gr00t.common.layouts import GR1
from models.experimental.gr00t.common.observation import parse_observation

SCRIPTS = Path(__file__).resolve().parents[5] / "scripts" / "operate"


def run(script: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPTS / script), *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def assert_one_line_error(proc: subprocess.CompletedProcess, pattern: str) -> None:
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert pattern in lines[0], lines[0]


@pytest.fixture
def obs_file(tmp_path, gr1_request):
    path = tmp_path / "obs.json"
    path.write_text(json.dumps(gr1_request))
    return path


def test_run_reference_writes_the_policy_answer(tmp_path, tiny_checkpoint, tiny_policy, obs_file, gr1_request):
    noise = np.random.default_rng(0).standard_normal((16, 32)).tolist()
    (tmp_path / "noise.json").write_text(json.dumps({"noise": noise}))
    proc = run("run_reference.py", "--checkpoint", tiny_checkpoint, "--observation", obs_file,
               "--noise", tmp_path / "noise.json", "--out", tmp_path / "out.json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads((tmp_path / "out.json").read_text())
    expected = tiny_policy.get_action(parse_observation(gr1_request, GR1), noise=noise)
    for key, value in expected.actions.items():
        assert np.array_equal(np.asarray(out["actions"][key], np.float32), value)
    assert (out["seq_len"], out["prompt_tokens"], out["noise_source"], out["seed"]) == (296, 14, "client", None)
    assert out["weights"]["synthetic"] is True and "SYNTHETIC" in proc.stderr


def test_run_reference_seed_is_reproducible(tmp_path, tiny_checkpoint, obs_file):
    outs = []
    for name in ("a", "b"):
        proc = run("run_reference.py", "--checkpoint", tiny_checkpoint, "--observation", obs_file, "--seed", 5,
                   "--out", tmp_path / f"{name}.json")
        assert proc.returncode == 0, proc.stderr
        outs.append(json.loads((tmp_path / f"{name}.json").read_text())["actions"])
    assert outs[0] == outs[1]


def test_missing_files_are_one_line(tmp_path, tiny_checkpoint, obs_file):
    assert_one_line_error(run("run_reference.py", "--checkpoint", tiny_checkpoint, "--observation",
                              tmp_path / "nope.json", "--out", tmp_path / "o.json"), "observation file not found")
    assert_one_line_error(run("run_reference.py", "--checkpoint", tmp_path / "nockpt", "--observation", obs_file,
                              "--out", tmp_path / "o.json"), "config.json: not found")


def test_wrong_tensor_shape_is_one_line(tmp_path, tiny_checkpoint, obs_file):
    from safetensors import safe_open
    from safetensors.torch import save_file

    broken = shutil.copytree(tiny_checkpoint, tmp_path / "broken")
    index = json.loads((broken / "model.safetensors.index.json").read_text())
    name = "action_head.model.proj_out_2.bias"
    shard = broken / index["weight_map"][name]
    with safe_open(str(shard), "pt") as fh:
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    tensors[name] = tensors[name][:-1].clone()
    save_file(tensors, str(shard))
    proc = run("run_reference.py", "--checkpoint", broken, "--observation", obs_file, "--out", tmp_path / "o.json")
    assert_one_line_error(proc, "shape mismatch")
    assert name in proc.stderr


def test_unknown_state_group_and_oversize_prompt_are_one_line(tmp_path, tiny_checkpoint, gr1_request):
    bad = dict(gr1_request, state={**gr1_request["state"], "waist": [[0.0, 0.0, 0.0]]})
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    assert_one_line_error(run("run_reference.py", "--checkpoint", tiny_checkpoint, "--observation",
                              tmp_path / "bad.json", "--out", tmp_path / "o.json"), "state.waist: unknown state group")
    long = dict(gr1_request, instruction="a" + " a" * 200)
    (tmp_path / "long.json").write_text(json.dumps(long))
    assert_one_line_error(run("run_reference.py", "--checkpoint", tiny_checkpoint, "--observation",
                              tmp_path / "long.json", "--out", tmp_path / "o.json"), "limit is 102")


def test_synthetic_cli_refuses_a_non_empty_output(tmp_path, tiny_checkpoint):
    assert_one_line_error(run("make_synthetic_checkpoint.py", "--scale", "tiny", "--out", tiny_checkpoint), "not empty")


def test_run_reference_serves_n17_checkpoints_too(tmp_path, tiny_checkpoint_n17):
    """The version comes from the checkpoint's config.json; the DROID layout follows."""
    from models.experimental.gr00t.common.demo import load_demo_request

    request = load_demo_request("n17")
    (tmp_path / "obs.json").write_text(json.dumps({k: request[k] for k in ("images", "state", "instruction")}))
    proc = run("run_reference.py", "--checkpoint", tiny_checkpoint_n17, "--observation", tmp_path / "obs.json",
               "--out", tmp_path / "o.json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads((tmp_path / "o.json").read_text())
    assert {k: np.shape(v) for k, v in out["actions"].items()} == {"eef_9d": (40, 9), "gripper_position": (40, 1),
                                                                    "joint_position": (40, 7)}
    assert (out["version"], out["layout"], out["seq_len"], out["seed"]) == ("n17", "droid", 469, 42)
