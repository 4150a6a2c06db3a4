# SPDX-License-Identifier: Apache-2.0
"""GR00T on TT-NN as a ``Policy`` (``common/policy.py``): the reference's host chain around the device model, so
only the model differs. What every version's TT policy shares: ``TTGr00tPolicyBase`` (build from a checkpoint,
run the captured stages), the weights' way onto the device, and ``build_tt_model``, which builds the version's TT
model through its ``VersionSpec.tt_model_builder``. The versions' policies: ``ttnn_policy_n15.TTGr00tPolicy``
(N1.5 GR1), ``ttnn_policy_n16.TTGr00tPolicyN16`` (N1.6, every served tag with a known frame size) and
``ttnn_policy_n17.TTGr00tPolicyN17`` (N1.7 DROID), named by ``VersionSpec.tt_policy_cls``."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..common.layouts import Layout, get_layout
from ..common.observation import Observation
from ..common.policy import PreparedInputs
from ..common.rtc import absolute_prefix
from ..common.timing import Stopwatch
from ..common.versions import VersionSpec, get_spec, load
from .policy import TTPolicy
from .runner import TTRunner, upload

_DEFAULT_POLICY = TTPolicy()  # the default dtype/trace policy (frozen, so one shared instance is safe)


@dataclass
class TTGr00tPolicyBase:
    """A version's TT policy: its subclass names ``config_cls`` (whose ``version`` picks the ``VersionSpec``) and
    implements ``load_stats``, ``prepare`` and ``finish``; the served layout and the command queues default to the
    version's row (``VersionSpec.layout``, ``tt_num_cqs``)."""

    config: object
    layout: Layout
    stats: object
    model: object  # the version's TT model (``ttnn_gr00t_nXX``), one request per call
    runner: TTRunner
    # micro-batching buckets beyond 1: batch → (a model over the same device weights with its own persistent
    # inputs, its runner and traces), built by ``add_bucket``
    buckets: dict[int, tuple[object, TTRunner]] = field(default_factory=dict)

    config_cls = None  # the version's ``CheckpointConfig`` subclass

    @classmethod
    def spec(cls) -> VersionSpec:
        return get_spec(cls.config_cls.version)

    @staticmethod
    def load_stats(checkpoint_dir: Path, layout: Layout, config):
        raise NotImplementedError

    @classmethod
    def build(cls, checkpoint_dir: str | Path, device, *, cache_root: str | Path, weights_id: str,
              policy: TTPolicy = _DEFAULT_POLICY, layout: str | None = None, traced: bool = True,
              num_cqs: int | None = None, log: Callable[[str], None] = print):
        """Config and statistics from the checkpoint, weights through the cache onto ``device``, the TT model
        for the layout's static geometry, and its runner (``num_cqs`` default: the version's)."""
        checkpoint_dir, spec = Path(checkpoint_dir), cls.spec()
        config = cls.config_cls.from_checkpoint(checkpoint_dir)
        stats = cls.load_stats(checkpoint_dir, get_layout(layout or spec.layout), config)
        lay = cls.served_layout(get_layout(layout or spec.layout), stats)
        weights = device_weights(checkpoint_dir, device, cache_root, weights_id, policy, lay, log)
        weights.use_policy(policy)  # its execution settings: the vision towers' per-block fidelity (vit_fork)
        model = build_tt_model(weights, config, lay)
        return cls(config, lay, stats, model, TTRunner(model, traced, num_cqs or spec.tt_num_cqs))

    @staticmethod
    def served_layout(layout: Layout, stats) -> Layout:
        """The layout the weights are converted and the model built for: the row as it is, or (N1.6) the row as the
        checkpoint's files make it (their category id, the image grids of their image chain)."""
        return layout

    @property
    def chunk_shape(self) -> tuple[int, int]:
        """(rows, width) of the served model-space chunk, as the version's reference policy reports it: the action
        head's horizon and action dim (N1.6 overrides the rows: the tag's horizon)."""
        h = self.config.action_head
        return h.action_horizon, h.action_dim

    def prepare(self, obs: Observation, *, noise=None, seed: int | None = None,
                state_dtype: str = "float64") -> PreparedInputs:
        """The reference's input chain; raises ``InputError`` before any device work."""
        raise NotImplementedError

    def add_bucket(self, batch: int) -> None:
        """A model for ``batch`` requests per call over the same device weights, with its own constants, persistent
        inputs and runner. Build every bucket before capturing any trace (``TTNNBackend`` does): then no bucket's
        buffers lie in another's trace scratch space."""
        model = build_tt_model(self.model.w, self.config, self.layout, batch)
        self.buckets[batch] = (model, TTRunner(model, self.runner.traced, self.runner.num_cqs))

    def bucket_for(self, n: int) -> tuple[object, TTRunner]:
        """The model and runner that run ``n`` requests: the smallest bucket that holds them."""
        sizes = sorted(b for b in (1, *self.buckets) if b >= n)
        if not sizes:
            raise ValueError(f"{n} requests in one call: the largest batch bucket is {max(1, *self.buckets)}")
        return (self.model, self.runner) if sizes[0] == 1 else self.buckets[sizes[0]]

    def infer(self, inputs: PreparedInputs | list[PreparedInputs],
              clock: Stopwatch | None = None) -> dict[str, torch.Tensor]:
        """Check the inputs against the captured static shapes (before any device write), run the four
        stages and read back the chunk: the taps are ``action_pred`` [n, H, D] (float32, host) for one request or
        the n of a list (``TTNNBackend.model_inputs``), run in the smallest bucket that holds them."""
        n = len(inputs) if isinstance(inputs, list) else 1
        model, runner = self.bucket_for(n)
        host = model.host_inputs_for(inputs)
        if clock:
            clock.lap("host_inputs")
        return {"action_pred": runner.run(host, clock)[:n]}

    def finish(self, action_pred: torch.Tensor, inputs: PreparedInputs) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Model-space chunk [1, H, D] → (float32 [H, D], actions per group in the robot's units)."""
        raise NotImplementedError

    def checkpoint_modality_config(self) -> dict | None:
        """The served tag's modality config as the checkpoint stores it (N1.6), or None: built from the layout."""
        return None

    def frozen_prefix(self, last_normalized: np.ndarray, last_actions: dict[str, np.ndarray], steps: slice,
                      inputs: PreparedInputs) -> np.ndarray:
        """RTC's inpainting target [d, action_dim] for a new request: as the version's reference policy computes
        it (absolute actions: the previous model-space rows; N1.7 re-expresses them against the new state)."""
        return absolute_prefix(last_normalized, steps)


def build_tt_model(weights, config, layout: Layout, batch: int = 1):
    """The version's TT model over device weights, built for the layout's static geometry and ``batch`` requests
    per call (``VersionSpec.tt_model_builder`` of the layout's version)."""
    return load(get_spec(layout.version).tt_model_builder)(weights, config, layout, batch)


def device_weights(checkpoint_dir: Path, device, cache_root: str | Path, weights_id: str, policy: TTPolicy,
                   layout: Layout, log: Callable[[str], None]):
    """The checkpoint through the weight cache (converted once) into the device's DRAM."""
    from .weight_cache import convert_checkpoint, load_cached

    info = convert_checkpoint(checkpoint_dir, cache_root, weights_id=weights_id, policy=policy, layout=layout, log=log)
    t0 = time.perf_counter()
    weights = upload(device, load_cached(info))
    log(f"TT weights on the device: {info.tensors} tensors, {info.nbytes / 1e9:.2f} GB in "
        f"{time.perf_counter() - t0:.1f} s")
    return weights
