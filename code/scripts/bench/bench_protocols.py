#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Per-request overhead of each protocol against HTTP/JSON, on one running server with its demo observation.

Sends the demo observation (frames decoded once, the demo noise) over HTTP/JSON (``http``: frames PNG-encoded by
the client for every call; ``http-png-ready``: the demo request's own JSON, PNGs encoded once beforehand), NVIDIA's
GR00T PolicyServer protocol (``zmq``, raw uint8) and the openpi websocket protocol (``openpi``, raw uint8),
round-robin so that load drifts hit all alike, W warm-ups then N timed calls each. Per call: the client's wall
time and the server's device time for that call; **overhead = wall − device** (encoding, transport, decoding,
the image chain, un-normalising: everything but the model). Checks that the answers are bit-identical. Prints
medians / p90 / min and writes JSON.

    python code/scripts/bench/bench_protocols.py --url http://127.0.0.1:P --zmq-port Z --openpi-port O [--n 40]

``make bench-protocols [GR00T_VERSION=n17]`` boots a synthetic:tiny server with both ports and runs this.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import platform
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # code/scripts: bench_http's shared client helpers
from bench_http import cpu_model, summary
from gr00t_client import HttpClient, OpenpiClient, ZmqClient


def demo_observation(url: str) -> tuple[dict, dict]:
    with urllib.request.urlopen(url + "/demo", timeout=60) as r:
        request = json.loads(r.read())["request"]

    def decode(b64: str) -> np.ndarray:
        return np.asarray(Image.open(io.BytesIO(base64.b64decode(b64))).convert("RGB"))

    images = {cam: [decode(f) for f in v] if isinstance(v, list) else decode(v) for cam, v in request["images"].items()}
    return {"images": images, "state": request["state"], "instruction": request["instruction"],
            "noise": np.asarray(request["noise"], dtype=np.float32)}, request


class PreEncodedHttp:
    """``POST /predict`` of the demo request's own JSON bytes (PNG frames already encoded): the HTTP path without
    the client's PNG encoding, as a camera that delivers PNG would send it."""

    def __init__(self, url: str, request: dict):
        self.url, self.body = url + "/predict", json.dumps(request).encode()

    def get_action(self, _obs):
        req = urllib.request.Request(self.url, data=self.body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            answer = json.loads(r.read())
        return {k: np.asarray(v, dtype=np.float32) for k, v in answer.pop("actions").items()}, answer


def device_ms(protocol: str, info: dict) -> float:
    if protocol.startswith("http"):
        return info["timing_ms"]["device"]
    if protocol == "zmq":
        return info["device_ms"][0]
    return info["server_timing"]["infer_ms"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--zmq-port", type=int, required=True)
    ap.add_argument("--openpi-port", type=int, required=True)
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    obs, request = demo_observation(args.url)
    with urllib.request.urlopen(args.url + "/info", timeout=60) as r:
        info = json.loads(r.read())
    clients = {"http": HttpClient(args.url), "http-png-ready": PreEncodedHttp(args.url, request),
               "zmq": ZmqClient(port=args.zmq_port), "openpi": OpenpiClient(port=args.openpi_port)}
    walls = {p: [] for p in clients}
    overheads = {p: [] for p in clients}
    answers = {}
    for i in range(args.warmup + args.n):
        for protocol, client in clients.items():
            t = time.perf_counter()
            actions, reply = client.get_action(obs)
            wall = (time.perf_counter() - t) * 1e3
            answers.setdefault(protocol, actions)
            if i >= args.warmup:
                walls[protocol].append(wall)
                overheads[protocol].append(wall - device_ms(protocol, reply))
    same = all(np.array_equal(answers[p][k], answers["http"][k]) for p in answers for k in answers["http"])
    version = info.get("version") or info.get("config", {}).get("version")
    result = {"version": version, "weights": info.get("weights"), "n": args.n, "warmup": args.warmup,
              "cpu": cpu_model(), "machine": platform.machine(), "identical_actions": same,
              "command": "code/scripts/bench/bench_protocols.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "wall_ms": {p: summary(v) for p, v in walls.items()},
              "overhead_ms": {p: summary(v) for p, v in overheads.items()}}
    print(f"{version}: {args.n} calls per protocol, round-robin after {args.warmup} warm-ups; {result['cpu']}")
    print(f"{'protocol':<15}{'wall median':>13}{'p90':>9}{'overhead median':>17}{'p90':>9}{'min':>9}   (ms)")
    for p in clients:
        w, o = result["wall_ms"][p], result["overhead_ms"][p]
        print(f"{p:<15}{w['median']:>13.2f}{w['p90']:>9.2f}{o['median']:>17.2f}{o['p90']:>9.2f}{o['min']:>9.2f}")
    print(f"actions bit-identical across protocols: {same}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    clients["zmq"].close()
    clients["openpi"].close()
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
