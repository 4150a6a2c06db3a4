# SPDX-License-Identifier: Apache-2.0
"""What every GR00T network shares: a version's ``backbone`` + the flow-matching ``action_head``, built on
the meta device and loaded strictly from a checkpoint (state-dict keys are exactly the checkpoint's tensor
names, so there is no rename table). ``torch_gr00t_n15.py`` / ``_n17.py`` name the backbone."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..common.checkpoint import LazyCheckpoint, load_module
from ..common.weights import OPTIONAL_UNUSED_KEYS
from .torch_action_head import FlowmatchingActionHead


class Gr00tModel(nn.Module):
    backbone_cls: type[nn.Module]  # built from ``config.backbone``

    def __init__(self, c):
        super().__init__()
        self.config = c
        self.backbone = self.backbone_cls(c.backbone)
        self.action_head = FlowmatchingActionHead(c.action_head)

    @classmethod
    def from_checkpoint(cls, checkpoint: LazyCheckpoint, config, dtype: torch.dtype = torch.float32,
                        dtypes_of: Callable[[nn.Module], dict[str, torch.dtype]] | None = None):
        """Build ``cls(config)`` on the meta device and assign the checkpoint's tensors (cast to ``dtype``):
        one copy of the weights in memory, every key checked, a stored tied lm_head tolerated. ``dtypes_of``
        (the meta model → its keys to load in another dtype): a mixed-precision model loaded as it will run,
        never held in fp32 (``torch_fast/fast_cuda.mixed_precision_dtypes``)."""
        with torch.device("meta"):
            model = cls(config)
        load_module(model, checkpoint, dtype=dtype, optional=OPTIONAL_UNUSED_KEYS,
                    dtypes=dtypes_of(model) if dtypes_of else None)
        return model.eval()
