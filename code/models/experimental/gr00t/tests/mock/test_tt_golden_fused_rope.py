# SPDX-License-Identifier: Apache-2.0
"""RoPE through ttnn's fused ``rotary_embedding_hf``: the N1.7 vision tower and text decoder with heads of 64 (no tile
padding, the width at which ``TtQwen3.rope`` takes the fused op, as every full-size config does) run with the golden
ops against the fp32 reference; the tiny heads of 16 are padded to 32 and keep the ``x·cos + (x @ R)·sin`` form,
which ``test_tt_golden_n17.py`` covers. A negated sine must be caught."""

from __future__ import annotations

from dataclasses import replace

import pytest

from models.experimental.gr00t.common.quality import max_abs_diff

from .test_tt_golden_n17 import BACKBONE, TINY, make_text_reference, make_vision_reference, run_golden, run_text_golden

pytestmark = pytest.mark.mock

FUSED_ROPE_VISION = replace(TINY, hidden_size=128, num_heads=2)
FUSED_ROPE_TEXT = replace(BACKBONE.text, head_dim=64, mrope_section=(16, 8, 8))


@pytest.mark.parametrize("broken", [False, True], ids=["fused rope", "fused rope, sin negated"])
def test_the_fused_rope_vision_tower_equals_the_fp32_reference(mock_device, broken):
    state, patches, want_tokens, want_deepstack = make_vision_reference(FUSED_ROPE_VISION)

    def negate_sin(module):
        module.sin = -module.sin

    tokens, deepstack, _, module = run_golden(state, patches, negate_sin if broken else None, c=FUSED_ROPE_VISION)
    assert module.rot is None  # the fused op ran, not the rotation matmul
    d = max([max_abs_diff(tokens.numpy(), want_tokens.numpy())]
            + [max_abs_diff(g.numpy(), w.numpy()) for g, w in zip(deepstack, want_deepstack, strict=True)])
    print(f"golden N1.7 vision tower, heads of 64 (fused RoPE){', sin negated' if broken else ''}: max |d| {d:.1e}")
    assert d > 1e-2 if broken else d < 1e-5


@pytest.mark.parametrize("broken", [False, True], ids=["fused rope", "fused rope, sin negated"])
def test_the_fused_rope_text_decoder_equals_the_fp32_reference(mock_device, broken):
    state, ids, embeds, deepstack, want = make_text_reference(FUSED_ROPE_TEXT)

    def negate_sin(module, position_ids):
        module.sin = -module.sin

    got, _ = run_text_golden(state, ids, embeds, deepstack, negate_sin if broken else None, c=FUSED_ROPE_TEXT)
    d = max_abs_diff(got.numpy(), want[0].numpy())
    print(f"golden N1.7 text decoder, heads of 64 (fused RoPE){', sin negated' if broken else ''}: max |d| {d:.1e}")
    assert d > 1e-2 if broken else d < 1e-5
