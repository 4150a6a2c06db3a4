#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The peer side of ``bench_peer.py``: LeRobot 0.6.1's GR00T N1.7 model (``lerobot.policies.groot``) on a local
N1.7 snapshot, run on prepared inputs with a given initial noise. Runs in the peer's own venv (``.venv-peer``:
LeRobot pins transformers 5.4–5.5 and diffusers 0.38–0.39) and imports nothing of ours.

    peer_lerobot_n17.py --checkpoint DIR --inputs inputs.npz --out out.npz --calls 3 [--device cuda]
        [--autocast bf16]

``--autocast bf16`` is LeRobot's own default inference (``GrootPolicy.predict_action_chunk``: fp32 parameters
under ``torch.autocast(bfloat16)``); without it the call is plain fp32 (TF32 off on CUDA).

Offline by construction: ``HF_HUB_OFFLINE=1``; ``GR00TN17.from_pretrained`` on a local directory skips the hub
(an absolute path is not a repo id), and the backbone is built from LeRobot's own hard-coded copy of the
Cosmos-Reason2-2B config (``load_backbone_weights=False``: the backbone's tensors come from the GR00T snapshot,
as in the published checkpoint). The model is cast to fp32 (the snapshot stores bf16; the cast is exact).

The initial noise: LeRobot draws it with ``torch.randn`` inside ``GR00TN17ActionHead.get_action_with_features``;
this script replaces ``torch.randn`` for exactly that call shape [1, horizon, action_dim] with the given tensor.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import torch


def log(msg: str) -> None:
    print(f"[lerobot] {msg}", file=sys.stderr, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--inputs", required=True, help="npz: input_ids, pixel_values, image_grid_thw, state, noise, "
                                                    "embodiment_id")
    ap.add_argument("--out", required=True, help="npz: action_pred (last call) and the JSON summary beside it")
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--autocast", default="none", choices=["none", "bf16"])
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False  # fp32 means fp32
    device = torch.device(args.device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    import lerobot
    from lerobot.policies.groot.groot_n1_7 import GR00TN17

    t0 = time.perf_counter()
    model = GR00TN17.from_pretrained(args.checkpoint, load_backbone_weights=False, local_files_only=True)
    model = model.float().eval().to(device)
    load_s = time.perf_counter() - t0
    log(f"loaded {args.checkpoint} in {load_s:.1f} s (lerobot {lerobot.__version__})")

    data = np.load(args.inputs)
    noise = torch.from_numpy(data["noise"]).float()
    inputs = {"input_ids": torch.from_numpy(data["input_ids"]).long(),
              "attention_mask": torch.ones_like(torch.from_numpy(data["input_ids"])).long(),
              "pixel_values": torch.from_numpy(data["pixel_values"]).float(),
              "image_grid_thw": torch.from_numpy(data["image_grid_thw"]).long(),
              "state": torch.from_numpy(data["state"]).float(),
              "embodiment_id": torch.from_numpy(data["embodiment_id"]).long()}
    inputs = {k: v.to(device) for k, v in inputs.items()}

    real_randn, drawn = torch.randn, []

    def randn(*size, **kw):
        shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)) else size
        shape = tuple(kw.get("size", shape))
        if shape == tuple(noise.shape):
            drawn.append(shape)
            return noise.to(dtype=kw.get("dtype") or noise.dtype, device=kw.get("device") or device).clone()
        return real_randn(*size, **kw)

    marks: dict[str, float] = {}

    def timed(owner, key: str, method: str = "forward") -> None:
        """Time ``owner.method`` into ``marks[key]`` (an instance attribute shadows the class's method)."""
        fn = getattr(owner, method)

        def wrapper(*a, **kw):
            sync()  # CUDA: stage bounds need the queue drained (a few syncs per call)
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                sync()
                marks[key] = marks.get(key, 0.0) + (time.perf_counter() - t) * 1e3

        setattr(owner, method, wrapper)

    timed(model.backbone.visual, "vision")
    timed(model.backbone, "backbone")
    timed(model.action_head, "head", "get_action")

    torch.randn = randn
    times, stages = [], []
    try:
        for i in range(args.calls):
            marks.clear()
            sync()
            t = time.perf_counter()
            with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16,
                                                        enabled=args.autocast == "bf16"):
                out = model.get_action(dict(inputs))
            sync()
            times.append((time.perf_counter() - t) * 1e3)
            vision = marks["vision"]
            stages.append({"vision": vision, "llm": marks["backbone"] - vision, "head": marks["head"]})
            log(f"call {i + 1}/{args.calls}: {times[-1]:.0f} ms")
    finally:
        torch.randn = real_randn
    if len(drawn) != args.calls:
        raise SystemExit(f"the noise was injected {len(drawn)} times in {args.calls} calls: LeRobot's sampler changed")
    action_pred = out["action_pred"].float().cpu().numpy()[0]
    np.savez(args.out, action_pred=action_pred)
    summary = {"side": "lerobot", "device": args.device, "autocast": args.autocast, "lerobot": lerobot.__version__,
               "torch": torch.__version__,
               "transformers": __import__("transformers").__version__, "diffusers": __import__("diffusers").__version__,
               "threads": torch.get_num_threads(), "load_s": round(load_s, 2), "call_ms": [round(t, 1) for t in times],
               "stages_ms": stages}
    with open(args.out + ".json", "w") as fh:
        json.dump(summary, fh, indent=1)
    log(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
