#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Run the fp32 CPU reference policy (N1.5 or N1.7, from the checkpoint's config.json) on one
observation (the server's request JSON) and write the un-normalised actions, the normalised chunk and
the prompt facts to a JSON file.

    run_reference.py --checkpoint DIR --observation obs.json [--noise noise.json | --seed N] --out result.json
"""

import argparse
import json
import sys
from pathlib import Path


from models.experimental.gr00t.common.cli import read_json, run_cli
from models.experimental.gr00t.common.errors import InputError
from models.experimental.gr00t.common.layouts import DEFAULT_LAYOUT, get_layout
from models.experimental.gr00t.common.observation import parse_observation
from models.experimental.gr00t.common.policy import result_to_json
from models.experimental.gr00t.reference.policies import checkpoint_version


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, type=Path, help="checkpoint directory (real or synthetic)")
    ap.add_argument("--observation", required=True, type=Path, help="request-shaped JSON: images, state, instruction")
    noise = ap.add_mutually_exclusive_group()
    noise.add_argument("--noise", type=Path,
                       help="JSON initial noise, [16][32] (N1.5) or [40][132] (N1.7), or {\"noise\": ...}")
    noise.add_argument("--seed", type=int,
                       help="seed of the CPU noise generator (default: the layout's: 0 gr1, 42 droid)")
    ap.add_argument("--layout", default=None, help="default: the version's layout (gr1 for N1.5, droid for N1.7)")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()

    version = checkpoint_version(args.checkpoint)
    layout = get_layout(args.layout or DEFAULT_LAYOUT[version])
    obs = parse_observation(read_json(args.observation, "observation"), layout)
    explicit = None
    if args.noise is not None:
        explicit = read_json(args.noise, "noise")
        if isinstance(explicit, dict):
            if "noise" not in explicit:
                raise InputError("noise", "the noise file must hold a [16][32] array or {\"noise\": [16][32]}")
            explicit = explicit["noise"]

    import torch  # after argument errors, which should be instant
    from models.experimental.gr00t.reference.policies import load_reference_policy

    torch.set_num_threads(max(1, torch.get_num_threads()))
    policy = load_reference_policy(args.checkpoint, version, layout.name)
    result = policy.get_action(obs, noise=explicit, seed=args.seed)
    answer = result_to_json(result)
    out = {
        "actions": answer.pop("actions"),
        "action_pred_normalized": answer.pop("action_pred_normalized"),
        "action_horizon": policy.config.action_head.action_horizon,
        "action_keys": layout.action_keys,
        "action_dims": layout.action_dims,
        "embodiment": layout.embodiment,
        "embodiment_id": layout.embodiment_id,
        "version": policy.config.version,
        "layout": layout.name,
        **answer,  # seq_len, prompt_tokens, noise_source
        "seed": result.seed,
        "noise": result.taps["noise"][0].tolist(),
        "weights": {"checkpoint": str(args.checkpoint), "synthetic": policy.synthetic is not None,
                    **({"synthetic_info": policy.synthetic} if policy.synthetic else {})},
        "backend": {"name": "torch-reference", "device": "cpu", "dtype": "float32"},
        "timing_ms": {k: round(v, 3) for k, v in result.timing_ms.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}: {len(result.actions)} groups x {out['action_horizon']} steps, seq_len {result.seq_len}"
          + (" (SYNTHETIC weights: not a policy)" if policy.synthetic else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_cli(main, "run_reference")
