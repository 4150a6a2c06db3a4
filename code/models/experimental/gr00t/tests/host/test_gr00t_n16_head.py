# SPDX-License-Identifier: Apache-2.0
"""The N1.6 action head (``reference/torch_gr00t_n16.py``) on a tiny synthetic N1.6 checkpoint: strict loading of
every ``action_head.`` tensor, determinism, the 1 + 50 token envelope, and the whole head against an independent
re-statement of spec ``gr00t_n16.md`` §6 written here with raw tensors and explicit masks (manual softmax attention,
the two sinusoids from their formulas, the 4-step Euler loop), plus perturbation checks that the first cross
block attends text and the second image."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from models.experimental.gr00t.common.checkpoint import LazyCheckpoint
from models.experimental.gr00t.common.configs_n16 import Gr00tN16Config
from models.experimental.gr00t.common.configs_n17 import Gr00tN17Config
from models.experimental.gr00t.common.embodiments_n16 import EMBODIMENT_IDS
from models.experimental.gr00t.common.errors import CheckpointError, ConfigError
from models.experimental.gr00t.common.flow_matching import seeded_noise
from models.experimental.gr00t.common.weights import n16_inventory
from models.experimental.gr00t.reference.torch_gr00t_n16 import Gr00tN16ActionHead

GR1 = EMBODIMENT_IDS["gr1"]
S, IMAGE = 14, slice(3, 10)  # a short VL sequence: 3 text tokens, 7 image tokens, 4 text tokens


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoints):
    return tiny_checkpoints["n16"]


@pytest.fixture(scope="module")
def head(ckpt):
    return Gr00tN16ActionHead.from_checkpoint(ckpt)


def inputs(head, seed: int = 0, batch: int = 1):
    c = head.config
    g = torch.Generator().manual_seed(1000 + seed)
    features = torch.randn(batch, S, c.backbone_embedding_dim, generator=g) * 3
    image_mask = torch.zeros(batch, S, dtype=torch.bool)
    image_mask[:, IMAGE] = True
    state = torch.zeros(batch, 1, c.max_state_dim)
    state[..., :58] = torch.rand(batch, 1, 58, generator=g) * 2 - 1  # GR1: 58 sin/cos dims, rest zero-padded
    noise = torch.cat([seeded_noise(seed + k, c.action_horizon, c.action_dim) for k in range(batch)])
    return features, image_mask, state, noise


def run(head, features, image_mask, state, noise, cat=GR1, **kw):
    with torch.inference_mode():
        return head(features, image_mask, state, cat, noise, **kw)


# ---- loading ------------------------------------------------------------------------------------------------------
def test_every_action_head_tensor_of_the_tiny_checkpoint_is_loaded_strictly_and_by_name(ckpt, head):
    lazy = LazyCheckpoint(ckpt)
    stored = sorted(n for n in lazy.names if n.startswith("action_head."))
    state = head.state_dict()
    assert sorted("action_head." + k for k in state) == stored
    for name in stored:
        assert torch.equal(state[name[len("action_head."):]], lazy.load(name, torch.float32)), name
    assert all(t.dtype == torch.float32 and t.device.type == "cpu" for t in state.values())
    assert not any(k.startswith(("vl_self_attention.", "future_tokens")) for k in state)


def test_the_full_config_names_exactly_the_473_released_action_head_tensors():
    config = Gr00tN16Config.full()
    with torch.device("meta"):
        full = Gr00tN16ActionHead(config.action_head)
    want = [(s.name, s.shape) for s in n16_inventory(config) if s.name.startswith("action_head.")]
    got = [("action_head." + k, tuple(v.shape)) for k, v in full.state_dict().items()]
    assert len(got) == 473 and got == want
    assert sum(v.numel() for v in full.state_dict().values()) == 1_418_624_000


def test_a_checkpoint_of_another_version_is_refused_by_the_strict_loader(tiny_checkpoints):
    with pytest.raises(CheckpointError, match="unexpected key"):  # N1.7 has vl_self_attention
        Gr00tN16ActionHead.from_checkpoint(tiny_checkpoints["n17"], Gr00tN16Config.tiny())


@pytest.mark.parametrize("edit, message", [
    (lambda h: Gr00tN17Config.tiny().action_head, "VL self-attention layers"),
    (lambda h: _replace(h, num_target_vision_tokens=4), "future tokens"),
    (lambda h: _replace(h, dit=_replace(h.dit, attend_text_every_n_blocks=0)), "alternates text / image"),
    (lambda h: _replace(h, dit=_replace(h.dit, interleave_self_attention=False)), "interleaved"),
])
def test_a_head_config_that_is_not_n16_shaped_is_refused(edit, message):
    with pytest.raises(ConfigError, match=message):
        Gr00tN16ActionHead(edit(Gr00tN16Config.tiny().action_head))


def _replace(obj, **changes):
    return dataclasses.replace(obj, **changes)


# ---- determinism and envelope -------------------------------------------------------------------------------------
def test_output_is_the_50x128_chunk_deterministic_for_fixed_noise(head):
    x = inputs(head)
    a, b = run(head, *x), run(head, *x)
    assert a.shape == (1, 50, 128) and a.dtype == torch.float32 and torch.isfinite(a).all()
    assert torch.equal(a, b)
    other_noise = run(head, *x[:3], seeded_noise(7, 50, 128))
    other_tag = run(head, *x, cat=EMBODIMENT_IDS["unitree_g1"])
    assert not torch.allclose(a, other_noise) and not torch.allclose(a, other_tag)


def test_the_dit_sees_1_state_and_50_action_tokens_and_the_chunk_is_the_last_50_decoder_rows(head):
    seen: dict[str, list] = {"dit_in": [], "dec": []}

    def keep(key, value) -> None:  # a forward hook that returns None leaves the output alone
        seen[key].append(value)

    hooks = [head.model.register_forward_hook(lambda m, args, out: keep("dit_in", args[0].shape)),
             head.action_decoder.register_forward_hook(lambda m, args, out: keep("dec", out.clone()))]
    velocities = []
    try:
        run(head, *inputs(head), on_step=lambda i, v: velocities.append(v))
    finally:
        for h in hooks:
            h.remove()
    assert seen["dit_in"] == [(1, 51, head.config.input_embedding_dim)] * 4
    assert len(velocities) == len(seen["dec"]) == 4
    for velocity, decoded in zip(velocities, seen["dec"]):
        assert decoded.shape == (1, 51, 128) and torch.equal(velocity, decoded[:, 1:])


def test_only_position_embedding_rows_0_to_49_are_used(ckpt):
    fresh = Gr00tN16ActionHead.from_checkpoint(ckpt)
    x = inputs(fresh)
    ref = run(fresh, *x)
    with torch.no_grad():
        fresh.position_embedding.weight[50:] += 10.0
    assert torch.equal(run(fresh, *x), ref)
    with torch.no_grad():
        fresh.position_embedding.weight[49] += 1.0
    assert not torch.allclose(run(fresh, *x), ref)


def test_padding_tokens_are_invisible_and_a_padded_row_equals_its_unpadded_self(head):
    features, image_mask, state, noise = inputs(head)
    ref = run(head, features, image_mask, state, noise)
    pad = 3  # left padding, as NVIDIA's batch collation does
    padded = torch.cat([torch.randn(1, pad, features.shape[-1]) * 5, features], dim=1)
    padded_image = torch.cat([torch.tensor([[True, False, True]]), image_mask], dim=1)  # whatever the pad ids
    attention = torch.cat([torch.zeros(1, pad, dtype=torch.bool), torch.ones(1, S, dtype=torch.bool)], dim=1)
    got = run(head, padded, padded_image, state, noise, attention_mask=attention)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=0)


def test_a_row_without_image_tokens_is_refused(head):
    features, image_mask, state, noise = inputs(head)
    with pytest.raises(ValueError, match="no image token"):
        run(head, features, torch.zeros_like(image_mask), state, noise)


def test_a_noise_outside_the_50x128_envelope_is_refused(head):
    features, image_mask, state, _ = inputs(head)
    with pytest.raises(ValueError, match="noise has shape"):
        run(head, features, image_mask, state, seeded_noise(0, 16, 128))


# ---- alternation: which tokens each cross block sees -------------------------------------------------------------
def _block_outputs(head, features, image_mask, state, noise) -> list[torch.Tensor]:
    """The output of every DiT block during the first Euler step."""
    outs: list[torch.Tensor] = []
    n = len(head.model.transformer_blocks)
    hooks = [blk.register_forward_hook(lambda m, args, out: outs.append(out.clone()) if len(outs) < n else None)
             for blk in head.model.transformer_blocks]
    try:
        run(head, features, image_mask, state, noise)
    finally:
        for h in hooks:
            h.remove()
    return outs


@pytest.mark.parametrize("kind, first_changed", [("image", 2), ("text", 0)])
def test_perturbing_one_kind_of_vl_token_first_changes_the_block_that_attends_to_it(head, kind, first_changed):
    """Block 0 is the first cross block and attends text; block 2 attends image (spec §6: i % 4 == 0 → text,
    i % 4 == 2 → image). Swapping the two, or letting a block see both, fails this."""
    features, image_mask, state, noise = inputs(head)
    base = _block_outputs(head, features, image_mask, state, noise)
    where = image_mask if kind == "image" else ~image_mask
    moved = features + 2.0 * where[..., None] * torch.randn(features.shape, generator=torch.Generator().manual_seed(5))
    changed = [not torch.equal(a, b) for a, b in zip(base, _block_outputs(head, moved, image_mask, state, noise))]
    assert changed.index(True) == first_changed
    assert all(changed[first_changed:])  # the residual stream carries it on


# ---- the whole head against §6 written out -----------------------------------------------------------------------
def _lin(x, p, name):
    return F.linear(x, p[name + ".weight"], p[name + ".bias"])


def _cat_lin(x, p, name, cat):
    return x @ p[name + ".W"][cat] + p[name + ".b"][cat]


def _attention(x, kv, p, name, heads, keep=None):
    """Softmax attention written out; ``keep`` [S_kv] bool marks the keys a query may see."""
    q, k, v = (_lin(t, p, f"{name}.{proj}") for t, proj in ((x, "to_q"), (kv, "to_k"), (kv, "to_v")))
    q, k, v = (t.view(t.shape[0], heads, -1).transpose(0, 1) for t in (q, k, v))  # [heads, T, hd]
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    o = torch.softmax(scores, dim=-1) @ v
    return _lin(o.transpose(0, 1).reshape(x.shape[0], -1), p, f"{name}.to_out.0")


def _ln(x, eps):
    return F.layer_norm(x, x.shape[-1:], eps=eps)


def spec_head(p, c, features, image_mask, state, noise, cat):
    """Spec §6 for one sample (no batch axis): vlln → state MLP → 4 × (encode actions, + pos rows 0..49,
    [state; actions], 32-block AlternateVLDiT, decoder, last 50 rows, x += v/4)."""
    d = c.dit
    vl = F.layer_norm(features, features.shape[-1:], p["vlln.weight"], p["vlln.bias"], 1e-5)
    state_feat = _cat_lin(F.relu(_cat_lin(state, p, "state_encoder.layer1", cat)), p, "state_encoder.layer2", cat)
    text_keys, image_keys = ~image_mask, image_mask  # "text" = every non-<IMG_CONTEXT> token (no padding here)
    e, h = c.input_embedding_dim, c.action_horizon
    x = noise.clone()
    for k in range(4):
        bucket = int(k / 4 * 1000)
        # both sinusoids in float32, as NVIDIA computes them, then widened
        f = torch.exp(-torch.arange(e // 2, dtype=torch.float32) * math.log(1e4) / (e // 2))
        tau = torch.cat([torch.sin(bucket * f), torch.cos(bucket * f)]).double().expand(h, e)  # sin first
        a = _cat_lin(x, p, "action_encoder.W1", cat)
        a = F.silu(_cat_lin(torch.cat([a, tau], -1), p, "action_encoder.W2", cat))
        a = _cat_lin(a, p, "action_encoder.W3", cat)
        a = a + p["position_embedding.weight"][:h]
        tokens = torch.cat([state_feat, a])  # [51, E]
        g = torch.exp(-math.log(1e4) * torch.arange(128, dtype=torch.float32) / 127)
        sinus = torch.cat([torch.cos(bucket * g), torch.sin(bucket * g)]).double()  # cos first
        temb = _lin(F.silu(_lin(sinus, p, "model.timestep_encoder.timestep_embedder.linear_1")), p,
                    "model.timestep_encoder.timestep_embedder.linear_2")
        for i in range(d.num_layers):
            blk = f"model.transformer_blocks.{i}"
            scale, shift = _lin(F.silu(temb), p, f"{blk}.norm1.linear").chunk(2)
            n = _ln(tokens, 1e-5) * (1 + scale) + shift
            if i % 2 == 1:
                tokens = tokens + _attention(n, n, p, f"{blk}.attn1", d.num_attention_heads)
            else:
                keep = text_keys if i % 4 == 0 else image_keys
                tokens = tokens + _attention(n, vl, p, f"{blk}.attn1", d.num_attention_heads, keep)
            hidden = F.gelu(_lin(_ln(tokens, 1e-5), p, f"{blk}.ff.net.0.proj"), approximate="tanh")
            tokens = tokens + _lin(hidden, p, f"{blk}.ff.net.2")
        shift, scale = _lin(F.silu(temb), p, "model.proj_out_1").chunk(2)
        out = _lin(_ln(tokens, 1e-6) * (1 + scale) + shift, p, "model.proj_out_2")
        pred = _cat_lin(F.relu(_cat_lin(out, p, "action_decoder.layer1", cat)), p, "action_decoder.layer2", cat)
        x = x + pred[-h:] / 4
    return x


def test_the_head_equals_spec_section_6_written_out_with_explicit_masks_and_euler_loop(head):
    features, image_mask, state, noise = inputs(head, batch=2)
    cats = torch.tensor([GR1, EMBODIMENT_IDS["oxe_widowx"]])
    image_mask[1, IMAGE.stop] = True  # the two rows differ in their image tokens too
    got = run(head, features, image_mask, state, noise, cat=cats)
    p = {k: v.double() for k, v in head.state_dict().items()}
    for row in range(2):
        want = spec_head(p, head.config, features[row].double(), image_mask[row], state[row].double(),
                         noise[row].double(), int(cats[row]))
        torch.testing.assert_close(got[row].double(), want, atol=2e-5, rtol=0)


def test_swapping_text_and_image_in_the_written_out_head_gives_another_chunk(head):
    """The comparison above can tell the alternation apart: the same formula with the masks swapped differs."""
    features, image_mask, state, noise = inputs(head)
    p = {k: v.double() for k, v in head.state_dict().items()}
    args = (p, head.config, features[0].double())
    right = spec_head(*args, image_mask[0], state[0].double(), noise[0].double(), GR1)
    swapped = spec_head(*args, ~image_mask[0], state[0].double(), noise[0].double(), GR1)
    assert (right - swapped).abs().max() > 1e-3
