# SPDX-License-Identifier: Apache-2.0
"""The N1.6 image side's TT data flow against the fp32 reference, without a card: the unchanged TT module
(``tt/ttnn_eagle3.py``: SigLIP2 tower, 2×2 unshuffle, connector ``mlp1``) runs with every ttnn op replaced by its
golden function (``tt/tools/golden_ops.py``) on the tiny N1.6 config (real patch 14, 16×16 position grid and 2×2
unshuffle; small widths; heads of 16 padded to 32).

It must reproduce ``reference/torch_eagle3_n16.Eagle3VisionConnector`` (itself tested against transformers) at
every tap — the tower after ``post_layernorm``, the unshuffled connector input, the image tokens — for one GR1
frame (252×252), for two frames of different grids in one call (252×252 and 252×336) and for a frame whose grid
is under the learned 16×16 (antialiased resize). Negative controls (attention across images, position rows of
another grid or without antialias, patch rows not in merge order) show the comparison has teeth; the module also
runs through the mock P150's op validation."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from models.experimental.gr00t.common.configs_n16 import Gr00tN16Config
from models.experimental.gr00t.common.quality import max_abs_diff

from ..conftest import randomize_
from .tt_expect import mock_tensor

pytestmark = pytest.mark.mock

BACKBONE = Gr00tN16Config.tiny().backbone  # tower 64 wide, 4 heads of 16 (→ 32 on the device), 2 layers
PATCH = BACKBONE.vision.patch_size
GR1 = [(252, 252)]  # one GR1 frame: 18×18 patches → 81 tokens
TWO = [(252, 252), (252, 336)]  # + a 320×240 G1 frame as snapped: 18×24 patches → 108 tokens
SHRUNK = [(168, 112)]  # 12×8 patches, under the 16×16 grid on both sides: the antialiased resize matters
CASES = {"gr1": GR1, "two_images": TWO, "shrunk": SHRUNK}
TOLERANCE = 1e-5  # of each tap's peak: fp32 golden math must equal the reference up to rounding
CAUGHT = 1e-3  # of the peak, 100 × TOLERANCE: what a negative control must at least miss by
TAPS = ("vision_tower", "unshuffled", "image_tokens")


@pytest.fixture(scope="module")
def reference():
    """Random weights (the N1.7 test's ``randomize_``), and per case: the images and the reference's taps."""
    from models.experimental.gr00t.reference.torch_backbone_n16 import vision_config
    from models.experimental.gr00t.reference.torch_eagle3_n16 import Eagle3VisionConnector

    model = randomize_(Eagle3VisionConnector(vision_config(BACKBONE)), seed=21).eval()
    g = torch.Generator().manual_seed(22)
    cases = {}
    for name, sizes in CASES.items():
        images = [torch.rand(3, h, w, generator=g) * 2 - 1 for h, w in sizes]
        with torch.no_grad():
            vision = model.vision_model(images)
            merged = model.unshuffle(vision)
            tokens = model.mlp1(torch.cat(merged))
        cases[name] = images, {"vision_tower": torch.cat(vision.last_hidden_state), "unshuffled": torch.cat(merged),
                               "image_tokens": tokens}
    return model.state_dict(), cases


def geometry_of(sizes):
    from models.experimental.gr00t.tt.weight_layout_n16 import VisionGeometry

    return VisionGeometry(tuple((h // PATCH, w // PATCH) for h, w in sizes), BACKBONE.unshuffle_factor)


def run_golden(state: dict, images: list[torch.Tensor], sizes, mutate=None, row_perm=None):
    """The TT module through golden functions → (taps in the reference's order and layout, weights, module, the
    raw device-layout taps).
    ``mutate(module)`` edits the built module; ``row_perm`` [P] reorders the real patch rows and position rows
    (a wrong patch order fed consistently to both)."""
    from models.experimental.gr00t.tt.tools.golden_ops import HOST_DEVICE, golden_execution
    from models.experimental.gr00t.tt.ttnn_common import DeviceWeights
    from models.experimental.gr00t.tt.ttnn_eagle3 import TtEagle3Vision
    from models.experimental.gr00t.tt.weight_layout_n16 import (STATIC_POS, VISION, connector_columns, patch_rows,
                                                                vision_device_tensors)

    geometry = geometry_of(sizes)
    converted = dict((name, t) for name, t, _ in vision_device_tensors(lambda n: state[n], list(state), BACKBONE,
                                                                      geometry, prefix=""))
    patches = patch_rows(images, PATCH, geometry)
    if row_perm is not None:
        n = geometry.patches
        patches[0, :n] = patches[0, :n][row_perm]
        converted[VISION + STATIC_POS][:n] = converted[VISION + STATIC_POS][:n][row_perm]
    with golden_execution("fp32") as shim:
        weights = DeviceWeights(HOST_DEVICE, {name: shim.from_torch(t) for name, t in converted.items()})
        module = TtEagle3Vision(weights, BACKBONE, geometry, prefix="")
        if mutate:
            mutate(module)
        taps = {}
        module(shim.from_torch(patches), taps=taps)
    # device layout → the reference's: rows back to packed row-major, unshuffled columns back to channel-major
    order = geometry.order() if row_perm is None else geometry.order()[row_perm]  # packed index of each device row
    rows = torch.empty(geometry.patches, dtype=torch.long)
    rows[order] = torch.arange(geometry.patches)
    cols = torch.empty(BACKBONE.connector_in_dim, dtype=torch.long)
    cols[connector_columns(BACKBONE.vision.hidden_size, BACKBONE.unshuffle_factor)] = torch.arange(cols.shape[0])
    got = {"vision_tower": taps["vision_tower"][0, :geometry.patches][rows],
           "unshuffled": taps["unshuffled"][0][:, cols], "image_tokens": taps["image_tokens"][0]}
    return got, weights, module, taps


def relative_diffs(got: dict, want: dict) -> dict[str, float]:
    """max |d| over each tap's peak |value|."""
    return {k: max_abs_diff(got[k].numpy(), want[k].numpy()) / float(want[k].abs().max()) for k in TAPS}


@pytest.mark.parametrize("case", list(CASES))
def test_the_image_side_data_flow_equals_the_fp32_reference(mock_device, reference, case):
    state, cases = reference
    images, want = cases[case]
    got, weights, module, raw = run_golden(state, images, CASES[case])
    g = module.g
    assert got["image_tokens"].shape == (g.tokens, BACKBONE.text.hidden_size)
    assert g.tokens == sum(h * w for h, w in CASES[case]) // 28**2  # GR1 81; 81 + 108
    assert (module.mask is None) == (len(g.segments()) == 1)
    diffs = relative_diffs(got, want)
    absolute = {k: max_abs_diff(got[k].numpy(), want[k].numpy()) for k in TAPS}
    print(f"golden N1.6 image side ({case}, {g.grids}) vs fp32 reference, max |d| (/ peak): "
          + ", ".join(f"{k} {absolute[k]:.1e} ({diffs[k]:.1e})" for k in TAPS))
    assert max(diffs.values()) < TOLERANCE, diffs
    assert torch.isfinite(raw["vision_tower"]).all()  # the padding rows too: a NaN there would reach real rows
    assert weights.used == set(weights.names())  # every converted tensor is read
    assert not any(".head." in n for n in weights.names())  # the pooling head is not converted


def test_images_attending_across_each_other_would_be_caught(mock_device, reference):
    """Only the padding kept apart: the two images see each other's tokens."""
    from models.experimental.gr00t.tt.ttnn_qwen3vl import block_diagonal_mask

    state, cases = reference
    images, want = cases["two_images"]

    def leak(module):
        g = module.g
        module.mask = block_diagonal_mask([g.patches, g.padded - g.patches])[None, None]

    got, *_ = run_golden(state, images, TWO, leak)
    diffs = relative_diffs(got, want)
    print("images attending across each other, max |d| / peak:", diffs)
    assert min(diffs.values()) > CAUGHT


@pytest.mark.parametrize("wrong", ["transposed grid", "not resized per image", "no antialias"])
def test_position_rows_of_the_wrong_grid_would_be_caught(mock_device, reference, wrong):
    import torch.nn.functional as F

    from models.experimental.gr00t.tt.weight_layout_n16 import STATIC_POS, VISION

    state, cases = reference
    case = "shrunk" if wrong == "no antialias" else "two_images"
    images, want = cases[case]
    geometry = geometry_of(CASES[case])
    table = state[VISION + "embeddings.position_embedding.weight"]
    d, side = table.shape[1], BACKBONE.vision.position_grid
    grid = table.reshape(side, side, d).permute(2, 0, 1)[None]
    rows = []
    for h, w in geometry.grids:
        if wrong == "transposed grid":  # resized for (w, h), read as (h, w)
            r = F.interpolate(grid, size=(w, h), mode="bilinear", align_corners=False, antialias=True)
        elif wrong == "not resized per image":  # every image gets the first image's grid, tiled to its length
            h0, w0 = geometry.grids[0]
            r = F.interpolate(grid, size=(h0, w0), mode="bilinear", align_corners=False, antialias=True)
            r = r.reshape(d, -1).repeat(1, -(-h * w // (h0 * w0)))[:, :h * w]
        else:
            r = F.interpolate(grid, size=(h, w), mode="bilinear", align_corners=False, antialias=False)
        rows.append(r.reshape(d, h * w).t())
    static = torch.cat(rows)[geometry.order()]

    def wrong_positions(module):
        module.w._t[VISION + STATIC_POS][:geometry.patches] = static

    got, *_ = run_golden(state, images, CASES[case], wrong_positions)
    diffs = relative_diffs(got, want)
    print(f"position rows, {wrong}: max |d| / peak", diffs)
    assert min(diffs.values()) > CAUGHT


@pytest.mark.parametrize("order", ["row-major", "window transposed"])
def test_a_wrong_unshuffle_order_would_be_caught(mock_device, reference, order):
    """Patch rows (and their position rows, consistently) not in merge order: the tower's output is right (read in
    the order it was fed), so what goes wrong is the unshuffle, and everything after it."""
    state, cases = reference
    images, want = cases["two_images"]
    geometry = geometry_of(TWO)
    merge = geometry.order()
    perms, start = [], 0
    for h, w in geometry.grids:
        idx = torch.arange(h * w).view(h // 2, 2, w // 2, 2)
        order_ = idx.flatten() if order == "row-major" else idx.permute(0, 2, 3, 1).flatten()  # (dx, dy) in windows
        perms.append(start + order_)
        start += h * w
    wanted = torch.cat(perms)  # packed row-major index of each device row
    position = torch.empty_like(merge)
    position[merge] = torch.arange(merge.shape[0])  # packed index → its device row in merge order
    got, *_ = run_golden(state, images, TWO, row_perm=position[wanted])
    diffs = relative_diffs(got, want)
    print(f"patch rows {order}: max |d| / peak", diffs)
    assert diffs["vision_tower"] < TOLERANCE
    assert diffs["unshuffled"] > CAUGHT and diffs["image_tokens"] > CAUGHT


def test_the_image_side_runs_on_the_mock_p150(mock_device, reference):
    """The same module through the device stack (ops validated and compiled, nothing computed) for two images of
    different grids: the reshape-unshuffle and the slice of the padding's tokens on tiled tensors, static output
    shape, one SDPA and two LayerNorms per layer, every weight read, no program rebuilt by a second forward."""
    import ttnn

    from models.experimental.gr00t.tt.ttnn_common import DeviceWeights
    from models.experimental.gr00t.tt.ttnn_eagle3 import TtEagle3Vision
    from models.experimental.gr00t.tt.weight_layout_n16 import patch_rows, vision_device_tensors

    state, cases = reference
    images, _ = cases["two_images"]
    geometry = geometry_of(TWO)
    put = partial(mock_tensor, mock_device)
    weights = DeviceWeights(mock_device, {name: put(t) for name, t, _ in
                                          vision_device_tensors(lambda n: state[n], list(state), BACKBONE, geometry,
                                                                prefix="")})
    module = TtEagle3Vision(weights, BACKBONE, geometry, prefix="")
    x = put(patch_rows(images, PATCH, geometry))
    module(x)  # first forward: builds the programs
    before = mock_device.num_program_cache_entries()
    ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
    tokens = module(x)
    calls = ttnn.graph.extract_calltrace(ttnn.graph.end_graph_capture())
    assert mock_device.num_program_cache_entries() == before
    assert list(tokens.shape) == [1, 81 + 108, BACKBONE.text.hidden_size]
    layers = BACKBONE.vision.num_hidden_layers
    assert calls.count("ttnn.transformer.scaled_dot_product_attention") == layers
    assert calls.count("ttnn.layer_norm") == 2 * layers + 2  # pre-norms, post_layernorm, mlp1.0
    assert weights.used == set(weights.names())
