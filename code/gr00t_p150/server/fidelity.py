# SPDX-License-Identifier: Apache-2.0
"""The boot's fidelity gate: which golden the warm-up is held to, and whether it passes.

The golden is the fp32 CPU reference's answer to the version's demo request on the served weights:
an explicit file, the shipped one (synthetic:tiny), a cached one, or computed once and cached. The
gate asks for bit-identical warm-ups, a finite PCC of the normalised chunk (valid columns) of at least
``GR00T_WARMUP_PCC_MIN``, and every varying action group at ``SERVE_GROUP_PCC_MIN`` (thresholds in
``common/quality.py``).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass

from .exceptions import BootError
from .settings import ServerConfig
from .weights import WeightsInfo, read_golden

log = logging.getLogger("gr00t_p150")


@dataclass
class Fidelity:
    pcc: float
    pcc_min: float
    per_group: dict[str, dict[str, float]]
    golden_source: str
    deterministic: bool
    passed: bool
    failed_groups: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        from models.experimental.gr00t.common.quality import SERVE_GROUP_PCC_MIN, SERVE_GROUP_SPREAD_MIN

        return {"pcc": self.pcc, "pcc_min": self.pcc_min, "per_group": self.per_group, "golden": self.golden_source,
                "deterministic": self.deterministic, "passed": self.passed,
                "compared": "normalised action chunk, valid dims", "group_pcc_min": SERVE_GROUP_PCC_MIN,
                "group_spread_min": SERVE_GROUP_SPREAD_MIN, "failed_groups": list(self.failed_groups)}

    def raise_unless_passed(self) -> None:
        from models.experimental.gr00t.common.quality import SERVE_GROUP_PCC_MIN

        if self.passed:
            return
        if not self.deterministic:
            raise BootError("fidelity gate failed: warm-up runs on identical inputs gave different actions")
        if self.failed_groups:
            k = self.failed_groups[0]
            g = self.per_group[k]
            raise BootError(f"fidelity gate failed: action group {k!r} PCC {g['pcc']:.6f} < {SERVE_GROUP_PCC_MIN} "
                            f"(max |d| {g['max_abs']:.4g}, golden spread {g['spread']:.3g}) against the "
                            f"{self.golden_source} golden")
        raise BootError(f"fidelity gate failed: warm-up actions PCC {self.pcc:.6f} < GR00T_WARMUP_PCC_MIN "
                        f"{self.pcc_min} against the {self.golden_source} golden")


def resolve_golden(config: ServerConfig, weights: WeightsInfo, backend, obs, request: dict, first) -> tuple[dict, str]:
    """The fp32 reference answer for the demo request on these weights, and where it came from.

    ``first`` is the backend's first warm-up result (the golden itself when the backend is the fp32
    CPU reference)."""
    c = config
    if c.golden:
        return read_golden(c.golden), f"file {c.golden}"
    from models.experimental.gr00t.common.demo import demo_path

    shipped = demo_path(c.version, c.layout) / "expected.json"
    if weights.source == "synthetic:tiny" and shipped.is_file():
        golden = read_golden(shipped)
        if golden.get("weights", {}).get("fingerprint") != weights.fingerprint:
            raise BootError(f"{shipped} was made for other synthetic weights than the generator now writes: "
                            "regenerate it with code/models/experimental/gr00t/demo/make_demo.py")
        return golden, "shipped"
    cache = c.cache_dir / "golden" / f"{c.version}-{c.layout}-{weights.fingerprint[:24]}.json"
    if cache.is_file():
        return read_golden(cache), f"cached {cache}"
    shared = backend.reference_policy
    if backend.is_reference:
        golden_result, how = first, "computed (this backend is the fp32 CPU reference)"
    elif shared is not None and shared.device.type == "cpu":
        # The fp32 fast path computes with the reference's own tensors: no second copy of the weights.
        golden_result = shared.get_action(obs, noise=request["noise"])
        how = "computed by the fp32 CPU reference (sharing this backend's weights)"
    else:
        log.info("Computing the fp32 CPU reference golden once for these weights")
        from models.experimental.gr00t.reference.policies import load_reference_policy

        ref = load_reference_policy(weights.path, c.version, c.layout)
        golden_result, how = ref.get_action(obs, noise=request["noise"]), "computed by the fp32 CPU reference"
        del ref
    golden = golden_record(golden_result, weights)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(golden) + "\n")
    return golden, f"{how}, cached {cache}"


def gate(results, golden: dict, source: str, layout, pcc_min: float) -> Fidelity:
    """Score the warm-up ``results`` (the last one against ``golden``; all against the first)."""
    import numpy as np

    from models.experimental.gr00t.common.quality import (SERVE_GROUP_PCC_MIN, SERVE_GROUP_SPREAD_MIN,
                                                          max_abs_diff, pcc)

    valid = sum(d for _, d in layout.action_groups)
    got = results[-1].action_pred[:, :valid]
    try:
        want = np.asarray(golden["action_pred_normalized"], dtype=np.float64)[:, :valid]
        score = pcc(got, want) if want.shape == got.shape else float("nan")
        per_group = {}
        for k in layout.action_keys:
            want_k = np.asarray(golden["actions"][k], dtype=np.float64)
            spread = float(np.ptp(want_k))
            per_group[k] = {"pcc": pcc(results[-1].actions[k], want_k),
                            "max_abs": max_abs_diff(results[-1].actions[k], want_k),
                            "spread": spread, "gated": spread > SERVE_GROUP_SPREAD_MIN}
    except (KeyError, TypeError, ValueError) as exc:
        raise BootError(f"fidelity golden ({source}) is malformed: {exc!r}") from None
    deterministic = all(np.array_equal(r.action_pred, results[0].action_pred) for r in results)
    failed = tuple(k for k, g in per_group.items() if g["gated"] and not g["pcc"] >= SERVE_GROUP_PCC_MIN)
    passed = deterministic and math.isfinite(score) and score >= pcc_min and not failed
    return Fidelity(score, pcc_min, per_group, source, deterministic, passed, failed)


def golden_record(result, weights: WeightsInfo) -> dict:
    from models.experimental.gr00t.common.policy import result_to_json

    return {"weights": weights.to_dict(), **result_to_json(result)}
