# SPDX-License-Identifier: Apache-2.0
"""GR00T N1.6 state encoding and action decoding, with everything read from the checkpoint's files
(``processor_config.json`` for the flags and the tag's modality config, ``statistics.json`` for the numbers,
``embodiment_id.json`` for the category row). Spec ``gr00t_n16.md`` §1.3, §1.4, §4.4, §7, §8, §10.

Which of NVIDIA's files (Isaac-GR00T e29d8fc, the spec's paths) each piece follows:

* ``N16Processing.from_checkpoint`` — ``gr00t/model/gr00t_n1d6/processing_gr00t_n1d6.py``
  (``Gr00tN1d6Processor.from_pretrained``: processor kwargs, modality configs, embodiment ids with the code entries
  for missing tags), ``gr00t/data/types.py`` (action configs parsed back from enum names) and
  ``gr00t/data/state_action/state_action_processor.py`` (``StateActionProcessor``'s normalisation parameters:
  q01/q99 or min/max by ``use_percentiles``, relative keys' per-step ``relative_action`` min/max replacing the
  parameters wholesale; file layout of ``gr00t/data/stats.py``).
* ``encode_state`` — ``StateActionProcessor.apply_state`` (sin/cos, mean/std or min/max with ``clip_outliers``,
  concatenation in modality order) and the padding to ``max_state_dim`` of ``Gr00tN1d6Processor.__call__``.
* ``decode_actions`` — ``Gr00tN1d6Processor.decode_action`` (slice the chunk per key) and
  ``StateActionProcessor.unapply_action`` (un-normalise; relative → absolute as in
  ``gr00t/data/state_action/action_chunking.py``: NON_EEF adds the raw current state).
* ``encode_actions`` — the inverse of ``decode_actions`` (``StateActionProcessor.apply_action``'s direction: absolute
  → relative against the state, then normalise), used to re-express a previous chunk for RTC. NVIDIA's N1.6 has no
  RTC; this is ours, the counterpart of ``normalization_n17.encode_actions``.

Spec §12 open items these depend on: (1) the base checkpoint's verbatim ``processor_config.json`` /
``statistics.json`` were not read — in particular ``apply_sincos_state_encoding`` (decides GR1's 58-dim sin/cos
state versus 29 min/max dims) and ``use_percentiles`` / ``clip_outliers`` are read from the file here, never assumed;
(2) the non-GR1 tags' modality configs in the base checkpoint — taken from the file, whatever it says; (8) the
fine-tunes' statistics and rows — likewise from their files. Not implemented: EEF actions (``type EEF``,
``XYZ_ROT6D``, spec §7 step 3), which no released N1.6 tag uses; a checkpoint asking for them is refused.

Choices where the spec leaves room: a key's width D is read from ``statistics[tag]["action"|"state"][key]`` (the
per-step relative statistics must then be exactly ``(horizon, D)``); un-normalisation clips min/max keys to
[−1, 1] whatever ``clip_outliers`` says (the spec's §7 formula has the clip unconditionally; ``clip_outliers`` governs
the state); mean/std keys are never clipped, and a zero std passes values through in both directions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .checkpoint import read_json
from .configs_n16 import PROCESSOR_FILE, Gr00tN16ProcessorConfig
from .embodiments_n16 import CODE_EMBODIMENT_IDS
from .errors import ConfigError

STATISTICS_FILE = "statistics.json"
EMBODIMENT_ID_FILE = "embodiment_id.json"


@dataclass(frozen=True)
class KeyParams:
    """One key's normalisation parameters: ``lo``/``hi`` (the min/max pair the processor uses) and ``mean``/``std``;
    shape (D,), or (horizon, D) per chunk step for a relative action key."""

    lo: np.ndarray
    hi: np.ndarray
    mean: np.ndarray
    std: np.ndarray


@dataclass(frozen=True)
class StateKey:
    name: str
    dim: int
    mode: str  # "sincos" | "mean_std" | "min_max"

    @property
    def width(self) -> int:
        """Width in the model's state vector (sin/cos doubles it)."""
        return 2 * self.dim if self.mode == "sincos" else self.dim


@dataclass(frozen=True)
class ActionKey:
    name: str
    start: int  # column of the 128-wide action vector
    dim: int
    relative: bool  # rep RELATIVE with use_relative_action: add the raw state of ``state_key``
    state_key: str
    mean_std: bool


@dataclass(frozen=True)
class N16Processing:
    """One tag's pre/post-processing as the checkpoint's files describe it (the ``embodiment`` argument)."""

    tag: str
    embodiment_id: int
    state_keys: tuple[StateKey, ...]  # modality order
    action_keys: tuple[ActionKey, ...]  # modality order = column order of the action vector
    horizon: int  # len(action delta_indices)
    max_state_dim: int
    max_action_dim: int
    max_action_horizon: int
    clip_outliers: bool

    @property
    def state_width(self) -> int:
        return sum(k.width for k in self.state_keys)

    @property
    def action_width(self) -> int:
        return sum(k.dim for k in self.action_keys)

    @classmethod
    def from_checkpoint(cls, directory: str | Path, tag: str) -> tuple[N16Processing, N16Stats]:
        """``tag``'s processing and statistics from ``directory``'s three files; a ``ConfigError`` naming the file
        for anything missing, inconsistent or not implemented."""
        directory = Path(directory)
        proc_path, stats_path = directory / PROCESSOR_FILE, directory / STATISTICS_FILE
        flags = Gr00tN16ProcessorConfig.from_checkpoint(directory)
        raw_proc = read_json(proc_path, "the N1.6 processor config")
        modality = raw_proc["processor_kwargs"]["modality_configs"].get(tag)
        if not isinstance(modality, dict):
            raise ConfigError(f"{proc_path}: no modality config for tag {tag!r}")
        ids = {**CODE_EMBODIMENT_IDS, **read_json(directory / EMBODIMENT_ID_FILE, "the N1.6 embodiment ids")}
        if tag not in ids:
            raise ConfigError(f"{directory / EMBODIMENT_ID_FILE}: no category row for tag {tag!r}")
        all_stats = read_json(stats_path, "the N1.6 normalisation statistics")
        if not isinstance(all_stats, dict) or not isinstance(all_stats.get(tag), dict):
            raise ConfigError(f"{stats_path}: no statistics for tag {tag!r}")
        try:
            return _parse(tag, ids[tag], modality, all_stats[tag], flags, stats_path)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{proc_path} / {stats_path}: tag {tag!r}: malformed entry ({exc!r})") from None


@dataclass(frozen=True)
class N16Stats:
    """The normalisation parameters of one tag's state and action keys (the ``stats`` argument)."""

    state: dict[str, KeyParams]
    action: dict[str, KeyParams]


def _modality(modality: dict[str, Any], name: str) -> dict[str, Any]:
    section = modality[name]
    if not isinstance(section, dict):
        raise TypeError(f"{name} is not an object")
    return section


def _params(entry: dict[str, Any], lo_name: str, hi_name: str) -> KeyParams:
    return KeyParams(*(np.asarray(entry[k], np.float64) for k in (lo_name, hi_name, "mean", "std")))


def _parse(tag: str, embodiment_id: int, modality: dict[str, Any], stats: dict[str, Any],
           flags: Gr00tN16ProcessorConfig, stats_path: Path) -> tuple[N16Processing, N16Stats]:
    lo_name, hi_name = ("q01", "q99") if flags.use_percentiles else ("min", "max")
    state_cfg, action_cfg = _modality(modality, "state"), _modality(modality, "action")

    if len(state_cfg["delta_indices"]) != 1:
        raise ConfigError(f"{tag}: {len(state_cfg['delta_indices'])} state frames; only one is implemented")
    sin_cos = set(state_cfg.get("sin_cos_embedding_keys") or ()) if flags.apply_sincos_state_encoding else set()
    state_mean_std = set(state_cfg.get("mean_std_embedding_keys") or ())
    state_keys, state_params = [], {}
    for key in state_cfg["modality_keys"]:
        params = _params(stats["state"][key], lo_name, hi_name)
        if params.lo.ndim != 1 or any(a.shape != params.lo.shape for a in (params.hi, params.mean, params.std)):
            raise ConfigError(f"{stats_path}: {tag} state {key!r} statistics must be 1-D of one width")
        mode = "sincos" if key in sin_cos else "mean_std" if key in state_mean_std else "min_max"
        state_keys.append(StateKey(key, params.lo.size, mode))
        state_params[key] = params
    state_dims = {k.name: k.dim for k in state_keys}

    horizon = len(action_cfg["delta_indices"])
    keys = list(action_cfg["modality_keys"])
    configs = action_cfg.get("action_configs")
    if configs is None:  # NVIDIA's templates without action configs: every key absolute
        configs = [{"rep": "ABSOLUTE", "type": "NON_EEF", "format": "DEFAULT", "state_key": None}] * len(keys)
    if len(configs) != len(keys):
        raise ConfigError(f"{tag}: {len(configs)} action configs for {len(keys)} action keys")
    action_mean_std = set(action_cfg.get("mean_std_embedding_keys") or ())
    relative_stats = stats.get("relative_action") or {}
    action_keys, action_params, start = [], {}, 0
    for key, cfg in zip(keys, configs):
        rep, kind, fmt = cfg["rep"], cfg.get("type", "NON_EEF"), cfg.get("format", "DEFAULT")
        if rep not in ("RELATIVE", "ABSOLUTE") or kind != "NON_EEF" or fmt != "DEFAULT":
            raise ConfigError(f"{tag}: action {key!r} is {rep}/{kind}/{fmt}; only NON_EEF/DEFAULT is implemented")
        dim = int(np.asarray(stats["action"][key][lo_name]).size)
        relative = rep == "RELATIVE" and flags.use_relative_action
        state_key = cfg.get("state_key") or key
        if relative:
            if state_dims.get(state_key) != dim:
                raise ConfigError(f"{tag}: relative action {key!r} ({dim} dims) needs a state key {state_key!r} "
                                  f"of the same width (has {state_dims.get(state_key)})")
            if key not in relative_stats:
                raise ConfigError(f"{stats_path}: {tag} has no relative_action statistics for {key!r}")
            params = _params(relative_stats[key], "min", "max")  # the true min/max, even with use_percentiles
            want = (horizon, dim)
        else:
            params = _params(stats["action"][key], lo_name, hi_name)
            want = (dim,)
        if any(a.shape != want for a in (params.lo, params.hi, params.mean, params.std)):
            raise ConfigError(f"{stats_path}: {tag} action {key!r} statistics have shape {list(params.lo.shape)}, "
                              f"expected {list(want)}")
        action_keys.append(ActionKey(key, start, dim, relative, state_key, key in action_mean_std))
        action_params[key] = params
        start += dim

    processing = N16Processing(tag, int(embodiment_id), tuple(state_keys), tuple(action_keys), horizon,
                               flags.max_state_dim, flags.max_action_dim, flags.max_action_horizon,
                               flags.clip_outliers)
    for what, used, limit in (("state width", processing.state_width, flags.max_state_dim),
                              ("action width", processing.action_width, flags.max_action_dim),
                              ("action horizon", horizon, flags.max_action_horizon)):
        if not 0 < used <= limit:
            raise ConfigError(f"{tag}: {what} {used} is outside 1..{limit}")
    return processing, N16Stats(state_params, action_params)


# ---- the formulas ---------------------------------------------------------------------------------------------------
def _min_max(x: np.ndarray, p: KeyParams, clip: bool) -> np.ndarray:
    """``2 (x − lo) / (hi − lo) − 1``; 0 where the range is flat (``np.isclose(hi − lo, 0)``)."""
    span = p.hi - p.lo
    flat = np.isclose(span, 0.0)
    y = np.where(flat, 0.0, 2.0 * (x - p.lo) / np.where(flat, 1.0, span) - 1.0)
    return np.clip(y, -1.0, 1.0) if clip else y


def _un_min_max(y: np.ndarray, p: KeyParams) -> np.ndarray:
    return (np.clip(y, -1.0, 1.0) + 1.0) / 2.0 * (p.hi - p.lo) + p.lo


def _mean_std(x: np.ndarray, p: KeyParams) -> np.ndarray:
    zero = p.std == 0
    return np.where(zero, x, (x - p.mean) / np.where(zero, 1.0, p.std))


def _un_mean_std(y: np.ndarray, p: KeyParams) -> np.ndarray:
    return np.where(p.std == 0, y, y * p.std + p.mean)


def _current(raw_state: dict[str, np.ndarray], key: str, dim: int) -> np.ndarray:
    """The raw state of ``key`` as float64 (D,): the value itself, or the last frame of (T, D)."""
    if key not in raw_state:
        raise KeyError(f"state {key!r} missing")
    x = np.asarray(raw_state[key], np.float32)  # the processor's dtype: observations arrive as float32
    if x.ndim == 2:
        x = x[-1]
    if x.shape != (dim,):
        raise ValueError(f"state {key!r} has shape {list(np.shape(raw_state[key]))}, expected [{dim}] or [T, {dim}]")
    return x.astype(np.float64)


def encode_state(raw_state: dict[str, np.ndarray], stats: N16Stats, embodiment: N16Processing) -> np.ndarray:
    """Raw state per key → the model's state vector, float32 (max_state_dim,): per key in modality order,
    ``[sin x, cos x]`` for sin/cos keys (raw value, no normalisation), ``(x − mean)/std`` for mean/std keys, else
    min/max to [−1, 1] (clipped when ``clip_outliers``); concatenated, zero-padded."""
    parts = []
    for key in embodiment.state_keys:
        x = _current(raw_state, key.name, key.dim)
        if key.mode == "sincos":
            parts += [np.sin(x), np.cos(x)]
        elif key.mode == "mean_std":
            parts.append(_mean_std(x, stats.state[key.name]))
        else:
            parts.append(_min_max(x, stats.state[key.name], embodiment.clip_outliers))
    out = np.zeros(embodiment.max_state_dim, np.float32)
    vec = np.concatenate(parts)
    out[:vec.size] = vec
    return out


def decode_actions(chunk: np.ndarray, raw_state: dict[str, np.ndarray], stats: N16Stats,
                   embodiment: N16Processing) -> dict[str, np.ndarray]:
    """Model chunk (rows ≥ horizon, columns ≥ the keys' width; the released (50, 128)) → absolute actions per key,
    float32 (horizon, D): rows 0 … horizon−1 and the key's columns, un-normalised (min/max keys clipped to [−1, 1]
    first; relative keys with their per-step statistics), relative keys plus the raw current state. Rows and
    columns past those are padding and ignored."""
    chunk = np.asarray(chunk, np.float32)
    if chunk.ndim != 2 or chunk.shape[0] < embodiment.horizon or chunk.shape[1] < embodiment.action_width:
        raise ValueError(f"chunk shape {list(chunk.shape)} cannot hold {embodiment.horizon} steps × "
                         f"{embodiment.action_width} dims")
    out = {}
    for key in embodiment.action_keys:
        y = chunk[:embodiment.horizon, key.start:key.start + key.dim].astype(np.float64)
        p = stats.action[key.name]
        a = _un_mean_std(y, p) if key.mean_std else _un_min_max(y, p)
        if key.relative:
            a = a + _current(raw_state, key.state_key, key.dim)
        out[key.name] = a.astype(np.float32)
    return out


def encode_actions(actions: dict[str, np.ndarray], raw_state: dict[str, np.ndarray], stats: N16Stats,
                   embodiment: N16Processing) -> np.ndarray:
    """The inverse of ``decode_actions`` for the first ``d`` steps of a chunk: absolute actions per key (d, D) meant
    to run at steps 0 … d−1 of the chunk answering ``raw_state`` → model space float32 (d, action_width) (the
    keys' columns only; the caller keeps its own padding columns, as ``inputs_n17.frozen_prefix_n17`` does).
    Relative keys minus the state, normalised with steps 0 … d−1 of their statistics; min/max keys clipped to
    [−1, 1] (what ``decode_actions`` would read back), mean/std keys not; a flat range maps to 0."""
    d = len(next(iter(actions.values())))
    if not 0 < d <= embodiment.horizon:
        raise ValueError(f"need 0 < rows ({d}) <= horizon ({embodiment.horizon})")
    parts = []
    for key in embodiment.action_keys:
        a = np.asarray(actions[key.name], np.float64).reshape(d, key.dim)
        p = stats.action[key.name]
        if key.relative:
            a = a - _current(raw_state, key.state_key, key.dim)
            p = KeyParams(p.lo[:d], p.hi[:d], p.mean[:d], p.std[:d])  # the new chunk's steps 0 … d−1
        parts.append(_mean_std(a, p) if key.mean_std else _min_max(a, p, clip=True))
    return np.concatenate(parts, axis=-1).astype(np.float32)
