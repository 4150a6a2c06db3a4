# SPDX-License-Identifier: Apache-2.0
"""TT-NN backend: GR00T N1.5 GR1, N1.6 (GR1, bridge) or N1.7 DROID on a Tenstorrent p150a, replaying four Metal
traces per request.

Boot: convert the checkpoint into the device-layout cache (once), open the device (with 1 or 2 command
queues), upload, build one model per micro-batching bucket (1, and 2 and 4 when ``GR00T_MAX_BATCH`` asks for
them: ``tt_buckets``) over the same weights, then for each write the demo inputs, compile with one untraced pass
and capture its vision / llm / adapter / denoise traces. A request (or a micro-batch, in the smallest bucket that
holds it): host chain (as the reference) → inputs checked against the captured shapes → written into the bucket's
persistent buffers (on CQ 1 with 2 queues) → four replays → readback → un-normalise (N1.7: relative actions
composed onto the request's state). RTC's inpainting runs inside the denoise trace (``rtc_variants``).

``mock=True`` (``GR00T_TT_MOCK=1``) is a test mode: the mock P150 of ``tt/tools/mock_runtime.py`` validates
every op of the untraced model but computes nothing, so the actions are not a policy; the response
and /info say so. Trace capture and ``wait_for_event`` crash on a mock, so the mock mode runs the stages
untraced on one command queue, and /info says so.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from .base import PolicyBackend

TT_MAX_BUCKET = 4  # the largest static batch: see ``tt_buckets``


def tt_buckets(max_batch: int) -> list[int]:
    """The static batch sizes a TT server batching up to ``max_batch`` builds: powers of two (a batch runs in the
    next one up, so padding never doubles the work) up to ``TT_MAX_BUCKET``. Each bucket is a second copy of every
    activation, input buffer and trace; at 4 the DiT's projections already see 256 rows, and a larger batch
    is run as several calls of at most 4 requests."""
    top = min(max(1, max_batch), TT_MAX_BUCKET)
    return [1 << i for i in range((1 << (top - 1).bit_length()).bit_length())]


MOCK_WARNING = ("MOCK DEVICE: the TT-NN ops ran on a mock P150 that validates them but computes nothing; "
                "these actions are not a policy")


class TTNNBackendError(RuntimeError):
    """The TT-NN backend cannot start here; the message says why in one line."""


def mock_root(cache_dir: Path) -> Path:
    return cache_dir / "tt-mock-runtime"


def prepare_runtime(mock: bool, cache_dir: Path) -> None:
    """Check that ttnn can reach a device (or set up the mock) before ``ttnn`` is first imported."""
    from models.experimental.gr00t.tt.runner import device_present  # no ttnn import

    if mock:
        import sys

        from models.experimental.gr00t.tt.tools.mock_runtime import MockRuntimeError, build_mock_runtime, mock_env

        if "ttnn" in sys.modules and not os.environ.get("TT_METAL_MOCK_CLUSTER_DESC_PATH"):
            raise TTNNBackendError("GR00T_TT_MOCK=1 but ttnn was already imported for real hardware in this process")
        if not os.environ.get("TT_METAL_MOCK_CLUSTER_DESC_PATH"):
            try:
                root = build_mock_runtime(mock_root(cache_dir))
            except MockRuntimeError as exc:
                raise TTNNBackendError(f"GR00T_TT_MOCK=1: {exc}") from None
            os.environ.update(mock_env(root))
        os.environ.setdefault("TT_LOGGER_LEVEL", "error")
        return
    if not device_present():
        raise TTNNBackendError("GR00T_BACKEND=ttnn: no Tenstorrent device (no /dev/tenstorrent* node); install the "
                               "card and its driver, or use GR00T_BACKEND=torch (GR00T_TT_MOCK=1 is a test mode only)")


class TTNNBackend(PolicyBackend):
    name = "ttnn"
    # RTC's inpainting runs inside the denoise trace (its mask and path points are inputs of every request); the
    # guided variant needs a vector-Jacobian product through the DiT, which no trace has
    rtc_variants = ("inpaint",)

    def __init__(self, checkpoint: Path, version: str, layout: str, *, mesh_shape: tuple[int, int], cache_root: Path,
                 weights_id: str, dtype_policy: str, trace_layout: str, mock: bool, warmup_request: dict,
                 reason: str, log: Callable[[str], None], num_cqs: int = 1, vit_fork: bool = True,
                 max_batch: int = 1):
        from models.experimental.gr00t.common.versions import get_spec, load

        spec = get_spec(version)
        if not spec.ttnn:
            raise TTNNBackendError(f"GR00T_VERSION={version}: {spec.ttnn_refusal}")
        from models.experimental.gr00t.common.observation import parse_observation
        from models.experimental.gr00t.tt.policy import TTPolicy
        from models.experimental.gr00t.tt.runner import check_num_cqs, open_model_device

        self.mock, self.reason, self.selection = mock, reason, reason
        self.requested_cqs = check_num_cqs(num_cqs)
        # wait_for_event crashes the mock runtime: a mock runs the untraced stages on one queue
        self.num_cqs = 1 if mock else num_cqs
        self.policy_settings = TTPolicy(dtype_policy=dtype_policy, trace_layout=trace_layout, vit_fork=vit_fork)
        t0 = time.perf_counter()
        log(f"Opening device: ttnn {'MOCK P150 (test mode)' if mock else 'p150a'}, "
            f"mesh {mesh_shape[0]}x{mesh_shape[1]}, {self.num_cqs} command queue(s), policy {dtype_policy}")
        self.device = open_model_device(mesh_shape, self.num_cqs)
        log(f"Opened {'a MOCK P150' if mock else 'the p150a'} as a {mesh_shape[0]}x{mesh_shape[1]} mesh "
            f"({time.perf_counter() - t0:.1f} s)")
        if mock and num_cqs == 2:
            log("GR00T_NUM_CQS=2 runs as 1 command queue on the mock P150 (its wait_for_event crashes); "
                "the two-queue protocol needs a card")
        self.policy = load(spec.tt_policy_cls).build(
            checkpoint, self.device, cache_root=cache_root, weights_id=weights_id, policy=self.policy_settings,
            layout=layout, traced=not mock, num_cqs=self.num_cqs, log=log)
        inputs = self.policy.prepare(parse_observation(warmup_request, self.policy.layout),
                                     noise=warmup_request.get("noise"))
        # every bucket's model (constants, persistent inputs) is allocated before the first capture: no input
        # buffer or constant can then lie in any trace's scratch space, whichever bucket replays next
        self.buckets = tt_buckets(min(max_batch, spec.tt_max_batch))
        for batch in self.buckets[1:]:
            self.policy.add_bucket(batch)
        for batch in self.buckets:
            model, runner = self.policy.bucket_for(batch)
            model.write_inputs(model.host_inputs_for(inputs))
            t0 = time.perf_counter()
            if mock:
                model.forward()
                log(f"Compiled the untraced batch-{batch} model on the mock P150 ({time.perf_counter() - t0:.1f} s; "
                    "traces need a card)")
            else:
                runner.capture()
                log(f"Compiled and captured the batch-{batch} model's {len(runner.traces)} traces "
                    f"({time.perf_counter() - t0:.1f} s)")
        # a version whose TT model runs one request per call (``VersionSpec.tt_max_batch`` 1: N1.6 so far) builds
        # bucket 1 only, and the boot turns GR00T_MAX_BATCH > 1 off with this reason
        self.batchable = None if spec.tt_max_batch > 1 else (
            f"the GR00T_VERSION={version} TT-NN model runs one request per call (no batch buckets yet)")
        self.programs = self.device.num_program_cache_entries()

    def batch_buckets(self, max_batch: int) -> list[int] | None:
        """The static batch sizes built at boot (``tt_buckets``); a server batching up to ``max_batch`` runs each
        group in the smallest that holds it."""
        return list(self.buckets)

    def batch_key(self, prepared) -> tuple:
        """Every request batches with every other on TT-NN: the prompt is padded to the static length with each
        row's own masks, the image geometry is static (checked per request), and a request without RTC is a zero
        mask in the same trace (guided RTC is refused before it gets here)."""
        return ()

    def model_inputs(self, batch: list):
        """The requests as they are, one ``PreparedInputs`` each: the TT model builds each row's host tensors
        (``TtGr00tModel.host_inputs_for``), so rows of different prompt lengths never need stacking."""
        return [p.inputs for p in batch]

    def run_batch(self, batch: list) -> list:
        """A group larger than the largest bucket runs as consecutive calls of at most that many requests."""
        top = max(self.buckets)
        if len(batch) <= top:
            return super().run_batch(batch)
        return [r for i in range(0, len(batch), top) for r in super().run_batch(batch[i:i + top])]

    @property
    def action_shape(self) -> tuple[int, int]:
        return self.policy.chunk_shape  # N1.6: the tag's horizon, not the 50-row envelope

    is_reference = False
    reference_policy = None

    def close(self) -> None:
        """Release the traces, then close the device (the mock too)."""
        from models.experimental.gr00t.tt.runner import close_model_device

        if self.device is None:
            return
        for batch in self.buckets:
            self.policy.bucket_for(batch)[1].release()
        close_model_device(self.device)
        self.device = None

    @property
    def stage(self) -> str:
        # Stage 1 = every op a TT-NN op (the persistent-megakernel denoise would be stage 2); a mock runs untraced
        return "stage1-ttnn-mock-untraced" if self.mock else "stage1-ttnn-traces"

    def describe(self) -> dict:
        return {"name": "ttnn", "device": "mock-p150" if self.mock else "p150a",
                "dtype": self.policy_settings.dtype_policy,
                "policy": self.policy_settings.to_dict(), "traced": not self.mock, "mock": self.mock,
                "seq_len_padded": self.policy.model.shapes.seq_len, "programs": self.programs,
                "num_cqs": self.num_cqs, "num_cqs_requested": self.requested_cqs, "reason": self.reason,
                "batch_buckets": self.buckets,
                **({"warning": MOCK_WARNING} if self.mock else {})}
