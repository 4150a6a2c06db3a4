# SPDX-License-Identifier: Apache-2.0
"""What a forward pass of the TT model must contain, derived from the config (not from the TT code):
the op counts the mock tests compare a captured op graph against, and the device-side expectations
shared by the tiny and full-size mock tests."""

from __future__ import annotations

from collections import Counter

from models.experimental.gr00t.common.configs_n15 import Gr00tN15Config


def expected_attention_calls(config: Gr00tN15Config) -> int:
    """One SDPA per attention layer: SigLIP + Qwen3 (kept layers) + VL self-attention + DiT × Euler steps."""
    e, h = config.backbone, config.action_head
    return (e.vision.num_hidden_layers + e.select_layer + h.vl_self_attention.num_layers
            + h.dit.num_layers * h.num_inference_timesteps)


def expected_norm_calls(config: Gr00tN15Config) -> Counter:
    e, h = config.backbone, config.action_head
    layer_norms = (2 * e.vision.num_hidden_layers + 1  # SigLIP pre-norms + post_layernorm
                   + 1 + 2 * h.vl_self_attention.num_layers  # vlln + adapter blocks
                   + h.num_inference_timesteps * (2 * h.dit.num_layers + 1))  # DiT norm1/norm3 + norm_out per step
    rms_norms = 4 * e.select_layer + 1  # input/post-attention + per-head q/k norms, final norm
    return Counter({"layer_norm": layer_norms, "rms_norm": rms_norms})


def expected_attention_calls_n17(config) -> int:
    """N1.7: Qwen3-VL vision blocks + kept text layers + VL self-attention + AlternateVLDiT × Euler steps."""
    b, h = config.backbone, config.action_head
    return (b.vision.depth + b.select_layer + h.vl_self_attention.num_layers
            + h.dit.num_layers * h.num_inference_timesteps)


def expected_norm_calls_n17(config) -> Counter:
    b, h = config.backbone, config.action_head
    layer_norms = (2 * b.vision.depth + len(b.vision.deepstack_visual_indexes) + 1  # blocks, DeepStack + final mergers
                   + 1 + 2 * h.vl_self_attention.num_layers  # vlln + adapter blocks
                   + h.num_inference_timesteps * (2 * h.dit.num_layers + 1))  # DiT norm1/norm3 + norm_out per step
    rms_norms = 4 * b.select_layer  # input/post-attention + per-head q/k norms; N1.7 applies no final norm
    return Counter({"layer_norm": layer_norms, "rms_norm": rms_norms})


def expected_attention_calls_n16(config) -> int:
    """N1.6: SigLIP2 layers + kept Qwen3 layers + AlternateVLDiT × Euler steps (no VL self-attention)."""
    b, h = config.backbone, config.action_head
    return b.vision.num_hidden_layers + b.select_layer + h.dit.num_layers * h.num_inference_timesteps


def expected_norm_calls_n16(config) -> Counter:
    b, h = config.backbone, config.action_head
    layer_norms = (2 * b.vision.num_hidden_layers + 1 + 1  # SigLIP2 pre-norms + post_layernorm, mlp1's LayerNorm
                   + 1  # vlln (no adapter blocks)
                   + h.num_inference_timesteps * (2 * h.dit.num_layers + 1))  # DiT norm1/norm3 + norm_out per step
    rms_norms = 4 * b.select_layer + 1  # input/post-attention + per-head q/k norms, the final norm N1.6 applies
    return Counter({"layer_norm": layer_norms, "rms_norm": rms_norms})


EXPECTED_LAYER_CALLS = {"n15": (expected_attention_calls, expected_norm_calls),
                        "n16": (expected_attention_calls_n16, expected_norm_calls_n16),
                        "n17": (expected_attention_calls_n17, expected_norm_calls_n17)}
LAYER_OPS = ("transformer.scaled_dot_product_attention", "layer_norm", "rms_norm", "embedding")


def expected_layer_ops(config) -> dict[str, int]:
    """``LAYER_OPS``' calls in one forward of the config's TT model: one SDPA per attention layer, every
    LayerNorm and RMSNorm, one embedding lookup."""
    attention, norms = EXPECTED_LAYER_CALLS[config.version]
    return {"transformer.scaled_dot_product_attention": attention(config), **norms(config), "embedding": 1}


# Device programs per request and stage at full size (``program_execution`` nodes of each stage's graph, as
# ``tt/tools/trace_safety.py`` captures it), the regression budget of ``make test-tt-full``: a stage that grows fails.
# Measured by the full-size tests' printouts (``pytest -s -m slow tests/mock/test_tt_full_size*.py``). History:
# the AdaLN fold (``ttnn_common.modulated_layer_norm``) took N1.5 from 1,835 (denoise 1,096) to 1,699 and N1.7
# from 3,172 (denoise 2,084) to 2,908; SDPA writing its heads concatenated (``output_concat_heads``, one
# program per attention layer) took N1.5 to 1,592 and N1.7 to 2,736; RoPE as ttnn's fused ``rotary_embedding_hf``
# (one program instead of a matmul, two multiplies and an add, for q and k of every layer) took N1.5 to 1,520 and
# N1.7 (text and vision) to 2,496; the DiT's FF1 on an explicit 1-D config with its tanh GELU fused
# (``tt/matmul_configs.py``) took N1.5 to 1,456 and N1.7 to 2,368; the action head's softmax scale folded into q
# (SDPA at scale 1 skips its per-layer mask multiply) and the cross-attention q/k/v as per-head batched matmuls (no
# head-split programs; K's bias dropped, V's folded into the output bias: ``weight_layout._attention``) took N1.5 to
# 1,316 and N1.7 to 2,092; the action head's SiLU / ReLU fused into their matmuls and the Euler step as one mixed-dtype
# add (dt folded into the decoder's last layer) took N1.5 to 1,299 and N1.7 to 2,075; Qwen3's SwiGLU SiLU run inside
# the multiply took N1.5 to 1,287 and N1.7 to 2,059; the long-activation matmuls on explicit 2-D configs with the
# vision towers' and the adapter's GELU fused took N1.5 to 1,256 and N1.7 to 2,031; the tile-aligned DiT token order
# (actions first, the Euler state kept at the DiT's padded rows: one addcmul per step instead of an add, a 4-part
# concat and a slice; +1 adapter program for the per-request base) took N1.5 to 1,221 and N1.7 to 2,000; RTC's
# inpainting inside the denoise trace (one ``where`` before each Euler step after the first and one after the last:
# +4) took N1.5 to 1,225 and N1.7 to 2,004. N1.6 (GR1: 352 patch rows, a 224-row prompt, N1.7's AlternateVLDiT
# without VL self-attention) entered at 1,904 (``test_tt_full_size_n16.py``). Lower a budget when a rewrite lowers
# the count.
PROGRAM_BUDGETS = {
    "n15": {"vision": 274, "llm": 203, "adapter": 60, "denoise": 688},
    "n16": {"vision": 279, "llm": 261, "adapter": 36, "denoise": 1328},
    "n17": {"vision": 334, "llm": 266, "adapter": 76, "denoise": 1328},
}


# A micro-batching bucket runs the same op graph on B rows, except N1.7's vision tower, which runs once per request
# (``TtGr00tN17.vision``) and adds a slice per request and a concat per output (the tokens and each DeepStack feature).
VISION_PER_REQUEST = {"n15": False, "n16": False, "n17": True}  # N1.6 builds batch 1 only (``tt_max_batch``)


def bucket_budgets(config, batch: int = 1) -> dict[str, int]:
    """Device programs per stage allowed for one call of ``config``'s batch-``batch`` model."""
    budget = dict(PROGRAM_BUDGETS[config.version])
    if batch > 1 and VISION_PER_REQUEST[config.version]:
        outputs = 1 + len(config.backbone.vision.deepstack_visual_indexes)
        budget["vision"] = batch * budget["vision"] + batch + outputs
    return budget


def over_budget(config, programs: dict[str, int], batch: int = 1) -> dict[str, tuple[int, int]]:
    """stage → (programs, budget) for every stage above its budget."""
    budget = bucket_budgets(config, batch)
    return {s: (n, budget[s]) for s, n in programs.items() if n > budget[s]}


def checked_sheet(version: str, model, host: dict, batch: int = 1) -> dict:
    """The full-size stage sheet (``tt/tools/stage_sheet.py``) of one request, with the budgets of ``make test-tt-full``
    asserted: trace safety, device programs per stage, no matmul on the generic factory, every device program
    accounted for as a device operation, L1 headroom, every weight's bytes in the sheet, and the committed
    roofline sheet (``benchmarks/results/tt_roofline_<version>.json``) equal to the fresh one."""
    import json
    from pathlib import Path

    from models.experimental.gr00t.tt.tools.stage_sheet import over_l1, stage_sheet

    sheet, report = stage_sheet(model, host)
    print(f"full-size {version} stage sheet:", {s: {k: r[k] for k in ("programs", "floor_us", "l1_peak_per_core",
                                                                      "matmul_factories")} for s, r in sheet.items()})
    assert report.ok, report.violations
    assert not over_budget(model.config, {s: g.programs for s, g in report.stages.items()}, batch)
    assert {s: r["programs"] for s, r in sheet.items()} == {s: g.programs for s, g in report.stages.items()}
    assert all(r["generic_matmuls"] == 0 for r in sheet.values()), {s: r["matmul_factories"] for s, r in sheet.items()}
    assert not over_l1(sheet)
    assert all(0 < r["l1_top_op_bytes"] <= r["l1_peak_per_core"] for r in sheet.values())
    assert sum(r["bytes"] for r in sheet.values()) > model.w.stored_bytes()  # each weight is read once or more
    committed = json.loads((Path(__file__).resolve().parents[6] / "benchmarks" / "results"
                            / f"tt_roofline_{version}{'' if batch == 1 else f'_b{batch}'}.json").read_text())["stages"]
    fresh = {s: (r["programs"], r["bytes"], r["floor_us"]) for s, r in sheet.items()}
    assert fresh == {s: (r["programs"], r["bytes"], r["floor_us"]) for s, r in committed.items()}, \
        f"rerun code/scripts/bench/tt_roofline.py --version {version} --batch {batch}: the committed sheet is stale"
    return sheet


def count_calls(calltrace: list[str], op: str) -> int:
    """Top-level calls of ``ttnn.<op>`` in a graph-capture calltrace."""
    return sum(1 for name in calltrace if name == f"ttnn.{op}")


def layer_ops(calltrace: list[str]) -> dict[str, int]:
    """``LAYER_OPS``' top-level calls in a graph-capture calltrace."""
    return {op: count_calls(calltrace, op) for op in LAYER_OPS}


def assert_static_taps_in_dram(taps: dict, want: dict) -> None:
    """Each tap of ``want`` (name → (shape, dtype)) has that shape and dtype, in tile layout, in DRAM."""
    import ttnn

    for name, (shape, dtype) in want.items():
        t = taps[name]
        assert tuple(t.shape) == shape and t.dtype == dtype, (name, tuple(t.shape), t.dtype)
        assert t.layout == ttnn.TILE_LAYOUT and t.memory_config().buffer_type == ttnn.BufferType.DRAM, name


def captured_forward(model, device) -> tuple[dict, list[str], int]:
    """One untraced forward over the model's current inputs under ttnn's graph capture:
    (taps, calltrace, programs newly built)."""
    import ttnn

    before = device.num_program_cache_entries()
    taps: dict = {}
    ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
    model.forward(taps)
    calls = ttnn.graph.extract_calltrace(ttnn.graph.end_graph_capture())
    return taps, calls, device.num_program_cache_entries() - before


def mock_tensor(device, t, *, dtype=None, row_major: bool = False):
    """A host tensor on the (mock) device in DRAM: bf16 tiles unless told otherwise."""
    import ttnn

    return ttnn.from_torch(t, dtype=dtype or ttnn.bfloat16, layout=ttnn.ROW_MAJOR_LAYOUT if row_major else
                           ttnn.TILE_LAYOUT, device=device, memory_config=ttnn.DRAM_MEMORY_CONFIG)


def reference_case(version: str, checkpoint):
    """(fp32 reference policy, prepared demo inputs, its taps) of ``version`` on ``checkpoint``: what the golden
    data-flow tests compare the TT modules against."""
    from models.experimental.gr00t.common.demo import load_demo_request
    from models.experimental.gr00t.common.observation import parse_observation
    from models.experimental.gr00t.common.versions import get_spec, load

    ref = load(get_spec(version).policy_cls).from_checkpoint(checkpoint)
    request = load_demo_request(version)
    inputs = ref.prepare(parse_observation(request, ref.layout), noise=request["noise"])
    return ref, inputs, ref.infer(inputs)


def golden_taps(checkpoint, ref, inputs, precision: str = "fp32", mutate=None) -> dict:
    """The TT model of ``ref``'s version, built from ``checkpoint`` through the weight rules, run with ttnn's
    golden functions on ``inputs`` (``mutate`` edits the host tensors first): every tap."""
    from models.experimental.gr00t.common.checkpoint import LazyCheckpoint
    from models.experimental.gr00t.tt.tools.golden_ops import golden_tt_model

    return run_golden(golden_tt_model(LazyCheckpoint(checkpoint), ref.config, ref.layout, precision), inputs, mutate)


def run_golden(model, inputs, mutate=None) -> dict:
    """Every tap of one forward of a golden TT ``model`` over ``inputs`` (``mutate`` edits the host tensors first)."""
    with model.execution():
        host = model.host_inputs_for(inputs)
        if mutate:
            mutate(host)
        model.write_inputs(host)
        taps = {}
        model.forward(taps)
    return taps


def tap_pairs(tt: dict, taps: dict, names, seq_len: int) -> dict:
    """name → (TT tap, reference tap), float and in the reference's shape; the padded prompt rows of
    ``backbone_features`` and ``vl_embs`` are dropped (nothing reads them)."""
    out = {}
    for name in names:
        got, want = tt[name].float(), taps[name].float()
        if name in ("backbone_features", "vl_embs"):
            got = got[:, :seq_len]
        out[name] = got.reshape(want.shape), want
    return out


def assert_each_stage_reads_its_declared_inputs(model) -> None:
    """Each stage of ``model`` reads exactly the persistent inputs ``STAGE_INPUTS`` declares (the two-queue runner
    uploads each input just before the stage that reads it, so the declaration must be the truth)."""

    class Recording(dict):
        def __init__(self, data):
            super().__init__(data)
            self.read = set()

        def __getitem__(self, name):
            self.read.add(name)
            return super().__getitem__(name)

    saved = model.inputs
    try:
        for stage, declared in model.STAGE_INPUTS.items():
            model.inputs = Recording(saved)
            getattr(model, stage)()
            assert model.inputs.read == set(declared), stage
    finally:
        model.inputs = saved


def stage_calltraces(model, device) -> tuple[dict[str, list[str]], int, dict]:
    """({stage: the ttnn calls of one pass of it}, programs compiled meanwhile, the taps) of one forward of ``model``,
    stage by stage under graph capture (its inputs written already)."""
    import ttnn

    from models.experimental.gr00t.tt.ttnn_gr00t import STAGES

    census, taps = {}, {}
    before = device.num_program_cache_entries()
    for stage in STAGES:
        ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
        getattr(model, stage)(taps)
        census[stage] = ttnn.graph.extract_calltrace(ttnn.graph.end_graph_capture())
    return census, device.num_program_cache_entries() - before, taps
