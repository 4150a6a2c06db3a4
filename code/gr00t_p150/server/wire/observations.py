# SPDX-License-Identifier: Apache-2.0
"""What the binary protocols share: their observation shapes mapped onto the server's one request form (the
``observation`` of a ``service.PolicyRequest``), and NVIDIA's modality config of the served layout.

Two wire shapes reach the engine besides HTTP/JSON (SERVING.md §11 says where each key comes from):

- **GR00T PolicyServer** (NVIDIA Isaac-GR00T N1.6/N1.7, ``gr00t/policy/server_client.py``), batched:
  ``{"video": {camera: (B, T, H, W, 3) uint8}, "state": {group: (B, T, D) float}, "language": {key: [[text]] × B}}``
  with the camera, group and language keys of NVIDIA's modality config for the embodiment (``Layout.wire``).
- **openpi** (``openpi-client``'s ``WebsocketClientPolicy``), one observation: ``observation/<camera>``
  (H, W, 3) uint8, or (T, H, W, 3) when the layout takes T frames a camera; ``observation/<group>`` (D,) float;
  ``prompt`` text.

Both become the HTTP body's ``{"images", "state", "instruction"}`` with the frames as decoded uint8 arrays (no
PNG round trip), so ``parse_observation`` applies the same rules, and every error names the field and the rule.
``wire_request`` adds the options every wire protocol may carry (seed or noise, the session fields).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from models.experimental.gr00t.common.errors import InputError
from models.experimental.gr00t.common.layouts import Layout

from ..service import PolicyRequest

SESSION_KEYS = ("session_id", "seq", "control_hz", "rtc")  # what a wire request may add for a robot session (§12)
OPTION_KEYS = ("seed", "noise", "return_normalized", *SESSION_KEYS)  # every option a wire request may carry
MAX_BATCH = 16  # items of one batched GR00T request (each runs alone, in order)


def modality_config(layout: Layout, action_horizon: int) -> dict[str, dict[str, Any]]:
    """``get_modality_config``'s answer: per modality, the fields of NVIDIA's ``ModalityConfig`` (enums by name, as
    their ``to_json_serializable`` writes them)."""
    m = layout.wire

    def entry(delta, keys, action_configs=None):
        return {"delta_indices": list(delta), "modality_keys": list(keys), "sin_cos_embedding_keys": None,
                "mean_std_embedding_keys": None, "action_configs": action_configs}

    actions = [{"rep": rep, "type": kind, "format": fmt, "state_key": key}
               for key, rep, kind, fmt in m.action_reps] or None
    return {"video": entry(m.video_delta, layout.cameras),
            "state": entry((0,), [g for g, _ in layout.state_groups]),
            "action": entry(range(action_horizon), layout.action_keys, actions),
            "language": entry((0,), [m.language_key])}


def _mapping(value: Any, field: str) -> dict:
    if not isinstance(value, dict):
        raise InputError(field, "must be a map")
    return value


def _array(value: Any, field: str) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise InputError(field, "must be an ndarray")
    return value


def floats(a: np.ndarray, field: str) -> list[float]:
    if a.dtype.kind not in "fiu":
        raise InputError(field, f"must be a float array, not {a.dtype}")
    return a.astype(np.float64).tolist()


def _frames(a: np.ndarray, field: str, frames: int) -> list[np.ndarray]:
    """(T, H, W, 3) uint8 → T frames; the checks ``parse_images`` does not make on arrays."""
    if a.dtype != np.uint8 or a.ndim != 4 or a.shape[3] != 3:
        raise InputError(field, f"must be a uint8 array (T, H, W, 3) of RGB frames, got {a.dtype} {list(a.shape)}")
    if a.shape[0] != frames:
        raise InputError(field, f"has {a.shape[0]} frame(s); this layout takes exactly {frames}")
    return [np.ascontiguousarray(f) for f in a]


def groot_observations(obs: Any, layout: Layout) -> list[dict]:
    """A GR00T PolicyServer ``observation`` (batched) → one request body per batch item."""
    obs = _mapping(obs, "observation")
    for key in ("video", "state", "language"):
        if key not in obs:
            raise InputError(f"observation.{key}", "missing")
    video, state = _mapping(obs["video"], "observation.video"), _mapping(obs["state"], "observation.state")
    language = _mapping(obs["language"], "observation.language")
    key = layout.wire.language_key
    unknown = [k for k in language if k != key]
    if unknown or key not in language:
        raise InputError(f"observation.language.{unknown[0] if unknown else key}",
                         f"{'unknown' if unknown else 'missing'}; this embodiment's language key is {key!r}")
    texts = language[key]
    if not isinstance(texts, list) or not texts:
        raise InputError(f"observation.language.{key}", "must be a list of [text] per batch item")
    batch = len(texts)
    if batch > MAX_BATCH:
        raise InputError("observation", f"batch of {batch}; at most {MAX_BATCH} items per request")
    arrays = {}
    for part, given in (("video", video), ("state", state)):
        for name, value in given.items():
            field = f"observation.{part}.{name}"
            a = _array(value, field)
            if a.ndim < 1 or a.shape[0] != batch:
                raise InputError(field, f"must have the batch size {batch} (of the language list) as its first axis")
            arrays[(part, name)] = a
    bodies = []
    for b in range(batch):
        item = texts[b]
        if not (isinstance(item, list) and len(item) == 1 and isinstance(item[0], str)):
            raise InputError(f"observation.language.{key}[{b}]", "must be a list holding one text")
        images = {name: _frames(a[b], f"observation.video.{name}[{b}]", layout.frames_per_camera)
                  for (part, name), a in arrays.items() if part == "video"}
        states = {}
        for (part, name), a in arrays.items():
            if part == "state":
                field = f"observation.state.{name}[{b}]"
                if a.ndim != 3 or a.shape[1] != 1:
                    raise InputError(field, f"must be (B, 1, D): one time step, got {list(a.shape)}")
                states[name] = floats(a[b, 0], field)
        bodies.append({"images": images, "state": states, "instruction": item[0]})
    return bodies


def openpi_observation(obs: Any, layout: Layout) -> dict:
    """An openpi ``infer`` observation → the request body (see the module docstring for the keys)."""
    obs = _mapping(obs, "observation")
    known = {f"observation/{c}" for c in layout.cameras} | {f"observation/{g}" for g, _ in layout.state_groups}
    extra = {"prompt", *OPTION_KEYS}
    unknown = sorted(repr(k) if not isinstance(k, str) else k for k in obs if k not in known | extra)
    if unknown:
        raise InputError(unknown[0], f"unknown key; this layout takes {sorted(known) + ['prompt']}")
    images, states = {}, {}
    for cam in layout.cameras:
        field = f"observation/{cam}"
        if field not in obs:
            raise InputError(field, "missing")
        a = _array(obs[field], field)
        images[cam] = _frames(a[None] if a.ndim == 3 and layout.frames_per_camera == 1 else a, field,
                              layout.frames_per_camera)
    for group, _ in layout.state_groups:
        field = f"observation/{group}"
        if field not in obs:
            raise InputError(field, "missing")
        states[group] = floats(_array(obs[field], field).reshape(-1), field)
    if "prompt" not in obs:
        raise InputError("prompt", "missing")
    return {"images": images, "state": states, "instruction": obs["prompt"]}


def wire_request(protocol: str, body: dict, options: dict, size: int):
    """An observation body of a wire protocol and its options (``seed``, ``noise`` as an ndarray or nested lists,
    ``return_normalized``, ``SESSION_KEYS``; ``rtc.prefix``'s rows may be ndarrays too, ``rtc.parse_rtc`` reads
    them) → the service's ``PolicyRequest``; ``size`` is the message's length in bytes."""
    noise = options.get("noise")
    if isinstance(noise, np.ndarray):
        noise = floats(noise, "noise")
    normalized = options.get("return_normalized", False)
    if not isinstance(normalized, (bool, np.bool_)):
        raise InputError("return_normalized", "must be true or false")
    return PolicyRequest(protocol, body, seed=options.get("seed"), noise=noise, return_normalized=bool(normalized),
                         **{k: options.get(k) for k in SESSION_KEYS}, size=size)
