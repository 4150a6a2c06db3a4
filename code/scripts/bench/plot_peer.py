#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A bench_peer.py result as a picture: per side, the model call's median split into vision, LLM and action head
(our sides) or whole (LeRobot reports no stages), one bar each, the CPU and date in the title.

    plot_peer.py benchmarks/results/bench_peer_n17_bf16.json media/bench_peer_n17_cpu_bf16.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

STAGES = (("vision", "#4c72b0"), ("llm", "#55a868"), ("head", "#c44e52"))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    result = json.loads(Path(argv[0]).read_text())
    sides = result["sides"]
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(sides) + 1.6))
    for i, row in enumerate(reversed(list(sides.values()))):
        staged = row.get("stages_median_ms")
        if staged:
            left = 0.0
            for stage, colour in STAGES:
                ax.barh(i, staged[stage] / 1e3, left=left, color=colour, label=stage if i == 0 or left == 0 else None)
                left += staged[stage] / 1e3
        else:
            ax.barh(i, row["median_ms"] / 1e3, color="#8c8c8c", label="LeRobot (whole call)")
        ax.text(row["median_ms"] / 1e3, i, f"  {row['median_ms'] / 1e3:.2f} s", va="center", fontsize=9)
    ax.set_yticks(range(len(sides)), list(reversed(list(sides))))
    ax.set_xlabel("model call, median seconds (backbone + action head), same inputs and noise")
    where = f"{result.get('device', 'cpu')}: {result['cpu']}, {result.get('date', '')}"
    ax.set_title(f"GR00T N1.7 full size (random weights), {where}", fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), loc="lower right", fontsize=8)
    ax.set_xlim(0, max(r["median_ms"] for r in sides.values()) / 1e3 * 1.2)
    fig.tight_layout()
    out = Path(argv[1])
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
