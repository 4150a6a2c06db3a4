# SPDX-License-Identifier: Apache-2.0
"""The N1.7 Qwen3-VL backbone's TT data flow against the fp32 reference, without a card: the unchanged
TT modules (``tt/ttnn_qwen3vl.py``) run with every ttnn op replaced by its golden function
(``tt/tools/golden_ops.py``) on the DROID static geometry (4 images × 16×28 patches, a prompt padded to 512),
with small widths.

They must reproduce ``reference/torch_qwen3vl`` (itself tested against transformers): the vision tower on
the merged image tokens and every DeepStack feature, the text decoder on the backbone feature. Negative
controls (attention across images, RoPE switched off, M-RoPE's H/W sections replaced by T) show the
comparison has teeth."""

from __future__ import annotations

from dataclasses import replace

from functools import partial

import pytest
import torch

from models.experimental.gr00t.common.configs_n17 import Gr00tN17Config
from models.experimental.gr00t.common.quality import max_abs_diff

from ..conftest import randomize_
from ..host.test_torch_qwen3vl import droid_prompt
from .tt_expect import mock_tensor

pytestmark = pytest.mark.mock

DROID_GRIDS = [[1, 16, 28]] * 4  # 2 cameras × 2 frames, each a 256×448 frame
BACKBONE = Gr00tN17Config.tiny().backbone
TINY = BACKBONE.vision  # head_dim 16: padded to 32 on the device
S_PAD = 512  # the DROID prompt's static length on the device
PAD_TOKEN_ID = 151643  # <|endoftext|>
INSTRUCTION_IDS = [3735, 279, 1896, 323, 2182, 432, 304, 279, 14024]


def make_vision_reference(c):
    from models.experimental.gr00t.reference.torch_qwen3vl import Qwen3VLVisionModel

    model = randomize_(Qwen3VLVisionModel(c), seed=3).eval()
    patches = torch.randn(sum(t * h * w for t, h, w in DROID_GRIDS), c.patch_dim,
                          generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        tokens, deepstack = model(patches, torch.tensor(DROID_GRIDS))
    return model.state_dict(), patches, tokens, deepstack


@pytest.fixture(scope="module")
def vision_reference():
    return make_vision_reference(TINY)


def run_golden(state: dict, patches: torch.Tensor, mutate=None, c=TINY):
    from models.experimental.gr00t.tt.tools.golden_ops import HOST_DEVICE, golden_execution
    from models.experimental.gr00t.tt.ttnn_common import DeviceWeights
    from models.experimental.gr00t.tt.ttnn_qwen3vl import TtQwen3VLVision
    from models.experimental.gr00t.tt.weight_layout_n17 import vision_device_tensors

    with golden_execution("fp32") as shim:
        tensors = {name: shim.from_torch(t) for name, t, _ in
                   vision_device_tensors(lambda n: state[n], list(state), c, DROID_GRIDS, prefix="")}
        weights = DeviceWeights(HOST_DEVICE, tensors)
        module = TtQwen3VLVision(weights, c, DROID_GRIDS, prefix="")
        if mutate:
            mutate(module)
        tokens, deepstack = module(shim.from_torch(patches[None]))
    return tokens[0], [d[0] for d in deepstack], weights, module


def test_the_vision_tower_data_flow_equals_the_fp32_reference(mock_device, vision_reference):
    state, patches, want_tokens, want_deepstack = vision_reference
    tokens, deepstack, weights, _ = run_golden(state, patches)
    assert tokens.shape == want_tokens.shape == (448, TINY.out_hidden_size)  # 4 images × 112 tokens
    diffs = {"tokens": max_abs_diff(tokens.numpy(), want_tokens.numpy())}
    diffs.update({f"deepstack_{i}": max_abs_diff(got.numpy(), want.numpy())
                  for i, (got, want) in enumerate(zip(deepstack, want_deepstack, strict=True))})
    print("golden N1.7 vision tower vs fp32 reference, max |d|:", ", ".join(f"{k} {v:.1e}" for k, v in diffs.items()))
    assert max(diffs.values()) < 1e-5, diffs
    assert len(deepstack) == len(TINY.deepstack_visual_indexes)
    assert weights.used == set(weights.names())  # every converted tensor is read


@pytest.mark.parametrize("broken", ["attention across images", "no rotary"])
def test_a_broken_mask_or_rope_would_be_caught(mock_device, vision_reference, broken):
    state, patches, want_tokens, _ = vision_reference

    def mutate(module):
        if broken == "attention across images":
            module.mask = torch.zeros_like(module.mask)
        else:
            module.cos, module.sin = torch.ones_like(module.cos), torch.zeros_like(module.sin)

    tokens, _, _, _ = run_golden(state, patches, mutate)
    assert max_abs_diff(tokens.numpy(), want_tokens.numpy()) > 1e-2


def test_the_vision_tower_runs_on_the_mock_p150(mock_device, vision_reference):
    """The same module through the device stack (ops validated and compiled, nothing computed): static
    output shapes, one LayerNorm pair and one SDPA per block, every weight read, and a second forward
    that builds no new program."""
    import ttnn

    from models.experimental.gr00t.tt.ttnn_common import DeviceWeights
    from models.experimental.gr00t.tt.ttnn_qwen3vl import TtQwen3VLVision
    from models.experimental.gr00t.tt.weight_layout_n17 import vision_device_tensors

    state, patches, want_tokens, want_deepstack = vision_reference

    put = partial(mock_tensor, mock_device)

    weights = DeviceWeights(mock_device, {name: put(t) for name, t, _ in
                                          vision_device_tensors(lambda n: state[n], list(state), TINY, DROID_GRIDS,
                                                                prefix="")})
    module = TtQwen3VLVision(weights, TINY, DROID_GRIDS, prefix="")
    x = put(patches[None])
    module(x)  # first forward: builds the programs
    before = mock_device.num_program_cache_entries()
    ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
    tokens, deepstack = module(x)
    calls = ttnn.graph.extract_calltrace(ttnn.graph.end_graph_capture())
    assert mock_device.num_program_cache_entries() == before
    assert list(tokens.shape) == [1, *want_tokens.shape]
    assert [list(d.shape) for d in deepstack] == [[1, *d.shape] for d in want_deepstack]
    assert calls.count("ttnn.transformer.scaled_dot_product_attention") == TINY.depth
    n_mergers = 1 + len(TINY.deepstack_visual_indexes)
    assert calls.count("ttnn.layer_norm") == 2 * TINY.depth + n_mergers
    assert weights.used == set(weights.names())


def make_text_reference(c):
    from models.experimental.gr00t.common.embeddings import rope_index
    from models.experimental.gr00t.reference.torch_qwen3vl import Qwen3VLTextModel

    model = randomize_(Qwen3VLTextModel(c, BACKBONE.select_layer), seed=5).eval()
    ids = droid_prompt(DROID_GRIDS, INSTRUCTION_IDS)
    g = torch.Generator().manual_seed(6)
    embeds = torch.randn(1, ids.shape[1], c.hidden_size, generator=g)
    deepstack = [torch.randn(448, c.hidden_size, generator=g) for _ in TINY.deepstack_visual_indexes]
    image_mask = ids == BACKBONE.image_token_id
    with torch.no_grad():
        want = model(embeds, rope_index(ids, torch.tensor(DROID_GRIDS), replace(BACKBONE, text=c)), image_mask,
                     deepstack)
    return model.state_dict(), ids, embeds, deepstack, want


@pytest.fixture(scope="module")
def text_reference():
    return make_text_reference(BACKBONE.text)


def run_text_golden(state, ids, embeds, deepstack, mutate=None, c=BACKBONE.text):
    from models.experimental.gr00t.common.embeddings import rope_index
    from models.experimental.gr00t.tt.tools.golden_ops import HOST_DEVICE, golden_execution
    from models.experimental.gr00t.tt.ttnn_common import DeviceWeights
    from models.experimental.gr00t.tt.ttnn_qwen3vl import TtQwen3VLText
    from models.experimental.gr00t.tt.weight_layout_n17 import text_device_tensors

    s = ids.shape[1]
    padded = torch.cat([ids, torch.full((1, S_PAD - s), PAD_TOKEN_ID)], dim=1)
    position_ids = rope_index(padded, torch.tensor(DROID_GRIDS), replace(BACKBONE, text=c))[:, 0]  # [3, S_pad]
    image_rows = torch.nonzero(padded[0] == BACKBONE.image_token_id).flatten().tolist()
    with golden_execution("fp32") as shim:
        tensors = {name: shim.from_torch(t) for name, t, _ in
                   text_device_tensors(lambda n: state[n], list(state), c, BACKBONE.select_layer, prefix="")}
        weights = DeviceWeights(HOST_DEVICE, tensors)
        module = TtQwen3VLText(weights, c, BACKBONE.select_layer, position_ids, image_rows, prefix="")
        if mutate:
            mutate(module, position_ids)
        x = torch.cat([embeds, torch.zeros(1, S_PAD - s, c.hidden_size)], dim=1)
        out = module(shim.from_torch(x), [shim.from_torch(d[None]) for d in deepstack])
    assert (module.rot is None) == (c.head_dim % 64 == 0)  # the fused RoPE runs exactly where it applies
    return out[0, :s], weights


def test_the_text_decoder_data_flow_equals_the_fp32_reference(mock_device, text_reference):
    state, ids, embeds, deepstack, want = text_reference
    got, weights = run_text_golden(state, ids, embeds, deepstack)
    d = max_abs_diff(got.numpy(), want[0].numpy())
    print(f"golden N1.7 text decoder vs fp32 reference ({ids.shape[1]} of {S_PAD} rows), max |d|: {d:.1e}")
    assert d < 1e-5
    # every converted tensor is read but the embedding table (the splice reads it), and the final norm is not converted
    assert weights.used == set(weights.names()) - {"embed_tokens.weight"}
    assert not any(name.startswith("norm.") for name in weights.names())


def test_a_broken_mrope_section_would_be_caught(mock_device, text_reference):
    from models.experimental.gr00t.common.embeddings import mrope_cos_sin

    state, ids, embeds, deepstack, want = text_reference

    def plain_rope(module, position_ids):  # every frequency from the T axis: H/W sections lost
        pad = 32 - BACKBONE.text.head_dim  # the tiny heads are padded to one tile
        cos, sin = (torch.nn.functional.pad(t, (0, pad))
                    for t in mrope_cos_sin(position_ids[[0, 0, 0], None, :], BACKBONE.text, torch.float32))
        module.cos, module.sin = cos[None], sin[None]

    got, _ = run_text_golden(state, ids, embeds, deepstack, plain_rope)
    assert max_abs_diff(got.numpy(), want[0].numpy()) > 1e-2


def test_the_text_decoder_runs_on_the_mock_p150(mock_device, text_reference):
    """The text decoder through the device stack at tiny size: the padded static shape out, one SDPA per
    layer, one placement matmul per DeepStack feature, every layer weight read, no program rebuilt."""
    import ttnn

    from models.experimental.gr00t.common.embeddings import rope_index
    from models.experimental.gr00t.tt.ttnn_common import DeviceWeights
    from models.experimental.gr00t.tt.ttnn_qwen3vl import TtQwen3VLText
    from models.experimental.gr00t.tt.weight_layout_n17 import text_device_tensors

    state, ids, embeds, deepstack, _ = text_reference
    c = BACKBONE.text
    padded = torch.cat([ids, torch.full((1, S_PAD - ids.shape[1]), PAD_TOKEN_ID)], dim=1)
    image_rows = torch.nonzero(padded[0] == BACKBONE.image_token_id).flatten().tolist()

    put = partial(mock_tensor, mock_device)

    weights = DeviceWeights(mock_device, {
        name: put(t, row_major=kind == "row_major") for name, t, kind in
        text_device_tensors(lambda n: state[n], list(state), c, BACKBONE.select_layer, prefix="")})
    module = TtQwen3VLText(weights, c, BACKBONE.select_layer,
                           rope_index(padded, torch.tensor(DROID_GRIDS), BACKBONE)[:, 0], image_rows, prefix="")
    x = put(torch.zeros(1, S_PAD, c.hidden_size))
    feats = [put(d[None]) for d in deepstack]
    module(x, feats)
    before = mock_device.num_program_cache_entries()
    ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
    out = module(x, feats)
    calls = ttnn.graph.extract_calltrace(ttnn.graph.end_graph_capture())
    assert mock_device.num_program_cache_entries() == before
    assert list(out.shape) == [1, S_PAD, c.hidden_size]
    assert calls.count("ttnn.transformer.scaled_dot_product_attention") == BACKBONE.select_layer
    assert weights.used == set(weights.names()) - {"embed_tokens.weight"}


# ---- the AlternateVLDiT: cross blocks alternate between text-only and image-only keys ---------------
DIT = Gr00tN17Config.tiny().action_head.dit  # 8 blocks, text every 2nd cross block, heads 16 → 32
T_REAL, T_PAD, BUCKET = 41, 64, 750  # 1 state token + 40 action tokens, padded to tile rows


def droid_image_mask() -> torch.Tensor:
    """[1, S] True at the image tokens of the DROID prompt."""
    return droid_prompt(DROID_GRIDS, INSTRUCTION_IDS) == BACKBONE.image_token_id


def cross_masks(image: torch.Tensor, rows: int) -> dict[str, torch.Tensor]:
    """Additive text-only / image-only key masks [1, 1, rows, S_PAD] for prompt image flags [S]; the padded
    prompt rows are neither."""
    from models.experimental.gr00t.tt.ttnn_common import NEG_INF

    keys = {"image": torch.zeros(S_PAD, dtype=torch.bool), "text": torch.zeros(S_PAD, dtype=torch.bool)}
    keys["image"][:image.shape[0]], keys["text"][:image.shape[0]] = image, ~image
    return {k: torch.where(v, 0.0, NEG_INF).expand(1, 1, rows, S_PAD).contiguous() for k, v in keys.items()}


@pytest.fixture(scope="module")
def dit_reference():
    from models.experimental.gr00t.reference.torch_dit import DiT

    model = randomize_(DiT(DIT), seed=8).eval()
    image = droid_image_mask()
    g = torch.Generator().manual_seed(9)
    x = torch.randn(1, T_REAL, DIT.inner_dim, generator=g)
    context = torch.randn(1, image.shape[1], DIT.cross_attention_dim, generator=g)
    with torch.no_grad():
        want = model(x, context, torch.tensor([BUCKET]), {"text": ~image, "image": image})
    return model.state_dict(), image[0], x, context, want


def run_dit_golden(state, image, x, context, swap_masks=False):
    from models.experimental.gr00t.tt.tools.golden_ops import HOST_DEVICE, golden_execution
    from models.experimental.gr00t.tt.ttnn_common import NEG_INF, DeviceWeights
    from models.experimental.gr00t.tt.ttnn_dit import TtDiT
    from models.experimental.gr00t.tt.weight_layout_n17 import dit_device_tensors

    s = image.shape[0]
    masks = cross_masks(image, T_PAD)
    if swap_masks:
        masks = {"text": masks["image"], "image": masks["text"]}
    self_mask = torch.zeros(1, 1, T_PAD, T_PAD)
    self_mask[..., T_REAL:] = NEG_INF
    with golden_execution("fp32") as shim:
        tensors = {name: shim.from_torch(t) for name, t, _ in dit_device_tensors(lambda n: state[n], list(state), DIT,
                                                                                  prefix="")}
        weights = DeviceWeights(HOST_DEVICE, tensors)
        dit = TtDiT(weights, DIT, prefix="")
        ctx = torch.cat([context, torch.zeros(1, S_PAD - s, DIT.cross_attention_dim)], dim=1)
        tokens = torch.cat([x, torch.zeros(1, T_PAD - T_REAL, DIT.inner_dim)], dim=1)
        out = dit(shim.from_torch(tokens), dit.modulation(BUCKET), dit.cross_kv(shim.from_torch(ctx)),
                  {k: shim.from_torch(m) for k, m in masks.items()}, shim.from_torch(self_mask))
    return out[0, :T_REAL], weights


def test_the_alternate_vl_dit_data_flow_equals_the_fp32_reference(mock_device, dit_reference):
    state, image, x, context, want = dit_reference
    assert {DIT.cross_keys(i) for i in range(DIT.num_layers) if DIT.cross_attends(i)} == {"text", "image"}
    got, weights = run_dit_golden(state, image, x, context)
    d = max_abs_diff(got.numpy(), want[0].numpy())
    print(f"golden N1.7 AlternateVLDiT vs fp32 reference, max |d|: {d:.1e}")
    assert d < 1e-5
    assert weights.used == set(weights.names())


def test_text_and_image_keys_swapped_would_be_caught(mock_device, dit_reference):
    state, image, x, context, want = dit_reference
    got, _ = run_dit_golden(state, image, x, context, swap_masks=True)
    assert max_abs_diff(got.numpy(), want[0].numpy()) > 1e-2


# ---- the whole N1.7 action head: vlln + VL self-attention, state encoder, 4 Euler steps ----------------
HEAD_CFG = Gr00tN17Config.tiny().action_head  # 40 × 132 actions, no future tokens
SLOT = 24  # the DROID embodiment's row of the category-specific layers


@pytest.fixture(scope="module")
def head_reference():
    from models.experimental.gr00t.reference.torch_action_head import FlowmatchingActionHead

    head = randomize_(FlowmatchingActionHead(HEAD_CFG), seed=10).eval()
    image = droid_image_mask()
    g = torch.Generator().manual_seed(11)
    features = torch.randn(1, image.shape[1], HEAD_CFG.backbone_embedding_dim, generator=g)
    state = torch.randn(1, 1, HEAD_CFG.max_state_dim, generator=g)
    noise = torch.randn(1, HEAD_CFG.action_horizon, HEAD_CFG.action_dim, generator=g)
    cat_ids = torch.tensor([SLOT])
    with torch.no_grad():
        vl = head.condition(features)
        want = head.sample(vl, head.state_encoder(state, cat_ids), cat_ids, noise, None,
                           {"text": ~image, "image": image})
    return {f"action_head.{k}": v for k, v in head.state_dict().items()}, image[0], features, state, noise, want


def test_the_n17_action_head_data_flow_equals_the_fp32_reference(mock_device, head_reference):
    from models.experimental.gr00t.tt.tools.golden_ops import HOST_DEVICE, golden_execution
    from models.experimental.gr00t.tt.ttnn_action_head import TtActionHead
    from models.experimental.gr00t.tt.ttnn_common import NEG_INF, DeviceWeights
    from models.experimental.gr00t.tt.weight_layout_n17 import head_device_tensors

    state_dict, image, features, state, noise, want = head_reference
    s = image.shape[0]
    with golden_execution("fp32") as shim:
        tensors = {name: shim.from_torch(t) for name, t, _ in
                   head_device_tensors(lambda n: state_dict[n], list(state_dict), HEAD_CFG, SLOT)}
        weights = DeviceWeights(HOST_DEVICE, tensors)
        head = TtActionHead(weights, HEAD_CFG)
        cross = {k: shim.from_torch(m) for k, m in cross_masks(image, head.tokens_padded).items()}
        vl_mask = torch.zeros(1, 1, S_PAD, S_PAD)
        vl_mask[..., s:] = NEG_INF  # the padded prompt rows are never keys
        padded = torch.cat([features, torch.zeros(1, S_PAD - s, features.shape[-1])], dim=1)
        vl = head.condition(shim.from_torch(padded), shim.from_torch(vl_mask))
        base = head.tokens_base(head.state_features(shim.from_torch(state)))
        got = head.actions(head.sample(shim.from_torch(head.rows_in(noise), dtype=shim.float32), base,
                                       head.dit.cross_kv(vl), cross))
    assert head.tokens == 1 + HEAD_CFG.action_horizon  # no future tokens in N1.7
    d = max_abs_diff(got[0].float().numpy(), want[0].numpy())
    moved = max_abs_diff(want[0].numpy(), noise[0].numpy())
    print(f"golden N1.7 action head (4 Euler steps, 40 x 132) vs fp32 reference, max |d|: {d:.1e} "
          f"(the steps moved the state by up to {moved:.2f})")
    assert d < 1e-5 and moved > 0.1  # the comparison is over a chunk the model really changed
    assert weights.used == set(weights.names())


def test_the_n17_action_head_runs_on_the_mock_p150(mock_device, head_reference):
    """The head through the device stack at tiny size, with the 132-wide action rows that are not a tile
    multiple: a [1, 40, 132] float32 chunk out, every weight read, no program rebuilt by a second sample."""
    import ttnn

    from models.experimental.gr00t.tt.ttnn_action_head import TtActionHead
    from models.experimental.gr00t.tt.ttnn_common import DeviceWeights
    from models.experimental.gr00t.tt.weight_layout_n17 import head_device_tensors

    state_dict, _, _, state, noise, _ = head_reference

    put = partial(mock_tensor, mock_device)

    weights = DeviceWeights(mock_device, {name: put(t) for name, t, _ in
                                          head_device_tensors(lambda n: state_dict[n], list(state_dict), HEAD_CFG,
                                                              SLOT)})
    head = TtActionHead(weights, HEAD_CFG)
    rows = head.tokens_padded
    cross = {k: put(torch.zeros(1, 1, rows, S_PAD)) for k in ("text", "image")}
    vl = head.condition(put(torch.zeros(1, S_PAD, HEAD_CFG.backbone_embedding_dim)),
                        put(torch.zeros(1, 1, S_PAD, S_PAD)))
    kv, x = head.dit.cross_kv(vl), put(head.rows_in(noise), dtype=ttnn.float32)
    base = head.tokens_base(head.state_features(put(state)))
    head.actions(head.sample(x, base, kv, cross))
    before = mock_device.num_program_cache_entries()
    out = head.actions(head.sample(x, base, kv, cross))
    assert mock_device.num_program_cache_entries() == before
    assert list(out.shape) == [1, HEAD_CFG.action_horizon, HEAD_CFG.action_dim] and out.dtype == ttnn.float32
    assert weights.used == set(weights.names())



# ---- the whole backbone: vision tower → splice → text decoder -------------------------------------------
def test_the_n17_backbone_with_its_splice_equals_the_fp32_reference(mock_device):
    from models.experimental.gr00t.common.embeddings import rope_index
    from models.experimental.gr00t.reference.torch_qwen3vl import Qwen3VLBackbone
    from models.experimental.gr00t.tt.tools.golden_ops import HOST_DEVICE, golden_execution
    from models.experimental.gr00t.tt.ttnn_common import DeviceWeights
    from models.experimental.gr00t.tt.ttnn_qwen3vl import TtQwen3VLBackbone
    from models.experimental.gr00t.tt.weight_layout_n17 import text_device_tensors, vision_device_tensors

    ref = randomize_(Qwen3VLBackbone(BACKBONE), seed=12).eval()
    ids = droid_prompt(DROID_GRIDS, INSTRUCTION_IDS)
    patches = torch.randn(4 * 448, TINY.patch_dim, generator=torch.Generator().manual_seed(13))
    with torch.no_grad():
        want = ref(ids, patches, torch.tensor(DROID_GRIDS))["backbone_features"][0]
    state = {f"backbone.{k}": v for k, v in ref.state_dict().items()}
    s = ids.shape[1]
    padded = torch.cat([ids, torch.full((1, S_PAD - s), PAD_TOKEN_ID)], dim=1)
    image_rows = torch.nonzero(padded[0] == BACKBONE.image_token_id).flatten().tolist()
    with golden_execution("fp32") as shim:
        load, names = (lambda n: state[n]), list(state)
        tensors = {name: shim.from_torch(t) for name, t, _ in
                   [*vision_device_tensors(load, names, TINY, DROID_GRIDS),
                    *text_device_tensors(load, names, BACKBONE.text, BACKBONE.select_layer)]}
        weights = DeviceWeights(HOST_DEVICE, tensors)
        model = TtQwen3VLBackbone(weights, BACKBONE, DROID_GRIDS,
                                  rope_index(padded, torch.tensor(DROID_GRIDS), BACKBONE)[:, 0], image_rows)
        got = model(shim.from_torch(patches[None]), shim.from_torch(padded, dtype=shim.uint32))[0, :s]
    d = max_abs_diff(got.numpy(), want.numpy())
    print(f"golden N1.7 backbone (vision → splice → {BACKBONE.select_layer} text layers) vs fp32 reference, "
          f"max |d|: {d:.1e}")
    assert d < 1e-5
    assert weights.used == set(weights.names())  # the embedding table too, now that the splice reads it


def test_the_n17_backbone_runs_on_the_mock_p150(mock_device):
    """Vision → splice (embedding, the 0/1 keep column, the placement matmul) → text decoder through the device
    stack at tiny size: [1, 512, D] out, every weight read, no program rebuilt on a second forward."""
    import ttnn

    from models.experimental.gr00t.common.embeddings import rope_index
    from models.experimental.gr00t.reference.torch_qwen3vl import Qwen3VLBackbone
    from models.experimental.gr00t.tt.ttnn_common import DeviceWeights
    from models.experimental.gr00t.tt.ttnn_qwen3vl import TtQwen3VLBackbone
    from models.experimental.gr00t.tt.weight_layout_n17 import text_device_tensors, vision_device_tensors

    state = {f"backbone.{k}": v for k, v in randomize_(Qwen3VLBackbone(BACKBONE), seed=12).state_dict().items()}
    ids = droid_prompt(DROID_GRIDS, INSTRUCTION_IDS)
    padded = torch.cat([ids, torch.full((1, S_PAD - ids.shape[1]), PAD_TOKEN_ID)], dim=1)
    image_rows = torch.nonzero(padded[0] == BACKBONE.image_token_id).flatten().tolist()

    put = partial(mock_tensor, mock_device)

    load, names = (lambda n: state[n]), list(state)
    weights = DeviceWeights(mock_device, {name: put(t, row_major=kind == "row_major") for name, t, kind in
                                          [*vision_device_tensors(load, names, TINY, DROID_GRIDS),
                                           *text_device_tensors(load, names, BACKBONE.text, BACKBONE.select_layer)]})
    model = TtQwen3VLBackbone(weights, BACKBONE, DROID_GRIDS,
                              rope_index(padded, torch.tensor(DROID_GRIDS), BACKBONE)[:, 0], image_rows)
    patches, input_ids = put(torch.zeros(1, 4 * 448, TINY.patch_dim)), put(padded, row_major=True, dtype=ttnn.uint32)
    model(patches, input_ids)
    before = mock_device.num_program_cache_entries()
    out = model(patches, input_ids)
    assert mock_device.num_program_cache_entries() == before
    assert list(out.shape) == [1, S_PAD, BACKBONE.text.hidden_size]
    assert weights.used == set(weights.names())
