# SPDX-License-Identifier: Apache-2.0
"""The N1.7 Qwen3-VL vision tower's TT data flow against the fp32 reference, without a card: the
unchanged TT module (``tt/ttnn_qwen3vl.py``) runs with every ttnn op replaced by its golden function
(``tt/golden_ops.py``) on the DROID static geometry (4 images × 16×28 patches), with small widths.

It must reproduce ``reference/torch_qwen3vl.Qwen3VLVisionModel`` (itself tested against transformers) on
the merged image tokens and every DeepStack feature; two negative controls (attention across images,
RoPE switched off) show the comparison has teeth."""

from __future__ import annotations

import pytest
import torch

from models.experimental.gr00t.common.configs_n17 import Gr00tN17Config
from models.experimental.gr00t.common.quality import max_abs_diff

from ..conftest import randomize_

pytestmark = pytest.mark.mock

DROID_GRIDS = [[1, 16, 28]] * 4  # 2 cameras × 2 frames, each a 256×448 frame
TINY = Gr00tN17Config.tiny().backbone.vision  # head_dim 16: padded to 32 on the device


@pytest.fixture(scope="module")
def vision_reference():
    from models.experimental.gr00t.reference.torch_qwen3vl import Qwen3VLVisionModel

    model = randomize_(Qwen3VLVisionModel(TINY), seed=3).eval()
    patches = torch.randn(sum(t * h * w for t, h, w in DROID_GRIDS), TINY.patch_dim,
                          generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        tokens, deepstack = model(patches, torch.tensor(DROID_GRIDS))
    return model.state_dict(), patches, tokens, deepstack


def run_golden(state: dict, patches: torch.Tensor, mutate=None):
    from models.experimental.gr00t.tt.golden_ops import HOST_DEVICE, golden_execution
    from models.experimental.gr00t.tt.ttnn_common import DeviceWeights
    from models.experimental.gr00t.tt.ttnn_qwen3vl import TtQwen3VLVision
    from models.experimental.gr00t.tt.weight_layout_n17 import vision_device_tensors

    with golden_execution("fp32") as shim:
        tensors = {name: shim.from_torch(t) for name, t, _ in
                   vision_device_tensors(lambda n: state[n], list(state), TINY, DROID_GRIDS, prefix="")}
        weights = DeviceWeights(HOST_DEVICE, tensors)
        module = TtQwen3VLVision(weights, TINY, DROID_GRIDS, prefix="")
        if mutate:
            mutate(module)
        tokens, deepstack = module(shim.from_torch(patches[None]))
    return tokens[0], [d[0] for d in deepstack], weights


def test_the_vision_tower_data_flow_equals_the_fp32_reference(mock_device, vision_reference):
    state, patches, want_tokens, want_deepstack = vision_reference
    tokens, deepstack, weights = run_golden(state, patches)
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

    tokens, _, _ = run_golden(state, patches, mutate)
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

    def put(t):
        return ttnn.from_torch(t, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=mock_device,
                               memory_config=ttnn.DRAM_MEMORY_CONFIG)

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
