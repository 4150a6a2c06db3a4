# SPDX-License-Identifier: Apache-2.0
"""Our Qwen3-VL backbone equals transformers' own Qwen3-VL modules on the same random weights: the
vision tower and its DeepStack features, the M-RoPE position ids of a DROID-shaped prompt, and the
backbone feature (pre-final-norm output of layer select_layer, DeepStack injected), and it loads
strictly from an HF state dict when built on the meta device."""

from __future__ import annotations

import pytest
import torch
from models.experimental.gr00t.common.configs import Qwen3VLConfig, Qwen3VLTextConfig, Qwen3VLVisionConfig
from models.experimental.gr00t.common.quality import FP32_REFERENCE_ATOL, max_abs_diff
from models.experimental.gr00t.reference.torch_qwen3vl import Qwen3VLBackbone, Qwen3VLVisionModel, rope_index
from transformers import Qwen3VLConfig as HFQwen3VLConfig
from transformers import Qwen3VLForConditionalGeneration as HFQwen3VLForConditionalGeneration
from transformers import Qwen3VLModel as HFQwen3VLModel
from transformers import Qwen3VLVisionModel as HFQwen3VLVisionModel

from ..conftest import randomize_

IM_START, USER, NEWLINE, IM_END = 151644, 872, 198, 151645
VISION_START, IMAGE_PAD, VISION_END = 151652, 151655, 151653
DROID_GRID = (1, 16, 28)  # a 256×448 frame → 112 tokens


def tiny_config() -> Qwen3VLConfig:
    """Real token ids, vocab and 48×48 position grid; small widths. select_layer 4 of 5 layers, so
    (as in the 16-of-28 original) the kept layers extend past the 3 DeepStack injections."""
    vision = Qwen3VLVisionConfig(depth=4, hidden_size=64, intermediate_size=128, num_heads=4, out_hidden_size=64,
                                 deepstack_visual_indexes=(1, 2, 3))
    text = Qwen3VLTextConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                             head_dim=16, num_hidden_layers=5, mrope_section=(4, 2, 2))
    return Qwen3VLConfig(vision=vision, text=text, select_layer=4)


def hf_config(c: Qwen3VLConfig, attn: str = "eager", num_layers: int | None = None) -> HFQwen3VLConfig:
    text = c.text.to_hf_dict()
    if num_layers is not None:
        text["num_hidden_layers"] = num_layers
    hf = HFQwen3VLConfig(vision_config=c.vision.to_hf_dict(), text_config=text, image_token_id=c.image_token_id)
    for cfg in (hf, hf.vision_config, hf.text_config):
        cfg._attn_implementation = attn
    return hf


def hf_model(attn: str = "eager", num_layers: int | None = None) -> HFQwen3VLModel:
    torch.manual_seed(0)
    return randomize_(HFQwen3VLModel(hf_config(tiny_config(), attn, num_layers)), seed=7).eval()


def ours_from_hf(hf_state: dict[str, torch.Tensor], c: Qwen3VLConfig) -> Qwen3VLBackbone:
    """HF ``Qwen3VLModel`` keys + the checkpoint's ``model.model.`` prefix; layers past select_layer dropped."""
    kept = {f"model.model.{k}": v for k, v in hf_state.items()
            if not (k.startswith("language_model.layers.") and int(k.split(".")[2]) >= c.select_layer)}
    ours = Qwen3VLBackbone(c)
    ours.load_state_dict(kept, strict=True)
    return ours.eval()


def pixels(grids: list[tuple[int, int, int]], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    grid_thw = torch.tensor(grids, dtype=torch.int64)
    n = int(grid_thw.prod(-1).sum())
    return torch.randn(n, 1536, generator=torch.Generator().manual_seed(seed)), grid_thw


def droid_prompt(grids: list[tuple[int, int, int]], text_ids: list[int]) -> torch.Tensor:
    """``<|im_start|>user\\n`` + per image ``<|vision_start|>`` N×``<|image_pad|>`` ``<|vision_end|>``
    + instruction + ``<|im_end|>\\n`` (Qwen3-VL chat template, one user turn)."""
    ids = [IM_START, USER, NEWLINE]
    for t, h, w in grids:
        ids += [VISION_START] + [IMAGE_PAD] * (t * h * w // 4) + [VISION_END]
    return torch.tensor([ids + text_ids + [IM_END, NEWLINE]], dtype=torch.int64)


def prompt_and_pixels(grids: list[tuple[int, int, int]], text_ids: list[int], seed: int):
    """(input ids, pixel patches, grid_thw) of a DROID-style prompt over images of these grids."""
    pv, grid_thw = pixels(grids, seed=seed)
    return droid_prompt(grids, text_ids), pv, grid_thw


def hf_rope_index(hf: HFQwen3VLModel, input_ids: torch.Tensor, grid_thw: torch.Tensor) -> torch.Tensor:
    mm_token_type_ids = (input_ids == IMAGE_PAD).int()
    return hf.get_rope_index(input_ids, mm_token_type_ids=mm_token_type_ids, image_grid_thw=grid_thw)[0]


INSTRUCTION = [2182, 279, 6303, 2504, 304, 279, 6176, 19212]  # 8 ordinary text ids: the length of the demo instruction


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("grids", [[DROID_GRID, (1, 8, 8)], [(1, 8, 8), DROID_GRID, (1, 12, 6), DROID_GRID]],
                         ids=["vision_2img", "vision_4img"])
def test_vision_tower_and_deepstack_match_transformers(attn, grids):
    c = tiny_config()
    torch.manual_seed(0)
    hf = randomize_(HFQwen3VLVisionModel(hf_config(c, attn).vision_config), seed=3).eval()
    ours = Qwen3VLVisionModel(c.vision)
    ours.load_state_dict(hf.state_dict(), strict=True)
    pv, grid_thw = pixels(grids, seed=len(grids))
    with torch.no_grad():
        out = hf(pv, grid_thw=grid_thw)
        merged, deepstack = ours(pv, grid_thw)
    tokens = sum(t * h * w for t, h, w in grids) // 4
    assert merged.shape == (tokens, 64) and len(deepstack) == 3
    assert max_abs_diff(merged, out.pooler_output) < FP32_REFERENCE_ATOL
    for got, expected in zip(deepstack, out.deepstack_features, strict=True):
        assert max_abs_diff(got, expected) < FP32_REFERENCE_ATOL


def test_rope_index_matches_transformers_for_a_droid_prompt():
    c = tiny_config()
    hf = hf_model()
    grids = [DROID_GRID] * 4
    ids = droid_prompt(grids, INSTRUCTION)
    grid_thw = torch.tensor(grids)
    got = rope_index(ids, grid_thw, c)
    assert ids.shape == (1, 461 + len(INSTRUCTION))  # 3 + 4 × (1 + 112 + 1) + text + 2
    assert torch.equal(got, hf_rope_index(hf, ids, grid_thw))
    # transformers' get_rope_index: image k starts at 4 + 16k (max(8, 14) = 14 plus two separators);
    # the tokens after the last image (its <|vision_end|> first) start at 66.
    starts = [3 + 1 + k * 114 for k in range(4)]
    assert [int(got[0, 0, s]) for s in starts] == [4, 20, 36, 52]
    assert got[:, 0, 3 + 4 * 114 - 1:].tolist() == [list(range(66, 66 + 3 + len(INSTRUCTION)))] * 3


def test_rope_index_matches_transformers_for_mixed_grids():
    c = tiny_config()
    hf = hf_model()
    grids = [(1, 8, 8), (1, 12, 6), DROID_GRID]
    ids = droid_prompt(grids, INSTRUCTION[:3])
    grid_thw = torch.tensor(grids)
    assert torch.equal(rope_index(ids, grid_thw, c), hf_rope_index(hf, ids, grid_thw))


def test_rope_index_rejects_a_prompt_whose_image_tokens_do_not_match_the_grids():
    c = tiny_config()
    ids = droid_prompt([(1, 8, 8)], INSTRUCTION)
    with pytest.raises(ValueError):
        rope_index(ids, torch.tensor([[1, 8, 12]]), c)
    with pytest.raises(ValueError):
        rope_index(ids, torch.tensor([[1, 8, 8], [1, 8, 8]]), c)


def hf_pre_norm_features(hf: HFQwen3VLModel, ids: torch.Tensor, pv: torch.Tensor, grid_thw: torch.Tensor):
    """HF's hidden state entering ``language_model.norm`` (its ``hidden_states[-1]`` is tied to the
    normed ``last_hidden_state`` in transformers 5, so the input of ``norm`` is captured instead)."""
    captured = {}
    handle = hf.language_model.norm.register_forward_pre_hook(lambda _, args: captured.update(x=args[0]))
    try:
        out = hf(input_ids=ids, pixel_values=pv, image_grid_thw=grid_thw,
                 mm_token_type_ids=(ids == IMAGE_PAD).int())
    finally:
        handle.remove()
    return captured["x"], out.last_hidden_state


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_backbone_features_match_transformers_pre_norm_hidden_state(attn):
    c = tiny_config()
    hf = hf_model(attn, num_layers=c.select_layer)  # HF cut at select_layer, as GR00T pops the rest
    ours = ours_from_hf(hf.state_dict(), c)
    ids, pv, grid_thw = prompt_and_pixels([DROID_GRID, (1, 8, 8)], INSTRUCTION, seed=11)
    with torch.no_grad():
        expected, normed = hf_pre_norm_features(hf, ids, pv, grid_thw)
        got = ours(ids, pv, grid_thw)
        embeds = hf.get_image_features(pv, grid_thw)
    assert got["backbone_features"].shape == (1, ids.shape[1], 64)
    assert torch.equal(got["image_mask"], ids == IMAGE_PAD)
    assert max_abs_diff(got["vision_embeds"], torch.cat(embeds.pooler_output)) < FP32_REFERENCE_ATOL
    assert max_abs_diff(got["backbone_features"], expected) < FP32_REFERENCE_ATOL
    assert max_abs_diff(got["backbone_features"], normed) > 1e-2  # applying the final norm would be caught


def hf_layer_output(hf: HFQwen3VLModel, layer: int, ids: torch.Tensor, pv: torch.Tensor,
                    grid_thw: torch.Tensor) -> torch.Tensor:
    """Output of HF decoder layer ``layer`` (before any DeepStack addition after it)."""
    captured = {}
    handle = hf.language_model.layers[layer].register_forward_hook(
        lambda _m, _a, out: captured.update(x=out[0] if isinstance(out, tuple) else out))
    try:
        hf(input_ids=ids, pixel_values=pv, image_grid_thw=grid_thw, mm_token_type_ids=(ids == IMAGE_PAD).int())
    finally:
        handle.remove()
    return captured["x"]


def test_backbone_features_are_layer_select_output_of_the_deeper_model():
    """With all 5 layers present in HF, our 4-layer model's feature is HF layer 3's output (the
    layers after select_layer never influence it), and the DeepStack injection matters."""
    c = tiny_config()
    hf = hf_model(num_layers=c.text.num_hidden_layers)
    ours = ours_from_hf(hf.state_dict(), c)
    ids, pv, grid_thw = prompt_and_pixels([(1, 8, 8), DROID_GRID], INSTRUCTION[:5], seed=12)
    with torch.no_grad():
        expected = hf_layer_output(hf, c.select_layer - 1, ids, pv, grid_thw)
        got = ours(ids, pv, grid_thw)
        lm = ours.model.model.language_model
        embeds = lm.embed_tokens(ids).masked_scatter(got["image_mask"][..., None], got["vision_embeds"])
        no_deepstack = lm(embeds, got["position_ids"], got["image_mask"], [])
    assert max_abs_diff(got["backbone_features"], expected) < FP32_REFERENCE_ATOL
    assert max_abs_diff(no_deepstack, expected) > 1e-2


def test_meta_built_backbone_loads_strictly_from_a_full_hf_state_dict():
    """The checkpoint is a whole ``Qwen3VLForConditionalGeneration`` under ``backbone.model.``:
    stripping ``backbone.`` and dropping lm_head and the layers past select_layer loads strictly
    into a meta-built backbone (no buffers to materialise), which then computes HF's feature."""
    c = tiny_config()
    torch.manual_seed(0)
    full = randomize_(HFQwen3VLForConditionalGeneration(hf_config(c)), seed=9).eval()
    checkpoint = {f"backbone.model.{k}": v for k, v in full.state_dict().items()}
    layers = "backbone.model.model.language_model.layers."
    state = {k.removeprefix("backbone."): v for k, v in checkpoint.items()
             if not k.startswith("backbone.model.lm_head.")
             and not (k.startswith(layers) and int(k.removeprefix(layers).split(".")[0]) >= c.select_layer)}
    with torch.device("meta"):
        ours = Qwen3VLBackbone(c)
    ours.load_state_dict(state, strict=True, assign=True)
    ours.eval()
    assert not any(p.is_meta for p in ours.parameters())
    assert not list(ours.buffers())
    ids, pv, grid_thw = prompt_and_pixels([(1, 8, 8), (1, 8, 8)], INSTRUCTION[:2], seed=13)
    with torch.no_grad():
        expected = hf_layer_output(full.model, c.select_layer - 1, ids, pv, grid_thw)
        got = ours(ids, pv, grid_thw)
    assert max_abs_diff(got["backbone_features"], expected) < FP32_REFERENCE_ATOL


def test_bf16_backbone_equals_transformers_with_fp32_rope_tables():
    """In bf16 the only difference from transformers is RoPE precision: ``.to(bfloat16)`` also rounds
    HF's non-persistent ``inv_freq`` buffers, ours are always computed in fp32 (NVIDIA's current
    loader re-derives them in fp32 too). With HF's buffers restored to fp32 the two are identical."""
    c = tiny_config()
    hf = hf_model("sdpa", num_layers=c.select_layer)
    ours = ours_from_hf(hf.state_dict(), c).to(torch.bfloat16)
    fp32_buffers = {name: b.clone() for name, b in hf.named_buffers()}
    hf = hf.to(torch.bfloat16)
    for name, b in fp32_buffers.items():
        owner, attr = name.rsplit(".", 1)
        setattr(hf.get_submodule(owner), attr, b)
    ids, pv, grid_thw = prompt_and_pixels([DROID_GRID, (1, 8, 8)], INSTRUCTION, seed=14)
    with torch.no_grad():
        expected, _ = hf_pre_norm_features(hf, ids, pv, grid_thw)
        got = ours(ids, pv, grid_thw)
    assert got["backbone_features"].dtype == torch.bfloat16
    assert torch.equal(got["backbone_features"], expected)
