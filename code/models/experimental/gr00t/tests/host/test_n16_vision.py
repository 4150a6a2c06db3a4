# SPDX-License-Identifier: Apache-2.0
"""GR00T N1.6 image side (``reference/torch_eagle3_n16.py``) against independent implementations.

* Vision tower: transformers 5.12.1 ``Siglip2VisionModel`` on the same random weights (tiny sizes, the real patch
  14 and 16 × 16 position grid), fed by transformers' own Siglip2 patchifier, three images of different aspect
  ratios (GR1 252², DROID 252×448, and a 168×112 one whose grid is under 16 so the position resize shrinks),
  batched with HF's padding mask (each image attends only to itself) and one by one: the embeddings, every
  layer's output and the post-LN output per image.
* Patch embedding + position resize: the spec's Conv2d form of the Linear and an explicit triangle-filter resize.
* Pixel-unshuffle + ``mlp1``: no transformers twin; checked against the spec's index formula, a reshape/permute
  formulation and the connector written out as plain arithmetic (LayerNorm, matmuls, erf GELU).
* Checkpoint names/shapes and parameter counts at the real sizes against spec §2.1, strict loading, and one
  real-size forward of a GR1 252² frame.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from models.experimental.gr00t.common.quality import FP32_REFERENCE_ATOL, max_abs_diff
from models.experimental.gr00t.reference.torch_eagle3_n16 import (
    CHECKPOINT_PREFIX,
    VISION_PREFIX,
    Eagle3VisionConfig,
    Eagle3VisionConnector,
    checkpoint_keys,
    from_state_dict,
    pixel_unshuffle_tokens,
)
from transformers import Siglip2VisionConfig, Siglip2VisionModel
from transformers.models.siglip2.image_processing_siglip2 import convert_image_to_patches

from ..conftest import randomize_

SIZES = [(252, 252), (252, 448), (168, 112)]  # GR1 18×18 patches, DROID 18×32, a 12×8 grid (shrunk positions)


def images(sizes=SIZES, seed: int = 5) -> list[torch.Tensor]:
    """Eagle-normalised pixels: uint8 → (x − 127.5) / 127.5."""
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, 256, (3, h, w), generator=g).float() - 127.5) / 127.5 for h, w in sizes]


def hf_tower(attn: str, c: Eagle3VisionConfig) -> Siglip2VisionModel:
    hf_config = Siglip2VisionConfig(**c.to_hf_siglip2_dict())
    hf_config._attn_implementation = attn
    torch.manual_seed(0)
    return randomize_(Siglip2VisionModel(hf_config), seed=1).eval()


def checkpoint_state(hf: Siglip2VisionModel, c: Eagle3VisionConfig) -> dict[str, torch.Tensor]:
    """A ``backbone.model.``-prefixed state: HF's tower (transformers 5 dropped the inner ``vision_model.`` level
    the checkpoint keeps), a random ``mlp1``, and LLM tensors that the loader must leave alone."""
    state = {CHECKPOINT_PREFIX + VISION_PREFIX + k: v for k, v in hf.state_dict().items()}
    g = torch.Generator().manual_seed(3)
    d_in, d = c.connector_in_size, c.llm_hidden_size
    state |= {
        CHECKPOINT_PREFIX + "mlp1.0.weight": 1 + 0.1 * torch.randn(d_in, generator=g),
        CHECKPOINT_PREFIX + "mlp1.0.bias": 0.1 * torch.randn(d_in, generator=g),
        CHECKPOINT_PREFIX + "mlp1.1.weight": torch.randn(d, d_in, generator=g) / d_in**0.5,
        CHECKPOINT_PREFIX + "mlp1.1.bias": 0.1 * torch.randn(d, generator=g),
        CHECKPOINT_PREFIX + "mlp1.3.weight": torch.randn(d, d, generator=g) / d**0.5,
        CHECKPOINT_PREFIX + "mlp1.3.bias": 0.1 * torch.randn(d, generator=g),
        CHECKPOINT_PREFIX + "language_model.model.norm.weight": torch.ones(8),
        "action_head.vlln.weight": torch.ones(8),
    }
    return state


def hf_run(hf: Siglip2VisionModel, imgs: list[torch.Tensor], patch: int) -> list[list[torch.Tensor]]:
    """HF over ``imgs`` as one padded batch → per image [embeddings, layer outputs..., post-LN], valid rows only."""
    patches = [convert_image_to_patches(img, patch) for img in imgs]
    n = max(p.shape[0] for p in patches)
    pv = torch.zeros(len(imgs), n, patches[0].shape[1])
    mask = torch.zeros(len(imgs), n, dtype=torch.long)
    for i, p in enumerate(patches):
        pv[i, : p.shape[0]], mask[i, : p.shape[0]] = p, 1
    shapes = torch.tensor([[img.shape[1] // patch, img.shape[2] // patch] for img in imgs])
    with torch.no_grad():
        out = hf(pixel_values=pv, pixel_attention_mask=mask, spatial_shapes=shapes, output_hidden_states=True)
    states = [*out.hidden_states, out.last_hidden_state]
    return [[s[i, : p.shape[0]] for s in states] for i, p in enumerate(patches)]


@pytest.fixture(scope="module")
def tiny():
    c = Eagle3VisionConfig.tiny()
    hf = hf_tower("eager", c)
    state = checkpoint_state(hf, c)
    return c, hf, state, from_state_dict(state, c)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("batched", [True, False], ids=["padded-batch", "one-by-one"])
def test_tower_matches_transformers_siglip2(tiny, attn, batched):
    c, _, state, ours = tiny
    hf = hf_tower(attn, c)  # same seeds → same weights as the fixture's
    imgs = images()
    expected = hf_run(hf, imgs, c.patch_size) if batched else [hf_run(hf, [img], c.patch_size)[0] for img in imgs]
    with torch.no_grad():
        got = ours.vision_model(imgs, output_hidden_states=True)
    assert got.grids == [(18, 18), (18, 32), (12, 8)]
    for i, want in enumerate(expected):
        # embeddings, the output of layers 0 .. L-1 (pre post-LN), then the post-LN feature.
        have = [s[i] for s in got.hidden_states] + [got.last_hidden_state[i]]
        assert len(have) == len(want) == c.num_hidden_layers + 2
        for k, (a, b) in enumerate(zip(have, want)):
            assert a.shape == (math.prod(got.grids[i]), c.hidden_size)
            assert max_abs_diff(a, b) < FP32_REFERENCE_ATOL, f"image {i} state {k}"


def triangle_resize_matrix(n_in: int, n_out: int) -> torch.Tensor:
    """[n_out, n_in] weights of an antialiased bilinear resize, written from its definition: output pixel i
    centred at input coordinate (i + ½)·s (s = n_in / n_out), input pixel j at j + ½, triangle kernel of
    half-width max(s, 1), normalised per output pixel."""
    s = n_in / n_out
    width = max(s, 1.0)
    m = torch.zeros(n_out, n_in, dtype=torch.float64)
    for i in range(n_out):
        for j in range(n_in):
            m[i, j] = max(0.0, 1.0 - abs((j + 0.5) - (i + 0.5) * s) / width)
    return m / m.sum(1, keepdim=True)


def test_embeddings_match_conv_and_explicit_resize(tiny):
    """Patch embedding as the spec's Conv2d (W.reshape(D, 14, 14, 3).permute(0, 3, 1, 2)) + the position table
    resized by explicit separable triangle-filter matrices."""
    c, _, _, ours = tiny
    emb = ours.vision_model.vision_model.embeddings
    w = emb.patch_embedding.weight.reshape(c.hidden_size, c.patch_size, c.patch_size, c.num_channels)
    table = emb.position_embedding.weight.double().reshape(c.grid_size, c.grid_size, c.hidden_size)
    imgs = images()
    with torch.no_grad():
        got = ours.vision_model(imgs, output_hidden_states=True).hidden_states[0]
        for i, img in enumerate(imgs):
            conv = F.conv2d(img[None], w.permute(0, 3, 1, 2), emb.patch_embedding.bias, stride=c.patch_size)[0]
            h, wd = conv.shape[1:]
            pos = torch.einsum("ya,abd,xb->yxd", triangle_resize_matrix(c.grid_size, h), table,
                               triangle_resize_matrix(c.grid_size, wd))
            expected = conv.flatten(1).t().double() + pos.reshape(h * wd, -1)
            assert max_abs_diff(got[i], expected) < FP32_REFERENCE_ATOL


def test_position_resize_antialias_only_matters_when_shrinking():
    """Spec §5.1 step 2 guessed that for grids ≥ 16 the antialiased resize equals plain half-pixel bilinear, and
    §12 item 7 left grids < 16 open: measured here on the real 16 × 16 × 1152 table shape."""
    table = torch.randn(1, 1152, 16, 16, generator=torch.Generator().manual_seed(0))

    def resize(size, aa):
        return F.interpolate(table, size=size, mode="bilinear", align_corners=False, antialias=aa)

    for size in [(16, 16), (18, 18), (18, 32), (36, 64)]:  # 224², GR1 252², DROID 252×448, 504×896
        assert max_abs_diff(resize(size, True), resize(size, False)) < 1e-6
    assert torch.equal(resize((16, 16), True), table)
    for size in [(12, 8), (8, 8), (18, 12)]:  # any side under 16 patches (224 px): antialias changes the values
        assert max_abs_diff(resize(size, True), resize(size, False)) > 1e-2


def test_pixel_unshuffle_channel_order():
    """Ours (F.pixel_unshuffle as NVIDIA's ``pixel_shuffle_back``) = the spec's index formula = a reshape."""
    h, w, ch = 6, 10, 5
    x = torch.randn(h * w, ch, generator=torch.Generator().manual_seed(1))
    got = pixel_unshuffle_tokens(x, h, w, 2)
    assert got.shape == (h // 2 * w // 2, 4 * ch)
    grid = x.reshape(h, w, ch)
    for r in range(h // 2):
        for s in range(w // 2):
            for c in range(ch):
                for dy in range(2):
                    for dx in range(2):
                        assert got[r * (w // 2) + s, c * 4 + 2 * dy + dx] == grid[2 * r + dy, 2 * s + dx, c]
    by_reshape = grid.reshape(h // 2, 2, w // 2, 2, ch).permute(0, 2, 4, 1, 3).reshape(h // 2 * w // 2, ch * 4)
    assert torch.equal(got, by_reshape)
    with pytest.raises(ValueError):
        pixel_unshuffle_tokens(torch.randn(15, ch), 3, 5, 2)


def explicit_connector(x: torch.Tensor, state: dict[str, torch.Tensor], eps: float) -> torch.Tensor:
    """mlp1 as plain float64 arithmetic: LayerNorm (biased variance), Linear, erf GELU, Linear."""
    p = {k[len(CHECKPOINT_PREFIX + "mlp1."):]: v.double() for k, v in state.items()
         if k.startswith(CHECKPOINT_PREFIX + "mlp1.")}
    x = x.double()
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    x = (x - mu) / torch.sqrt(var + eps) * p["0.weight"] + p["0.bias"]
    x = x @ p["1.weight"].t() + p["1.bias"]
    x = 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    return x @ p["3.weight"].t() + p["3.bias"]


def test_image_tokens_match_transformers_tower_and_explicit_connector(tiny):
    """End to end per image: HF's post-LN tower output → reshape-based unshuffle → explicit mlp1 = ours."""
    c, hf, state, ours = tiny
    imgs = images()
    with torch.no_grad():
        got = ours(imgs)
    for i, (img, want) in enumerate(zip(imgs, hf_run(hf, imgs, c.patch_size))):
        h, w = img.shape[1] // c.patch_size, img.shape[2] // c.patch_size
        merged = (want[-1].reshape(h // 2, 2, w // 2, 2, c.hidden_size).permute(0, 2, 4, 1, 3)
                  .reshape(h // 2 * w // 2, 4 * c.hidden_size))
        expected = explicit_connector(merged, state, c.connector_layer_norm_eps)
        assert got[i].shape == (img.shape[1] // 28 * img.shape[2] // 28, c.llm_hidden_size)
        assert max_abs_diff(got[i], expected) < FP32_REFERENCE_ATOL, f"image {i}"


def test_strict_loading_and_input_checks(tiny):
    c, _, state, ours = tiny
    key = CHECKPOINT_PREFIX + "mlp1.3.bias"
    with pytest.raises(RuntimeError, match="Missing"):
        from_state_dict({k: v for k, v in state.items() if k != key}, c)
    with pytest.raises(RuntimeError, match="Unexpected"):
        from_state_dict(state | {CHECKPOINT_PREFIX + "mlp1.2.weight": torch.ones(1)}, c)
    with pytest.raises(ValueError, match="shape"):
        from_state_dict(state | {key: torch.zeros(c.llm_hidden_size + 1)}, c)
    ours_prefixes = (CHECKPOINT_PREFIX + "vision_model.", CHECKPOINT_PREFIX + "mlp1.")
    assert set(checkpoint_keys(c)) == {k for k in state if k.startswith(ours_prefixes)}
    for bad in ([], [torch.zeros(3, 250, 252)], [torch.zeros(1, 28, 28)], [torch.zeros(3, 0, 28)]):
        with pytest.raises(ValueError):
            ours(bad)


def spec_shapes() -> dict[str, tuple[int, ...]]:
    """Spec §2.1's table (vision tower + connector under ``backbone.model.``), typed in independently."""
    v = CHECKPOINT_PREFIX + "vision_model.vision_model."
    d, f = 1152, 4304
    out = {v + "embeddings.patch_embedding.weight": (d, 588), v + "embeddings.patch_embedding.bias": (d,),
           v + "embeddings.position_embedding.weight": (256, d),
           v + "post_layernorm.weight": (d,), v + "post_layernorm.bias": (d,),
           v + "head.probe": (1, 1, d), v + "head.attention.in_proj_weight": (3 * d, d),
           v + "head.attention.in_proj_bias": (3 * d,), v + "head.attention.out_proj.weight": (d, d),
           v + "head.attention.out_proj.bias": (d,), v + "head.layernorm.weight": (d,), v + "head.layernorm.bias": (d,),
           v + "head.mlp.fc1.weight": (f, d), v + "head.mlp.fc1.bias": (f,), v + "head.mlp.fc2.weight": (d, f),
           v + "head.mlp.fc2.bias": (d,)}
    for i in range(27):
        p = f"{v}encoder.layers.{i}."
        for n in ("layer_norm1", "layer_norm2"):
            out |= {p + n + ".weight": (d,), p + n + ".bias": (d,)}
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            out |= {p + f"self_attn.{n}.weight": (d, d), p + f"self_attn.{n}.bias": (d,)}
        out |= {p + "mlp.fc1.weight": (f, d), p + "mlp.fc1.bias": (f,), p + "mlp.fc2.weight": (d, f),
                p + "mlp.fc2.bias": (d,)}
    m = CHECKPOINT_PREFIX + "mlp1."
    return out | {m + "0.weight": (4608,), m + "0.bias": (4608,), m + "1.weight": (2048, 4608), m + "1.bias": (2048,),
                  m + "3.weight": (2048, 2048), m + "3.bias": (2048,)}


def test_real_size_names_shapes_and_parameter_counts():
    """Spec §2.1: vision 448 tensors / 427,680,704 params; connector 6 tensors / 13,644,800 params."""
    keys = checkpoint_keys()
    assert keys == spec_shapes()
    vision = {k: s for k, s in keys.items() if k.startswith(CHECKPOINT_PREFIX + VISION_PREFIX)}
    connector = {k: s for k, s in keys.items() if k.startswith(CHECKPOINT_PREFIX + "mlp1.")}
    assert (len(vision), sum(math.prod(s) for s in vision.values())) == (448, 427_680_704)
    assert (len(connector), sum(math.prod(s) for s in connector.values())) == (6, 13_644_800)


@pytest.mark.slow
def test_real_size_forward_gr1_frame():
    """One 252² GR1 frame at the real sizes: 18 × 18 patches of 1152 → 81 tokens of 2048 (~15 s on 2 cores:
    1.76 GB of fp32 weights, 27 layers over 324 tokens)."""
    with torch.device("meta"):
        model = Eagle3VisionConnector()
    model.to_empty(device="cpu")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.copy_(1.0 + 0.02 * torch.randn(p.shape, generator=g) if "norm" in name else
                        0.02 * torch.randn(p.shape, generator=g))
            else:
                p.normal_(0.0, p.shape[-1] ** -0.5, generator=g)
        vision = model.vision_model(images([(252, 252)]))
        tokens = [model.mlp1(t) for t in model.unshuffle(vision)]  # = model(...), without a second tower pass
    assert vision.grids == [(18, 18)] and vision.last_hidden_state[0].shape == (324, 1152)
    assert len(tokens) == 1 and tokens[0].shape == (81, 2048) and bool(torch.isfinite(tokens[0]).all())
