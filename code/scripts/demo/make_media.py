#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Generate the README's media: the demo frames and, per version, the served actions for the shipped
demo request against the shipped fp32 reference (``demo/<version>/expected.json``).

    make_media.py [--out media] [--from-url http://127.0.0.1:20000]

By default the "served" actions come from the fp32 reference policy run in-process on a tiny synthetic
checkpoint (seed 0, the weights expected.json was made with). With --from-url they come from a running
server's POST /predict instead, and only that server's version is plotted. Output is deterministic
(Agg, fixed sizes and DPI, no Software/time chunks), so reruns give the same bytes.
"""

import argparse
import io
import json
import shutil
import sys
import tempfile
import urllib.request
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from PIL import Image


from models.experimental.gr00t.common.demo import DEMO_DIR, load_demo_request
from models.experimental.gr00t.common.cli import run_cli

REPO = Path(__file__).resolve().parents[3]
VERSION_NAMES = {"n15": "N1.5", "n17": "N1.7"}


def save(fig, path: Path) -> None:
    """PNG at a fixed DPI, quantised to a 256-colour palette (a third of the RGBA size, same look), with
    no Software or time chunks, so reruns give the same bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    Image.open(buf).convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


def reference_actions(version: str) -> dict[str, np.ndarray]:
    """The fp32 reference policy's actions for the demo request, on synthetic:tiny seed-0 weights."""
    from models.experimental.gr00t.common.layouts import DEFAULT_LAYOUT, get_layout
    from models.experimental.gr00t.common.observation import parse_observation
    from models.experimental.gr00t.common.synthetic import write_checkpoint
    from models.experimental.gr00t.reference.policies import load_reference_policy

    request = load_demo_request(version)
    with tempfile.TemporaryDirectory(prefix=f"gr00t-{version}-tiny-") as tmp:
        write_checkpoint(tmp, scale="tiny", seed=0, version=version, log=lambda _: None)
        policy = load_reference_policy(tmp, version)
        obs = parse_observation(request, get_layout(DEFAULT_LAYOUT[version]))
        result = policy.get_action(obs, noise=request["noise"])
    return result.actions


def http_json(url: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as resp:
        return json.loads(resp.read())


def served_actions(base: str) -> tuple[str, str, dict[str, np.ndarray]]:
    """(version, backend label, actions) from a running server, for its version's demo request."""
    version = http_json(f"{base}/health")["version"]
    resp = http_json(f"{base}/predict", load_demo_request(version))
    if resp["weights"].get("source") != "synthetic:tiny":
        print(f"make_media: warning: the server serves {resp['weights'].get('source')!r}, but expected.json "
              "was made on synthetic:tiny; the diffs will not be precision", file=sys.stderr)
    b = resp["backend"]
    label = f"served: {b.get('name')} / {b.get('device')} / {b.get('dtype')}"
    return version, label, {k: np.asarray(v) for k, v in resp["actions"].items()}


def plot_actions(version: str, served: dict[str, np.ndarray], label: str, out: Path) -> None:
    expected = json.loads((DEMO_DIR / version / "expected.json").read_text())["actions"]
    groups = list(expected)
    nrows = 2 if len(groups) > 3 else 1
    ncols = -(-len(groups) // nrows)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.2 * nrows + 0.7), squeeze=False)
    for ax, group in zip(axes.flat, groups):
        ref, got = np.asarray(expected[group], dtype=np.float64), np.asarray(served[group], dtype=np.float64)
        steps = np.arange(ref.shape[0])
        for d in range(ref.shape[1]):
            color = f"C{d % 10}"
            ax.plot(steps, ref[:, d], color=color, lw=1.2)
            ax.plot(steps, got[:, d], color=color, ls="none", marker="o", ms=3.5, mfc="none", mew=0.8)
        ax.set_title(f"{group} [{ref.shape[1]}]: max |diff| {np.abs(got - ref).max():.2g}", fontsize=9)
        ax.set_xlabel("chunk step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(groups):]:
        ax.axis("off")
    handles = [Line2D([], [], color="k", lw=1.2, label="fp32 reference (expected.json)"),
               Line2D([], [], color="k", ls="none", marker="o", mfc="none", label=label)]
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.suptitle(f"GR00T {VERSION_NAMES[version]} demo request, actions per group (one colour per dim)\n"
                 "synthetic:tiny random weights — not a policy", fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    save(fig, out)


def droid_montage(out: Path) -> None:
    frames = DEMO_DIR / "n17" / "frames"
    cams, times = ["exterior_image_1_left", "wrist_image_left"], [("tm15", "t−15"), ("t0", "t")]
    fig, axes = plt.subplots(2, 2, figsize=(7.0, 4.9))
    for r, cam in enumerate(cams):
        for c, (suffix, when) in enumerate(times):
            ax = axes[r, c]
            ax.imshow(Image.open(frames / f"{cam}_{suffix}.png"), interpolation="antialiased")
            ax.set_title(f"{cam}  ({when})", fontsize=8)
            ax.set_xticks([]), ax.set_yticks([])
    fig.suptitle("GR00T N1.7 demo frames (DROID layout: 2 cameras × 2 time steps)", fontsize=9)
    fig.tight_layout()
    save(fig, out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "media", help="output folder (default: <repo>/media)")
    ap.add_argument("--from-url", help="take the served actions from this server's POST /predict")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    written = [args.out / "demo_ego_view.png", args.out / "demo_droid_frames.png"]
    shutil.copyfile(DEMO_DIR / "n15" / "frames" / "ego_view_t0.png", written[0])
    droid_montage(written[1])
    if args.from_url:
        version, label, actions = served_actions(args.from_url.rstrip("/"))
        runs = [(version, label, actions)]
    else:
        runs = [(v, "served: fp32 reference in-process (torch CPU)", reference_actions(v)) for v in VERSION_NAMES]
    for version, label, actions in runs:
        written.append(args.out / f"demo_actions_{version}.png")
        plot_actions(version, actions, label, written[-1])
    for path in written:
        print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KB)")
    return 0


if __name__ == "__main__":
    run_cli(main, "make_media")
