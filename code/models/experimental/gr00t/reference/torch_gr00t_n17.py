# SPDX-License-Identifier: Apache-2.0
"""The whole GR00T N1.7 network: ``backbone.model`` (Qwen3-VL, Cosmos-Reason2-2B layout) and
``action_head`` (VL self-attention + 32-block AlternateVLDiT). State-dict keys equal the checkpoint's
tensor names; the stored ``lm_head`` is never computed and may be absent."""

from __future__ import annotations

import torch
from torch import nn

from ..common.checkpoint import LazyCheckpoint
from ..common.configs_n17 import Gr00tN17Config
from .torch_action_head import FlowmatchingActionHead
from .torch_gr00t_n15 import build_from_checkpoint
from .torch_qwen3vl import Qwen3VLBackbone


class Gr00tN17(nn.Module):
    def __init__(self, c: Gr00tN17Config):
        super().__init__()
        self.config = c
        self.backbone = Qwen3VLBackbone(c.backbone)
        self.action_head = FlowmatchingActionHead(c.action_head)

    @classmethod
    def from_checkpoint(cls, checkpoint: LazyCheckpoint, config: Gr00tN17Config,
                        dtype: torch.dtype = torch.float32) -> "Gr00tN17":
        return build_from_checkpoint(cls, checkpoint, config, dtype)
