# SPDX-License-Identifier: Apache-2.0
"""GR00T N1.5 GR1 on TT-NN as a ``Policy`` (``common/policy.py``): the reference's host chain
(``prepare_n15``, un-normalisation) around the device model, so only the model differs."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..common.configs_n15 import Gr00tN15Config
from ..common.inputs_n15 import prepare_n15
from ..common.layouts import Layout, get_layout
from ..common.normalization_n15 import ActionStats, unnormalize
from ..common.observation import Observation
from ..common.policy import PreparedInputs
from ..common.prompts import encode_n15_prompt
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

    @classmethod
    def build(cls, checkpoint_dir: str | Path, device, *, cache_root: str | Path, weights_id: str,
              policy: TTPolicy = _DEFAULT_POLICY, layout: str = "gr1", traced: bool = True,
              log: Callable[[str], None] = print) -> "TTGr00tPolicy":
        from .ttnn_gr00t_n15 import TtGr00tN15, StaticShapes
        from .weight_cache import convert_checkpoint, load_cached

        checkpoint_dir = Path(checkpoint_dir)
        config = Gr00tN15Config.from_checkpoint(checkpoint_dir)
        lay = get_layout(layout)
        stats = ActionStats.from_metadata(checkpoint_dir, lay)
        info = convert_checkpoint(checkpoint_dir, cache_root, weights_id=weights_id, policy=policy, layout=lay, log=log)
        t0 = time.perf_counter()
        weights = upload(device, load_cached(info))
        log(f"TT weights on the device: {info.tensors} tensors, {info.nbytes / 1e9:.2f} GB in "
            f"{time.perf_counter() - t0:.1f} s")
        offset = image_offset(config, lay)
        model = TtGr00tN15(weights, config, StaticShapes.gr1(config, offset))
        return cls(config, lay, stats, model, TTRunner(model, traced))

    def prepare(self, obs: Observation, *, noise=None, seed: int | None = None,
                state_dtype: str = "float64") -> PreparedInputs:
        """The reference's input chain; raises ``InputError`` before any device work."""
        return prepare_n15(self.config, self.layout, obs, noise=noise, seed=seed, state_dtype=state_dtype)

    def infer(self, inputs: PreparedInputs, clock: Stopwatch | None = None) -> dict[str, torch.Tensor]:
        """Check the inputs against the captured static shapes (before any device write), run the four
        stages and read back the chunk: the taps are ``action_pred`` [1, H, D] (float32, host)."""
        host = self.model.host_inputs(inputs.pixel_values, inputs.input_ids, inputs.state, inputs.noise)
        if clock:
            clock.lap("host_inputs")
        return {"action_pred": self.runner.run(host, clock)}

    def finish(self, action_pred: torch.Tensor, inputs: PreparedInputs) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Model-space chunk [1, H, D] → (float32 [H, D], un-normalised actions per group); N1.5 needs no
        request state to un-normalise."""
        chunk = action_pred[0].float().cpu().numpy()
        return chunk, unnormalize(chunk, self.stats, self.layout)


def image_offset(config: Gr00tN15Config, layout: Layout) -> int:
    """Where the image block starts in every prompt of this layout (the chat prefix is fixed)."""
    ids = encode_n15_prompt("x", n_images=layout.n_images, tokens_per_image=config.backbone.tokens_per_image,
                            max_text_tokens=layout.max_text_tokens).input_ids
    return ids.index(config.backbone.image_token_index)
