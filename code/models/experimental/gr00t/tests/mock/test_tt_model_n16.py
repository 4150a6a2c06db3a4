# SPDX-License-Identifier: Apache-2.0
"""The whole N1.6 TT model (``tt/ttnn_gr00t_n16.py``) at tiny scale, from the synthetic checkpoint in the real
format through the N1.6 weight rules (``tt/weight_layout_n16.device_tensors``), on the GR1 demo request.

Golden path: the unchanged TT code with every ttnn op replaced by its golden function must reproduce the fp32
reference policy (``reference/torch_policy_n16``) at every stage tap — the image tokens, the backbone feature
(final norm applied), vl_embs (vlln only), the state token, each Euler step's velocity and the chunk — within
1e-5 of each tap's peak, for two instructions of different lengths on the SAME built model (N1.6's prompt puts
the instruction before the images, so the image rows move with it). Negative controls show the comparison has
teeth: the text / image cross masks swapped, the final norm left out, the image tokens placed one row off."""

from __future__ import annotations

import pytest
import torch

from models.experimental.gr00t.common.errors import InputError
from models.experimental.gr00t.common.quality import max_abs_diff

from .tt_expect import assert_each_stage_reads_its_declared_inputs, reference_case, run_golden, tap_pairs

pytestmark = pytest.mark.mock

TAPS = ("image_tokens", "backbone_features", "vl_embs", "state_features",
        "velocity_0", "velocity_1", "velocity_2", "velocity_3", "action_pred")
BACKBONE_TAPS = TAPS[:3]
HEAD_TAPS = TAPS[4:]
TOLERANCE = 1e-5  # of each tap's peak: fp32 golden math must equal the reference up to rounding
CAUGHT = 1e-3  # of the peak, 100 × TOLERANCE: what a negative control must at least miss by
LONG = "pick up the red apple from the wooden table and place it gently into the small basket on the left"


@pytest.fixture(scope="module")
def checkpoint(tiny_checkpoints):
    return tiny_checkpoints["n16"]


@pytest.fixture(scope="module")
def reference(mock_device, checkpoint):
    """(policy, [(inputs, taps)] for the demo instruction and a longer one). ``mock_device`` first: the mock
    runtime must be configured before anything imports ttnn."""
    from models.experimental.gr00t.common.demo import load_demo_request
    from models.experimental.gr00t.common.observation import parse_observation

    ref, inputs, taps = reference_case("n16", checkpoint)
    request = load_demo_request("n16")
    request["instruction"] = LONG
    longer = ref.prepare(parse_observation(request, ref.layout), noise=request["noise"])
    return ref, [(inputs, taps), (longer, ref.infer(longer))]


@pytest.fixture(scope="module")
def golden(checkpoint, reference):
    """The TT model built once on host weights (the device cache's rules and dtype policy) for golden execution,
    and the checkpoint tensors its weight rules read."""
    from models.experimental.gr00t.common.checkpoint import LazyCheckpoint
    from models.experimental.gr00t.tt.policy import TTPolicy
    from models.experimental.gr00t.tt.tools.golden_ops import HOST_DEVICE, GoldenModel, golden_execution
    from models.experimental.gr00t.tt.ttnn_common import DeviceWeights
    from models.experimental.gr00t.tt.ttnn_gr00t_n16 import build_model
    from models.experimental.gr00t.tt.weight_layout_n16 import device_tensors

    ref, _ = reference
    ckpt, read, policy = LazyCheckpoint(checkpoint), set(), TTPolicy()

    def load(name):
        read.add(name)
        return ckpt.load(name, torch.float32)

    with golden_execution("fp32") as shim:
        weights = {name: shim.from_torch(t, dtype=getattr(shim, policy.weight_dtype(name)))
                   for name, t, _ in device_tensors(load, list(ckpt.names), ref.config, ref.layout)}
        w = DeviceWeights(HOST_DEVICE, weights, policy)
        model = build_model(w, ref.config, ref.layout)
    return GoldenModel(model, "fp32", w), read, list(ckpt.names)


def relative(tt: dict, taps: dict, seq_len: int) -> dict[str, float]:
    """max |TT − reference| / the reference tap's peak |x|, per tap."""
    return {name: max_abs_diff(got.numpy(), want.numpy()) / max(float(want.abs().max()), 1e-12)
            for name, (got, want) in tap_pairs(tt, taps, TAPS, seq_len).items()}


def image_rows(inputs, ref) -> list[int]:
    return (inputs.input_ids[0] == ref.config.backbone.image_token_index).nonzero().flatten().tolist()


def test_static_shapes_of_gr1(golden, reference):
    ref, cases = reference
    s = golden[0].shapes
    # 14 template + 2 suffix + (5 + 81 + 2) for the one image, + the 102-token instruction limit = 206 → 224
    assert (s.grids, s.image_tokens, s.seq_len, s.dit_tokens, s.horizon) == (((18, 18),), 81, 224, 64, 50)
    assert all(inputs.input_ids.shape[1] < s.seq_len for inputs, _ in cases)  # the padding is exercised


def test_the_n16_tt_data_flow_equals_the_fp32_reference_for_two_instruction_lengths(golden, reference):
    ref, cases = reference
    model = golden[0]
    (short, _), (long_, _) = cases
    assert long_.input_ids.shape[1] > short.input_ids.shape[1]
    assert image_rows(long_, ref)[0] > image_rows(short, ref)[0]  # the image rows moved with the instruction
    for inputs, taps in cases:
        s = inputs.input_ids.shape[1]
        rel = relative(run_golden(model, inputs), taps, s)
        print(f"golden N1.6 TT data flow vs fp32 reference (S = {s}, image rows from {image_rows(inputs, ref)[0]}), "
              "max |d| / peak:", ", ".join(f"{k} {v:.1e}" for k, v in rel.items()))
        assert max(rel.values()) < TOLERANCE, rel
        assert max_abs_diff(taps["action_pred"].numpy(), inputs.noise.numpy()) > 0.1  # the model moved the chunk


def test_every_checkpoint_tensor_is_read_or_deliberately_unused(golden, reference):
    from models.experimental.gr00t.tt.weight_layout_n16 import unused_tensors

    ref, _ = reference
    model, read, names = golden
    w = model.weights
    assert w.used == set(w.names())  # every converted tensor is read by the forward passes above
    assert read | set(unused_tensors(names, ref.config)) == set(names)
    assert not read & set(unused_tensors(names, ref.config))


def swap_masks(host):
    host["text_keys"], host["image_keys"] = host["image_keys"], host["text_keys"]


def shift_placement(host):
    host["placement"] = torch.roll(host["placement"], 1, dims=1)  # every image token one row later


NEGATIVE = {"swapped text / image masks": (swap_masks, HEAD_TAPS, BACKBONE_TAPS),
            "image tokens one row off": (shift_placement, ("backbone_features", *HEAD_TAPS), ("image_tokens",))}


@pytest.mark.parametrize("case", list(NEGATIVE))
def test_wrong_host_inputs_would_be_caught(golden, reference, case):
    mutate, broken, intact = NEGATIVE[case]
    _, [(inputs, taps), _] = reference
    rel = relative(run_golden(golden[0], inputs, mutate), taps, inputs.input_ids.shape[1])
    print(f"{case}: max |d| / peak", {k: f"{v:.1e}" for k, v in rel.items()})
    assert max(rel[k] for k in intact) < TOLERANCE, rel
    assert min(rel[k] for k in broken) > CAUGHT, rel


def test_a_missing_final_norm_would_be_caught(golden, reference):
    _, [(inputs, taps), _] = reference
    model = golden[0].model
    q = model.qwen3
    try:
        def no_norm(x):
            for i in range(q.n):
                x = q.layer(x, i)
            return x
        model.qwen3 = no_norm
        rel = relative(run_golden(golden[0], inputs), taps, inputs.input_ids.shape[1])
    finally:
        model.qwen3 = q
    print("no final norm: max |d| / peak", {k: f"{v:.1e}" for k, v in rel.items()})
    assert rel["image_tokens"] < TOLERANCE
    assert min(rel[k] for k in ("backbone_features", *HEAD_TAPS)) > CAUGHT, rel


def test_the_splice_multiplies_tile_aligned_zero_padding(golden, reference):
    """The placement matmul's inner dimension is the image-token count tile-padded (GR1 81 → 96), so the device
    multiplies no tile-padding row of the tokens (on a card those may hold anything, NaN included: 0 × NaN = NaN):
    the tokens reach the matmul as 96 rows whose last 15 are exact zeros, and the placement's columns 81 … 95 are
    zero. Here the tokens' padding rows are poisoned with NaN after the pad to show that the product would then be
    NaN (the padding really is multiplied), and that the real splice stays finite."""
    _, [(inputs, _), _] = reference
    model = golden[0]
    s = model.shapes
    assert (s.image_tokens, s.placement_k) == (81, 96) and s.placement_k % 32 == 0
    seen = {}
    with model.execution() as shim:
        host = model.host_tensors_for(inputs)
        assert tuple(host["placement"].shape) == (1, s.seq_len, 96) and not host["placement"][..., 81:].any()
        assert host["placement"].sum() == 81  # one 1 per image token
        tokens = torch.randn(1, 81, model.config.backbone.text.hidden_size)
        matmul = shim.matmul

        def recording(a, b, *args, **kwargs):
            seen["a"], seen["b"] = a.clone(), b.clone()
            return matmul(a, b, *args, **kwargs)

        shim.matmul = recording
        try:
            ids = host["input_ids"].to(torch.int64)
            clean = model.model.splice(ids, host["placement"], tokens)
        finally:
            shim.matmul = matmul
    assert tuple(seen["b"].shape) == (1, 96, tokens.shape[-1]) and not seen["b"][:, 81:].any()
    assert torch.equal(seen["b"][:, :81], tokens) and torch.isfinite(clean).all()
    poisoned = seen["b"].clone()
    poisoned[:, 81:] = float("nan")
    assert torch.isnan(seen["a"] @ poisoned).any()  # unpadded garbage rows would reach the output


def test_inputs_off_the_static_geometry_are_refused(golden, reference):
    ref, [(i, _), _] = reference
    model = golden[0]
    other = torch.zeros(1, 3, 252, 336)
    extra_image_row = i.input_ids.clone()
    extra_image_row[0, 1] = ref.config.backbone.image_token_index
    too_long = torch.cat([i.input_ids, i.input_ids[:, :200]], dim=1)
    cases = {"images": (other, i.input_ids, i.state, i.noise),
             "instruction": (i.pixel_values, too_long, i.state, i.noise),
             "noise": (i.pixel_values, i.input_ids, i.state, i.noise[:, :16]),
             "state": (i.pixel_values, i.input_ids, i.state[..., :32], i.noise)}
    with model.execution():
        for field, args in cases.items():
            with pytest.raises(InputError) as err:
                model.host_inputs(*args)
            assert err.value.field == field
        with pytest.raises(InputError, match="IMG_CONTEXT"):
            model.host_inputs(i.pixel_values, extra_image_row, i.state, i.noise)


# ---- the same model on the mock P150 ---------------------------------------------------------------
@pytest.fixture(scope="module")
def mock_model(mock_device, checkpoint, reference):
    """The tiny model on the mock P150: weights through the N1.6 rules in the policy's dtypes, uploaded to DRAM."""
    import ttnn

    from models.experimental.gr00t.common.checkpoint import LazyCheckpoint
    from models.experimental.gr00t.tt.policy import TTPolicy
    from models.experimental.gr00t.tt.runner import upload
    from models.experimental.gr00t.tt.ttnn_gr00t_n16 import build_model
    from models.experimental.gr00t.tt.weight_layout_n16 import device_tensors

    ref, _ = reference
    ckpt, policy = LazyCheckpoint(checkpoint), TTPolicy()
    host = {name: ttnn.from_torch(t, dtype=getattr(ttnn, policy.weight_dtype(name)),
                                  layout=ttnn.TILE_LAYOUT if lay == "tile" else ttnn.ROW_MAJOR_LAYOUT)
            for name, t, lay in device_tensors(lambda n: ckpt.load(n, torch.float32), list(ckpt.names), ref.config,
                                               ref.layout)}
    return build_model(upload(mock_device, host), ref.config, ref.layout)


@pytest.fixture(scope="module")
def mock_forward(mock_model, reference, mock_device):
    from .tt_expect import captured_forward

    _, [(inputs, _), _] = reference
    mock_model.write_inputs(mock_model.host_inputs_for(inputs))
    return captured_forward(mock_model, mock_device)


def test_the_n16_model_runs_on_the_mock_p150(mock_forward, mock_model, mock_device):
    """Every op validated and compiled, the op graph the config implies, static stage outputs in DRAM, every
    weight read, no program rebuilt by a second forward."""
    import ttnn

    from .tt_expect import assert_static_taps_in_dram, expected_layer_ops, layer_ops

    taps, calls, _ = mock_forward
    c, s = mock_model.config, mock_model.shapes
    assert layer_ops(calls) == expected_layer_ops(c)
    d = c.backbone.text.hidden_size
    assert_static_taps_in_dram(taps, {
        "image_tokens": ((1, 81, d), ttnn.bfloat16), "backbone_features": ((1, 224, d), ttnn.bfloat16),
        "vl_embs": ((1, 224, d), ttnn.bfloat16), "state_features": ((1, 1, c.action_head.input_embedding_dim),
                                                                    ttnn.bfloat16),
        "velocity_0": ((1, 50, 128), ttnn.bfloat16), "action_pred": ((1, 50, 128), ttnn.float32)})
    w = mock_model.w
    assert w.used == set(w.names())
    before = mock_device.num_program_cache_entries()
    mock_model.forward()
    assert mock_device.num_program_cache_entries() == before
    assert s.seq_len == 224


def test_each_n16_stage_reads_exactly_the_inputs_it_declares(mock_model, mock_forward):
    assert_each_stage_reads_its_declared_inputs(mock_model)


def test_n16_inputs_off_the_geometry_are_refused_before_any_device_write(mock_model, reference, monkeypatch):
    import ttnn

    _, [(i, _), _] = reference
    writes = []
    monkeypatch.setattr(ttnn, "copy_host_to_device_tensor", lambda *a, **k: writes.append(a))
    with pytest.raises(InputError) as err:
        mock_model.write_inputs(mock_model.host_inputs(torch.zeros(1, 3, 252, 336), i.input_ids, i.state, i.noise))
    assert err.value.field == "images" and writes == []


def test_every_n16_stage_is_trace_safe(mock_model, reference):
    """``tt/tools/trace_safety.py`` in ``TTRunner.capture``'s order: no host I/O inside a stage, no dangling read, no
    allocation over a buffer a replay needs, and every persistent input read (the moving placement and masks too)."""
    from models.experimental.gr00t.tt.runner import STAGES
    from models.experimental.gr00t.tt.tools.trace_safety import check

    _, [(inputs, _), _] = reference
    report = check(mock_model, mock_model.host_inputs_for(inputs))
    assert report.ok, report.violations
    assert list(report.stages) == list(STAGES)
    read = set().union(*(g.read for g in report.stages.values()))
    assert {t.buffer_address() for t in mock_model.inputs.values()} <= read


def test_the_tt_policy_builds_for_the_checkpoints_own_image_chain(mock_device, checkpoint, tmp_path):
    """The static image grids come from the checkpoint's processor config, not from defaults: with
    ``shortest_image_edge`` 224 a 256×256 GR1 frame lands on 224×224 (16×16 patches, 64 tokens), and the TT policy
    (``served_layout`` → ``Layout.image_grids`` → the weight rules, the cache key and ``StaticShapesN16``) builds for
    exactly what its own ``prepare`` produces; the default checkpoint keeps 18×18."""
    import json
    import shutil

    from models.experimental.gr00t.common.demo import load_demo_request
    from models.experimental.gr00t.common.inputs_n16 import N16Host
    from models.experimental.gr00t.common.layouts import N16_LAYOUTS
    from models.experimental.gr00t.common.observation import parse_observation
    from models.experimental.gr00t.tt.policy import TTPolicy
    from models.experimental.gr00t.tt.ttnn_policy_n16 import TTGr00tPolicyN16
    from models.experimental.gr00t.tt.weight_cache import cache_key

    other = tmp_path / "n16-edge224"
    shutil.copytree(checkpoint, other)
    processor = json.loads((other / "processor_config.json").read_text())
    processor["processor_kwargs"]["shortest_image_edge"] = 224
    (other / "processor_config.json").write_text(json.dumps(processor))
    row = N16_LAYOUTS["gr1"]
    layouts = {name: TTGr00tPolicyN16.served_layout(row, N16Host.from_checkpoint(path, row))
               for name, path in (("default", checkpoint), ("edge224", other))}
    assert {k: v.image_grids for k, v in layouts.items()} == {"default": ((18, 18),), "edge224": ((16, 16),)}
    assert len({cache_key("same-weights", TTPolicy(), lay) for lay in layouts.values()}) == 2

    policy = TTGr00tPolicyN16.build(other, mock_device, cache_root=tmp_path / "cache", weights_id="edge224",
                                    traced=False, num_cqs=1, log=lambda _: None)
    assert policy.model.shapes.grids == ((16, 16),) and policy.model.shapes.image_tokens == 64
    assert policy.layout.image_grids == ((16, 16),) and policy.chunk_shape == (16, 128)
    request = load_demo_request("n16")
    inputs = policy.prepare(parse_observation(request, policy.layout), noise=request["noise"])
    assert tuple(inputs.pixel_values.shape) == (1, 3, 224, 224)
    policy.model.write_inputs(policy.model.host_inputs_for(inputs))  # fits the static geometry
    policy.model.forward()
