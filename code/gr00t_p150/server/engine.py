# SPDX-License-Identifier: Apache-2.0
"""The one owner of the model and the device.

Boot (load → warm up → fidelity gate) and every prediction run on a single worker thread, so requests
are serialised and never share state; request parsing and image decoding happen before, on the
request's own thread, so a malformed request never reaches the device.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import platform
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .demo import DEMO_DIR, load_demo_request
from .settings import ServerConfig
from .weights import WeightsError, WeightsInfo, read_golden, resolve_weights

log = logging.getLogger("gr00t_p150")


class BootError(RuntimeError):
    """The server must not start; the message says why."""


# Per action group: PCC vs the golden must reach GROUP_PCC_MIN wherever the golden chunk varies by more
# than GROUP_SPREAD_MIN (action units); a near-constant group's PCC measures noise, so it is only reported
# (as the published packages do). The fp32 reference meets it exactly; bf16 and TT-NN paths must earn it.
GROUP_PCC_MIN = 0.9999
GROUP_SPREAD_MIN = 0.2


@dataclass
class Fidelity:
    pcc: float
    pcc_min: float
    per_group: dict[str, dict[str, float]]
    golden_source: str
    deterministic: bool
    passed: bool
    failed_groups: tuple[str, ...] = ()


class Engine:
    def __init__(self, config: ServerConfig):
        self.config = config
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gr00t-device")
        self.backend = None
        self.weights: WeightsInfo | None = None
        self.layout = None
        self.fidelity: Fidelity | None = None
        self.warmup_ms: list[float] = []
        self.golden: dict | None = None
        self.backend_choice = ""
        self.fidelity_skipped: str | None = None
        self.golden_source = ""
        self.boot_s = 0.0
        self.ready = False

    # ---- boot -----------------------------------------------------------------------------------
    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self._boot)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)

    def _boot(self) -> None:
        t0 = time.perf_counter()
        c = self.config
        from models.experimental.gr00t.common.layouts import get_layout  # noqa: PLC0415

        self.layout = get_layout(c.layout)
        log.info("Settings init: %s", json.dumps(c.to_dict()))
        try:
            self.weights = resolve_weights(c, log.info)
        except WeightsError as exc:
            raise BootError(str(exc)) from None
        if self.weights.synthetic:
            log.warning("Weights are SYNTHETIC (random, %s): responses are not a policy", self.weights.source)
        self.backend = self._open_backend()
        self._warm_up_and_gate()
        self.boot_s = time.perf_counter() - t0
        self.ready = True
        log.info("Model warmup completed: ready in %.1f s", self.boot_s)

    def _open_backend(self):
        c = self.config
        if c.tt_mock and c.backend != "ttnn":
            raise BootError("GR00T_TT_MOCK=1 is the TT-NN test mode: it needs GR00T_BACKEND=ttnn")
        if c.backend in ("auto", "ttnn"):
            from models.experimental.gr00t.tt.runner import device_present  # noqa: PLC0415 - imports no ttnn

            present = device_present()
            if c.backend == "ttnn":
                return self._open_ttnn("GR00T_TT_MOCK=1 (test mode)" if c.tt_mock else "GR00T_BACKEND=ttnn")
            if present and c.version == "n15":
                return self._open_ttnn("auto: a Tenstorrent device is present")
            self.backend_choice = ("auto: a Tenstorrent device is present but the TT-NN port serves N1.5 only; "
                                   if present else "auto: no Tenstorrent device; ")
        from gr00t_p150.backends.torch_backend import TorchBackend, pick_torch_device  # noqa: PLC0415

        try:
            device, reason = pick_torch_device(c.torch_device)
        except RuntimeError as exc:
            raise BootError(str(exc)) from None
        self.backend_choice += f"torch on {device} ({reason})"
        log.info("Loading weights: %s from %s", self.weights.source, self.weights.path)
        log.info("Opening device: torch %s, %s", device, c.torch_dtype)
        t = time.perf_counter()
        try:
            backend = TorchBackend(self.weights.path, c.version, c.layout, device, c.torch_dtype, self.backend_choice,
                                   path=c.torch_path)
        except Exception as exc:  # a bad checkpoint: name the problem in one line
            raise BootError(f"loading {self.weights.path} failed: {exc}") from None
        log.info("Model loaded and pipeline ready (%.1f s)", time.perf_counter() - t)
        return backend

    def _open_ttnn(self, reason: str):
        c = self.config
        from gr00t_p150.backends.ttnn_backend import TTNNBackend, TTNNBackendError, prepare_runtime  # noqa: PLC0415

        self.backend_choice = f"ttnn ({reason})"
        try:
            prepare_runtime(c.tt_mock, c.cache_dir)
        except TTNNBackendError as exc:
            raise BootError(str(exc)) from None
        log.info("Loading weights: %s from %s into the TT-NN cache %s", self.weights.source, self.weights.path, c.tt_cache)
        t = time.perf_counter()
        weights_id = f"{self.weights.source}-{self.weights.revision or 'local'}-{self.weights.fingerprint[:24]}"
        try:
            backend = TTNNBackend(self.weights.path, c.version, c.layout, mesh_shape=c.mesh_shape, cache_root=c.tt_cache,
                                  weights_id=weights_id, dtype_policy=c.tt_policy, trace_layout=c.tt_trace_layout,
                                  mock=c.tt_mock, warmup_request=load_demo_request(c.version), reason=self.backend_choice,
                                  log=log.info)
        except TTNNBackendError as exc:
            raise BootError(str(exc)) from None
        except Exception as exc:  # a device or conversion failure: one line, the cause named
            raise BootError(f"TT-NN backend failed to start: {type(exc).__name__}: {str(exc).splitlines()[0]}") from None
        log.info("Model loaded and pipeline ready (%.1f s)", time.perf_counter() - t)
        return backend

    def _warm_up_and_gate(self) -> None:
        c = self.config
        from models.experimental.gr00t.common.observation import parse_observation  # noqa: PLC0415

        request = load_demo_request(c.version)
        obs = parse_observation(request, self.layout)
        results = []
        for i in range(c.warmup_runs):
            t = time.perf_counter()
            results.append(self.backend.predict(obs, noise=request["noise"]))
            self.warmup_ms.append((time.perf_counter() - t) * 1e3)
            log.info("Warming up: %d/%d, %.1f ms", i + 1, c.warmup_runs, self.warmup_ms[-1])
        self.golden, source = self._golden(obs, request, results[0])
        self.golden_source = source
        if getattr(self.backend, "mock", False):
            self.fidelity_skipped = "not applicable: the mock P150 validates ops but computes nothing"
            log.warning("Fidelity gate skipped (%s): MOCK test mode, responses are not a policy", self.fidelity_skipped)
            return
        self.fidelity = self._gate(results, self.golden, source)
        f = self.fidelity
        log.info("Fidelity gate: PCC %.6f vs %s golden (min %.4f), deterministic=%s -> %s", f.pcc, f.golden_source,
                 f.pcc_min, f.deterministic, "PASS" if f.passed else "FAIL")
        if not f.passed:
            if not f.deterministic:
                raise BootError("fidelity gate failed: warm-up runs on identical inputs gave different actions")
            if f.failed_groups:
                k = f.failed_groups[0]
                g = f.per_group[k]
                raise BootError(f"fidelity gate failed: action group {k!r} PCC {g['pcc']:.6f} < {GROUP_PCC_MIN} "
                                f"(max |d| {g['max_abs']:.4g}, golden spread {g['spread']:.3g}) against the "
                                f"{f.golden_source} golden")
            raise BootError(f"fidelity gate failed: warm-up actions PCC {f.pcc:.6f} < GR00T_WARMUP_PCC_MIN {f.pcc_min}"
                            f" against the {f.golden_source} golden")

    def _golden(self, obs, request, first) -> tuple[dict, str]:
        """The fp32 reference answer for the demo request on these weights, and where it came from."""
        c = self.config
        if c.golden:
            return read_golden(c.golden), f"file {c.golden}"
        shipped = DEMO_DIR / c.version / "expected.json"
        if self.weights.source == "synthetic:tiny" and shipped.is_file():
            golden = read_golden(shipped)
            if golden.get("weights", {}).get("fingerprint") != self.weights.fingerprint:
                raise BootError(f"{shipped} was made for other synthetic weights than the generator now writes: "
                                "regenerate it with code/gr00t_p150/demo/make_demo.py")
            return golden, "shipped"
        cache = c.cache_dir / "golden" / f"{c.version}-{c.layout}-{self.weights.fingerprint[:24]}.json"
        if cache.is_file():
            return read_golden(cache), f"cached {cache}"
        shared = getattr(self.backend, "reference_policy", None)
        if getattr(self.backend, "is_reference", False):
            golden_result, how = first, "computed (this backend is the fp32 CPU reference)"
        elif shared is not None and shared.device.type == "cpu":
            # The fp32 fast path computes with the reference's own tensors: no second copy of the weights.
            golden_result = shared.get_action(obs, noise=request["noise"])
            how = "computed by the fp32 CPU reference (sharing this backend's weights)"
        else:
            log.info("Computing the fp32 CPU reference golden once for these weights")
            from models.experimental.gr00t.reference.policies import load_reference_policy  # noqa: PLC0415

            ref = load_reference_policy(self.weights.path, c.version, c.layout)
            golden_result, how = ref.get_action(obs, noise=request["noise"]), "computed by the fp32 CPU reference"
            del ref
        golden = golden_record(golden_result, self.weights)
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(golden) + "\n")
        return golden, f"{how}, cached {cache}"

    def _gate(self, results, golden: dict, source: str) -> Fidelity:
        import numpy as np  # noqa: PLC0415
        from models.experimental.gr00t.common.quality import max_abs_diff, pcc  # noqa: PLC0415

        valid = sum(d for _, d in self.layout.action_groups)
        got = results[-1].action_pred[:, :valid]
        try:
            want = np.asarray(golden["action_pred_normalized"], dtype=np.float64)[:, :valid]
            score = pcc(got, want) if want.shape == got.shape else float("nan")
            per_group = {}
            for k in self.layout.action_keys:
                want_k = np.asarray(golden["actions"][k], dtype=np.float64)
                spread = float(np.ptp(want_k))
                per_group[k] = {"pcc": pcc(results[-1].actions[k], want_k),
                                "max_abs": max_abs_diff(results[-1].actions[k], want_k),
                                "spread": spread, "gated": spread > GROUP_SPREAD_MIN}
        except (KeyError, TypeError, ValueError) as exc:
            raise BootError(f"fidelity golden ({source}) is malformed: {exc!r}") from None
        deterministic = all(np.array_equal(r.action_pred, results[0].action_pred) for r in results)
        failed = tuple(k for k, g in per_group.items() if g["gated"] and not g["pcc"] >= GROUP_PCC_MIN)
        passed = deterministic and math.isfinite(score) and score >= self.config.warmup_pcc_min and not failed
        return Fidelity(score, self.config.warmup_pcc_min, per_group, source, deterministic, passed, failed)

    # ---- requests -------------------------------------------------------------------------------
    async def predict(self, obs, *, noise, seed, state_dtype):
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, lambda: self.backend.predict(obs, noise=noise, seed=seed, state_dtype=state_dtype))

    def info(self) -> dict[str, Any]:
        import torch  # noqa: PLC0415
        import transformers  # noqa: PLC0415

        c, lay = self.config, self.layout
        f = self.fidelity
        return {
            "version": c.version,
            "model": MODEL_NAMES[c.version],
            "ready": self.ready,
            "stage": self.backend.stage if self.backend else None,
            "contract": contract(c, lay, *self.backend.action_shape) if self.backend else None,
            "weights": self.weights.to_dict() if self.weights else None,
            "backend": {**(self.backend.describe() if self.backend else {}), "selection": self.backend_choice},
            "warmup": {"runs": len(self.warmup_ms), "median_ms": statistics.median(self.warmup_ms) if self.warmup_ms else None,
                       "all_ms": [round(x, 2) for x in self.warmup_ms]},
            "fidelity": {"skipped": self.fidelity_skipped} if self.fidelity_skipped else None if f is None else {"pcc": f.pcc, "pcc_min": f.pcc_min, "per_group": f.per_group,
                                                "golden": f.golden_source, "deterministic": f.deterministic,
                                                "passed": f.passed, "compared": "normalised action chunk, valid dims",
                                                "group_pcc_min": GROUP_PCC_MIN, "group_spread_min": GROUP_SPREAD_MIN,
                                                "failed_groups": list(f.failed_groups)},
            "boot_s": round(self.boot_s, 2),
            "config": c.to_dict(),
            "software": {"python": platform.python_version(), "torch": torch.__version__,
                         "transformers": transformers.__version__},
        }


# The served package's name, as the published manifests report it; `backend` says where it ran.
MODEL_NAMES = {"n15": "GR00T-N1.5-3B-p150", "n17": "GR00T-N1.7-3B-p150"}


IMAGE_CHAINS = {
    "n15": "0.95 centre crop -> antialiased bilinear 224x224 -> uint8 truncation -> (u8-127.5)/127.5",
    "n17": "shortest edge 256 (INTER_AREA) -> 0.95 centre crop -> shortest edge 256 -> Qwen smart resize to multiples "
           "of 32 (bicubic, uint8) -> (u8-127.5)/127.5 -> 16x16x2 patches; frames ordered t-15 (all cameras), t",
}
UNITS = {"n15": {"state": "raw joint values (radians)", "actions": "physical (un-normalised) joint targets, radians"},
         "n17": {"state": "raw values: eef_9d = xyz (m) + first two rows of the rotation matrix, gripper, joints (rad)",
                 "actions": "absolute targets: eef_9d composed onto the request's pose, joints added to the request's, "
                            "gripper absolute"}}
INSTRUCTION_RULES = {"n15": "counted as rendered into the prompt (NVIDIA's ['...'] form adds 2 tokens)",
                     "n17": "counted after normalisation (lower-case, punctuation removed)"}


def contract(c: ServerConfig, lay, horizon: int, action_dim: int) -> dict[str, Any]:
    """The request/response contract of this server, as data (for /info and clients)."""
    from models.experimental.gr00t.common.preprocessing import MAX_SIDE, MIN_SIDE  # noqa: PLC0415

    return {
        "embodiment": lay.embodiment, "embodiment_id": lay.embodiment_id, "layout": lay.name,
        "images": {"cameras": list(lay.cameras), "frames_per_camera": lay.frames_per_camera,
                   "format": "base64 PNG or JPEG, RGB" + (" (one string, or a list of one)" if lay.frames_per_camera == 1
                                                         else f" (a list of {lay.frames_per_camera}: t-15 then t)"),
                   "side_px": [MIN_SIDE, MAX_SIDE], "width_over_height": list(lay.aspect_range) if lay.aspect_range else None,
                   "chain": IMAGE_CHAINS[c.version]},
        "state": {"groups": dict(lay.state_groups), "format": "{group: [[floats]]} (one time step) or {group: [floats]}",
                  "units": UNITS[c.version]["state"], "dtypes": ["float64", "float32"], "default_dtype": "float64"},
        "instruction": {"max_tokens": lay.max_text_tokens, "counted": INSTRUCTION_RULES[c.version],
                        "over_limit": "refused with 400, never truncated"},
        "noise": {"shape": [horizon, action_dim], "default_seed": lay.default_seed,
                  "seed_range": [0, 2**63 - 1], "generator": f"g = torch.Generator('cpu').manual_seed(seed); "
                               f"torch.randn((1, {horizon}, {action_dim}), generator=g, dtype=torch.float32)"},
        "actions": {"groups": dict(lay.action_groups), "horizon": horizon, "units": UNITS[c.version]["actions"]},
        "max_body_bytes": c.max_body_bytes,
    }


def golden_record(result, weights: WeightsInfo) -> dict:
    return {"weights": weights.to_dict(),
            "action_pred_normalized": result.action_pred.tolist(),
            "actions": {k: v.tolist() for k, v in result.actions.items()},
            "seq_len": result.seq_len, "prompt_tokens": result.prompt_tokens,
            "noise_source": result.noise_source}
