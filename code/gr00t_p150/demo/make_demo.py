#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Regenerate the shipped N1.5 demo assets in ``code/gr00t_p150/demo/n15/``.

- ``frames/ego_view_t0.png``: a made-up 256×256 kitchen-counter scene (pear, plate, gripper) drawn
  here with PIL; it is not from NVIDIA's GR1 dataset (not reachable offline).
- ``observation.json``: that frame, made-up GR1 joint state (radians) and the published demo
  instruction.
- ``noise.json``: an explicit [16][32] initial noise (numpy, seed 20251202, float32 values).
- ``expected.json``: the fp32 CPU reference actions for that request on the ``synthetic:tiny``
  checkpoint (seed 0), with the checkpoint's content fingerprint; the server's fidelity gate uses it
  when serving ``GR00T_WEIGHTS=synthetic:tiny``.

    python code/gr00t_p150/demo/make_demo.py [--check]
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

import numpy as np  # noqa: E402
from PIL import Image, ImageDraw  # noqa: E402

INSTRUCTION = "pick the pear from the counter and place it in the plate"
STATE = {  # made-up, in the range of GR1 arm/hand joints
    "left_arm": [[0.01, 0.21, 0.05, -1.81, -0.13, -0.05, 0.01]],
    "right_arm": [[-0.02, -0.17, 0.37, -1.74, 0.50, -0.06, 0.98]],
    "left_hand": [[0.01, 0.02, 0.00, 0.01, 0.02, 0.04]],
    "right_hand": [[-1.49, -1.49, -1.48, -1.48, -2.96, 2.99]],
}
NOISE_SEED = 20251202


def draw_scene() -> Image.Image:
    img = Image.new("RGB", (256, 256), (196, 206, 214))  # wall
    d = ImageDraw.Draw(img)
    d.rectangle([0, 150, 255, 255], fill=(142, 104, 70))  # counter
    d.rectangle([0, 146, 255, 152], fill=(110, 80, 52))  # counter edge
    d.ellipse([150, 175, 230, 215], fill=(236, 236, 232), outline=(180, 180, 176), width=2)  # plate
    d.ellipse([165, 183, 215, 207], fill=(246, 246, 242))
    d.ellipse([60, 168, 96, 206], fill=(176, 196, 60))  # pear body
    d.ellipse([68, 150, 88, 176], fill=(184, 202, 70))  # pear neck
    d.line([78, 150, 80, 140], fill=(90, 60, 30), width=3)  # stem
    d.polygon([(95, 0), (135, 0), (128, 70), (102, 70)], fill=(70, 74, 80))  # robot forearm
    d.rectangle([96, 70, 134, 92], fill=(52, 55, 60))  # wrist
    d.rectangle([98, 92, 106, 118], fill=(40, 42, 46))  # fingers
    d.rectangle([124, 92, 132, 118], fill=(40, 42, 46))
    return img


def build(out: Path) -> dict:
    from gr00t_p150.server.weights import fingerprint  # noqa: PLC0415
    from models.experimental.gr00t.common.layouts import GR1  # noqa: PLC0415
    from models.experimental.gr00t.common.observation import parse_observation  # noqa: PLC0415
    from models.experimental.gr00t.common.synthetic import write_checkpoint  # noqa: PLC0415
    from models.experimental.gr00t.reference.torch_policy import ReferencePolicy  # noqa: PLC0415

    (out / "frames").mkdir(parents=True, exist_ok=True)
    draw_scene().save(out / "frames" / "ego_view_t0.png", format="PNG")
    observation = {"_note": "made-up scene and joint state (not NVIDIA data); the published demo instruction",
                   "images": {"ego_view": ["frames/ego_view_t0.png"]}, "state": STATE, "instruction": INSTRUCTION}
    (out / "observation.json").write_text(json.dumps(observation, indent=1) + "\n")
    noise = np.random.default_rng(NOISE_SEED).standard_normal((16, 32)).astype(np.float32)
    (out / "noise.json").write_text(json.dumps({"_note": f"numpy default_rng({NOISE_SEED}).standard_normal((16, 32)), float32",
                                                "noise": noise.tolist()}) + "\n")

    from gr00t_p150.server.demo import load_demo_request  # noqa: PLC0415

    request = load_demo_request(out.name, out.parent)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = write_checkpoint(Path(tmp) / "n15-tiny", scale="tiny", seed=0, log=lambda _: None)
        policy = ReferencePolicy.from_checkpoint(ckpt)
        result = policy.get_action(parse_observation(request, GR1), noise=request["noise"])
        weights = {"source": "synthetic:tiny", "seed": 0, "fingerprint": fingerprint(ckpt, content=True)}
    expected = {"_note": "fp32 CPU reference (run_reference.py semantics) on GR00T_WEIGHTS=synthetic:tiny; random weights",
                "weights": weights, "seq_len": result.seq_len, "prompt_tokens": result.prompt_tokens,
                "noise_source": result.noise_source,
                "actions": {k: v.tolist() for k, v in result.actions.items()},
                "action_pred_normalized": result.action_pred.tolist()}
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    return expected


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="regenerate into a temp dir and compare with the shipped files")
    args = ap.parse_args()
    target = HERE / "n15"
    if not args.check:
        e = build(target)
        print(f"wrote {target}: seq_len {e['seq_len']}, prompt_tokens {e['prompt_tokens']}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "n15"
        build(fresh)
        names = ["observation.json", "noise.json", "expected.json", "frames/ego_view_t0.png"]
        stale = [n for n in names if (fresh / n).read_bytes() != (target / n).read_bytes()]
    print("demo assets up to date" if not stale else f"stale demo assets: {stale}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
