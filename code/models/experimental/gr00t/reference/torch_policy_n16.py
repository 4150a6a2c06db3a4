# SPDX-License-Identifier: Apache-2.0
"""fp32 reference policy for GR00T N1.6 (NVIDIA's ``Gr00tPolicy.get_action`` over ``Gr00tN1d6``, Isaac-GR00T
e29d8fc), stage by stage, every value read from the checkpoint's own files. Spec ``gr00t_n16.md`` §3–§10.

One request (an ``Observation`` checked against one of ``layouts.N16_LAYOUTS``, the tag's row):

1. frames, one per camera, in the modality config's camera order (time-major, view-minor: ``vlm_frame_order``)
   → the N1.6 image chain (``preprocessing_n16.N16ImageChain``: shortest edge, 0.95 centre crop, shortest edge,
   Eagle snap to multiples of 28 px, (x − 127.5)/127.5) → one [3, H', W'] tensor per frame;
2. the instruction → ``prompts_n16.n16_prompt_ids`` (text before images, ``formalize_language`` as the processor
   config says) with H'·W'/28² ``<IMG_CONTEXT>`` tokens per image;
3. the Eagle 3 backbone (``torch_backbone_n16``): image tokens spliced over ``<IMG_CONTEXT>``, Qwen3 cut to 16
   layers, final norm;
4. the raw state → ``normalization_n16.encode_state`` (sin/cos, mean/std or min/max per key, padded to 128);
5. the action head (``torch_gr00t_n16``): vlln, state encoder, 4 Euler steps of the AlternateVLDiT from the noise
   (1, 50, 128), with the same key masks ``Gr00tN16ActionHead.forward`` builds (RTC's inpaint/guide enter here);
6. ``normalization_n16.decode_actions``: rows 0 … H−1 (H = the tag's horizon: GR1 16, G1 30, bridge 8) and the keys'
   columns, un-normalised, relative keys plus the raw state.

Decisions (the spec leaves them to us):

* **Noise.** NVIDIA draws it unseeded from the device's global RNG (§9), so nothing can be "as NVIDIA seeds". We do
  what our N1.5/N1.7 policies do for their own envelope: explicit noise [50][128] from the client, else
  ``flow_matching.seeded_noise(seed, 50, 128)`` (a CPU ``torch.Generator``; the layout's ``default_seed`` 0 when no
  seed is given). The noise always covers the whole 50 × 128 envelope, whatever the tag's horizon.
* **``action_pred``** (``PolicyResult.action_pred``) is float32 [H, 128]: the **first H rows** of the model's
  (50, 128) chunk — the rows the robot executes — with **all 128 columns** (the keys' columns 0 … width−1 and the
  padding columns as the model produced them, as N1.5 and N1.7 keep their padding columns). Rows H … 49 are padding
  no decoding reads; they stay in ``taps["action_pred"]`` [1, 50, 128]. So an RTC prefix is at most H rows of the
  model's 128-wide space, which is what ``InpaintPrefix`` / ``GuidedPrefix`` (targets over the 50-row envelope) take.
* **``frozen_prefix``** (RTC) re-expresses the previous chunk's absolute actions at ``steps`` against the new
  request's state with ``normalization_n16.encode_actions`` (relative keys minus the state, per-step statistics of the
  new chunk's steps 0 … d−1; absolute keys just normalised) and keeps the previous rows' padding columns — the
  counterpart of ``inputs_n17.frozen_prefix_n17``. NVIDIA's N1.6 has no RTC.
* **Embodiment.** ``from_checkpoint(dir, embodiment=tag)``: the tag's processing, statistics and category row come
  from ``processor_config.json`` / ``statistics.json`` / ``embodiment_id.json``; the tag's layout row must agree with
  the file (cameras = the video keys, state and action keys with their widths, one frame) or the checkpoint is
  refused; the category row is the file's (a fine-tune may move it), put into the policy's copy of the layout.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..common.checkpoint import LazyCheckpoint, load_module
from ..common.configs_n16 import Gr00tN16Config, Gr00tN16ProcessorConfig
from ..common.errors import CheckpointError
from ..common.inputs_n16 import N16Host, n16_layout_row
from ..common.layouts import Layout
from ..common.normalization_n16 import N16Processing, N16Stats
from ..common.observation import Observation
from ..common.policy import PreparedInputs
from ..common.synthetic import synthetic_info
from ..common.timing import Stopwatch
from ..common.weights import ACTION_HEAD_PREFIX
from .policy import ReferencePolicyBase
from .torch_backbone_n16 import BACKBONE_PREFIX, LM_HEAD_KEY, Eagle3Backbone
from .torch_gr00t_n16 import MASK_TOKEN, Gr00tN16ActionHead

class Gr00tN16(nn.Module):
    """The whole N1.6 model: ``backbone`` (``Eagle3Backbone``) and ``action_head`` (``Gr00tN16ActionHead``), module
    names equal to the checkpoint's tensor prefixes."""

    def __init__(self, backbone: Eagle3Backbone, action_head: Gr00tN16ActionHead):
        super().__init__()
        self.backbone, self.action_head = backbone, action_head

    @classmethod
    def from_checkpoint(cls, checkpoint: LazyCheckpoint, config: Gr00tN16Config, dtype: torch.dtype = torch.float32,
                        dtypes_of: Callable[[nn.Module], dict[str, torch.dtype]] | None = None) -> "Gr00tN16":
        """Both parts loaded strictly (the stored lm_head and a state-dropout ``mask_token`` tolerated); a tensor
        under neither prefix is refused. ``dtypes_of`` (the meta model → its keys, with their ``backbone.`` /
        ``action_head.`` prefixes, to load in another dtype): a mixed-precision model loaded as it will run, never
        held in fp32, as ``Gr00tModel.from_checkpoint`` (``torch_fast/fast_cuda.mixed_precision_dtypes``)."""
        stray = sorted(n for n in checkpoint.names if not n.startswith((BACKBONE_PREFIX, ACTION_HEAD_PREFIX)))
        if stray:
            raise CheckpointError(f"{checkpoint.directory}: {len(stray)} tensor(s) outside backbone./action_head. "
                                  f"(first {stray[0]!r}): not an N1.6 checkpoint")
        if dtypes_of is None:
            return cls(Eagle3Backbone.from_checkpoint(checkpoint, config.backbone, dtype=dtype),
                       Gr00tN16ActionHead.from_checkpoint(checkpoint, config, dtype=dtype))
        with torch.device("meta"):  # the parts' own loaders, with each part's share of ``dtypes_of``
            model = cls(Eagle3Backbone(config.backbone), Gr00tN16ActionHead(config.action_head))
        dtypes = dtypes_of(model)
        for part, prefix, optional in ((model.backbone, BACKBONE_PREFIX, (LM_HEAD_KEY,)),
                                       (model.action_head, ACTION_HEAD_PREFIX, (MASK_TOKEN,))):
            load_module(part, checkpoint, prefix=prefix, dtype=dtype, optional=optional,
                        dtypes={k[len(prefix):]: v for k, v in dtypes.items() if k.startswith(prefix)})
        return model.eval()


class ReferencePolicyN16(ReferencePolicyBase):
    """N1.6, one embodiment tag: the shared life cycle (``get_action`` = prepare → infer → finish) with N1.6's
    checkpoint files, model and the shared host chain (``common/inputs_n16.N16Host``: prepare, finish, RTC prefix)."""

    def __init__(self, model: Gr00tN16, config: Gr00tN16Config, layout: Layout, stats: N16Stats, checkpoint_dir: Path,
                 synthetic: dict | None, processing: N16Processing | None = None,
                 processor: Gr00tN16ProcessorConfig | None = None):
        """The base's six arguments (what ``torch_fast.build`` re-wraps a moved model with); the tag's processing and
        the processor flags are read again from ``checkpoint_dir`` when not given."""
        super().__init__(model, config, layout, stats, checkpoint_dir, synthetic)
        self.processing = processing or N16Processing.from_checkpoint(checkpoint_dir, layout.embodiment)[0]
        self.processor = processor or Gr00tN16ProcessorConfig.from_checkpoint(checkpoint_dir)
        self.host = N16Host(config, layout, stats, self.processing, self.processor, Path(checkpoint_dir))
        self.image_chain = self.host.image_chain

    @classmethod
    def from_checkpoint(cls, directory: str | Path, embodiment: str = "gr1", device: str = "cpu",
                        layout: str | None = None, dtypes_of=None) -> "ReferencePolicyN16":
        """The policy on ``directory``'s checkpoint for tag ``embodiment`` (or for the tag of the N1.6 layout named
        ``layout``: ``reference.policies.load_reference_policy``'s keyword), fp32. ``dtypes_of`` (a mixed-precision
        load for a fast path that takes the model over: ``Gr00tN16.from_checkpoint``) loads those parts in another
        dtype."""
        directory = Path(directory)
        row = n16_layout_row(embodiment, layout)
        config = Gr00tN16Config.from_checkpoint(directory)
        host = N16Host.from_checkpoint(directory, row, config)
        model = Gr00tN16.from_checkpoint(LazyCheckpoint(directory), config, dtypes_of=dtypes_of).to(device)
        return cls(model, config, host.layout, host.stats, directory, synthetic_info(directory), host.processing,
                   host.processor)

    @property
    def chunk_shape(self) -> tuple[int, int]:
        """The tag's horizon (GR1 16, G1 30, bridge 8) × the model's 128 columns (``N16Host.chunk_shape``)."""
        return self.host.chunk_shape

    def checkpoint_modality_config(self) -> dict:
        """The tag's entry of ``processor_config.json``'s ``modality_configs`` (``N16Host.modality_config``)."""
        return self.host.modality_config()

    # ---- host side: ``common/inputs_n16.N16Host``, shared with the TT-NN policy --------------------------------------
    def frames(self, obs: Observation) -> list[np.ndarray]:
        return self.host.frames(obs)

    def prepare(self, obs: Observation, *, noise=None, seed: int | None = None,
                state_dtype: str = "float64") -> PreparedInputs:
        """Validate and encode one observation; raises ``InputError`` before any model work."""
        return self.host.prepare(obs, noise=noise, seed=seed, state_dtype=state_dtype)

    def finish(self, action_pred: torch.Tensor, inputs: PreparedInputs) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Model chunk [1, 50, 128] → (float32 [H, 128]: the tag's rows, every column; actions per group)."""
        return self.host.finish(action_pred, inputs)

    def frozen_prefix(self, last_normalized, last_actions, steps: slice, inputs) -> np.ndarray:
        """RTC's target [d, 128] for a new request, re-expressed against its state (``N16Host.frozen_prefix``)."""
        return self.host.frozen_prefix(last_normalized, last_actions, steps, inputs)

    # ---- the model ---------------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def infer(self, inputs: PreparedInputs, clock: Stopwatch | None = None) -> dict[str, torch.Tensor]:
        """The backbone's stages (``Eagle3VLModel.forward``, no padding) and the head's (``Gr00tN16ActionHead.forward``
        with RTC's prefix when the request has one), every boundary a tap."""
        clock = clock or Stopwatch()
        vlm, head, dev = self.model.backbone.model, self.model.action_head, self.device
        input_ids = inputs.input_ids.to(dev)
        cat_ids = self.cat_ids.expand(input_ids.shape[0])  # one embodiment per batch row (stacked requests)
        image_tokens = vlm.image_tokens([im.to(dev) for im in inputs.pixel_values])
        clock.lap("vision", dev)
        features = vlm.language_model.model(vlm.splice(input_ids, image_tokens))
        clock.lap("llm", dev)
        image_mask = input_ids == vlm.eagle_config.image_token_index
        key_masks = head.key_masks(image_mask)
        vl_embs = head.condition(features)
        state_features = head.state_encoder(inputs.state.to(dev, vl_embs.dtype), cat_ids)
        clock.lap("adapter", dev)
        taps = self.denoise(vl_embs, state_features, cat_ids, inputs, clock, key_masks)
        return {"pixel_values": inputs.pixel_values, "input_ids": inputs.input_ids, "state": inputs.state,
                "noise": inputs.noise, "image_tokens": torch.cat(image_tokens), "image_mask": image_mask,
                "backbone_features": features, "vl_embs": vl_embs, "state_features": state_features, **taps}
