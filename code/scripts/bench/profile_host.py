#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The server's host path, stage by stage, in one process and without the model: what a request costs the
server besides the device.

The stages are the server's own (``timing_ms`` of /predict): ``decode`` (request body → checked
``Observation``: base64 and PNG/JPEG decoding), ``encode`` (``policy.prepare``: prompt ids, image chain,
state, noise), ``decode_actions`` (``policy.finish``: the model-space chunk → un-normalised actions) and
``respond`` (``_response`` and the JSON rendering). The demo request of the version and synthetic tiny
weights are used (the host path does not depend on the model's size); the model itself never runs
(``--model``: the reference between encode and decode_actions, as in a CPU server): ``finish`` gets a
fixed chunk. ``--backend ttnn-mock``: the TT-NN policy on the mock P150, whose encode also builds the
host tensors. ``--profile STAGE`` prints cProfile's top functions for one stage.

    profile_host.py [--version n15|n17] [--backend torch|ttnn-mock] [--model] [--n 200]
                    [--profile encode] [--json benchmarks/results/host_n15.json]
"""

import argparse
import cProfile
import json
import os
import platform
import pstats
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from fastapi.responses import JSONResponse

from gr00t_p150.backends.torch_backend import TorchBackend
from gr00t_p150.server.boot import open_configured_backend
from gr00t_p150.server.service import Answer, decode_request
from gr00t_p150.server.settings import load_config
from gr00t_p150.server.web.routes import policy_request, predict_body
from gr00t_p150.server.web.schemas import PredictRequest
from gr00t_p150.server.weights import resolve_weights
from models.experimental.gr00t.common.demo import load_demo_request
from models.experimental.gr00t.common.cli import run_cli
from models.experimental.gr00t.common.host_threads import frame_workers, set_frame_workers
from models.experimental.gr00t.common.layouts import DEFAULT_LAYOUT, get_layout
from models.experimental.gr00t.common.policy import PolicyResult


class Served:
    """What the server's request functions read of its engine, for a backend this script opened itself."""

    def __init__(self, config, layout, weights, backend):
        self.config, self.layout, self.weights, self.backend = config, layout, weights, backend

    def describe_backend(self) -> dict:
        return self.backend.describe()


def stages(served: Served, body: dict):
    """The host stages of one /predict, each a call of the server's own function, in the server's order."""
    backend = served.backend
    policy = backend.policy
    horizon, dim = backend.action_shape
    chunk = torch.from_numpy(np.random.default_rng(0).uniform(-1, 1, (1, horizon, dim)).astype(np.float32))
    state = {}

    def decode():
        state["request"] = request = policy_request(PredictRequest(**body), Scoped())
        state["obs"] = decode_request(served, request)

    def encode():
        request = state["request"]
        state["prepared"] = backend.prepare(state["obs"], noise=request.noise, seed=request.seed)
        if backend.name == "ttnn":  # a TT-NN policy: its host tensors are the last host step, timed as encode
            state["host"] = policy.model.host_inputs_for(state["prepared"].inputs)

    def model():
        policy.infer(state["prepared"].inputs)

    def decode_actions():
        state["finished"] = policy.finish(chunk, state["prepared"].inputs)

    def respond():
        inputs = state["prepared"].inputs
        pred, actions = state["finished"]
        result = PolicyResult(actions, pred, inputs.noise_source, inputs.seed, int(inputs.input_ids.shape[1]),
                              inputs.prompt_tokens)
        answer = Answer(result, state["obs"].received_hw(), {"total": 0.0})
        JSONResponse(predict_body(served, state["request"], answer))  # renders the body

    return {"decode": decode, "encode": encode, "model": model, "decode_actions": decode_actions, "respond": respond}


class Scoped:
    """The little of a Starlette request that ``policy_request`` reads."""

    headers: dict = {}
    scope = {"gr00t.arrived_at": 0.0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default="n15", choices=["n15", "n17"])
    ap.add_argument("--n", type=int, default=200, help="timed requests (after 5 warm-ups)")
    ap.add_argument("--backend", default="torch", choices=["torch", "ttnn-mock"],
                    help="whose host path: the fp32 reference's, or the TT-NN policy's on the mock P150 (the same "
                         "chain plus its host tensors; the mock's device never runs here)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the server's request threads share "
                                                           "the CPU with the device thread)")
    ap.add_argument("--model", action="store_true",
                    help="run the (tiny) model between encode and decode_actions, as a server does: the host "
                         "stages then start with the caches the model left, as they do in the server")
    ap.add_argument("--frame-workers", type=int,
                    help="overrides GR00T_FRAME_WORKERS (default: the server's, min(4, CPUs))")
    ap.add_argument("--profile", choices=["decode", "encode", "decode_actions", "respond"])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    layout = get_layout(DEFAULT_LAYOUT[args.version])
    env = {"GR00T_BACKEND": "ttnn", "GR00T_TT_MOCK": "1"} if args.backend == "ttnn-mock" else {}
    if args.frame_workers is not None:
        env["GR00T_FRAME_WORKERS"] = str(args.frame_workers)
    config = load_config({**os.environ, "GR00T_VERSION": args.version, "GR00T_WEIGHTS": "synthetic:tiny", **env})
    set_frame_workers(config.frame_workers)  # as the server's lifespan does
    weights = resolve_weights(config, lambda m: print(m, file=sys.stderr))
    demo = load_demo_request(args.version)
    if args.backend == "torch":
        backend = TorchBackend(weights.path, args.version, layout.name, "cpu", "float32", "profile_host.py",
                               path="reference")
    else:
        backend = open_configured_backend(config, weights, demo)
    run = stages(Served(config, layout, weights, backend), demo)
    if not args.model or args.backend != "torch":
        del run["model"]
    for _ in range(5):
        for fn in run.values():
            fn()
    times = {k: [] for k in run}
    for _ in range(args.n):
        for k, fn in run.items():
            t = time.perf_counter()
            fn()
            times[k].append((time.perf_counter() - t) * 1e3)
    rows = {k: {"median_ms": round(statistics.median(v), 3), "p90_ms": round(sorted(v)[int(0.9 * len(v))], 3),
                "min_ms": round(min(v), 3)} for k, v in times.items()}
    total = [sum(times[k][i] for k in times if k != "model") for i in range(args.n)]
    rows["host_total"] = {"median_ms": round(statistics.median(total), 3),
                          "p90_ms": round(sorted(total)[int(0.9 * args.n)], 3), "min_ms": round(min(total), 3)}
    print(f"{args.version} host path, {args.n} requests after 5 warm-ups, torch threads {args.threads}, "
          f"frame workers {frame_workers()}, "
          f"{platform.processor() or platform.machine()}")
    print(f"{'stage (ms)':<20}{'median':>10}{'p90':>10}{'min':>10}")
    for k, r in rows.items():
        print(f"{k:<20}{r['median_ms']:>10.3f}{r['p90_ms']:>10.3f}{r['min_ms']:>10.3f}")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(50):
            run[args.profile]()
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"version": args.version, "n": args.n, "threads": args.threads,
                                         "command": " ".join(["code/scripts/bench/profile_host.py",
                                                              *(argv or sys.argv[1:])]),
                                         "stages": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    run_cli(main, "profile_host.py")
