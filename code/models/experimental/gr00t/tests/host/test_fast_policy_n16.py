# SPDX-License-Identifier: Apache-2.0
"""The N1.6 torch fast path (``torch_fast/fast_policy_n16.py``) against the fp32 reference on the tiny synthetic N1.6
checkpoint, for every served tag: every tap within 1e-5 in fp32 (plain CPU options, and the padded / fused shape the
CUDA graphs use), images of several shapes, the AlternateVLDiT's text / image rows exactly the reference's key masks,
micro-batches, RTC inpainting, the bf16 mixed-precision path (PCC >= 0.9999 per action group) and its mixed load."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from models.experimental.gr00t.common.layouts import N16_LAYOUTS
from models.experimental.gr00t.common.observation import Observation
from models.experimental.gr00t.common.policy import batch_key, run_prepared, stack_inputs
from models.experimental.gr00t.common.prompts_n16 import n16_prompt_ids
from models.experimental.gr00t.common.quality import BF16_ACTION_PCC_MIN, max_abs_diff, pcc
from models.experimental.gr00t.common.rtc import GuidedPrefix, InpaintPrefix
from models.experimental.gr00t.reference.torch_policy_n16 import ReferencePolicyN16
from models.experimental.gr00t.torch_fast.build import fast_policy_from_reference
from models.experimental.gr00t.torch_fast.fast_cuda import mixed_precision_dtypes
from models.experimental.gr00t.torch_fast.fast_policy_n16 import FastPolicyN16

from ..conftest import make_frame

TAGS = sorted(N16_LAYOUTS)
OPTIONS = {"cpu_default": {}, "padded": {"pad": True}, "padded_fused": {"pad": True, "fuse": True}}
# two instruction lengths: the padded buffers are reused with other pad rows
INSTRUCTIONS = ["Pick the pear from the counter, and place it in the plate!", "wave"]
FP32_ATOL = 1e-5  # measured: 0 unpadded (bit for bit), <= 2.2e-6 padded (2-core x86 CPU)
BATCH_ATOL = 1e-5  # fp32 batched vs alone


@pytest.fixture(scope="module")
def checkpoint(tiny_checkpoints):
    return tiny_checkpoints["n16"]


@pytest.fixture(scope="module")
def references(checkpoint):
    return {tag: ReferencePolicyN16.from_checkpoint(checkpoint, tag) for tag in TAGS}


def observation(tag: str, instruction: str = INSTRUCTIONS[0], seed: int = 1, size=(256, 256)) -> Observation:
    lay = N16_LAYOUTS[tag]
    rng = np.random.default_rng(seed)
    return Observation(images={cam: [make_frame(seed + i, size)] for i, cam in enumerate(lay.cameras)},
                       state={k: rng.uniform(-1.2, 1.2, d) for k, d in lay.state_groups}, instruction=instruction)


@pytest.fixture(scope="module")
def goldens(references):
    return {tag: {text: references[tag].get_action(observation(tag, text), seed=5) for text in INSTRUCTIONS}
            for tag in TAGS}


def _assert_taps_match(got: dict, want: dict, atol: float = FP32_ATOL) -> None:
    assert set(got) == set(want)
    diffs = {k: max_abs_diff(got[k], want[k]) for k in want if k != "pixel_values"}
    assert max(diffs.values()) <= atol, diffs


@pytest.mark.parametrize("tag", TAGS)
@pytest.mark.parametrize("options", OPTIONS.values(), ids=list(OPTIONS))
def test_fp32_fast_path_matches_the_reference_at_every_tap(references, goldens, tag, options):
    fast = FastPolicyN16.from_reference(references[tag], **options)
    for text, want in goldens[tag].items():
        got = fast.get_action(observation(tag, text), seed=5)
        _assert_taps_match(got.taps, want.taps)
        assert max_abs_diff(got.action_pred, want.action_pred) <= FP32_ATOL
        assert max(max_abs_diff(got.actions[k], want.actions[k]) for k in want.actions) <= FP32_ATOL
        assert list(got.timing_ms) == list(want.timing_ms)  # the same stage laps as the reference
    assert (fast.pad, fast.fused) == (bool(options.get("pad")), bool(options.get("fuse")))
    if fast.pad:  # one set of static buffers served both prompt lengths
        assert len(fast._static) == 1


def test_unpadded_fp32_is_bit_identical_and_non_square_frames_work(references):
    """On the CPU without padding the fast path computes the reference's numbers exactly (the GEMMs see the same
    shapes); a 180×320 frame (252×448 px, 144 image tokens) too."""
    ref = references["gr1"]
    obs = observation("gr1", seed=4, size=(180, 320))
    want = ref.get_action(obs, seed=11)
    got = FastPolicyN16.from_reference(ref).get_action(obs, seed=11)
    assert got.taps["image_tokens"].shape[0] == 144
    for k in ("image_tokens", "backbone_features", "vl_embs", "action_pred"):
        assert torch.equal(got.taps[k], want.taps[k]), k


def _two_shape_inputs(ref: ReferencePolicyN16, seed: int):
    """A request with two images of different shapes (what ``prepare`` gives as a list for a multi-camera tag whose
    cameras differ in size): 81 + 144 image tokens."""
    inputs = ref.prepare(observation("gr1", seed=seed), seed=seed)
    g = torch.Generator().manual_seed(seed)
    images = [torch.rand(3, 252, 252, generator=g) * 2 - 1, torch.rand(3, 252, 448, generator=g) * 2 - 1]
    prompt = n16_prompt_ids(INSTRUCTIONS[0], [81, 144], formalize=ref.processor.formalize_language)
    inputs.pixel_values, inputs.input_ids = images, torch.tensor([prompt.input_ids])
    inputs.prompt_tokens = prompt.text_tokens
    return inputs


@pytest.mark.parametrize("options", OPTIONS.values(), ids=list(OPTIONS))
def test_images_of_several_shapes_alone_and_batched(references, options):
    """A list of differently shaped images runs one tower batch per shape and splices the tokens back in image
    order; three such requests stack (``stack_inputs`` keeps the list; padded: bucket 4 repeats the last request's
    images) and batch like tensors do."""
    ref = references["gr1"]
    fast = FastPolicyN16.from_reference(ref, **options)
    batch = [_two_shape_inputs(ref, seed) for seed in (1, 2, 3)]
    want = [ref.infer(p) for p in batch]
    _assert_taps_match(fast.infer(batch[0]), want[0])
    stacked = stack_inputs(batch)
    assert len({batch_key(p) for p in batch}) == 1 and isinstance(stacked.pixel_values, list)
    together = fast.infer(stacked)
    for k in ("action_pred", "backbone_features"):
        assert max(max_abs_diff(together[k][i:i + 1], want[i][k]) for i in range(3)) <= BATCH_ATOL, k
    assert max_abs_diff(want[0]["action_pred"], want[1]["action_pred"]) > 1e-2


@pytest.mark.parametrize("tag", TAGS)
def test_cross_blocks_see_the_reference_key_masks_text_first(references, tag):
    """The fast DiT's text rows / image rows are the reference's ``Gr00tN16ActionHead.key_masks`` (text = real
    non-``<IMG_CONTEXT>`` tokens, image = ``<IMG_CONTEXT>``), block 0 cross-attends to text, block 2 to image."""
    ref = references[tag]
    fast = FastPolicyN16.from_reference(ref, pad=True)
    inputs = fast.prepare(observation(tag), seed=0)
    b, _ = fast._buffers(inputs)
    masks = ref.model.action_head.key_masks(inputs.input_ids == ref.config.backbone.image_token_index)
    s = inputs.input_ids.shape[1]
    text = b.text_idx[b.text_valid[0]]
    assert b.input_ids.shape[1] > s and int(b.text_valid[0].sum()) < b.text_idx.numel()  # padded rows are masked
    assert torch.equal(text, masks["text"][0].nonzero().flatten())
    assert torch.equal(b.image_pos, masks["image"][0].nonzero().flatten())
    dit = ref.config.action_head.dit
    cross = [dit.cross_keys(i) for i in range(len(ref.model.action_head.model.transformer_blocks))
             if dit.cross_attends(i)]
    assert cross[:2] == ["text", "image"] and set(cross) == {"text", "image"}
    kv = fast.fast_head.cross_kv(torch.zeros(1, b.input_ids.shape[1], ref.config.action_head.backbone_embedding_dim),
                                 {"text": (b.text_idx, b.text_valid), "image": (b.image_pos, None)})
    assert kv[0][0].shape[2] == b.text_idx.numel() and kv[2][0].shape[2] == b.image_pos.numel()


def test_fusing_shares_the_weights_and_leaves_the_reference_bit_identical(checkpoint):
    ref = ReferencePolicyN16.from_checkpoint(checkpoint, "gr1")
    obs = observation("gr1")
    before = ref.get_action(obs, seed=1)
    storages = {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in ref.model.parameters()}
    fast = FastPolicyN16.from_reference(ref, fuse=True)
    assert fast.model is ref.model and len(fast.fz.fused) > 0
    vision_q = ref.model.backbone.model.vision_model.vision_model.encoder.layers[0].self_attn.q_proj
    assert vision_q in fast.fz.fused  # the SigLIP2 tower's QKV too
    after_storages = {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in ref.model.parameters()}
    assert sum(after_storages.values()) == sum(storages.values())  # views into the concatenations, not copies
    assert vision_q.weight.untyped_storage().data_ptr() == fast.fz.fused[vision_q][0].untyped_storage().data_ptr()
    assert np.array_equal(before.action_pred, ref.get_action(obs, seed=1).action_pred)


def test_cross_attention_kv_is_projected_once_per_request_not_per_step(references):
    ref = references["gr1"]
    blocks = ref.model.action_head.model.transformer_blocks
    calls = {0: [], 2: []}  # block 0 sees text, block 2 images
    handles = [blocks[i].attn1.to_k.register_forward_hook(lambda *_, i=i: calls[i].append(1)) for i in calls]
    try:
        ref.get_action(observation("gr1"), seed=0)
        per_reference = {i: len(c) for i, c in calls.items()}
        for c in calls.values():
            c.clear()
        FastPolicyN16.from_reference(ref).get_action(observation("gr1"), seed=0)
    finally:
        for h in handles:
            h.remove()
    assert per_reference == {0: 4, 2: 4} and {i: len(c) for i, c in calls.items()} == {0: 1, 2: 1}


def _batch_of(policy, n: int, frozen: list[int] | None = None, tag: str = "gr1"):
    """``n`` prepared requests of one batch_key that differ in pixels, state and seed (a row mix-up would show),
    optionally each with an inpainting prefix of its own length."""
    out = []
    for i in range(n):
        p = policy.prepare(observation(tag, seed=1 + i), seed=100 + i)
        if frozen is not None:
            rows = np.random.default_rng(i).uniform(-0.8, 0.8, (frozen[i], p.noise.shape[2])).astype(np.float32)
            p.inpaint = InpaintPrefix.build(rows, int(p.noise.shape[1]))
        out.append(p)
    assert len({batch_key(p) for p in out}) == 1
    return out


@pytest.mark.parametrize("options", OPTIONS.values(), ids=list(OPTIONS))
def test_a_fast_path_batch_gives_every_request_its_unbatched_answer(references, options):
    """Three stacked requests: every tap row equals the request run alone; the static path runs them in bucket 4 (a
    copy of the last request fills it) and hands back three rows."""
    fast = FastPolicyN16.from_reference(references["gr1"], **options)
    batch = _batch_of(fast, 3)
    alone = [fast.infer(p) for p in batch]
    together = fast.infer(stack_inputs(batch))
    for k in ("action_pred", "vl_embs", "state_features", "backbone_features", "image_mask"):
        assert together[k].shape[0] == 3, k
        worst = max(max_abs_diff(together[k][i:i + 1], alone[i][k]) for i in range(3))
        assert worst <= BATCH_ATOL, (k, worst)
    assert together["image_tokens"].shape[0] == 3 * alone[0]["image_tokens"].shape[0]
    assert max_abs_diff(alone[0]["action_pred"], alone[1]["action_pred"]) > 1e-2  # the rows really differ
    if fast.pad:
        assert sorted(entry[0].input_ids.shape[0] for entry in fast._static.values()) == [1, 4]
    else:
        assert not fast._static


@pytest.mark.parametrize("options", OPTIONS.values(), ids=list(OPTIONS))
def test_fast_path_inpaints_like_the_reference(references, options):
    """RTC inpaint (its own buffers, keyed with RTC on): the frozen rows are the target exactly, the chunk equals the
    reference sampler's, the same buffers then serve a plain request; a batch inpaints each row with its own delay;
    the guided variant is refused."""
    ref = references["unitree_g1"]
    fast = FastPolicyN16.from_reference(ref, **options)
    for frozen in (3, 6):
        inputs = _batch_of(fast, 1, [frozen], tag="unitree_g1")[0]
        got = run_prepared(fast, inputs)
        want = run_prepared(ref, _batch_of(ref, 1, [frozen], tag="unitree_g1")[0])
        assert torch.equal(got.taps["action_pred"][0, :frozen], inputs.inpaint.target[0, :frozen])
        assert max_abs_diff(got.action_pred, want.action_pred) <= FP32_ATOL
    plain = fast.get_action(observation("unitree_g1"), seed=5)
    assert max_abs_diff(plain.action_pred, ref.get_action(observation("unitree_g1"), seed=5).action_pred) <= FP32_ATOL
    frozen = [2, 5, 3]
    batch = _batch_of(fast, 3, frozen, tag="unitree_g1")
    together = fast.infer(stack_inputs(batch))["action_pred"]
    for i, p in enumerate(batch):
        assert torch.equal(together[i, :frozen[i]], p.inpaint.target[0, :frozen[i]])
        assert max_abs_diff(together[i:i + 1], ref.infer(p)["action_pred"]) <= FP32_ATOL
    inputs = fast.prepare(observation("unitree_g1"), seed=5)
    inputs.guide = GuidedPrefix.build(np.zeros((4, inputs.noise.shape[2]), np.float32), 2, int(inputs.noise.shape[1]))
    with pytest.raises(ValueError, match="inpaint variant only"):
        fast.infer(inputs)


@pytest.mark.parametrize("tag", TAGS)
def test_bf16_fast_path_reaches_pcc_0_9999_per_action_group(checkpoint, goldens, tag):
    """bf16 GEMMs with fp32 modulation / decode / Euler state, run on the CPU here (the CUDA path's numerics), built
    as the server builds it (``fast_policy_from_reference``)."""
    for pad in (False, True):
        fast = fast_policy_from_reference(ReferencePolicyN16.from_checkpoint(checkpoint, tag), dtype="bfloat16",
                                          pad=pad, fuse=True)
        assert isinstance(fast, FastPolicyN16) and fast.act_dtype == torch.bfloat16
        assert fast.model.action_head.action_decoder.layer1.W.dtype == torch.float32
        for text, want in goldens[tag].items():
            got = fast.get_action(observation(tag, text), seed=5)
            assert np.isfinite(got.action_pred).all()
            scores = {k: pcc(got.actions[k], want.actions[k]) for k in want.actions}
            assert min(scores.values()) >= BF16_ACTION_PCC_MIN, scores
            # really bf16, not fp32 (measured max |d| of action_pred 0.015 … 0.021)
            assert 1e-4 < max_abs_diff(got.action_pred, want.action_pred) < 0.1


def test_a_bf16_model_loaded_as_it_runs_equals_a_fp32_load_cast_afterwards(checkpoint):
    """``ReferencePolicyN16.from_checkpoint(dtypes_of=…)``: the bf16 parts come straight from the checkpoint, and the
    fast path built on them holds the same tensors, dtypes and step tables, bit for bit, as the one built on a fp32
    load; the AdaLN linears the step tables read stay fp32 until then."""
    mixed = ReferencePolicyN16.from_checkpoint(checkpoint, "gr1", dtypes_of=mixed_precision_dtypes(torch.bfloat16))
    head = mixed.model.action_head
    blocks = head.model.transformer_blocks
    assert blocks[0].norm1.linear.weight.dtype == torch.float32 and blocks[0].ff.net[2].weight.dtype == torch.bfloat16
    assert {p.dtype for p in mixed.model.backbone.parameters()} == {torch.bfloat16}
    assert head.vlln.weight.dtype == torch.bfloat16 and head.action_decoder.layer1.W.dtype == torch.float32
    new = fast_policy_from_reference(mixed, dtype="bfloat16")
    old = fast_policy_from_reference(ReferencePolicyN16.from_checkpoint(checkpoint, "gr1"), dtype="bfloat16")
    got, want = new.model.state_dict(), old.model.state_dict()
    assert list(got) == list(want)
    assert all(got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]) for k in want)
    nt, ot = new.fast_head.tables, old.fast_head.tables
    flat = [(a, b) for x, y in [(nt.tau, ot.tau), (nt.out, ot.out), (nt.ada, ot.ada)]
            for a, b in zip(torch.utils._pytree.tree_leaves(x), torch.utils._pytree.tree_leaves(y))]
    assert flat and all(torch.equal(a, b) for a, b in flat)
    obs = observation("gr1")
    assert np.array_equal(new.get_action(obs, seed=5).action_pred, old.get_action(obs, seed=5).action_pred)


def test_a_bf16_static_batch_matches_its_requests_alone(checkpoint):
    fast = fast_policy_from_reference(ReferencePolicyN16.from_checkpoint(checkpoint, "gr1"), dtype="bfloat16",
                                      pad=True, fuse=True)
    batch = _batch_of(fast, 3)
    alone = [fast.infer(p)["action_pred"] for p in batch]
    together = fast.infer(stack_inputs(batch))["action_pred"]
    assert max(max_abs_diff(together[i:i + 1], alone[i]) for i in range(3)) <= 1e-2


def test_padded_path_refuses_a_longer_prompt_and_graphs_need_cuda(references):
    ref = references["gr1"]
    fast = FastPolicyN16.from_reference(ref, pad=True)
    inputs = fast.prepare(observation("gr1"), seed=0)
    key = fast._signature(inputs)
    b = fast._new_buffers(inputs, (inputs.input_ids.shape[1] - 1, *key[1:]))
    with pytest.raises(ValueError, match="exceeds the static length"):
        fast._fill(b, inputs)
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA device"):
        FastPolicyN16.from_reference(ref, graphs=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none present)")
def test_cuda_graph_bf16_path_matches_the_reference_and_its_own_eager_run(checkpoint, goldens):
    eager = fast_policy_from_reference(ReferencePolicyN16.from_checkpoint(checkpoint, "gr1"), device="cuda",
                                       dtype="bfloat16", graphs=False)
    graphed = fast_policy_from_reference(ReferencePolicyN16.from_checkpoint(checkpoint, "gr1"), device="cuda",
                                         dtype="bfloat16")
    assert graphed.graphs and graphed.pad and graphed.fused
    for text, want in goldens["gr1"].items():
        obs = observation("gr1", text)
        got = graphed.get_action(obs, seed=5)
        again = graphed.get_action(obs, seed=5)  # a replay of the captured graphs
        assert np.array_equal(got.action_pred, again.action_pred)
        assert max_abs_diff(got.action_pred, eager.get_action(obs, seed=5).action_pred) < 1e-2
        assert min(pcc(got.actions[k], want.actions[k]) for k in want.actions) >= BF16_ACTION_PCC_MIN
    batch = _batch_of(graphed, 3)
    alone = [graphed.infer(p)["action_pred"].cpu() for p in batch]
    together = graphed.infer(stack_inputs(batch))["action_pred"].cpu()
    assert max(max_abs_diff(together[i:i + 1], alone[i]) for i in range(3)) <= 1e-2
