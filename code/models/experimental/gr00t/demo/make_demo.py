#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Regenerate the shipped demo assets in ``code/models/experimental/gr00t/demo/<folder>/``: one folder per served
embodiment of each version (``VersionSpec.demo_dir``: ``n15``, ``n17``, ``n16`` for N1.6 GR1, ``n16_unitree_g1``, ...).

Each folder's scene is its ``Served.demo`` row (``common/versions.py``):
- ``frames/*.png``: made-up scenes drawn with PIL (``scenes.py``; N1.5: one 256×256 GR1 ``ego_view`` of a
  counter with a pear and a plate; N1.7: DROID exterior and wrist views at t−15 and t, 320×180, of a
  table with a blue block and a green bowl). They are not NVIDIA data (not reachable offline).
- ``observation.json``: those frames, made-up robot state and the published demo instruction.
- ``noise.json``: an explicit initial noise (the row's shape: [16][32], [40][132], N1.6 [50][128]; numpy seed
  20251202, float32).
- ``expected.json``: the fp32 CPU reference actions for that request on the ``synthetic:tiny``
  checkpoint (seed 0), with the checkpoint's content fingerprint; the server's fidelity gate uses it
  when serving ``GR00T_WEIGHTS=synthetic:tiny``.

``--check`` regenerates everything into a temporary folder: the inputs (frames, observation, noise) and
every non-numeric field of ``expected.json`` (fingerprint, seq_len, ...) must be byte-identical; the
actions must be within ``common.quality``'s cross-machine rule of the shipped ones (bit-identical only
on the machine and software that made them). It prints the max |d| it found.

    .venv/bin/python code/models/experimental/gr00t/demo/make_demo.py [--version n15|n17|n16|all] [--check]
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from models.experimental.gr00t.common.versions import SPECS, get_spec, load

HERE = Path(__file__).resolve().parent

NOISE_SEED = 20251202


def build(out: Path, version: str, layout_name: str | None = None) -> dict:
    from models.experimental.gr00t.common.checkpoint import fingerprint
    from models.experimental.gr00t.common.demo import read_demo_request
    from models.experimental.gr00t.common.layouts import get_layout
    from models.experimental.gr00t.common.observation import parse_observation
    from models.experimental.gr00t.common.policy import result_to_json
    from models.experimental.gr00t.common.synthetic import write_checkpoint
    from models.experimental.gr00t.reference.policies import load_reference_policy

    spec = get_spec(version)
    layout = get_layout(layout_name or spec.layout)
    scene = next(s.demo for s in spec.served if s.layout == layout.name)
    (out / "frames").mkdir(parents=True, exist_ok=True)
    images = {}
    for cam, frames in load(scene.frames)(layout).items():
        for stem, frame in frames:
            frame.save(out / "frames" / f"{stem}.png", format="PNG")
        images[cam] = [f"frames/{stem}.png" for stem, _ in frames]
    observation = {"_note": "made-up scene and robot state (not NVIDIA data); the published demo instruction",
                   "images": images, "state": load(scene.state), "instruction": scene.instruction}
    (out / "observation.json").write_text(json.dumps(observation, indent=1) + "\n")
    shape = scene.noise_shape
    noise = np.random.default_rng(NOISE_SEED).standard_normal(shape).astype(np.float32)
    (out / "noise.json").write_text(json.dumps({"_note": f"numpy default_rng({NOISE_SEED})."
                                                         f"standard_normal({shape}), float32",
                                                "noise": noise.tolist()}) + "\n")

    request = read_demo_request(out)
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


def check(version: str, layout: str) -> list[str]:
    """Regenerate the assets of ``version``'s ``layout`` in a temporary folder; the stale ones, after printing each
    verdict."""
    folder = get_spec(version).demo_dir(layout)
    target, stale = HERE / folder, []
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / folder
        build(fresh, version, layout)
        for name in sorted(str(p.relative_to(fresh)) for p in fresh.rglob("*") if p.is_file()):
            if not (target / name).is_file():
                stale.append(f"{folder}/{name}")
                continue
            if name != "expected.json":
                if (fresh / name).read_bytes() != (target / name).read_bytes():
                    stale.append(f"{folder}/{name}")
                continue
            ok, detail = compare_expected(json.loads((fresh / name).read_text()),
                                          json.loads((target / name).read_text()))
            print(f"{folder}/expected.json: {detail}")
            if not ok:
                stale.append(f"{folder}/{name}")
    return stale


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", default="all", choices=[*SPECS, "all"])
    ap.add_argument("--check", action="store_true",
                    help="regenerate into a temp dir and compare with the shipped files")
    args = ap.parse_args()
    stale = []
    for version in SPECS if args.version == "all" else (args.version,):
        for layout in get_spec(version).layouts:
            if args.check:
                stale += check(version, layout)
                continue
            out = HERE / get_spec(version).demo_dir(layout)
            e = build(out, version, layout)
            print(f"wrote {out}: seq_len {e['seq_len']}, prompt_tokens {e['prompt_tokens']}")
    if args.check:
        print("demo assets up to date" if not stale else f"stale demo assets: {stale}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
