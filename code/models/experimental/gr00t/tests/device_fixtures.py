# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the device tests (tests/pcc, tests/perf): a real p150a or a clean skip.

They need a Tenstorrent card (a /dev/tenstorrent* node, not the mock: a mock computes nothing). The card
is opened once with two command queues (the 1-CQ runners use CQ 0 only).
Weights: ``GR00T_TEST_WEIGHTS`` / ``GR00T_TEST_WEIGHTS_N17`` (a GR00T N1.5 / N1.7 snapshot directory, e.g.
the real checkpoint) or, by default, the full-size synthetic checkpoint generated once into
``$GR00T_CACHE/synthetic``. How to run: README, "TT-NN port" → "On a p150a".

The tap comparison (``tap_report``) and each version's reference taps (``reference_taps_n15``,
``reference_taps_n17``) are plain functions, so that CI runs them too: N1.7's on the golden model
(``tests/mock/test_tt_model_n17.py``), where the device test's tap names, shapes and reference hooks are
exercised without a card.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def require_device() -> None:
    from models.experimental.gr00t.tt.runner import device_present

    if os.environ.get("TT_METAL_MOCK_CLUSTER_DESC_PATH"):
        pytest.skip("device tests need a real p150a; this process is configured for the mock P150")
    if not device_present():
        pytest.skip("no Tenstorrent device (/dev/tenstorrent* absent): device tests run on a p150a only")


@pytest.fixture(scope="session")
def p150():
    require_device()
    from models.experimental.gr00t.tt.runner import close_model_device, open_model_device

    device = open_model_device((1, 1), num_cqs=2)
    yield device
    close_model_device(device)


def checkpoint_for(version: str) -> Path:
    require_device()
    explicit = os.environ.get({"n15": "GR00T_TEST_WEIGHTS", "n16": "GR00T_TEST_WEIGHTS_N16",
                               "n17": "GR00T_TEST_WEIGHTS_N17"}[version])
    if explicit:
        return Path(explicit)
    from models.experimental.gr00t.common.synthetic import synthetic_info, write_checkpoint

    cache = Path(os.environ.get("GR00T_DEVICE_TEST_CACHE") or Path.home() / ".cache" / "gr00t-p150")
    path = cache / "synthetic" / f"{version}-full-seed0"
    if synthetic_info(path) is None:
        write_checkpoint(path, scale="full", seed=0, version=version)
    return path


@pytest.fixture(scope="session")
def tt_cache_root() -> Path:
    return Path(os.environ.get("GR00T_TT_CACHE") or Path.home() / ".cache" / "gr00t-p150" / "tt")


def build_policy(device, checkpoint: Path, cache_root: Path, traced: bool, dtype_policy: str = "mixed_dit",
                 version: str = "n15", num_cqs: int = 1):
    from models.experimental.gr00t.common.versions import get_spec, load
    from models.experimental.gr00t.tt.policy import TTPolicy

    return load(get_spec(version).tt_policy_cls).build(
        checkpoint, device, cache_root=cache_root, weights_id=f"device-test-{checkpoint.name}",
        policy=TTPolicy(dtype_policy=dtype_policy), traced=traced, num_cqs=num_cqs)


def observations(layout):
    """Two different observations of the layout's version: the shipped demo (A) and a variant (B: other
    task, other state; N1.7 moves the end effector and the joints but keeps its rotation valid)."""
    import numpy as np

    from models.experimental.gr00t.common.demo import load_demo_request
    from models.experimental.gr00t.common.observation import parse_observation

    a = load_demo_request(layout.version)
    if "eef_9d" not in a["state"]:  # joint states (N1.5, N1.6): scaled and shifted
        state = {k: (np.asarray(v) * 0.5 + 0.1).tolist() for k, v in a["state"].items()}
    else:
        state = {k: np.asarray(v, dtype=np.float64) for k, v in a["state"].items()}
        state["eef_9d"][..., :3] += 0.05
        state["joint_position"] = state["joint_position"] * 0.9 + 0.05
        state = {k: v.tolist() for k, v in state.items()}
    b = {**a, "instruction": "put the red cube into the basket", "state": state}
    return parse_observation(a, layout), parse_observation(b, layout), a["noise"]


# ---- N1.5 taps: the module boundaries without a published gate (projector, each DiT evaluation, state token) ---
N15_REPORTED = ("vit_embeds", "state_features", "velocity_0", "velocity_1", "velocity_2", "velocity_3")


def reference_taps_n15(ref, inputs) -> dict:
    """The fp32 reference's taps for the N1.5 device comparison: ``infer``'s stage boundaries plus the first
    SigLIP block."""
    import torch

    taps = ref.infer(inputs)
    vit = ref.model.backbone.eagle_model.vision_model.vision_model
    with torch.inference_mode():
        taps["vit_block_first"] = vit.encoder.layers[0](vit.embeddings(inputs.pixel_values))
    return {k: v.float() for k, v in taps.items() if isinstance(v, torch.Tensor)}


# ---- N1.7 taps: the published package's gated boundaries that the Stage-1 port exposes -----------------
N17_REPORTED = ("vision_block_first", "vision_embeds", "deepstack_1", "deepstack_2", "backbone_features", "vl_embs",
                "state_features", "velocity_0", "velocity_1", "velocity_2", "velocity_3")


def reference_taps_n17(ref, inputs) -> dict:
    """The fp32 reference's taps for the N1.7 device comparison: ``infer``'s stage boundaries plus the first
    vision block, the DeepStack mergers (the vision model's own outputs) and the first text layer (a forward
    hook, before its DeepStack add)."""
    import torch

    qwen = ref.model.backbone.model.model
    hooks, seen = [], {}
    hooks.append(qwen.visual.blocks[0].register_forward_hook(lambda m, a, out: seen.setdefault("vision_block_first",
                                                                                                 out)))
    hooks.append(qwen.language_model.layers[0].register_forward_hook(
        lambda m, a, out: seen.setdefault("llm_layer_first", out[0] if isinstance(out, tuple) else out)))
    try:
        with torch.inference_mode():
            taps = ref.infer(inputs)
            _, deepstack = qwen.visual(inputs.pixel_values, inputs.image_grid_thw)
    finally:
        for h in hooks:
            h.remove()
    taps.update(seen)
    taps.update({f"deepstack_{i}": d for i, d in enumerate(deepstack)})
    return {k: v.float() for k, v in taps.items() if isinstance(v, torch.Tensor)}


def tap_report(got: dict, want: dict, gates: dict, reported: tuple[str, ...], seq_len: int) -> dict:
    """name → {pcc, max_abs, gate} for every gated and reported tap; TT tensors already on the host (float32).
    The padded prompt rows of the LLM-length taps are dropped (nothing reads them)."""
    from models.experimental.gr00t.common.quality import max_abs_diff, pcc

    report = {}
    for name, gate in (*gates.items(), *((n, None) for n in reported)):
        g, w = got[name].float(), want[name].float()
        if g.ndim == 3 and g.shape[1] > seq_len and w.shape[-2] == seq_len:
            g = g[:, :seq_len]
        g = g.reshape(w.shape)
        report[name] = {"pcc": pcc(g.numpy(), w.numpy()), "max_abs": max_abs_diff(g.numpy(), w.numpy()), "gate": gate}
    return report


def group_report(actions: dict, actions_ref: dict, keys) -> dict:
    """group → {pcc, max_abs, spread} of the served actions against the reference's (physical units)."""
    import numpy as np

    from models.experimental.gr00t.common.quality import max_abs_diff, pcc

    return {k: {"pcc": pcc(actions[k], actions_ref[k]), "max_abs": max_abs_diff(actions[k], actions_ref[k]),
                "spread": float(np.ptp(actions_ref[k]))} for k in keys}


def gate_failures(report: dict, groups: dict, action_gate: float) -> dict:
    """The gated taps under their gate, and the groups whose golden spread exceeds the serving floor
    (``SERVE_GROUP_SPREAD_MIN``) that are under ``action_gate``; a near-constant group is reported, not gated."""
    from models.experimental.gr00t.common.quality import SERVE_GROUP_SPREAD_MIN

    failed = {k: r for k, r in report.items() if r["gate"] is not None and not r["pcc"] >= r["gate"]}
    failed.update({k: g for k, g in groups.items()
                   if g["spread"] > SERVE_GROUP_SPREAD_MIN and not g["pcc"] >= action_gate})
    return failed
