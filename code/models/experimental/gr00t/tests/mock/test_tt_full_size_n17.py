# SPDX-License-Identifier: Apache-2.0
"""The full-size N1.7 TT modules on the mock P150 (``make test-tt-full``; CI runs it). So far: the
Qwen3-VL vision tower (24 blocks of 1024, 16 heads of 64, DROID's 4 × 448 patches).

Real widths mean real program configs, L1/circular-buffer budgets and DRAM allocations; the mock
validates them and computes nothing. The weights are a randomly initialised reference tower (its
parameter names are the checkpoint's, as the reference's strict-loading tests show), ≈0.4 B parameters."""

from __future__ import annotations

import time

import pytest
import torch

from models.experimental.gr00t.common.configs_n17 import Gr00tN17Config

pytestmark = [pytest.mark.mock, pytest.mark.slow]

DROID_GRIDS = [[1, 16, 28]] * 4


def test_full_size_vision_tower_runs_on_the_mock_p150(mock_device):
    import ttnn

    from models.experimental.gr00t.reference.torch_qwen3vl import Qwen3VLVisionModel
    from models.experimental.gr00t.tt.ttnn_common import DeviceWeights
    from models.experimental.gr00t.tt.ttnn_qwen3vl import TtQwen3VLVision
    from models.experimental.gr00t.tt.weight_layout_n17 import vision_device_tensors

    c = Gr00tN17Config.full().backbone.vision
    t0 = time.perf_counter()
    state = Qwen3VLVisionModel(c).state_dict()

    def put(t):
        return ttnn.from_torch(t, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=mock_device,
                               memory_config=ttnn.DRAM_MEMORY_CONFIG)

    weights = DeviceWeights(mock_device, {name: put(t) for name, t, _ in
                                          vision_device_tensors(lambda n: state[n], list(state), c, DROID_GRIDS,
                                                                prefix="")})
    module = TtQwen3VLVision(weights, c, DROID_GRIDS, prefix="")
    x = put(torch.zeros(1, 4 * 448, c.patch_dim))
    tokens, deepstack = module(x)
    before = mock_device.num_program_cache_entries()
    module(x)
    print(f"full-size N1.7 vision tower on the mock P150: {before} programs, "
          f"{time.perf_counter() - t0:.1f} s with weight upload")
    assert mock_device.num_program_cache_entries() == before  # a second forward builds nothing
    assert list(tokens.shape) == [1, 448, c.out_hidden_size]
    assert [list(d.shape) for d in deepstack] == [[1, 448, c.out_hidden_size]] * len(c.deepstack_visual_indexes)
    assert weights.used == set(weights.names())
