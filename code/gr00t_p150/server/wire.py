# SPDX-License-Identifier: Apache-2.0
"""What the binary protocols share: their observation shapes mapped onto the server's one request form, and a
request run through the same engine as ``POST /predict``.

Two wire shapes reach the engine besides HTTP/JSON (SERVING.md §11 says where each key comes from):

- **GR00T PolicyServer** (NVIDIA Isaac-GR00T N1.6/N1.7, ``gr00t/policy/server_client.py``), batched:
  ``{"video": {camera: (B, T, H, W, 3) uint8}, "state": {group: (B, T, D) float}, "language": {key: [[text]] × B}}``
  with the camera, group and language keys of NVIDIA's modality config for the embodiment (``MODALITY``).
- **openpi** (``openpi-client``'s ``WebsocketClientPolicy``), one observation: ``observation/<camera>``
  (H, W, 3) uint8, or (T, H, W, 3) when the layout takes T frames a camera; ``observation/<group>`` (D,) float;
  ``prompt`` text.

Both become the HTTP body's ``{"images", "state", "instruction"}`` with the frames as decoded uint8 arrays (no
PNG round trip), so ``parse_observation`` applies the same rules, and every error names the field and the rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from models.experimental.gr00t.common.errors import InputError
from models.experimental.gr00t.common.host_threads import single_threaded_torch
from models.experimental.gr00t.common.layouts import Layout

from .errors import NonFiniteActions, RequestRefused, as_request_refused

SESSION_KEYS = ("session_id", "seq", "control_hz", "rtc")  # what a wire request may add for a robot session (§12)
MAX_BATCH = 16  # items of one batched GR00T request (each runs alone, in order)


@dataclass(frozen=True)
class Modality:
    """NVIDIA's modality config of a served embodiment, as its ``ModalityConfig`` entries carry it."""

    video_delta: tuple[int, ...]
    language_key: str
    image_hw: tuple[int, int]  # the frame size the embodiment's cameras deliver (DROID letterboxes to 180×320)
    action_reps: tuple[tuple[str, str, str, str | None], ...] = ()  # (key, rep, type, format) or empty


# N1.7 DROID: ``oxe_droid_relative_eef_relative_joint`` in Isaac-GR00T ``gr00t/configs/data/embodiment_configs.py``
# (video [-15, 0], state/action keys, 40 action steps, language ``annotation.language.language_instruction``).
# N1.5 GR1: ``fourier_gr1_arms_only`` in Isaac-GR00T n1.5-release ``gr00t/experiment/data_config.py`` (video
# ``ego_view`` at [0], state/action arm and hand groups, 16 action steps, language
# ``annotation.human.action.task_description``); N1.5 predates the nested wire shape, which this maps it onto.
MODALITY = {
    "droid": Modality(video_delta=(-15, 0), language_key="annotation.language.language_instruction",
                      image_hw=(180, 320),
                      action_reps=(("eef_9d", "RELATIVE", "EEF", "XYZ_ROT6D"),
                                   ("gripper_position", "ABSOLUTE", "NON_EEF", "DEFAULT"),
                                   ("joint_position", "RELATIVE", "NON_EEF", "DEFAULT"))),
    "gr1": Modality(video_delta=(0,), language_key="annotation.human.action.task_description", image_hw=(256, 256)),
}


def modality_config(layout: Layout, action_horizon: int) -> dict[str, dict[str, Any]]:
    """``get_modality_config``'s answer: per modality, the fields of NVIDIA's ``ModalityConfig`` (enums by name, as
    their ``to_json_serializable`` writes them)."""
    m = MODALITY[layout.name]

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


def _floats(a: np.ndarray, field: str) -> list[float]:
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
    key = MODALITY[layout.name].language_key
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
                states[name] = _floats(a[b, 0], field)
        bodies.append({"images": images, "state": states, "instruction": item[0]})
    return bodies


def openpi_observation(obs: Any, layout: Layout) -> dict:
    """An openpi ``infer`` observation → the request body (see the module docstring for the keys)."""
    obs = _mapping(obs, "observation")
    known = {f"observation/{c}" for c in layout.cameras} | {f"observation/{g}" for g, _ in layout.state_groups}
    extra = {"prompt", "seed", "noise", *SESSION_KEYS}
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
        states[group] = _floats(_array(obs[field], field).reshape(-1), field)
    if "prompt" not in obs:
        raise InputError("prompt", "missing")
    return {"images": images, "state": states, "instruction": obs["prompt"]}


async def _admit(admission) -> float:
    return admission.enter(time.perf_counter())


def admitted(admission, loop: asyncio.AbstractEventLoop):
    """A context in which one request holds a place in ``/predict``'s admission queue (``GR00T_MAX_QUEUE``, the
    SIGTERM drain): every protocol shares the one queue. The queue lives on the event loop's thread."""
    from .admission import Draining, QueueFull

    @contextlib.contextmanager
    def held():
        try:
            at = asyncio.run_coroutine_threadsafe(_admit(admission), loop).result(timeout=60)
        except QueueFull as exc:
            raise RequestRefused("queue", str(exc)) from None
        except Draining:
            raise RequestRefused("server", "the server is shutting down") from None
        try:
            yield
        finally:
            loop.call_soon_threadsafe(admission.leave, at)

    return held()


def run_observation(engine, loop: asyncio.AbstractEventLoop, body: dict, *, seed=None, noise=None,
                    admission=None, sessions=None, session: dict | None = None, timeout_s: float = 600.0):
    """One request body through the engine as ``/predict`` runs it: parsed and prepared on the calling thread
    (torch single-threaded there), run on the device thread in ``loop``; returns the ``PolicyResult``, the ms it
    took, the session's description (``None`` without ``session["session_id"]``) and the RTC plan (``None``
    without ``session["rtc"]``, the same map as /predict's ``rtc``). Raises ``RequestRefused`` for anything the
    request got wrong, ``SessionConflict`` for an old ``seq``."""
    from .sessions import attach_rtc, check_session_fields, parse_rtc, rtc_plan

    from models.experimental.gr00t.common.observation import parse_observation

    single_threaded_torch()
    t0 = time.perf_counter()
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
        raise RequestRefused("seed", "must be an integer in [0, 2^63)")
    if seed is not None and noise is not None:
        raise RequestRefused("noise", "give either noise or seed, not both")
    if noise is not None:
        noise = _floats(noise, "noise") if isinstance(noise, np.ndarray) else noise
    session = session or {}
    sid, seq, hz = session.get("session_id"), session.get("seq"), session.get("control_hz")
    check_session_fields(sid, seq, hz)
    rtc = parse_rtc(session.get("rtc"), sid, engine.backend)
    if rtc is not None and sessions is None:
        raise RequestRefused("rtc", "this endpoint keeps no sessions")
    claimed = None if sid is None or sessions is None else sessions.claim(sid, seq, hz)  # before any work
    plan, job = (None, None) if rtc is None else rtc_plan(claimed, t0, rtc.delay, engine.backend.action_shape[0],
                                                          rtc.variant, rtc.beta)
    timeout_ms = engine.config.request_timeout_ms
    deadline = t0 + timeout_ms / 1e3 if timeout_ms else None
    with admitted(admission, loop) if admission is not None else contextlib.nullcontext():
        with as_request_refused():
            obs = parse_observation(body, engine.layout)
        prepared = engine.prepare(obs, noise=noise, seed=seed, state_dtype="float64", deadline=deadline)
        if job is not None:
            attach_rtc(engine.backend.policy, job, prepared.inputs)
        result = asyncio.run_coroutine_threadsafe(engine.run(prepared, deadline=deadline), loop).result(timeout_s)
    if not all(np.isfinite(a).all() for a in result.actions.values()):
        raise NonFiniteActions(f"seed={result.seed}, noise_source={result.noise_source}")
    total_ms = (time.perf_counter() - t0) * 1e3
    if claimed is not None:
        sessions.record(claimed, result, total_ms, observed_at=t0)
    return result, total_ms, None if claimed is None else claimed.describe(), plan
