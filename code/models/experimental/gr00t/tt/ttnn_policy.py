# SPDX-License-Identifier: Apache-2.0
"""GR00T on TT-NN as a ``Policy`` (``common/policy.py``): the reference's host chain around the device model,
so only the model differs. ``TTGr00tPolicy``: N1.5 GR1 (``prepare_n15``, un-normalisation);
``TTGr00tPolicyN17``: N1.7 DROID (``prepare_n17`` / ``finish_n17``, shared with the reference: the DROID chain,
and the relative actions composed onto the request's state)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..common.configs_n15 import Gr00tN15Config
from ..common.configs_n17 import Gr00tN17Config
from ..common.inputs_n15 import prepare_n15
from ..common.inputs_n17 import finish_n17, prepare_n17
from ..common.layouts import Layout, get_layout
from ..common.normalization_n15 import ActionStats, unnormalize
from ..common.normalization_n17 import DroidStats
from ..common.observation import Observation
from ..common.policy import PreparedInputs
from ..common.prompts import encode_n15_prompt, encode_n17_prompt
from ..common.timing import Stopwatch
from .policy import TTPolicy
from .runner import TTRunner, upload

_DEFAULT_POLICY = TTPolicy()  # the default dtype/trace policy (frozen, so one shared instance is safe)


@dataclass
class TTGr00tPolicy:
    """GR00T N1.5 GR1 on TT-NN: the reference's host chain around the device model."""

    config: Gr00tN15Config
    layout: Layout
    stats: ActionStats
    model: object  # TtGr00tN15
    runner: TTRunner

    config_cls = Gr00tN15Config
    default_layout, default_num_cqs = "gr1", 1  # the published N1.5 package runs one command queue

    @staticmethod
    def load_stats(checkpoint_dir: Path, layout: Layout, config) -> ActionStats:
        return ActionStats.from_metadata(checkpoint_dir, layout)

    @classmethod
    def build(cls, checkpoint_dir: str | Path, device, *, cache_root: str | Path, weights_id: str,
              policy: TTPolicy = _DEFAULT_POLICY, layout: str | None = None, traced: bool = True,
              num_cqs: int | None = None, log: Callable[[str], None] = print):
        """Config and statistics from the checkpoint, weights through the cache onto ``device``, the TT model
        for the layout's static geometry, and its runner (``num_cqs`` default: the class's)."""
        checkpoint_dir = Path(checkpoint_dir)
        config = cls.config_cls.from_checkpoint(checkpoint_dir)
        lay = get_layout(layout or cls.default_layout)
        stats = cls.load_stats(checkpoint_dir, lay, config)
        weights = device_weights(checkpoint_dir, device, cache_root, weights_id, policy, lay, log)
        model = build_tt_model(weights, config, lay)
        return cls(config, lay, stats, model, TTRunner(model, traced, num_cqs or cls.default_num_cqs))

    def prepare(self, obs: Observation, *, noise=None, seed: int | None = None,
                state_dtype: str = "float64") -> PreparedInputs:
        """The reference's input chain; raises ``InputError`` before any device work."""
        return prepare_n15(self.config, self.layout, obs, noise=noise, seed=seed, state_dtype=state_dtype)

    def infer(self, inputs: PreparedInputs, clock: Stopwatch | None = None) -> dict[str, torch.Tensor]:
        """Check the inputs against the captured static shapes (before any device write), run the four
        stages and read back the chunk: the taps are ``action_pred`` [1, H, D] (float32, host)."""
        host = self.model.host_inputs_for(inputs)
        if clock:
            clock.lap("host_inputs")
        return {"action_pred": self.runner.run(host, clock)}

    def finish(self, action_pred: torch.Tensor, inputs: PreparedInputs) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Model-space chunk [1, H, D] → (float32 [H, D], un-normalised actions per group); N1.5 needs no
        request state to un-normalise."""
        chunk = action_pred[0].float().cpu().numpy()
        return chunk, unnormalize(chunk, self.stats, self.layout)


def build_tt_model(weights, config, layout: Layout):
    """The version's TT model over device weights, built for the layout's static geometry."""
    if layout.version == "n15":
        from .ttnn_gr00t_n15 import StaticShapes, TtGr00tN15

        return TtGr00tN15(weights, config, StaticShapes.gr1(config, image_offset(config, layout)))
    from .ttnn_gr00t_n17 import StaticShapesN17, TtGr00tN17
    from .weight_layout_n17 import static_grids

    grids = static_grids(config, layout)
    return TtGr00tN17(weights, config, StaticShapesN17.droid(config, grids, image_rows_n17(config, layout, grids)))


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


@dataclass
class TTGr00tPolicyN17(TTGr00tPolicy):
    """GR00T N1.7 DROID on TT-NN: the reference's host chain (``common/inputs_n17``: ``prepare``, ``finish``)
    around the device model built for the static DROID geometry; two command queues by default, as published."""

    config: Gr00tN17Config
    stats: DroidStats

    config_cls = Gr00tN17Config
    default_layout, default_num_cqs = "droid", 2  # as published

    @staticmethod
    def load_stats(checkpoint_dir: Path, layout: Layout, config) -> DroidStats:
        return DroidStats.from_checkpoint(checkpoint_dir, layout, config.action_head.action_horizon)

    def prepare(self, obs: Observation, *, noise=None, seed: int | None = None,
                state_dtype: str = "float64") -> PreparedInputs:
        """The reference's DROID chain (``common/inputs_n17``); raises ``InputError`` before any device work."""
        return prepare_n17(self.config, self.layout, self.stats, obs, noise=noise, seed=seed, state_dtype=state_dtype)

    def finish(self, action_pred: torch.Tensor, inputs: PreparedInputs) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Model-space chunk → absolute DROID actions composed onto the request's state."""
        return finish_n17(action_pred, inputs, self.stats, self.layout)


def image_rows_n17(config: Gr00tN17Config, layout: Layout, grids: list[list[int]]) -> list[int]:
    """The prompt rows of the image tokens: the chat template puts every image before the instruction, so
    they are the same for every prompt of the layout."""
    merge = config.backbone.vision.spatial_merge_size**2
    ids = encode_n17_prompt("x", tokens_per_image=[t * h * w // merge for t, h, w in grids],
                            max_text_tokens=layout.max_text_tokens).input_ids
    return [i for i, t in enumerate(ids) if t == config.backbone.image_token_id]


def image_offset(config: Gr00tN15Config, layout: Layout) -> int:
    """Where the image block starts in every prompt of this layout (the chat prefix is fixed)."""
    ids = encode_n15_prompt("x", n_images=layout.n_images, tokens_per_image=config.backbone.tokens_per_image,
                            max_text_tokens=layout.max_text_tokens).input_ids
    return ids.index(config.backbone.image_token_index)
