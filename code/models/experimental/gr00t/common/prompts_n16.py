# SPDX-License-Identifier: Apache-2.0
"""GR00T N1.6 prompt: the Eagle 3 processor's chat template with the text BEFORE the images (spec ``gr00t_n16.md``
§4.3; NVIDIA's ``Gr00tN1d6Processor`` and the vendored ``Eagle-Block2A-2B-v2`` processor).

One sample is one ``user`` message ``[text, image_1, …, image_V]`` rendered without a generation prompt; the
template adds the default system turn. Each image placeholder becomes the literal text ``<image N>`` followed by
``<img>``, n_N × ``<IMG_CONTEXT>`` and ``</img>``::

    <|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n<|im_start|>user\\n{text}
    <image 1><img><IMG_CONTEXT>…</img><image 2><img>…</img>…<|im_end|>\\n

(one line in reality: no separator between the text and ``<image 1>``, nor between images). For N ≤ 9,
``<image N>`` is 5 tokens, so S = 14 + L + Σ(n_i + 7) + 2. The instruction first goes through
``formalize_language`` (lower-case, drop every character that is neither a word character nor whitespace), which
also removes every added token (they all contain ``<``, ``|`` or ``>``), so nothing in the text can forge an image
token.

The tokenizer is N1.5's: Qwen3's BPE + Qwen3's added tokens + the Eagle tokens 151669–151679 (``<IMG_CONTEXT>``
151669, ``<img>`` 151670, ``</img>`` 151671 are the ones the prompt uses; vocabulary 151680), assembled offline by
``prompts.get_tokenizer("n16")`` (``GR00T_TOKENIZER_DIR_N16``
may name a prepared directory).

Tokenising: the tokenizer splits on added tokens before BPE, so the prompt is encoded piece by piece between them.
The only piece holding user text is ``"user\\n" + text + "<image 1>"``: it is tokenised whole, because the text's
edges can merge with its neighbours (a trailing space makes ``" <"`` one token; a leading newline merges with the
template's ``"\\n"``). ``text_tokens`` (L) is that piece's count less the template's 2 + 5, which keeps the S formula
an identity. A test compares with tokenising the whole prompt string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from .errors import InputError
from .prompts import _TOKENIZE, SYSTEM_PROMPT, check_instruction_length, get_tokenizer

VERSION = "n16"
IMG_CONTEXT_ID = 151669  # <IMG_CONTEXT>: its embedding is replaced by an image token
IMG_START_ID = 151670  # <img>
IMG_END_ID = 151671  # </img>
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
# Everything before the user piece (ends with the added token <|im_start|>): 12 tokens, then "user\n" = 2 more.
HEAD = f"{IM_START}system\n{SYSTEM_PROMPT}{IM_END}\n{IM_START}"
USER = "user\n"
TAIL = f"{IM_END}\n"
PREFIX_TOKENS = 14  # HEAD + "user\n" (spec §4.3)
SUFFIX_TOKENS = 2  # <|im_end|> "\n"


def formalize_language(text: str) -> str:
    """GR00T's ``formalize_language`` (N1.6 applies it when ``processor_config.json`` says so; the released one
    does): lower-case, then delete every character that is not a word character (Unicode letters, digits, ``_``)
    or whitespace. Whitespace is kept as it is, leading and trailing included."""
    return re.sub(r"[^\w\s]", "", text.lower())


def image_label(index: int) -> str:
    """The text NVIDIA's processor writes for image ``index`` (1-based) before its ``<img>``."""
    return f"<image {index}>"


def label_tokens(index: int) -> int:
    """Tokens of ``<image index>``: "<", "image", " ", one token per digit (Qwen3 splits digits), ">"."""
    return 4 + len(str(index))


def seq_len(text_tokens: int, tokens_per_image: list[int]) -> int:
    """S = 14 + L + Σ_i (label_i + n_i + 2) + 2; label_i = 5 for i ≤ 9, i.e. S = 14 + L + Σ(n_i + 7) + 2."""
    return (PREFIX_TOKENS + text_tokens + SUFFIX_TOKENS
            + sum(label_tokens(i + 1) + n + 2 for i, n in enumerate(tokens_per_image)))


def prompt_text(text: str, tokens_per_image: list[int]) -> str:
    """The whole prompt as one string (images expanded), for tokenising in one go; ``text`` as given."""
    images = "".join(image_label(i + 1) + "<img>" + "<IMG_CONTEXT>" * n + "</img>"
                     for i, n in enumerate(tokens_per_image))
    return f"{HEAD}{USER}{text}{images}{TAIL}"


def get_n16_tokenizer():
    """N1.6's tokenizer (transformers ``Qwen2Tokenizer``), built offline, without a registry row."""
    return get_tokenizer(VERSION)


@lru_cache(maxsize=64)
def _piece_ids(tok, piece: str) -> tuple[int, ...]:
    return tuple(tok(piece, add_special_tokens=False)["input_ids"])


@lru_cache(maxsize=256)  # a robot repeats its task sentence request after request
def _user_ids(tok, text: str) -> tuple[int, ...]:
    return tuple(tok(USER + text + image_label(1), add_special_tokens=False)["input_ids"])


@dataclass(frozen=True)
class N16Prompt:
    input_ids: list[int]  # the whole prompt, S = len(input_ids)
    text_tokens: int  # L: the formalised instruction's tokens (as counted in the S formula)
    image_spans: tuple[tuple[int, int], ...]  # per image (position of its first <IMG_CONTEXT>, token count)

    @property
    def image_positions(self) -> list[int]:
        """Every ``<IMG_CONTEXT>`` position, images in order: where the image tokens go, row-major per image."""
        return [start + j for start, n in self.image_spans for j in range(n)]

    @property
    def text_positions(self) -> list[int]:
        """Every other position (template, text, image framing): the action head's "text" tokens."""
        image = set(self.image_positions)
        return [p for p in range(len(self.input_ids)) if p not in image]


def n16_prompt_ids(instruction: str, tokens_per_image: list[int], *, formalize: bool = True,
                   max_text_tokens: int | None = None, tokenizer=None) -> N16Prompt:
    """One sample's input ids for ``instruction`` and V images of ``tokens_per_image`` tokens each (in the order the
    image tokens will be spliced: time-major, view-minor). ``formalize``: apply ``formalize_language`` first (the
    released processor config does). Over ``max_text_tokens`` (when given) is refused, never truncated."""
    if not isinstance(instruction, str):
        raise InputError("instruction", "must be a string")
    counts = [int(n) for n in tokens_per_image]
    if not counts or min(counts) < 1:
        raise InputError("images", f"need at least one image, each with at least one token (got {counts})")
    text = formalize_language(instruction) if formalize else instruction
    if not text.strip():
        raise InputError("instruction", "is empty after normalisation (lower-case, punctuation removed)")
    if max_text_tokens is not None:
        check_instruction_length(text, max_text_tokens)
    tok = tokenizer or get_n16_tokenizer()
    with _TOKENIZE:
        head, user, tail = _piece_ids(tok, HEAD), _user_ids(tok, text), _piece_ids(tok, TAIL)
        labels = [_piece_ids(tok, image_label(i + 1)) for i in range(1, len(counts))]
        n_user_template = len(_piece_ids(tok, USER)) + len(_piece_ids(tok, image_label(1)))
    ids, spans = [*head, *user], []
    for i, n in enumerate(counts):
        if i:
            ids += labels[i - 1]
        ids.append(IMG_START_ID)
        spans.append((len(ids), n))
        ids += [IMG_CONTEXT_ID] * n
        ids.append(IMG_END_ID)
    ids += tail
    n_text = len(user) - n_user_template
    if max_text_tokens is not None and n_text > max_text_tokens:
        raise InputError("instruction", f"is {n_text} tokens after normalisation; the limit is {max_text_tokens} "
                                        "(it is never truncated)")
    return N16Prompt(ids, n_text, tuple(spans))
