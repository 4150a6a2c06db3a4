# SPDX-License-Identifier: Apache-2.0
"""End-to-end latency of the traced policies on a p150a (skips without one): N1.5 GR1 on 1 command queue,
N1.7 DROID on 1 and 2 (the published N1.7 package runs 2).

``get_action``-equivalent: host chain (image chain, tokenizer, state) → input upload → four trace replays →
readback → un-normalise. Median of ``GR00T_PERF_N`` (50) after 10 warm-ups, plus a per-trace breakdown from
a second loop that synchronises after each stage (that loop's total is a little higher than the first one's,
which is the figure to quote). Writes ``GR00T_DEVICE_REPORT`` (JSON, one file per case) if set. The assertion
is a loose regression guard. Targets, which are the published packages' figures on their own ports and never
this port's: N1.5 43.4 ms; N1.7 62.8 ms (vision 17.5, LLM 12.4, adapter 6.2, megakernel denoise 16.5; their
Stage-1 TTNN denoise path 79.7 ms).

Each stage's median is set beside its roofline floor (``benchmarks/results/tt_roofline_<version>.json``: the
captured ops' bytes and FLOPs at 512 GB/s and the grid's peak, from the mock) and a warning names every stage
above 3× its floor, so the first card run says where the time goes."""

from __future__ import annotations

import json
import os
import statistics
import time
import warnings
from pathlib import Path

import pytest

from models.experimental.gr00t.common.timing import Stopwatch
from models.experimental.gr00t.tests.device_fixtures import build_policy, checkpoint_for, observations

BUDGET_MS = 250.0
PUBLISHED_MS = {"n15": 43.4, "n17": 62.8}  # the published packages' p150a figures (none for N1.6)
# The roofline sheets (``code/scripts/bench/tt_roofline.py``, from the mock): a stage slower than 3× its floor is named.
ROOFLINE = Path(__file__).resolve().parents[6] / "benchmarks" / "results"
OVER_FLOOR = 3.0


def stage_floors_ms(version: str) -> dict[str, float]:
    sheet = json.loads((ROOFLINE / f"tt_roofline_{version}.json").read_text())
    return {stage: row["floor_us"] / 1e3 for stage, row in sheet["stages"].items()}


def over_floor(breakdown: dict[str, float], floors: dict[str, float]) -> dict[str, str]:
    """stage → "measured ms vs floor ms (×ratio)" for every stage above ``OVER_FLOOR`` × its floor."""
    return {s: f"{breakdown[s]:.2f} ms vs floor {f:.2f} ms (x{breakdown[s] / f:.1f})" for s, f in floors.items()
            if s in breakdown and breakdown[s] > OVER_FLOOR * f}


@pytest.mark.parametrize("version, num_cqs", [("n15", 1), ("n16", 1), ("n17", 1), ("n17", 2)])
def test_traced_end_to_end_latency(p150, tt_cache_root, version, num_cqs):
    checkpoint = checkpoint_for(version)
    policy = build_policy(p150, checkpoint, tt_cache_root, traced=True, version=version, num_cqs=num_cqs)
    obs, _, noise = observations(policy.layout)
    first = policy.prepare(obs, noise=noise)
    policy.model.write_inputs(policy.model.host_inputs_for(first))
    policy.runner.capture()
    n = int(os.environ.get("GR00T_PERF_N", "50"))

    def once(clock=None):
        t = time.perf_counter()
        inputs = policy.prepare(obs, noise=noise)
        policy.finish(policy.infer(inputs, clock)["action_pred"], inputs)
        return (time.perf_counter() - t) * 1e3

    for _ in range(10):
        once()
    totals = [once() for _ in range(n)]
    laps = []
    for _ in range(n):
        clock = Stopwatch()
        once(clock)
        laps.append(clock.ms)
    breakdown = {k: statistics.median(lap[k] for lap in laps) for k in laps[0]}
    floors = stage_floors_ms(version)
    slow = over_floor(breakdown, floors)
    if slow:
        warnings.warn(f"{version} stages above {OVER_FLOOR}x their roofline floor: {slow}", stacklevel=1)
    result = {"what": f"traced {version} get_action on a p150a, {num_cqs} CQ (host chain + upload + 4 traces + "
                      "readback + decode)",
              "weights": str(checkpoint), "n": n, "median_ms": statistics.median(totals),
              "p90_ms": sorted(totals)[int(0.9 * (n - 1))], "min_ms": min(totals), "per_stage_median_ms": breakdown,
              "published_target_ms": PUBLISHED_MS.get(version),
              "roofline_floor_ms": floors, "above_3x_floor": slow}
    print(json.dumps(result, indent=1))
    if os.environ.get("GR00T_DEVICE_REPORT"):
        with open(f"{os.environ['GR00T_DEVICE_REPORT']}.{version}-{num_cqs}cq.json", "w") as f:
            json.dump(result, f, indent=1)
    policy.runner.release()
    assert result["median_ms"] < BUDGET_MS, result
