#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Ourselves against a real peer in one run on one machine: LeRobot 0.6.1's GR00T N1.7 and our fp32 reference and
fast path, on the same full-size N1.7 weights, the same DROID observation and the same initial noise.

    make bench-peer    (= bench_peer.py [--rounds 2] [--calls 3] [--json benchmarks/results/bench_peer_n17.json])
    bench_peer.py --device cuda --peer-python python3 --peer-path DIR    (code/scripts/device_check_cuda.sh --peer)

The sides are LeRobot fp32 and LeRobot's default inference (fp32 parameters under bf16 autocast, on the CPU too),
our fp32 reference, our fp32 fast path (CPU only) and our bf16 fast path (on CUDA with static shapes and CUDA
graphs); fp32 sides must agree with LeRobot fp32 (TF32 off), the bf16 ones are reported (PCC, max |d|) against it.
Each side's process reports its own peak RSS. Without a CUDA device ``--device cuda`` stops with a reason.

1. The peer venv (``.venv-peer``; LeRobot pins transformers 5.4–5.5 and diffusers 0.38–0.39, which conflict with
   our lock, so it never shares ours) is built on first use: ``pip install lerobot[groot]==0.6.1`` with our lock's
   torch (the pip cache serves it).
2. The weights: our ``synthetic:full`` N1.7 snapshot (random, the real layout; generated once into the cache).
3. The inputs: the shipped DROID demo request through our host chain (frames, prompt, state; its explicit noise),
   saved once (``inputs.npz``); both sides run the model on exactly these tensors. LeRobot's own processor is not
   in the loop: its tokenizer/processor come from the hub (``nvidia/Cosmos-Reason2-2B``), which is not reachable
   here, so this times and compares the model call (backbone + action head), where all of the time goes.
4. Rounds, one process and one model in memory at a time (each ~12 GB fp32): LeRobot, our reference, our fast
   path, then again; ``--calls`` calls per process, the first is a warm-up and not counted.
5. The actions compared: max |d| of the model-space chunk and, per action group, of the physical actions (both
   chunks decoded by our ``decode_actions`` against the request's state). They must agree to fp32 precision
   (``AGREE_ATOL``), or the timing means nothing and the run fails.

Output: a table on stdout and ``--json`` (CPU model, versions, every call's time, per-stage medians).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # code/scripts: bench_http's shared client helpers
from bench_http import cpu_model

REPO = Path(__file__).resolve().parents[3]
PEER_VENV = REPO / ".venv-peer"
PEER_PACKAGE = "lerobot[groot]==0.6.1"
AGREE_ATOL = 1e-4  # the bound; fp32 on one machine lands near 1e-6
SIDES = {"cpu": ("lerobot", "lerobot-bf16-autocast", "reference", "fast", "fast-bf16"),
         "cuda": ("lerobot", "lerobot-bf16-autocast", "reference", "fast-bf16")}
FP32_SIDES = ("reference", "fast")  # held to AGREE_ATOL against LeRobot fp32


def log(msg: str) -> None:
    print(f"bench_peer: {msg}", file=sys.stderr, flush=True)


def our_torch() -> str:
    for line in (REPO / "requirements.lock").read_text().splitlines():
        if line.startswith("torch=="):
            return line.strip()
    raise SystemExit("requirements.lock has no torch== line")


def peer_python() -> Path:
    """The peer venv's python, built on first use (and rebuilt when it lacks LeRobot 0.6.1)."""
    py = PEER_VENV / "bin" / "python"
    check = [str(py), "-c", "import lerobot, sys; sys.exit(lerobot.__version__ != '0.6.1')"]
    if py.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return py
    log(f"building {PEER_VENV} ({PEER_PACKAGE} with {our_torch()}; a few minutes on first use)")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(PEER_VENV)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", PEER_PACKAGE, our_torch()], check=True)
    if subprocess.run(check, capture_output=True).returncode != 0:
        raise SystemExit(f"{PEER_VENV}: lerobot 0.6.1 did not install")
    return py


def checkpoint() -> Path:
    from gr00t_p150.server.settings import load_config
    from gr00t_p150.server.weights import resolve_weights

    config = load_config({"GR00T_VERSION": "n17", "GR00T_WEIGHTS": "synthetic:full",
                          **({"GR00T_CACHE": os.environ["GR00T_CACHE"]} if "GR00T_CACHE" in os.environ else {})})
    return resolve_weights(config, log).path


def prepare_inputs(ckpt: Path, out: Path) -> None:
    from models.experimental.gr00t.common.demo import load_demo_request
    from models.experimental.gr00t.common.configs_n17 import Gr00tN17Config
    from models.experimental.gr00t.common.inputs_n17 import prepare_n17
    from models.experimental.gr00t.common.layouts import DROID
    from models.experimental.gr00t.common.normalization_n17 import DroidStats
    from models.experimental.gr00t.common.observation import parse_observation

    config = Gr00tN17Config.from_checkpoint(ckpt)
    stats = DroidStats.from_checkpoint(ckpt, DROID, config.action_head.action_horizon)
    request = load_demo_request("n17")
    inputs = prepare_n17(config, DROID, stats, parse_observation(request, DROID), noise=request["noise"])
    np.savez(out, input_ids=inputs.input_ids.numpy(), pixel_values=inputs.pixel_values.numpy(),
             image_grid_thw=inputs.image_grid_thw.numpy(), state=inputs.state.numpy(), noise=inputs.noise.numpy(),
             embodiment_id=np.array([DROID.embodiment_id]),
             **{f"raw_state/{k}": v for k, v in inputs.raw_state.items()})


def worker(side: str, ckpt: Path, inputs_path: Path, out: Path, calls: int, device: str) -> int:
    """One of our sides in this process: load, run ``calls`` times on the saved inputs, save the last chunk."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    from models.experimental.gr00t.common.policy import PreparedInputs
    from models.experimental.gr00t.common.timing import Stopwatch
    from models.experimental.gr00t.reference.policies import load_reference_policy
    from models.experimental.gr00t.torch_fast.build import fast_policy_from_reference, load_mixed_fast_policy

    t0 = time.perf_counter()
    if side == "fast-bf16":  # bf16 GEMMs (CUDA also pads, fuses and captures per-stage graphs; the CPU does not)
        policy = load_mixed_fast_policy(ckpt, "n17", device=device)  # as the server's torch backend loads it
    else:
        policy = load_reference_policy(ckpt, "n17", device=device)
        if side == "fast":
            policy = fast_policy_from_reference(policy, device=device, dtype="float32")
    load_s = time.perf_counter() - t0
    d = np.load(inputs_path)
    t = {k: torch.from_numpy(d[k]) for k in ("pixel_values", "input_ids", "state", "noise", "image_grid_thw")}
    inputs = PreparedInputs(**t, prompt_tokens=0, noise_source="client", seed=None)
    times, stages = [], []
    for i in range(calls):
        if device == "cuda":
            torch.cuda.synchronize()
        clock, start = Stopwatch(), time.perf_counter()
        taps = policy.infer(inputs, clock)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
        laps = clock.ms
        stages.append({"vision": laps["vision"], "llm": laps["llm"],
                       "head": laps["adapter"] + sum(v for k, v in laps.items() if k.startswith("dit_step_"))})
        log(f"{side} call {i + 1}/{calls}: {times[-1]:.0f} ms")
    np.savez(out, action_pred=taps["action_pred"][0].float().cpu().numpy())
    out.with_suffix(".json").write_text(json.dumps({"side": side, "torch": torch.__version__,
                                                    "threads": torch.get_num_threads(), "load_s": round(load_s, 2),
                                                    "call_ms": [round(t, 1) for t in times], "stages_ms": stages}))
    return 0


def run_side(side: str, ckpt: Path, inputs: Path, out: Path, calls: int, threads: int, device: str,
             peer: tuple[str, str | None]) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'code'}:{REPO / 'code/scripts'}"}
    if side.startswith("lerobot"):
        python, path = peer
        cmd = [python, str(REPO / "code/scripts/bench/peer_lerobot_n17.py"), "--checkpoint", str(ckpt),
               "--inputs", str(inputs), "--out", str(out), "--calls", str(calls), "--threads", str(threads),
               "--device", device, "--autocast", "bf16" if side.endswith("autocast") else "none"]
        env["PYTHONPATH"] = path or ""  # the peer sees none of ours
        summary_path = Path(str(out) + ".json")
    else:
        cmd = [sys.executable, __file__, "--worker", side, "--checkpoint", str(ckpt), "--inputs", str(inputs),
               "--out", str(out), "--calls", str(calls), "--device", device]
        summary_path = out.with_suffix(".json")
    proc = subprocess.Popen(cmd, env=env)
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS (ru_maxrss: KiB on Linux)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    return {**json.loads(summary_path.read_text()), "action_pred": np.load(out)["action_pred"],
            "peak_rss_gib": round(usage.ru_maxrss / 2**20, 2)}


def compare(a: np.ndarray, b: np.ndarray, inputs: Path, ckpt: Path) -> dict:
    """max |d| of the model-space chunks and of their physical actions per group (both decoded by us)."""
    from models.experimental.gr00t.common.layouts import DROID
    from models.experimental.gr00t.common.normalization_n17 import DroidStats, decode_actions

    d = np.load(inputs)
    state = {k.split("/", 1)[1]: d[k] for k in d.files if k.startswith("raw_state/")}
    stats = DroidStats.from_checkpoint(ckpt, DROID, a.shape[0])
    pa, pb = decode_actions(a, state, stats, DROID), decode_actions(b, state, stats, DROID)
    pcc = float(np.corrcoef(a.ravel(), b.ravel())[0, 1])
    return {"action_pred": float(np.abs(a - b).max()), "pcc": pcc,
            **{k: float(np.abs(pa[k].astype(np.float64) - pb[k]).max()) for k in pa}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--calls", type=int, default=3, help="calls per process; the first is a warm-up")
    ap.add_argument("--json", type=Path, default=REPO / "benchmarks/results/bench_peer_n17.json")
    ap.add_argument("--device", default="cpu", choices=list(SIDES))
    ap.add_argument("--peer-python", help="python for LeRobot (default: .venv-peer, built on first use)")
    ap.add_argument("--peer-path", help="PYTHONPATH for the peer (e.g. LeRobot's wheels unpacked on a GPU machine)")
    ap.add_argument("--worker", choices=["reference", "fast", "fast-bf16"], help=argparse.SUPPRESS)
    ap.add_argument("--checkpoint", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--inputs", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker, args.checkpoint, args.inputs, args.out, args.calls, args.device)
    if args.calls < 2 or args.rounds < 1:
        ap.error("--calls must be >= 2 (the first is a warm-up) and --rounds >= 1")

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        log(f"SKIP: --device cuda but torch {torch.__version__} sees no CUDA device")
        return 0
    threads = torch.get_num_threads()
    peer = (args.peer_python or str(peer_python()), args.peer_path)
    sides = SIDES[args.device]
    ckpt = checkpoint()
    runs: dict[str, list[dict]] = {s: [] for s in sides}
    with tempfile.TemporaryDirectory(prefix="bench-peer-") as tmp:
        inputs = Path(tmp) / "inputs.npz"
        prepare_inputs(ckpt, inputs)
        for r in range(args.rounds):
            for side in sides:
                log(f"round {r + 1}/{args.rounds}: {side}")
                runs[side].append(run_side(side, ckpt, inputs, Path(tmp) / f"{side}-{r}.npz", args.calls, threads,
                                           args.device, peer))
        agreement = {side: compare(runs[side][-1]["action_pred"], runs["lerobot"][-1]["action_pred"], inputs, ckpt)
                     for side in sides if side != "lerobot"}
    rows = {}
    for side, side_runs in runs.items():
        timed = [t for run in side_runs for t in run["call_ms"][1:]]
        row = {"median_ms": round(statistics.median(timed), 1), "min_ms": round(min(timed), 1), "calls": len(timed),
               "load_s": [run["load_s"] for run in side_runs], "all_call_ms": [run["call_ms"] for run in side_runs],
               "threads": side_runs[0]["threads"], "torch": side_runs[0]["torch"],
               "peak_rss_gib": max(run["peak_rss_gib"] for run in side_runs)}
        staged = [s for run in side_runs for s in run.get("stages_ms", [])[1:]]
        if staged:
            row["stages_median_ms"] = {k: round(statistics.median(s[k] for s in staged), 1) for k in staged[0]}
        if side.startswith("lerobot"):
            row.update({k: side_runs[0][k] for k in ("lerobot", "transformers", "diffusers")})
        rows[side] = row
    peer_ms = rows["lerobot"]["median_ms"]
    gpu = torch.cuda.get_device_name(0) if args.device == "cuda" else None
    result = {"command": "make bench-peer" if args.device == "cpu" else "device_check_cuda.sh --peer",
              "device": args.device, "gpu": gpu, "cpu": cpu_model(), "date": time.strftime("%Y-%m-%d"),
              "weights": f"synthetic:full N1.7 (random, seed 0): {ckpt}",
              "observation": "code/models/experimental/gr00t/demo/n17 "
              "request, its explicit noise", "rounds": args.rounds, "calls_per_process": args.calls,
              "sides": rows, "agreement_max_abs_vs_lerobot": agreement, "agree_atol": AGREE_ATOL}
    print(f"GR00T N1.7 full size, {args.device}, one run on {gpu or result['cpu']} ({threads} threads); model call "
          f"(backbone + action head) on identical inputs and noise; medians over {rows['lerobot']['calls']} calls")
    print(f"{'side':<22}{'median ms':>11}{'min ms':>9}{'vs LeRobot':>12}{'peak RSS':>10}   max |d| vs LeRobot "
          "(action_pred; worst group)")
    for side, row in rows.items():
        agree = agreement.get(side)
        text = "" if agree is None else (f"{agree['action_pred']:.2e}; "
                                         f"{max(v for k, v in agree.items() if k not in ('action_pred', 'pcc')):.2e}"
                                         f"; PCC {agree['pcc']:.6f}")
        print(f"{side:<22}{row['median_ms']:>11.1f}{row['min_ms']:>9.1f}{peer_ms / row['median_ms']:>11.2f}x"
              f"{row['peak_rss_gib']:>8.2f} GB   {text}")
    for side, row in rows.items():
        if "stages_median_ms" in row:
            print(f"  {side} stages (median ms): {row['stages_median_ms']}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {args.json}")
    worst = max(max(v for k, v in agreement[s].items() if k != "pcc") for s in FP32_SIDES if s in agreement)
    if worst > AGREE_ATOL:
        log(f"FAIL: the actions disagree by {worst:.3g} > {AGREE_ATOL}: the timing compares different work")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
