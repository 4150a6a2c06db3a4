#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Regenerate the shipped demo assets in ``code/gr00t_p150/demo/<version>/``.

- ``frames/*.png``: made-up scenes drawn here with PIL (N1.5: one 256×256 GR1 ``ego_view`` of a
  counter with a pear and a plate; N1.7: DROID exterior and wrist views at t−15 and t, 320×180, of a
  table with a blue block and a green bowl). They are not NVIDIA data (not reachable offline).
- ``observation.json``: those frames, made-up robot state and the published demo instruction.
- ``noise.json``: an explicit initial noise ([16][32] or [40][132]; numpy seed 20251202, float32).
- ``expected.json``: the fp32 CPU reference actions for that request on the ``synthetic:tiny``
  checkpoint (seed 0), with the checkpoint's content fingerprint; the server's fidelity gate uses it
  when serving ``GR00T_WEIGHTS=synthetic:tiny``.

``--check`` regenerates everything into a temporary folder: the inputs (frames, observation, noise) and
every non-numeric field of ``expected.json`` (fingerprint, seq_len, ...) must be byte-identical; the
actions must be within ``common.quality``'s cross-machine rule of the shipped ones (bit-identical only
on the machine and software that made them). It prints the max |d| it found.

    .venv/bin/python code/gr00t_p150/demo/make_demo.py [--version n15|n17|all] [--check]
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

HERE = Path(__file__).resolve().parent

INSTRUCTION = {"n15": "pick the pear from the counter and place it in the plate",
               "n17": "Put the blue block in the green bowl"}
STATE_N15 = {  # made-up, in the range of GR1 arm/hand joints
    "left_arm": [[0.01, 0.21, 0.05, -1.81, -0.13, -0.05, 0.01]],
    "right_arm": [[-0.02, -0.17, 0.37, -1.74, 0.50, -0.06, 0.98]],
    "left_hand": [[0.01, 0.02, 0.00, 0.01, 0.02, 0.04]],
    "right_hand": [[-1.49, -1.49, -1.48, -1.48, -2.96, 2.99]],
}
# made-up DROID Franka state: gripper pointing down (rotation rows from a real-looking pose), open gripper;
# flat lists, as the published N1.7 package's request has them (the server also takes [[...]])
STATE_N17 = {
    "eef_9d": [0.53, 0.02, 0.46, -0.0786, 0.3927, -0.9163, 0.9923, 0.1193, -0.034],
    "gripper_position": [0.0],
    "joint_position": [-0.005, 0.034, 0.001, -1.917, 0.164, 1.610, 0.084],
}
NOISE_SEED = 20251202
NOISE_SHAPE = {"n15": (16, 32), "n17": (40, 132)}
DROID_FRAMES = [f"{cam}_{t}" for cam in ("exterior_image_1_left", "wrist_image_left") for t in ("tm15", "t0")]


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


def draw_droid(view: str, t: str) -> Image.Image:
    """A 320×180 table scene: blue block, green bowl; the gripper is lower at t than at t−15."""
    img = Image.new("RGB", (320, 180), (180, 190, 200))
    d = ImageDraw.Draw(img)
    wrist = view.startswith("wrist")
    d.rectangle([0, 60 if wrist else 95, 319, 179], fill=(150, 120, 90))  # table
    s = 1.8 if wrist else 1.0  # the wrist camera sees the scene closer
    cx = 160
    d.ellipse([cx + 20 * s, 120 - 15 * s, cx + 80 * s, 120 + 10 * s], fill=(40, 150, 60))  # green bowl
    d.ellipse([cx + 30 * s, 120 - 10 * s, cx + 70 * s, 120 + 4 * s], fill=(30, 110, 45))
    d.rectangle([cx - 70 * s, 112 - 10 * s, cx - 45 * s, 112 + 8 * s], fill=(40, 70, 200))  # blue block
    drop = 0 if t == "tm15" else 18
    if not wrist:
        d.rectangle([cx - 68, 0, cx - 48, 40 + drop], fill=(235, 235, 235))  # arm
        d.rectangle([cx - 74, 40 + drop, cx - 42, 52 + drop], fill=(60, 60, 65))  # gripper
    else:
        d.polygon([(0, 179), (50, 120 + drop // 2), (70, 179)], fill=(60, 60, 65))  # fingers in view
        d.polygon([(319, 179), (270, 120 + drop // 2), (250, 179)], fill=(60, 60, 65))
    return img


def build(out: Path, version: str) -> dict:
    from models.experimental.gr00t.reference.policies import load_reference_policy
    from gr00t_p150.server.demo import load_demo_request
    from gr00t_p150.server.weights import fingerprint
    from models.experimental.gr00t.common.layouts import DEFAULT_LAYOUT, get_layout
    from models.experimental.gr00t.common.observation import parse_observation
    from models.experimental.gr00t.common.policy import result_to_json
    from models.experimental.gr00t.common.synthetic import write_checkpoint

    (out / "frames").mkdir(parents=True, exist_ok=True)
    if version == "n15":
        draw_scene().save(out / "frames" / "ego_view_t0.png", format="PNG")
        images, state = {"ego_view": ["frames/ego_view_t0.png"]}, STATE_N15
    else:
        for name in DROID_FRAMES:
            cam, t = name.rsplit("_", 1)
            draw_droid(cam, t).save(out / "frames" / f"{name}.png", format="PNG")
        images = {cam: [f"frames/{cam}_tm15.png", f"frames/{cam}_t0.png"]
                  for cam in ("exterior_image_1_left", "wrist_image_left")}
        state = STATE_N17
    observation = {"_note": "made-up scene and robot state (not NVIDIA data); the published demo instruction",
                   "images": images, "state": state, "instruction": INSTRUCTION[version]}
    (out / "observation.json").write_text(json.dumps(observation, indent=1) + "\n")
    shape = NOISE_SHAPE[version]
    noise = np.random.default_rng(NOISE_SEED).standard_normal(shape).astype(np.float32)
    (out / "noise.json").write_text(json.dumps({"_note": f"numpy default_rng({NOISE_SEED})."
                                                         f"standard_normal({shape}), float32",
                                                "noise": noise.tolist()}) + "\n")

    layout = get_layout(DEFAULT_LAYOUT[version])
    request = load_demo_request(out.name, out.parent)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = write_checkpoint(Path(tmp) / f"{version}-tiny", scale="tiny", seed=0, version=version,
                                log=lambda _: None)
        policy = load_reference_policy(ckpt, version, layout.name)
        result = policy.get_action(parse_observation(request, layout), noise=request["noise"])
        weights = {"source": "synthetic:tiny", "seed": 0, "fingerprint": fingerprint(ckpt, content=True)}
    expected = {"_note": "fp32 CPU reference (run_reference.py semantics) on GR00T_WEIGHTS=synthetic:tiny; "
                         "random weights",
                "weights": weights, **result_to_json(result)}
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    return expected


def compare_expected(fresh: dict, shipped: dict) -> tuple[bool, str]:
    """Fresh vs shipped ``expected.json``: metadata equal, numbers within the cross-machine golden rule."""
    from models.experimental.gr00t.common.quality import compare_with_golden

    numeric = ("actions", "action_pred_normalized")
    meta = sorted(k for k in fresh.keys() | shipped.keys() if k not in numeric and fresh.get(k) != shipped.get(k))
    if meta or set(fresh["actions"]) != set(shipped["actions"]):
        return False, f"fields differ: {meta or 'action groups'}"
    groups = {**fresh["actions"], "action_pred_normalized": fresh["action_pred_normalized"]}
    golden = {**shipped["actions"], "action_pred_normalized": shipped["action_pred_normalized"]}
    cmp = compare_with_golden(groups, golden)
    return cmp.ok, "bit-identical to the shipped golden" if cmp.bit_identical else cmp.summary()


def check(version: str) -> list[str]:
    """Regenerate ``version``'s assets in a temporary folder; the stale ones, after printing each verdict."""
    target, stale = HERE / version, []
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / version
        build(fresh, version)
        for name in sorted(str(p.relative_to(fresh)) for p in fresh.rglob("*") if p.is_file()):
            if not (target / name).is_file():
                stale.append(f"{version}/{name}")
                continue
            if name != "expected.json":
                if (fresh / name).read_bytes() != (target / name).read_bytes():
                    stale.append(f"{version}/{name}")
                continue
            ok, detail = compare_expected(json.loads((fresh / name).read_text()),
                                          json.loads((target / name).read_text()))
            print(f"{version}/expected.json: {detail}")
            if not ok:
                stale.append(f"{version}/{name}")
    return stale


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", default="all", choices=[*INSTRUCTION, "all"])
    ap.add_argument("--check", action="store_true",
                    help="regenerate into a temp dir and compare with the shipped files")
    args = ap.parse_args()
    stale = []
    for version in INSTRUCTION if args.version == "all" else (args.version,):
        if args.check:
            stale += check(version)
            continue
        e = build(HERE / version, version)
        print(f"wrote {HERE / version}: seq_len {e['seq_len']}, prompt_tokens {e['prompt_tokens']}")
    if args.check:
        print("demo assets up to date" if not stale else f"stale demo assets: {stale}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
