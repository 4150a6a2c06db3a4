# SPDX-License-Identifier: Apache-2.0
"""The full-size N1.7 TT modules on the mock P150 (``make test-tt-full``; CI runs it). So far: the
Qwen3-VL vision tower (24 blocks of 1024, 16 heads of 64, DROID's 4 × 448 patches), the text decoder
(16 kept layers of 2048, 16 query / 8 key-value heads of 128, the 512-row DROID prompt) and the
AlternateVLDiT (32 blocks of 1536, 32 heads of 48 padded to 64, text / image cross-attention masks), and the
whole action head around it (vlln + 4 VL self-attention blocks, slot-24 encoders / decoder, 4 Euler steps
over a 40 × 132 float32 chunk).

Real widths mean real program configs, L1/circular-buffer budgets and DRAM allocations; the mock
validates them and computes nothing. The weights come from the reference modules (their parameter names
are the checkpoint's, as the reference's strict-loading tests show): a randomly initialised vision tower
(≈0.4 B parameters), and zeros in the text layers' and the DiT's shapes (the values do not matter to the mock)."""

from __future__ import annotations

import time
from functools import partial

import pytest
import torch

from models.experimental.gr00t.common.configs_n17 import Gr00tN17Config

from .tt_expect import mock_tensor, stage_calltraces

pytestmark = [pytest.mark.mock, pytest.mark.slow]

DROID_GRIDS = [[1, 16, 28]] * 4
S_PAD = 512


def test_full_size_vision_tower_runs_on_the_mock_p150(mock_device):

    from models.experimental.gr00t.reference.torch_qwen3vl import Qwen3VLVisionModel
    from models.experimental.gr00t.tt.ttnn_common import DeviceWeights
    from models.experimental.gr00t.tt.ttnn_qwen3vl import TtQwen3VLVision
    from models.experimental.gr00t.tt.weight_layout_n17 import vision_device_tensors

    c = Gr00tN17Config.full().backbone.vision
    t0 = time.perf_counter()
    state = Qwen3VLVisionModel(c).state_dict()

    put = partial(mock_tensor, mock_device)

    weights = DeviceWeights(mock_device, {name: put(t) for name, t, _ in
                                          vision_device_tensors(lambda n: state[n], list(state), c, DROID_GRIDS,
                                                                prefix="")})
    module = TtQwen3VLVision(weights, c, DROID_GRIDS, prefix="")
    x = put(torch.zeros(1, 4 * 448, c.patch_dim))
    tokens, deepstack = module(x)
    before = mock_device.num_program_cache_entries()
    module(x)
    print(f"full-size N1.7 vision tower on the mock P150: {before} programs in the cache, "
          f"{time.perf_counter() - t0:.1f} s with weight upload")
    assert mock_device.num_program_cache_entries() == before  # a second forward builds nothing
    assert list(tokens.shape) == [1, 448, c.out_hidden_size]
    assert [list(d.shape) for d in deepstack] == [[1, 448, c.out_hidden_size]] * len(c.deepstack_visual_indexes)
    assert weights.used == set(weights.names())


def test_full_size_text_decoder_runs_on_the_mock_p150(mock_device):

    from models.experimental.gr00t.common.embeddings import rope_index
    from models.experimental.gr00t.reference.torch_qwen3vl import Qwen3VLTextModel
    from models.experimental.gr00t.tt.ttnn_common import DeviceWeights
    from models.experimental.gr00t.tt.ttnn_qwen3vl import TtQwen3VLText
    from models.experimental.gr00t.tt.weight_layout_n17 import text_device_tensors

    from ..host.test_torch_qwen3vl import droid_prompt
    from .test_tt_golden_n17 import INSTRUCTION_IDS, PAD_TOKEN_ID

    backbone = Gr00tN17Config.full().backbone
    c, layers = backbone.text, backbone.select_layer
    t0 = time.perf_counter()
    with torch.device("meta"):
        shapes = {n: p.shape for n, p in Qwen3VLTextModel(c, layers).state_dict().items()
                  if n != "embed_tokens.weight"}  # the splice reads the table, not this module

    put = partial(mock_tensor, mock_device)

    weights = DeviceWeights(mock_device, {name: put(t) for name, t, _ in
                                          text_device_tensors(lambda n: torch.zeros(shapes[n]), list(shapes), c,
                                                              layers, prefix="")})
    ids = droid_prompt(DROID_GRIDS, INSTRUCTION_IDS)
    padded = torch.cat([ids, torch.full((1, S_PAD - ids.shape[1]), PAD_TOKEN_ID)], dim=1)
    image_rows = torch.nonzero(padded[0] == backbone.image_token_id).flatten().tolist()
    module = TtQwen3VLText(weights, c, layers, rope_index(padded, torch.tensor(DROID_GRIDS), backbone)[:, 0],
                           image_rows, prefix="")
    x = put(torch.zeros(1, S_PAD, c.hidden_size))
    feats = [put(torch.zeros(1, len(image_rows), c.hidden_size)) for _ in range(3)]
    module(x, feats)
    before = mock_device.num_program_cache_entries()
    out = module(x, feats)
    print(f"full-size N1.7 text decoder on the mock P150: {before} programs in the cache, "
          f"{time.perf_counter() - t0:.1f} s with weight upload")
    assert mock_device.num_program_cache_entries() == before
    assert list(out.shape) == [1, S_PAD, c.hidden_size] and len(image_rows) == 448
    assert weights.used == set(weights.names())


def test_full_size_alternate_vl_dit_runs_on_the_mock_p150(mock_device):

    from models.experimental.gr00t.reference.torch_dit import DiT
    from models.experimental.gr00t.tt.ttnn_common import DeviceWeights
    from models.experimental.gr00t.tt.ttnn_dit import TtDiT
    from models.experimental.gr00t.tt.weight_layout_n17 import dit_device_tensors

    c = Gr00tN17Config.full().action_head.dit
    t_pad = 64  # 1 state token + 40 action tokens, padded
    t0 = time.perf_counter()
    with torch.device("meta"):
        shapes = {n: p.shape for n, p in DiT(c).state_dict().items()}

    put = partial(mock_tensor, mock_device)

    weights = DeviceWeights(mock_device, {name: put(t) for name, t, _ in
                                          dit_device_tensors(lambda n: torch.zeros(shapes[n]), list(shapes), c,
                                                             prefix="")})
    dit = TtDiT(weights, c, prefix="")
    mod = dit.modulation(750)
    kv = dit.cross_kv(put(torch.zeros(1, S_PAD, c.cross_attention_dim)))
    masks = {k: put(torch.zeros(1, 1, t_pad, S_PAD)) for k in ("text", "image")}
    x, self_mask = put(torch.zeros(1, t_pad, c.inner_dim)), put(torch.zeros(1, 1, t_pad, t_pad))
    dit(x, mod, kv, masks, self_mask)
    before = mock_device.num_program_cache_entries()
    out = dit(x, mod, kv, masks, self_mask)
    print(f"full-size N1.7 AlternateVLDiT on the mock P150: {before} programs in the cache, "
          f"{time.perf_counter() - t0:.1f} s with weight upload")
    assert mock_device.num_program_cache_entries() == before  # an Euler step builds nothing new
    assert list(out.shape) == [1, t_pad, c.output_dim]
    assert weights.used == set(weights.names())


def test_full_size_n17_action_head_runs_on_the_mock_p150(mock_device):
    import ttnn

    from models.experimental.gr00t.reference.torch_action_head import FlowmatchingActionHead
    from models.experimental.gr00t.tt.ttnn_action_head import TtActionHead
    from models.experimental.gr00t.tt.ttnn_common import DeviceWeights
    from models.experimental.gr00t.tt.weight_layout_n17 import head_device_tensors

    c = Gr00tN17Config.full().action_head
    t0 = time.perf_counter()
    with torch.device("meta"):
        shapes = {f"action_head.{n}": p.shape for n, p in FlowmatchingActionHead(c).state_dict().items()}

    put = partial(mock_tensor, mock_device)

    weights = DeviceWeights(mock_device, {name: put(t) for name, t, _ in
                                          head_device_tensors(lambda n: torch.zeros(shapes[n]), list(shapes), c, 24)})
    head = TtActionHead(weights, c)
    vl = head.condition(put(torch.zeros(1, S_PAD, c.backbone_embedding_dim)), put(torch.zeros(1, 1, S_PAD, S_PAD)))
    cross = {k: put(torch.zeros(1, 1, head.tokens_padded, S_PAD)) for k in ("text", "image")}
    kv, sf = head.dit.cross_kv(vl), head.state_features(put(torch.zeros(1, 1, c.max_state_dim)))
    base = head.tokens_base(sf)
    x = put(head.rows_in(torch.zeros(1, c.action_horizon, c.action_dim)), dtype=ttnn.float32)
    head.actions(head.sample(x, base, kv, cross))
    before = mock_device.num_program_cache_entries()
    out = head.actions(head.sample(x, base, kv, cross))
    print(f"full-size N1.7 action head on the mock P150: {before} programs in the cache, "
          f"{time.perf_counter() - t0:.1f} s with weight upload")
    assert mock_device.num_program_cache_entries() == before
    assert list(out.shape) == [1, 40, 132] and out.dtype == ttnn.float32
    assert weights.used == set(weights.names())


# ---- the whole full-size N1.7 model, stage by stage ------------------------------------------------------
def test_full_size_n17_model_runs_stage_by_stage_and_is_trace_safe(mock_device):
    import ttnn

    from models.experimental.gr00t.tt.tools.stage_sheet import allocated_model, demo_host_inputs

    from .tt_expect import checked_sheet, expected_attention_calls_n17, expected_norm_calls_n17

    t0 = time.perf_counter()
    model, config, layout = allocated_model("n17", mock_device)
    host = demo_host_inputs(model, config, layout)
    model.write_inputs(host)
    built = time.perf_counter() - t0
    census, programs, taps = stage_calltraces(model, mock_device)
    sdpa = {s: calls.count("ttnn.transformer.scaled_dot_product_attention") for s, calls in census.items()}
    b, h = config.backbone, config.action_head
    assert sdpa == {"vision": b.vision.depth, "llm": b.select_layer, "adapter": h.vl_self_attention.num_layers,
                    "denoise": h.dit.num_layers * h.num_inference_timesteps} == {"vision": 24, "llm": 16,
                                                                                 "adapter": 4, "denoise": 128}
    assert sum(sdpa.values()) == expected_attention_calls_n17(config)
    norms = expected_norm_calls_n17(config)
    flat = [c for calls in census.values() for c in calls]
    assert (flat.count("ttnn.layer_norm"), flat.count("ttnn.rms_norm")) == (norms["layer_norm"], norms["rms_norm"])
    assert model.w.used == set(model.w.names())  # every converted weight is read
    o = model.outputs
    assert tuple(o["vision_embeds"].shape) == (1, 448, 2048) and tuple(o["backbone_features"].shape) == (1, 512, 2048)
    assert tuple(o["euler_state"].shape) == (1, 64, 132) and o["euler_state"].dtype == ttnn.float32
    again = mock_device.num_program_cache_entries()
    model.forward()
    assert mock_device.num_program_cache_entries() == again  # static shapes: the second forward builds nothing
    sheet = checked_sheet("n17", model, host)
    print(f"full-size N1.7 on the mock P150: built in {built:.1f} s, {programs} programs, top-level calls per stage "
          f"{ {s: len(c) for s, c in census.items()} }, device programs per stage "
          f"{ {s: r['programs'] for s, r in sheet.items()} }, {time.perf_counter() - t0:.1f} s in all")
