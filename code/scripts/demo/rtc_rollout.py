#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Real-time chunking evidence: a simulated 10-chunk rollout per version with naive chunking, ``inpaint`` and
``guided`` RTC, the discontinuity at every chunk switch measured on the executed trajectory.

    make rtc-rollout    (= rtc_rollout.py [--out-json benchmarks/results/rtc_rollout.json] [--media media])

Random weights (``synthetic:tiny``, seed 0): this measures a property of the algorithms, not of a policy. Each
version's demo observation is sent ``--chunks`` times with initial-noise seeds 100, 101, … (after the first,
with the state the robot reached: it tracks its commands exactly); the robot asks for
the next chunk after executing ``execute`` steps of the current one (``offset``), the answer arrives ``delay``
steps later, and the robot switches then: it has executed the old chunk up to step ``offset + delay − 1`` and
goes on with the new chunk's step ``delay``. The RTC requests go through the server's own code
(``sessions.RtcJob`` → ``attach_rtc`` → the reference sampler) with the plan the server would make from
``offset`` and ``delay``.

Metrics (physical units, max over all action dims and over the 9 switches; ``s`` = execute, ``d`` = delay):

- frozen error: ``|new[0:d] − old[s:s+d]|``, the steps the robot ran from the old chunk while the new one was
  computed (0 for ``inpaint`` on N1.5's absolute actions; for N1.7 the re-expressed rows are clipped to the new
  chunk's early-step statistics, see SERVING.md §12);
- switch jump, action: ``|new[d] − old[s+d]|``, the first step taken from the new chunk against what the old
  one planned there; velocity: the same for the first difference one step on;
- overlap deviation: mean ``|new[d:H−s] − old[s+d:H]|``;
- the executed trajectory's step at the switches and its median step inside chunks: random weights make every
  chunk rough, so the raw step size cannot tell the variants apart; the jumps against the old plan can.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # code/scripts: bench_http's shared client helpers
from bench_http import cpu_model

from models.experimental.gr00t.common.demo import load_demo_request
from gr00t_p150.server.rtc import attach_rtc, rtc_plan
from gr00t_p150.server.sessions import Session
from models.experimental.gr00t.common.cli import run_cli
from models.experimental.gr00t.common.layouts import get_layout
from models.experimental.gr00t.common.versions import SPECS

REPO = Path(__file__).resolve().parents[3]
DEFAULTS = {"n15": {"execute": 8, "delay": 4, "control_hz": 30.0},
            "n16": {"execute": 8, "delay": 4, "control_hz": 30.0},  # GR1, 16 rows served
            "n17": {"execute": 16, "delay": 6, "control_hz": 15.0}}
VARIANTS = ("naive", "inpaint", "guided")


def rollout(policy, request: dict, variant: str, chunks: int, execute: int, delay: int, hz: float,
            track: bool = True):
    """(chunks [n][H, A] physical, plans): each chunk after the first planned as the server plans it. With
    ``track`` the robot follows its commands: each request after the first reports as state the action it
    executed last (the old chunk's step ``execute − 1``), so relative actions (N1.7) are re-expressed against
    where the robot is; without, every request reports the demo state."""
    from models.experimental.gr00t.common.observation import parse_observation
    from models.experimental.gr00t.common.policy import run_prepared

    layout = policy.layout
    session = Session("rollout", created_at=0.0, touched=0.0, control_hz=hz)
    out, plans, denoise_ms = [], [], []
    for i in range(chunks):
        body = dict(request)
        if i and track:
            body["state"] = {k: session.last_actions[k][execute - 1].tolist() for k, _ in layout.state_groups}
        inputs = policy.prepare(parse_observation(body, layout), seed=100 + i)
        plan = None
        if variant != "naive" and i:
            # the previous request "arrived" ``execute`` control steps ago
            plan, job = rtc_plan(session, session.observed_at + execute / hz, delay,
                                 int(inputs.noise.shape[1]), variant)
            if job is not None:
                attach_rtc(policy, job, inputs)
        result = run_prepared(policy, inputs)
        session.observed_at, session.last_chunk_normalized = 0.0, result.action_pred
        session.last_actions = result.actions
        out.append(np.concatenate([result.actions[k] for k in layout.action_keys], -1).astype(np.float64))
        plans.append(plan)
        denoise_ms.append(sum(v for k, v in result.timing_ms.items() if k.startswith("dit_step_")))
    return out, plans, float(np.median(denoise_ms[1:]))


def executed(chunks: list[np.ndarray], execute: int, delay: int) -> tuple[np.ndarray, list[int]]:
    """The trajectory the robot runs and the indices where it switched to a new chunk."""
    parts, switches, t = [chunks[0][:execute + delay]], [], execute + delay
    for c in chunks[1:]:
        switches.append(t)
        parts.append(c[delay:delay + execute])
        t += execute
    return np.concatenate(parts), switches


def metrics(chunks, execute: int, delay: int, groups) -> tuple[dict, np.ndarray, list[int]]:
    """The switch metrics over all action dims (max over dims, then over switches unless said); ``groups`` the
    layout's (key, dim) in column order, for the frozen error per group."""
    s, d = execute, delay
    pairs = list(zip(chunks, chunks[1:]))
    frozen, start = {}, 0
    for key, dim in groups:
        frozen[key] = float(max(np.abs(new[:d, start:start + dim] - old[s:s + d, start:start + dim]).max()
                                for old, new in pairs))
        start += dim
    traj, switches = executed(chunks, execute, delay)
    step = np.abs(np.diff(traj, axis=0)).max(1)  # step[t − 1] = max over dims |a[t] − a[t−1]|
    inside = np.setdiff1d(np.arange(len(step)), [t - 1 for t in switches])
    horizon = chunks[0].shape[0]
    return {
        # the steps the robot ran from the old chunk while this one was computed
        "frozen_error_max": max(frozen.values()),
        "frozen_error_max_per_group": frozen,
        # the first step taken from the new chunk against what the old chunk had planned there
        "switch_action_jump_max": float(max(np.abs(new[d] - old[s + d]).max() for old, new in pairs)),
        # the same for the first difference one step on (the velocity the new chunk takes up)
        "switch_velocity_jump_max": float(max(np.abs((new[d + 1] - new[d]) - (old[s + d + 1] - old[s + d])).max()
                                              for old, new in pairs)),
        # the rest of the overlap: how far the new plan strays from the old one where both exist
        "overlap_deviation_mean": float(np.mean([np.abs(new[d:horizon - s] - old[s + d:]).mean()
                                                 for old, new in pairs])),
        # the executed trajectory's own roughness: the step at switches and the median step inside chunks
        "executed_step_at_switch_max": float(step[[t - 1 for t in switches]].max()),
        "executed_step_inside_median": float(np.median(step[inside])),
    }, traj, switches


def plot(version: str, first: dict, execute: int, delay: int, dims: list[int], out: Path) -> None:
    """The first switch in chunk time: the old chunk (the same for every variant: the session's first answer)
    and each variant's new chunk from the step it starts at, the frozen steps shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from make_media import save

    old = first["naive"][0]
    horizon = old.shape[0]
    fig, axes = plt.subplots(len(dims), 1, figsize=(8.0, 1.9 * len(dims) + 0.9), sharex=True, squeeze=False)
    styles = {"naive": ("C3", "-", "o"), "inpaint": ("C0", "-", "s"), "guided": ("C2", "--", "^")}
    t_old, t_new = np.arange(horizon), np.arange(execute, execute + horizon)
    for ax, d in zip(axes[:, 0], dims):
        ax.axvspan(execute - 0.5, execute + delay - 0.5, color="0.9", zorder=0)
        ax.plot(t_old, old[:, d], color="k", lw=1.6, label="previous chunk")
        for name, (_, new) in first.items():
            color, ls, marker = styles[name]
            ax.plot(t_new, new[:, d], color=color, ls=ls, lw=1.0, marker=marker, ms=3, label=f"new chunk: {name}")
        ax.set_xlim(-0.5, execute + horizon - 0.5)
        ax.set_ylabel(f"action dim {d}", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0, 0].legend(fontsize=7, ncol=4, loc="upper left", frameon=False)
    axes[-1, 0].set_xlabel(f"control step (shaded: the {delay} steps run from the previous chunk during inference)",
                           fontsize=8)
    fig.suptitle(f"GR00T {version.upper()}: one chunk switch, naive chunking vs RTC inpaint / guided (request at "
                 f"step {execute})\nsynthetic:tiny random weights — a property of the algorithm, not a policy",
                 fontsize=9)
    fig.tight_layout()
    save(fig, out)


def widen_relative_statistics(directory: Path) -> None:
    """N1.7 only: every step's relative-action range per dim set to the union of all steps' ranges (the synthetic
    ranges grow with the step, as real ones do), so a previous chunk's relative actions, re-expressed against the
    same state, fit the new chunk's early steps."""
    path = directory / "statistics.json"
    stats = json.loads(path.read_text())
    for per_key in stats.values():
        for entry in per_key["relative_action"].values():
            for name, pick in (("min", np.min), ("q01", np.min), ("max", np.max), ("q99", np.max)):
                values = np.asarray(entry[name])
                entry[name] = np.broadcast_to(pick(values, axis=0), values.shape).tolist()
    path.write_text(json.dumps(stats, indent=2) + "\n")


def run_version(version: str, chunks: int, media: Path | None, log, wide: bool = False) -> dict:
    from models.experimental.gr00t.common.synthetic import write_checkpoint
    from models.experimental.gr00t.reference.policies import load_reference_policy

    p = DEFAULTS[version]
    with tempfile.TemporaryDirectory(prefix=f"gr00t-{version}-tiny-") as tmp:
        write_checkpoint(tmp, scale="tiny", seed=0, version=version, log=lambda _: None)
        if wide:
            widen_relative_statistics(Path(tmp))
        policy = load_reference_policy(tmp, version)
    name = version + ("_wide_stats" if wide else "")
    request = {k: v for k, v in load_demo_request(version).items() if k != "noise"}
    row = {**p, "action_keys": policy.layout.action_keys, "relative_statistics": "widened" if wide else "synthetic",
           "state": "the demo state every time" if wide else "the last executed action",
           "variants": {}}
    first = {}
    for variant in VARIANTS:
        t0 = time.perf_counter()
        out, plans, denoise = rollout(policy, request, variant, chunks, p["execute"], p["delay"], p["control_hz"],
                             track=not wide)
        first[variant] = out[0], out[1]
        m, _, _ = metrics(out, p["execute"], p["delay"], policy.layout.action_groups)
        if variant != "naive":
            m["plan"] = plans[1]
        m["denoise_ms_median"] = denoise  # the Euler loop of chunks 2…n (guided: with its backward passes)
        row["variants"][variant] = m
        log(f"{name} {variant:8s} frozen error {m['frozen_error_max']:.4g}, switch jump: action "
            f"{m['switch_action_jump_max']:.4g} velocity {m['switch_velocity_jump_max']:.4g}, overlap deviation "
            f"{m['overlap_deviation_mean']:.4g}; executed step at switch {m['executed_step_at_switch_max']:.4g} "
            f"(inside median {m['executed_step_inside_median']:.4g}); denoise {denoise:.1f} ms  "
            f"[{time.perf_counter() - t0:.1f} s]")
        per_group = {k: round(v, 4) for k, v in m["frozen_error_max_per_group"].items()}
        log(f"    frozen error per group: {json.dumps(per_group)}")
    if media is not None:
        plot(version, first, p["execute"], p["delay"], [0, 1, 2], media / f"rtc_rollout_{name}.png")
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-json", type=Path, default=REPO / "benchmarks/results/rtc_rollout.json")
    ap.add_argument("--media", default=str(REPO / "media"), help="plot directory ('' for none)")
    ap.add_argument("--chunks", type=int, default=10)
    ap.add_argument("--versions", nargs="+", default=["n15", "n17"], choices=sorted(DEFAULTS))
    args = ap.parse_args()
    media = Path(args.media) if args.media else None  # Path("") would be the working directory

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    result = {"command": "make rtc-rollout", "cpu": cpu_model(), "weights": "synthetic:tiny seed 0 (random)",
              "chunks": args.chunks, "versions": {v: run_version(v, args.chunks, media, log) for v in args.versions}}
    for v in args.versions:  # relative actions again, with relative statistics wide enough that nothing clips
        if any(rep.startswith("relative") for _, rep in get_layout(SPECS[v].layout).action_reps):
            result["versions"][f"{v}_wide_stats"] = run_version(v, args.chunks, media, log, wide=True)
    args.out_json.parent.mkdir(parents=True, exist_ok=True)
    args.out_json.write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {args.out_json}")
    return 0


if __name__ == "__main__":
    run_cli(main, "rtc_rollout")
