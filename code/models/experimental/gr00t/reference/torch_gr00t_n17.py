# SPDX-License-Identifier: Apache-2.0
"""The whole GR00T N1.7 network: ``backbone.model`` (Qwen3-VL, Cosmos-Reason2-2B layout) and
``action_head`` (VL self-attention + 32-block AlternateVLDiT). State-dict keys equal the checkpoint's
tensor names; the stored ``lm_head`` is never computed and may be absent."""

from __future__ import annotations

from .torch_gr00t import Gr00tModel
from .torch_qwen3vl import Qwen3VLBackbone


class Gr00tN17(Gr00tModel):
    backbone_cls = Qwen3VLBackbone
