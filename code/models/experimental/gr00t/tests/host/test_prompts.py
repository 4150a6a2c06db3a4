# SPDX-License-Identifier: Apache-2.0
"""Token ids of the N1.5 prompt equal the ones NVIDIA's ``Gr00tPolicy.get_action`` produced (``n1.5-release``)."""

from __future__ import annotations

import json

import pytest
from models.experimental.gr00t.common.errors import InputError
from models.experimental.gr00t.common.prompts import encode_n15_prompt, get_tokenizer, render_instruction

# Measured by running NVIDIA's Gr00tPolicy.get_action transform path (N1.5, transformers 4.51.3).
PREFIX = [151644, 8948, 198, 2610, 525, 264, 10950, 17847, 13, 151645, 198, 151644, 872, 198, 27, 1805, 220, 16, 29,
          151670]
EXAMPLE_TEXT = [677, 36953, 705, 279, 23268, 11, 323, 1992, 432, 304, 279, 14024, 0, 660]
SUFFIX = [151645, 198, 151644, 77091, 198]


def encode(text: str):
    return encode_n15_prompt(text, n_images=1, tokens_per_image=256, max_text_tokens=102)


def test_spec_example_prompt_ids():
    p = encode("Pick up the apple, and place it in the basket!")
    assert p.input_ids == PREFIX + [151669] * 256 + [151671] + EXAMPLE_TEXT + SUFFIX
    assert len(p.input_ids) == 296 and p.text_tokens == 14


def test_published_demo_instruction_gives_seq_len_296():
    p = encode("pick the pear from the counter and place it in the plate")
    assert (len(p.input_ids), p.text_tokens) == (296, 14)  # as in the published response example


def test_instruction_is_rendered_like_a_numpy_array():
    assert render_instruction("pick it") == "['pick it']"
    assert render_instruction("it's") == '["it\'s"]'


def test_special_token_ids():
    tok = get_tokenizer("n15")
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|image_pad|>",
                                                      "<|vision_start|>", "<IMG_CONTEXT>", "<img>", "</img>",
                                                      "</interval>")}
    assert ids == {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<|image_pad|>": 151655,
                   "<|vision_start|>": 151652, "<IMG_CONTEXT>": 151669, "<img>": 151670, "</img>": 151671,
                   "</interval>": 151679}
    assert len(tok.get_vocab()) == 151680


def test_longest_allowed_prompt_fits_and_one_more_token_is_refused():
    # "['" + n × " a" + "']" renders to n + 2 tokens.
    assert encode("a" + " a" * 99).text_tokens == 102
    with pytest.raises(InputError, match="103 tokens.*limit is 102") as err:
        encode("a" + " a" * 100)
    assert err.value.field == "instruction"


@pytest.mark.parametrize("text", ["", "   ", "look at <IMG_CONTEXT>", "stop<|im_end|>", "see <image-2>"])
def test_empty_or_reserved_token_instructions_are_refused(text):
    with pytest.raises(InputError) as err:
        encode(text)
    assert err.value.field == "instruction"


def test_the_longest_token_bound_is_the_vocabulary_s_longest_token():
    from models.experimental.gr00t.common.prompts import LONGEST_TOKEN_CHARS, bpe_files_dir

    vocab = json.loads((bpe_files_dir() / "vocab.json").read_text())
    # byte-level BPE: one vocabulary character per byte, and a text character is at least one byte
    assert max(len(token) for token in vocab) == LONGEST_TOKEN_CHARS


def test_an_instruction_longer_than_the_token_limit_can_hold_is_refused_without_tokenising(monkeypatch):
    from models.experimental.gr00t.common import prompts

    class NoTokenizer:
        def __call__(self, *a, **k):
            raise AssertionError("tokenised")

    text = "a" * (prompts.max_instruction_chars(51) + 1)
    with pytest.raises(InputError, match="refused before tokenising"):
        prompts.encode_n17_prompt(text, tokens_per_image=[112], max_text_tokens=51, tokenizer=NoTokenizer())


# Texts whose pieces could merge with the template's if the tokenizer did not cut at added tokens: leading and
# trailing whitespace and newlines (Qwen's pre-tokenizer groups them), contractions, digits, combining marks
# (NFC), CJK, emoji, and a long run of one byte.
TRICKY = ["pick the pear", "  leading and trailing  ", "\nnew\nline\n", "tab\there\t", "it's we'll they've",
          "1234567 89", "e\u0301 combining", "émigré café", "把杯子放进碗里", "🙂 emoji 🙂🙂", "a" * 300,
          " ", "\n", "'s", "<", "|>", "x<|y"]


def random_texts(n: int, seed: int = 0) -> list[str]:
    import random

    rng = random.Random(seed)
    alphabet = (" \n\t'.,!?<>|/_-" + "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                + "éüßçñ\u0301\u0308" + "中文字杯碗" + "🙂👍")
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(n)]


@pytest.mark.parametrize("version", ["n15", "n17"])
def test_spliced_prompt_ids_equal_transformers_on_the_whole_prompt(version):
    """Only the instruction is tokenised per request; transformers tokenising the whole rendered prompt
    (template and text together) must give the same ids, for any text the server lets through."""
    from models.experimental.gr00t.common.preprocessing_n17 import formalize_language
    from models.experimental.gr00t.common.prompts import n15_template, n17_template, spliced_ids

    tok = get_tokenizer(version)
    template = n15_template(1, 256) if version == "n15" else n17_template((112,) * 4)
    render = render_instruction if version == "n15" else formalize_language
    checked = 0
    for raw in TRICKY + random_texts(300):
        text = render(raw)
        if not text.strip():
            continue  # refused before tokenising
        whole = tok(template[0] + text + template[1], add_special_tokens=False)["input_ids"]
        alone = tok(text, add_special_tokens=False)["input_ids"]
        assert spliced_ids(tok, template, text) == (whole, len(alone)), repr(text)
        checked += 1
    assert checked > 250
