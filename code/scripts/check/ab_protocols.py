# SPDX-License-Identifier: Apache-2.0
"""Served actions over HTTP, ZMQ and openpi, for an A/B of two trees: the same requests against each, compared bit
for bit. Boots each version's synthetic:tiny server in process with all three protocols on (loopback), sends the
demo observation with seeds 0, 1, 7 and the demo noise, and a three-request session with inpainting RTC (delay 2)
per protocol, through this repo's clients (``gr00t_client``: HTTP, ZMQ; openpi-client under it for openpi).

    # the tree before a change, from a git worktree, with the same venv:
    git worktree add /tmp/before <rev>
    PYTHONPATH=/tmp/before/code .venv/bin/python code/scripts/check/ab_protocols.py --out /tmp/before.json
    PYTHONPATH=code .venv/bin/python code/scripts/check/ab_protocols.py --out /tmp/after.json
    .venv/bin/python code/scripts/check/ab_protocols.py --compare /tmp/before.json /tmp/after.json

Only public entry points are used (``create_app``, ``load_config``, ``/demo``, the clients), so both trees run it.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import socket
import sys
import tempfile
from pathlib import Path

import numpy as np

SEEDS = (0, 1, 7)
SESSION_STEPS = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def frames_of(value) -> list[np.ndarray]:
    from PIL import Image

    return [np.asarray(Image.open(io.BytesIO(base64.b64decode(f))).convert("RGB"))
            for f in (value if isinstance(value, list) else [value])]


def capture(version: str, cache: str) -> dict:
    from fastapi.testclient import TestClient
    from gr00t_client.clients import OpenpiClient, ZmqClient

    from gr00t_p150.server.app import create_app, load_config

    env = {"GR00T_VERSION": version, "GR00T_WEIGHTS": "synthetic:tiny", "GR00T_WARMUP_RUNS": "1", "GR00T_CACHE": cache,
           "GR00T_ZMQ_PORT": str(free_port()), "GR00T_OPENPI_PORT": str(free_port())}
    config = load_config(env)
    rec = {}
    with TestClient(create_app(config)) as http:
        demo = http.get("/demo").json()["request"]
        several = any(isinstance(v, list) for v in demo["images"].values())
        obs = {"images": {c: (frames_of(v) if several else frames_of(v)[0]) for c, v in demo["images"].items()},
               "state": demo["state"], "instruction": demo["instruction"]}
        clients = {"zmq": ZmqClient(port=config.zmq_port), "openpi": OpenpiClient(port=config.openpi_port)}

        def exact(actions: dict) -> dict:
            return {k: np.asarray(v, np.float32).tolist() for k, v in actions.items()}

        for seed in SEEDS:
            body = http.post("/predict", json={**demo, "noise": None, "seed": seed}).json()
            rec[f"http/seed{seed}"] = body["actions"]
            for name, client in clients.items():
                rec[f"{name}/seed{seed}"] = exact(client.get_action({**obs, "seed": seed})[0])
        rec["http/demo_noise"] = http.post("/predict", json=demo).json()["actions"]
        for i in range(SESSION_STEPS):  # control_hz tiny: the plan's offset is 0 whatever the timing, so it repeats
            session = {"seq": i, "control_hz": 1e-3, "rtc": {"variant": "inpaint", "delay": 2}}
            body = http.post("/predict", json={**demo, "noise": None, "seed": 10 + i, "session_id": "ab-http",
                                               **session}).json()
            rec[f"http/rtc{i}"], rec[f"http/rtc{i}/plan"] = body["actions"], body.get("rtc")
            for name, client in clients.items():
                actions, _ = client.get_action({**obs, "seed": 10 + i}, {"session_id": f"ab-{name}", **session})
                rec[f"{name}/rtc{i}"] = exact(actions)
    return rec


def compare(a_path: Path, b_path: Path) -> int:
    a, b = json.loads(a_path.read_text()), json.loads(b_path.read_text())
    bad = 0
    for version in sorted(set(a) | set(b)):
        keys = sorted(set(a.get(version, {})) | set(b.get(version, {})))
        differing = [k for k in keys if a.get(version, {}).get(k) != b.get(version, {}).get(k)]
        same_over_protocols = all(b[version][f"http/seed{s}"] == b[version][f"{p}/seed{s}"]
                                  for s in SEEDS for p in ("zmq", "openpi"))
        which = ": " + ", ".join(differing) if differing else ""
        print(f"{version}: {len(keys)} answers, {len(differing)} differ{which}; HTTP == ZMQ == openpi per seed: "
              f"{same_over_protocols}")
        bad += len(differing) + (not same_over_protocols)
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the answers of this tree (PYTHONPATH) here")
    ap.add_argument("--versions", nargs="+", default=["n15", "n17"])
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = ap.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        ap.error("give --out (capture) or --compare BEFORE AFTER")
    cache = tempfile.mkdtemp(prefix="ab-protocols-")
    out = {v: capture(v, cache) for v in args.versions}
    args.out.write_text(json.dumps(out))
    print(f"wrote {args.out}: {', '.join(f'{v} {len(r)} answers' for v, r in out.items())}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
