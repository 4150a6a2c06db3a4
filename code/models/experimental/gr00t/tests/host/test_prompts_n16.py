# SPDX-License-Identifier: Apache-2.0
"""GR00T N1.6 prompt (``common/prompts_n16.py``): the spec's token ids and layout (``gr00t_n16.md`` §4.3), text before
images, ``formalize_language``, and piecewise tokenising equal to tokenising the whole prompt string."""

from __future__ import annotations

import pytest
from models.experimental.gr00t.common.errors import InputError
from models.experimental.gr00t.common.prompts import added_tokens, get_tokenizer
from models.experimental.gr00t.common.prompts_n16 import (IMG_CONTEXT_ID, IMG_END_ID, IMG_START_ID, PREFIX_TOKENS,
                                                          formalize_language, get_n16_tokenizer, n16_prompt_ids,
                                                          prompt_text, seq_len)

# Spec §4.3: system turn + "<|im_start|>user\n" (14 tokens).
PREFIX = [151644, 8948, 198, 2610, 525, 264, 10950, 17847, 13, 151645, 198, 151644, 872, 198]
EXAMPLE = "pick the pear from the counter and place it in the plate"
EXAMPLE_TEXT = [29245, 279, 37690, 504, 279, 5546, 323, 1992, 432, 304, 279, 11968]  # L = 12
SUFFIX = [151645, 198]


def label(n: int) -> list[int]:
    """``<image N>`` for N ≤ 9: "<", "image", " ", the digit, ">"."""
    return [27, 1805, 220, 16 + n - 1, 29]


def whole(text: str, counts: list[int]) -> list[int]:
    return get_n16_tokenizer()(prompt_text(formalize_language(text), counts), add_special_tokens=False)["input_ids"]


def test_spec_example_gr1_one_252px_image():
    p = n16_prompt_ids(EXAMPLE, [81])
    image = [IMG_START_ID] + [IMG_CONTEXT_ID] * 81 + [IMG_END_ID]
    assert p.input_ids == PREFIX + EXAMPLE_TEXT + label(1) + image + SUFFIX
    assert (len(p.input_ids), p.text_tokens) == (116, 12)  # S = 104 + L
    assert p.image_spans == ((14 + 12 + 6, 81),)
    assert p.image_positions == list(range(32, 113))
    assert len(p.text_positions) == 116 - 81


def test_prefix_and_per_image_framing_with_several_images():
    counts = [4, 1, 9]
    p = n16_prompt_ids("Pick the pear.", counts)  # formalised to "pick the pear"
    ids = p.input_ids
    assert ids[:PREFIX_TOKENS] == PREFIX
    text = ids[14:14 + p.text_tokens]
    assert text == [29245, 279, 37690]
    expected = PREFIX + text
    for i, n in enumerate(counts):
        expected += label(i + 1) + [IMG_START_ID] + [IMG_CONTEXT_ID] * n + [IMG_END_ID]
    assert ids == expected + SUFFIX
    assert len(ids) == 14 + 3 + sum(n + 7 for n in counts) + 2 == seq_len(3, counts)
    assert [ids[s - 1] for s, _ in p.image_spans] == [IMG_START_ID] * 3
    assert [ids[s + n] for s, n in p.image_spans] == [IMG_END_ID] * 3
    assert [i for i, t in enumerate(ids) if t == IMG_CONTEXT_ID] == p.image_positions


def test_ten_or_more_images_spell_the_label_digit_by_digit():
    counts = [1] * 11
    p = n16_prompt_ids("go", counts)
    assert p.input_ids == whole("go", counts)
    assert len(p.input_ids) == seq_len(p.text_tokens, counts) == 14 + 1 + 9 * 8 + 2 * 9 + 2
    ten = p.image_spans[9][0] - 1 - 6  # "<image 10>" is 6 tokens: "<", "image", " ", "1", "0", ">"
    assert p.input_ids[ten:ten + 6] == [27, 1805, 220, 16, 15, 29]


@pytest.mark.parametrize("raw, expected", [
    ("Pick up the apple, and place it in the basket!", "pick up the apple and place it in the basket"),
    ("It's the RED cup.", "its the red cup"),
    ("a_b-c 3.5cm", "a_bc 35cm"),  # underscore and digits are word characters; '-' and '.' are not
    ("Café ÜBER naïve", "café über naïve"),  # Unicode letters stay (lower-cased)
    ("  two\tspaces \n", "  two\tspaces \n"),  # whitespace kept as is, edges included
    ("look at <IMG_CONTEXT> <image-2>", "look at img_context image2"),  # no added token survives
    ("?!...", ""),
])
def test_formalize_language(raw, expected):
    from models.experimental.gr00t.common.preprocessing_n17 import formalize_language as n17_rule

    assert formalize_language(raw) == expected == n17_rule(raw)  # the same GR00T rule as N1.7's


def test_a_trailing_space_changes_the_image_label_split():
    plain, spaced = n16_prompt_ids("pick the pear", [2]), n16_prompt_ids("pick the pear ", [2])
    assert plain.input_ids[14:19] == [29245, 279, 37690, 27, 1805]  # "<" alone
    assert spaced.input_ids[14:19] == [29245, 279, 37690, 366, 1805]  # " <" is one token: the space is absorbed
    assert len(plain.input_ids) == len(spaced.input_ids) and plain.text_tokens == spaced.text_tokens == 3
    assert spaced.input_ids == whole("pick the pear ", [2])


@pytest.mark.parametrize("text", [EXAMPLE, "pick the pear ", "place it  ", "\nleading newline", " leading space",
                                  "tab\t", "multi\n\nline", "x" * 300, "数字 123 ünï"])
def test_piecewise_tokenising_equals_the_whole_prompt(text):
    counts = [3, 5]
    p = n16_prompt_ids(text, counts)
    assert p.input_ids == whole(text, counts)
    assert len(p.input_ids) == seq_len(p.text_tokens, counts)


def test_without_formalisation_the_text_is_used_as_given():
    p = n16_prompt_ids("Pick", [1], formalize=False)
    assert p.input_ids[14] != n16_prompt_ids("pick", [1]).input_ids[14]


def test_tokenizer_is_n15_s_added_tokens_without_a_registry_row():
    assert added_tokens("n16") == added_tokens("n15")
    tok = get_tokenizer("n16")
    assert tok is get_n16_tokenizer()
    assert [tok.convert_tokens_to_ids(t) for t in ("<IMG_CONTEXT>", "<img>", "</img>", "<|im_start|>", "<|im_end|>",
                                                   "<|endoftext|>")] == [151669, 151670, 151671, 151644, 151645,
                                                                         151643]
    assert len(tok.get_vocab()) == 151680


@pytest.mark.parametrize("text, counts, field", [("", [81], "instruction"), ("?!", [81], "instruction"),
                                                  ("go", [], "images"), ("go", [81, 0], "images")])
def test_refusals(text, counts, field):
    with pytest.raises(InputError) as err:
        n16_prompt_ids(text, counts)
    assert err.value.field == field


def test_text_token_limit_is_refused_never_truncated():
    assert n16_prompt_ids("a" + " a" * 9, [1], max_text_tokens=10).text_tokens == 10
    with pytest.raises(InputError, match="11 tokens.*limit is 10"):
        n16_prompt_ids("a" + " a" * 10, [1], max_text_tokens=10)
