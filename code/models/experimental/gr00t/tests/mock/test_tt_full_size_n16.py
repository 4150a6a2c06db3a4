# SPDX-License-Identifier: Apache-2.0
"""The full-size N1.6 TT model on the mock P150 (``make test-tt-full``; CI runs it): the full-size synthetic N1.6
checkpoint (≈6.6 GB) through the N1.6 weight rules (``tt/weight_layout_n16.device_tensors``) in the port's dtype
policy, uploaded to the mock's DRAM and built into ``TtGr00tN16`` for the GR1 tag (one 252×252 frame = 18×18 patches
→ 352 tile-padded patch rows in the Eagle 3 tower of 27 layers of 1152, 81 image tokens through the ``mlp1``
connector 4608 → 2048; the prompt padded to 224 rows through Qwen3's 16 kept layers and its final norm; the
AlternateVLDiT's 32 blocks of 1536 over 64 token rows, 4 Euler steps over the 50-row envelope), then run stage by
stage: every op validated and compiled at real widths (program configs, circular buffers, L1, DRAM), nothing
computed.

Checked: every converted weight read and every checkpoint tensor converted or deliberately unused; the SDPA and
norm census of each stage from the config; static stage outputs; no program rebuilt by a second forward (also with a
longer instruction, whose image rows move); and ``tt_expect.checked_sheet``: trace safety in ``TTRunner.capture``'s
order, the per-stage program budgets of ``tt_expect.PROGRAM_BUDGETS``, no matmul on the generic factory, L1 within
``census.L1_HEADROOM``, and the committed roofline sheet (``benchmarks/results/tt_roofline_n16.json``, written by
``code/scripts/bench/tt_roofline.py --version n16`` from the allocated model) equal to this model's.

The checkpoint: ``GR00T_TEST_WEIGHTS_N16`` (a snapshot directory) if set; else the full-size synthetic one the device
tests keep (``$GR00T_DEVICE_TEST_CACHE`` or ``~/.cache/gr00t-p150``, ``synthetic/n16-full-seed0``: read, never
written, when present); else generated once into this run's ``$GR00T_CACHE`` as the N1.5 full-size test does."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from .test_tt_full_size import _need_free_disk

pytestmark = [pytest.mark.mock, pytest.mark.slow]

LONG = "pick up the red apple from the wooden table and place it gently into the small basket on the left"


@pytest.fixture(scope="module")
def full_checkpoint_n16() -> Path:
    from models.experimental.gr00t.common.synthetic import synthetic_info, write_checkpoint

    explicit = os.environ.get("GR00T_TEST_WEIGHTS_N16")
    if explicit:
        return Path(explicit)
    name = Path("synthetic") / "n16-full-seed0"
    shared = Path(os.environ.get("GR00T_DEVICE_TEST_CACHE") or Path.home() / ".cache" / "gr00t-p150") / name
    here = Path(os.environ["GR00T_CACHE"]) / name  # this run's temporary cache (tests/conftest.py)
    for path in (shared, here):
        info = synthetic_info(path) or {}
        if (info.get("version"), info.get("scale"), info.get("seed")) == ("n16", "full", 0):
            return path
    _need_free_disk(here.parent, 8)  # the checkpoint (6.6 GB) with margin; no TT cache is written here
    write_checkpoint(here, scale="full", seed=0, version="n16")
    return here


@pytest.fixture(scope="module")
def full_model_n16(mock_device, full_checkpoint_n16):
    """(model, checkpoint names, names read, seconds to build): the full-size TT model over the checkpoint's
    converted tensors in DRAM. Its weights are freed after the module (the mock device is the session's)."""
    import ttnn

    from models.experimental.gr00t.common.checkpoint import LazyCheckpoint
    from models.experimental.gr00t.common.configs_n16 import Gr00tN16Config
    from models.experimental.gr00t.common.layouts import get_layout
    from models.experimental.gr00t.tt.policy import TTPolicy
    from models.experimental.gr00t.tt.ttnn_common import DeviceWeights
    from models.experimental.gr00t.tt.ttnn_gr00t_n16 import build_model
    from models.experimental.gr00t.tt.weight_layout_n16 import device_tensors

    t0 = time.perf_counter()
    ckpt, policy, read = LazyCheckpoint(full_checkpoint_n16), TTPolicy(), set()
    config = Gr00tN16Config.from_checkpoint(full_checkpoint_n16)

    def load(name):
        read.add(name)
        return ckpt.load(name, torch.float32)

    tensors = {name: ttnn.from_torch(t, dtype=getattr(ttnn, policy.weight_dtype(name)), device=mock_device,
                                     layout=ttnn.TILE_LAYOUT if lay == "tile" else ttnn.ROW_MAJOR_LAYOUT,
                                     memory_config=ttnn.DRAM_MEMORY_CONFIG)
               for name, t, lay in device_tensors(load, list(ckpt.names), config, get_layout("gr1_n16"))}
    model = build_model(DeviceWeights(mock_device, tensors, policy), config, get_layout("gr1_n16"))
    built = time.perf_counter() - t0
    yield model, list(ckpt.names), read, built
    for t in tensors.values():
        ttnn.deallocate(t)


def host_request(model, instruction: str) -> dict:
    """A GR1 request's host tensors at the model's static shapes: a zero frame, state and noise, a real prompt."""
    from models.experimental.gr00t.common.layouts import get_layout
    from models.experimental.gr00t.common.prompts_n16 import n16_prompt_ids

    s, h = model.shapes, model.config.action_head
    ids = n16_prompt_ids(instruction, [s.image_tokens], max_text_tokens=get_layout("gr1_n16").max_text_tokens)
    p = model.config.backbone.vision.patch_size
    return model.host_inputs([torch.zeros(3, hh * p, w * p) for hh, w in s.grids], torch.tensor([ids.input_ids]),
                             torch.zeros(1, 1, h.max_state_dim), torch.zeros(1, h.action_horizon, h.action_dim))


def test_full_size_n16_model_runs_stage_by_stage_and_is_trace_safe(full_model_n16, mock_device):
    import ttnn


    from .tt_expect import checked_sheet, expected_attention_calls_n16, expected_norm_calls_n16, stage_calltraces

    model, _, _, built = full_model_n16
    t0 = time.perf_counter()
    config, s = model.config, model.shapes
    b, h = config.backbone, config.action_head
    assert (s.grids, s.geometry.padded, s.image_tokens, s.seq_len, s.dit_tokens, s.horizon) == \
        (((18, 18),), 352, 81, 224, 64, 50)
    assert (b.vision.hidden_size, b.vision.num_hidden_layers, b.text.hidden_size, b.select_layer, h.dit.num_layers,
            h.dit.inner_dim) == (1152, 27, 2048, 16, 32, 1536)  # the full-size widths, not a tiny config
    host = host_request(model, "put the marker in the bowl")
    model.write_inputs(host)

    census, compiled, taps = stage_calltraces(model, mock_device)

    sdpa = {st: calls.count("ttnn.transformer.scaled_dot_product_attention") for st, calls in census.items()}
    assert sdpa == {"vision": b.vision.num_hidden_layers, "llm": b.select_layer, "adapter": 0,
                    "denoise": h.dit.num_layers * h.num_inference_timesteps} == \
        {"vision": 27, "llm": 16, "adapter": 0, "denoise": 128}
    assert sum(sdpa.values()) == expected_attention_calls_n16(config)
    norms = {st: (calls.count("ttnn.layer_norm"), calls.count("ttnn.rms_norm")) for st, calls in census.items()}
    assert norms == {"vision": (2 * 27 + 1 + 1, 0),  # pre-norms, post_layernorm, mlp1's LayerNorm
                     "llm": (0, 4 * 16 + 1),  # input / post-attention / q / k norms per layer, the final norm
                     "adapter": (1, 0),  # vlln only
                     "denoise": (4 * (2 * 32 + 1), 0)}  # per Euler step: norm1 / norm3 per block + norm_out
    want = expected_norm_calls_n16(config)
    assert (sum(n[0] for n in norms.values()), sum(n[1] for n in norms.values())) == \
        (want["layer_norm"], want["rms_norm"])
    assert model.w.used == set(model.w.names())  # every converted weight is read

    o = model.outputs
    assert tuple(o["image_tokens"].shape) == (1, 81, 2048)
    assert tuple(o["backbone_features"].shape) == tuple(o["vl_embs"].shape) == (1, 224, 2048)
    assert tuple(o["euler_state"].shape) == (1, 64, 128) and o["euler_state"].dtype == ttnn.float32
    assert tuple(taps["unshuffled"].shape) == (1, 81, 4608)
    dit_ff = model.w["action_head.model.transformer_blocks.0.ff.net.0.proj.weight"]
    assert dit_ff.dtype == ttnn.bfloat8_b and tuple(dit_ff.shape) == (1536, 6144)  # mixed_dit on the device

    again = mock_device.num_program_cache_entries()
    model.forward()
    model.write_inputs(host_request(model, LONG))  # the image rows move with the instruction: data, not shapes
    model.forward()
    assert mock_device.num_program_cache_entries() == again  # static shapes: nothing rebuilt

    # trace safety in TTRunner.capture's order, the program budgets, no generic matmul, L1 headroom and the committed
    # roofline sheet (benchmarks/results/tt_roofline_n16.json, from the allocated model: the same ops and bytes)
    sheet = checked_sheet("n16", model, host)
    print(f"full-size N1.6 on the mock P150: built in {built:.1f} s (checkpoint read, converted, uploaded), "
          f"{compiled} programs compiled, top-level calls per stage {({st: len(c) for st, c in census.items()})}, "
          f"device programs per stage {({st: r['programs'] for st, r in sheet.items()})}, "
          f"{time.perf_counter() - t0:.1f} s to run and check")


def test_every_full_size_checkpoint_tensor_is_converted_or_deliberately_unused(full_model_n16):
    from models.experimental.gr00t.tt.weight_layout_n16 import unused_tensors

    model, names, read, _ = full_model_n16
    unused = set(unused_tensors(names, model.config))
    assert read | unused == set(names) and not read & unused
    assert len(model.w.names()) > 27 * 12  # the whole tower, text layers and head, not a tiny subset
