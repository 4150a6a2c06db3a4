# SPDX-License-Identifier: Apache-2.0
"""The full-size N1.5 model through every TT module on the mock P150 (``make test-tt-full``; CI runs it).

Real shapes mean real program configs, L1/circular-buffer budgets and DRAM allocations on the p150a's
13×10 grid: the mock validates all of them (it computes nothing). The checkpoint is the full-size
synthetic one (≈7 GB; generated once into ``$GR00T_CACHE/synthetic`` like the server's
``synthetic:full``), converted through the weight cache as a real boot would."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from models.experimental.gr00t.common.configs_n15 import Gr00tN15Config
from models.experimental.gr00t.common.observation import parse_observation

from .tt_expect import captured_forward, count_calls, expected_attention_calls, expected_norm_calls

pytestmark = [pytest.mark.mock, pytest.mark.slow]


@pytest.fixture(scope="module")
def full_checkpoint() -> Path:
    from models.experimental.gr00t.common.synthetic import synthetic_info, write_checkpoint

    cache = Path(os.environ.get("GR00T_CACHE") or Path.home() / ".cache" / "gr00t-p150")
    path = cache / "synthetic" / "n15-full-seed0"  # the server's synthetic:full location
    if synthetic_info(path) is None:
        _need_free_disk(cache, NEEDS_GB)
        write_checkpoint(path, scale="full", seed=0, version="n15")
    return path


# The full checkpoint (6.5 GB) plus its TT weight cache (see the "TT weight cache written" line), with margin.
NEEDS_GB = 14


def _need_free_disk(where: Path, gigabytes: float) -> None:
    """Fail before writing gigabytes, with the numbers, rather than deep inside a tensor dump (ENOSPC)."""
    where.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(where).free / 1e9
    if free < gigabytes:
        pytest.fail(f"the full-size tests write about {gigabytes} GB under {where} (checkpoint + TT cache); "
                    f"only {free:.1f} GB is free there. Free disk, or point TMPDIR / --basetemp elsewhere.")


@pytest.fixture(scope="module")
def full_policy(mock_device, full_checkpoint, tmp_path_factory):
    from models.experimental.gr00t.tt.ttnn_policy_n15 import TTGr00tPolicy

    lines: list[str] = []
    root = tmp_path_factory.mktemp("tt-cache")
    t0 = time.perf_counter()
    policy = TTGr00tPolicy.build(full_checkpoint, mock_device, cache_root=root, weights_id="full-seed0", traced=False,
                                 log=lines.append)
    print(*lines, f"built in {time.perf_counter() - t0:.1f} s", sep="\n")
    return policy, lines, root


def test_full_size_model_runs_through_every_tt_module(full_policy, mock_device):
    import ttnn

    from models.experimental.gr00t.common.demo import load_demo_request

    policy, lines, _ = full_policy
    assert policy.config == Gr00tN15Config.full()
    assert any(line.startswith("TT weight cache written:") for line in lines)  # conversion time and size printed
    request = load_demo_request("n15")
    inputs = policy.prepare(parse_observation(request, policy.layout), noise=request["noise"])
    m = policy.model
    m.write_inputs(m.host_inputs(inputs.pixel_values, inputs.input_ids, inputs.state, inputs.noise))
    taps, calls, programs = captured_forward(m, mock_device)
    print(f"full-size forward on the mock P150: {len(calls)} calls, {programs} programs built")
    assert programs > 50
    assert (count_calls(calls, "transformer.scaled_dot_product_attention") == expected_attention_calls(policy.config)
            == 27 + 12 + 4 + 16 * 4)
    norms = expected_norm_calls(policy.config)
    assert (count_calls(calls, "layer_norm"),
            count_calls(calls, "rms_norm")) == (norms["layer_norm"], norms["rms_norm"])
    assert m.w.used == set(m.w.names())
    assert tuple(taps["vision_features"].shape) == (1, 256, 1152)
    assert tuple(taps["backbone_features"].shape) == (1, 384, 2048)
    assert tuple(taps["vl_embs"].shape) == (1, 384, 2048)
    assert tuple(taps["action_pred"].shape) == (1, 16, 32) and taps["action_pred"].dtype == ttnn.float32
    dit_ff = m.w["action_head.model.transformer_blocks.0.ff.net.0.proj.weight"]
    assert dit_ff.dtype == ttnn.bfloat8_b and tuple(dit_ff.shape) == (1536, 6144)  # mixed_dit on the device


def test_second_boot_reads_only_the_cache(full_policy, full_checkpoint):
    from models.experimental.gr00t.tt.policy import TTPolicy
    from models.experimental.gr00t.tt.weight_cache import convert_checkpoint

    policy, _, root = full_policy
    t0 = time.perf_counter()
    info = convert_checkpoint(full_checkpoint, root, weights_id="full-seed0", policy=TTPolicy(), layout=policy.layout,
                              log=lambda _: None)
    assert not info.converted and info.tensors == len(policy.model.w.names())
    assert time.perf_counter() - t0 < 5.0  # a manifest read, no tensor touched


def test_full_size_model_is_trace_safe_and_within_its_budgets(full_policy):
    """``tt/tools/trace_safety.py`` at full size (the real allocation order of ``TTRunner.capture`` on the p150a's DRAM)
    and the budgets of ``tt_expect.checked_sheet``: programs per stage, matmul factories, L1 headroom, the
    committed roofline sheet."""
    from models.experimental.gr00t.common.demo import load_demo_request

    from .tt_expect import checked_sheet

    policy, _, _ = full_policy
    request = load_demo_request("n15")
    inputs = policy.prepare(parse_observation(request, policy.layout), noise=request["noise"])
    checked_sheet("n15", policy.model, policy.model.host_inputs_for(inputs))
