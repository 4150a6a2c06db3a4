# SPDX-License-Identifier: Apache-2.0
"""The whole GR00T N1.5 network: ``backbone`` (Eagle: SigLIP → ``mlp1`` → Qwen3) + ``action_head``."""

from __future__ import annotations

from .torch_eagle import EagleBackbone
from .torch_gr00t import Gr00tModel


class Gr00tN15(Gr00tModel):
    backbone_cls = EagleBackbone
