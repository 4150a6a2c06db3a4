# SPDX-License-Identifier: Apache-2.0
"""The micro-batching buckets of the full-size TT models on the mock P150 (``make test-tt-full``): the batch-2 and
batch-4 models of both versions over the real converted weight shapes validate every op, program config, L1 and
circular-buffer budget, stay trace-safe (inputs and constants never in a stage's scratch), keep the program budgets
of the batch-1 graph (N1.7's vision tower once per request), and equal the committed per-bucket roofline sheets
(``code/scripts/bench/tt_roofline.py --version <v> --batch <B>``). The DRAM a bucket adds beside the weights is
printed and held under the card's: every bucket of a server together with the weights fits the p150a's 32 GB."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.mock, pytest.mark.slow]

P150A_DRAM_BYTES = 32 * 2**30


@pytest.mark.parametrize("batch", [2, 4])
@pytest.mark.parametrize("version", ["n15", "n17"])
def test_full_size_bucket_is_trace_safe_within_budgets_and_fits_dram(mock_device, version, batch):
    import ttnn

    from models.experimental.gr00t.tt.tools.stage_sheet import allocated_model, demo_host_inputs, dram_in_use

    from .tt_expect import checked_sheet

    before = dram_in_use(mock_device)
    model, config, layout = allocated_model(version, mock_device, batch)
    weights = model.w.stored_bytes()
    resident = dram_in_use(mock_device) - before - weights
    sheet = checked_sheet(version, model, demo_host_inputs(model, config, layout), batch)
    banks = ttnn.get_memory_view(mock_device, ttnn.BufferType.DRAM).num_banks
    scratch = max(r["dram_peak_per_bank"] for r in sheet.values()) * banks
    print(f"full-size {version} batch {batch}: {weights / 1e9:.2f} GB weights, the bucket's constants and inputs "
          f"{resident / 1e6:.1f} MB, its largest stage's buffers {scratch / 1e6:.1f} MB")
    assert 0 < resident and 0 < scratch
    # a server with buckets 1, 2 and 4 holds three models' constants, inputs and stage outputs over one set of weights
    assert weights + 3 * (resident + scratch) < P150A_DRAM_BYTES
    assert tuple(model.inputs["noise"].shape)[0] == batch
