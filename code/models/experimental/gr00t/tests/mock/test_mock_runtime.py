# SPDX-License-Identifier: Apache-2.0
"""The mock P150 harness works: a Blackhole device with the p150a's compute grid opens, ops are
validated and compiled into the program cache (they run as no-ops, so outputs are zeros), and host-side
weight conversion to device layouts (bf16 / bfloat8_b tiles, tensorbin round trip) is exact."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.mock


def test_mock_device_is_a_blackhole_p150(mock_device):
    import ttnn

    assert mock_device.arch() == ttnn.Arch.BLACKHOLE
    grid = mock_device.compute_with_storage_grid_size()
    assert (grid.x, grid.y) == (13, 10)


def test_a_dit_sized_linear_is_validated_and_cached(mock_device):
    """[49, 1536] @ [1536, 6144] with bfloat8_b weights (one DiT feed-forward): program built, shapes,
    dtypes and memory config as asked; the mock executes nothing, so the result is all zeros."""
    import ttnn

    before = mock_device.num_program_cache_entries()
    x = ttnn.from_torch(torch.randn(1, 49, 1536), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=mock_device)
    w = ttnn.from_torch(torch.randn(1536, 6144), dtype=ttnn.bfloat8_b, layout=ttnn.TILE_LAYOUT, device=mock_device)
    y = ttnn.linear(x, w, memory_config=ttnn.DRAM_MEMORY_CONFIG)
    assert tuple(y.shape) == (1, 49, 6144) and y.dtype == ttnn.bfloat16 and y.layout == ttnn.TILE_LAYOUT
    assert y.memory_config().buffer_type == ttnn.BufferType.DRAM
    assert mock_device.num_program_cache_entries() > before  # the op really went through the device stack
    assert ttnn.to_torch(y).abs().max().item() == 0.0  # mock: nothing ran


def test_weight_conversion_round_trips_on_the_host(mock_device, tmp_path):
    import ttnn

    w = torch.randn(1536, 6144)
    for dtype, tol in ((ttnn.bfloat16, 0.01), (ttnn.bfloat8_b, 0.05)):
        host = ttnn.from_torch(w, dtype=dtype, layout=ttnn.TILE_LAYOUT)
        assert host.storage_type() == ttnn.StorageType.HOST
        path = tmp_path / f"w_{dtype}.tensorbin"
        ttnn.dump_tensor(str(path), host)
        again = ttnn.to_torch(ttnn.load_tensor(str(path)))
        assert torch.equal(again, ttnn.to_torch(host))  # the cache file is bit-exact
        rel = ((again.float() - w).norm() / w.norm()).item()
        assert rel < tol, (dtype, rel)

