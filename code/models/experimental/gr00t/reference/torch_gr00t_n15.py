# SPDX-License-Identifier: Apache-2.0
"""The whole GR00T N1.5 network: ``backbone`` (Eagle) + ``action_head``. Its state-dict keys are
exactly the checkpoint's tensor names, so loading is ``strict=True`` with no rename table."""

from __future__ import annotations

import torch
from torch import nn

from ..common.checkpoint import LazyCheckpoint, load_module
from ..common.configs_n15 import Gr00tN15Config
from ..common.weights import OPTIONAL_UNUSED_KEYS
from .torch_action_head import FlowmatchingActionHead
from .torch_eagle import EagleBackbone


class Gr00tN15(nn.Module):
    def __init__(self, c: Gr00tN15Config):
        super().__init__()
        self.config = c
        self.backbone = EagleBackbone(c.backbone)
        self.action_head = FlowmatchingActionHead(c.action_head)

    @classmethod
    def from_checkpoint(cls, checkpoint: LazyCheckpoint, config: Gr00tN15Config,
                        dtype: torch.dtype = torch.float32) -> "Gr00tN15":
        return build_from_checkpoint(cls, checkpoint, config, dtype)


def build_from_checkpoint(cls: type[nn.Module], checkpoint: LazyCheckpoint, config, dtype: torch.dtype) -> nn.Module:
    """Build ``cls(config)`` on the meta device and assign the checkpoint's tensors (cast to ``dtype``):
    one copy of the weights in memory, every key checked, a stored tied lm_head tolerated."""
    with torch.device("meta"):
        model = cls(config)
    load_module(model, checkpoint, dtype=dtype, optional=OPTIONAL_UNUSED_KEYS)
    return model.eval()
