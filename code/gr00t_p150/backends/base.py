# SPDX-License-Identifier: Apache-2.0
"""The one interface the engine talks to, and the one adapter from a ``Policy`` to it. A backend owns the
model and the device; the engine calls it from a single thread."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from models.experimental.gr00t.common.policy import Policy, PolicyResult, PreparedInputs, batch_key, stack_inputs
from models.experimental.gr00t.common.timing import Stopwatch


@runtime_checkable
class Backend(Protocol):
    """What every backend must offer; the engine uses nothing else (``PolicyBackend`` gives the defaults).
    ``close`` runs at shutdown on the thread that owns the device."""

    name: str
    mock: bool  # a mock device: ops validated, nothing computed (the gate is skipped)
    selection: str  # why this backend (and device) was chosen, for /info
    reference_policy: Any  # an fp32 reference sharing this backend's weights, or None
    batchable: str | None  # None when ``run_batch`` takes several requests in one model call, else why not
    rtc_variants: tuple[str, ...]  # the real-time chunking variants its sampler runs (SERVING.md §12)

    @property
    def is_reference(self) -> bool:
        """This backend is the fp32 CPU reference (its answer is the golden)."""

    @property
    def action_shape(self) -> tuple[int, int]:
        """(horizon, action_dim) of the served model-space chunk: the rows a robot executes and an RTC prefix may
        cover (N1.6: the tag's horizon, not the 50-row noise envelope)."""

    @property
    def stage(self) -> str:
        """What is served, in one word for /info's top-level ``stage`` (``reference-fp32-cpu``,
        ``fast-bf16-cuda``, ``stage1-ttnn-traces``, ...), as the published package reports it."""

    def prepare(self, observation: Any, *, noise=None, seed: int | None = None, state_dtype: str = "float64"):
        """Validate and encode, on the request's thread (raises ``InputError`` before any device work)."""

    def frozen_prefix(self, last_normalized, last_actions, steps: slice, inputs):
        """A session's previous chunk rows ``steps`` in the model space of a new request's ``inputs`` (RTC)."""

    def modality_config(self) -> dict | None:
        """The served tag's modality config as the checkpoint stores it (N1.6), or None (the wire builds it)."""

    def batch_buckets(self, max_batch: int) -> list[int] | None:
        """The static batch sizes that batches of up to ``max_batch`` run at (each built at boot), or None where
        a batch runs at its own size."""

    def batch_key(self, prepared) -> tuple:
        """Prepared requests with equal keys may share one ``run_batch`` call (the micro-batcher groups by it)."""

    def run(self, prepared) -> PolicyResult:
        """Run the model and un-normalise, on the device thread."""

    def run_batch(self, batch: list) -> list[PolicyResult]:
        """Several prepared requests of one ``batch_key`` in one model call (micro-batching), one result each."""

    def predict(self, observation: Any, *, noise=None, seed: int | None = None,
                state_dtype: str = "float64") -> PolicyResult:
        """``run(prepare(...))``: both halves on the calling thread (warm-up, scripts)."""

    def describe(self) -> dict:
        """Backend, device, dtype policy and why they were chosen (for /info)."""

    def close(self) -> None:
        """Release what the backend holds (traces, device, weights); safe to call twice."""


@dataclass
class Prepared:
    """A request validated and encoded on its own thread, ready for the device thread."""

    inputs: PreparedInputs
    encode_ms: float


class PolicyBackend:
    """A ``Policy`` (reference, fast path or TT-NN) behind the engine: the one ``predict`` they share,
    in two halves so that tokenising and image encoding never run on the device thread."""

    policy: Policy

    def prepare(self, observation, *, noise=None, seed=None, state_dtype="float64") -> Prepared:
        """Host work, thread-safe: validate and encode (raises ``InputError``)."""
        t0 = time.perf_counter()
        inputs = self.policy.prepare(observation, noise=noise, seed=seed, state_dtype=state_dtype)
        return Prepared(inputs, (time.perf_counter() - t0) * 1e3)

    batchable: str | None = "this backend runs one request at a time"
    rtc_variants: tuple[str, ...] = ()

    def frozen_prefix(self, last_normalized, last_actions, steps: slice, inputs):
        """The policy's own re-expression of a previous chunk (N1.7: absolute actions against the new state)."""
        return self.policy.frozen_prefix(last_normalized, last_actions, steps, inputs)

    def modality_config(self) -> dict | None:
        return self.policy.checkpoint_modality_config()

    def batch_buckets(self, max_batch: int) -> list[int] | None:
        return None

    def batch_key(self, prepared: Prepared) -> tuple:
        """``common/policy.batch_key``: rows that stack without padding (one prompt length, one image geometry,
        one RTC variant)."""
        return batch_key(prepared.inputs)

    def model_inputs(self, batch: list[Prepared]):
        """What ``policy.infer`` takes for ``batch``: one request's inputs, or the requests stacked row by row."""
        return batch[0].inputs if len(batch) == 1 else stack_inputs([p.inputs for p in batch])

    def run(self, prepared: Prepared) -> PolicyResult:
        """Device work, on the device thread: the model, then un-normalisation."""
        return self.run_batch([prepared])[0]

    def run_batch(self, batch: list[Prepared]) -> list[PolicyResult]:
        """B prepared requests of one ``batch_key`` as one model call, then un-normalisation row by row. One
        request runs exactly as ``run`` always did (its inputs are not re-stacked, its output not sliced)."""
        inputs = self.model_inputs(batch)
        clock = Stopwatch()
        taps = self.policy.infer(inputs, clock)  # a device policy checks its static shapes before any write
        laps = dict(clock.ms)
        host_inputs = laps.pop("host_inputs", 0.0)  # a device policy's last host step (its input tensors)
        device = sum(laps.values())
        pred = taps["action_pred"]
        results = []
        for b, p in enumerate(batch):
            t1 = time.perf_counter()
            action_pred, actions = self.policy.finish(pred if len(batch) == 1 else pred[b:b + 1], p.inputs)
            timing = {"encode": p.encode_ms + host_inputs, "device": device,
                      "decode_actions": (time.perf_counter() - t1) * 1e3, **{f"device.{k}": v for k, v in laps.items()}}
            x = p.inputs
            results.append(PolicyResult(actions=actions, action_pred=action_pred, noise_source=x.noise_source,
                                        seed=x.seed, seq_len=int(x.input_ids.shape[1]), prompt_tokens=x.prompt_tokens,
                                        timing_ms=timing, batch_size=len(batch)))
        return results

    def predict(self, observation, *, noise=None, seed=None, state_dtype="float64") -> PolicyResult:
        return self.run(self.prepare(observation, noise=noise, seed=seed, state_dtype=state_dtype))
