# SPDX-License-Identifier: Apache-2.0
"""The three sync clients (see the package docstring). Each turns the server's observation form into its
protocol's and the answer back into ``({group: float32 (horizon, dim)}, info)``."""

from __future__ import annotations

import base64
import io
import json
import urllib.error
import urllib.request
from typing import Any

import numpy as np

from .codecs import groot_pack, groot_unpack, openpi_pack, openpi_unpack

MAX_REPLY_BYTES = 64 * 2**20


class PolicyError(RuntimeError):
    """The server refused the request (the message names the field and the rule) or failed."""


def _frames(value) -> list[np.ndarray]:
    frames = value if isinstance(value, (list, tuple)) else [value]
    out = [np.asarray(f) for f in frames]
    for f in out:
        if f.dtype != np.uint8 or f.ndim != 3 or f.shape[2] != 3:
            raise ValueError(f"a frame must be uint8 (H, W, 3) RGB, got {f.dtype} {list(f.shape)}")
    return out


def rtc_prefix(previous: dict, executed: int) -> dict:
    """Real-time chunking without server memory (SERVING.md §12): the ``rtc.prefix`` of the next request, from the
    previous answer (``actions`` and ``action_pred_normalized``: ask with ``return_normalized=true``) and the
    number of its steps the robot will have executed when it takes the next observation. Send it with
    ``rtc.delay``. Every client's ``(actions, info)`` gives ``previous = {**info, "actions": actions}``."""
    if "action_pred_normalized" not in previous:
        raise ValueError("the previous answer has no action_pred_normalized: ask it with return_normalized=true")
    return {"normalized": np.asarray(previous["action_pred_normalized"], dtype=np.float64)[executed:].tolist(),
            "actions": {k: np.asarray(v, dtype=np.float64)[executed:].tolist() for k, v in previous["actions"].items()}}


def _extras(observation: dict) -> dict:
    return {k: observation[k] for k in ("seed", "noise") if observation.get(k) is not None}


class HttpClient:
    """``POST /predict`` with JSON; frames are PNG-encoded (Pillow) as the HTTP contract requires."""

    def __init__(self, url: str = "http://127.0.0.1:8000", api_key: str | None = None, timeout_s: float = 60.0):
        self.url, self.api_key, self.timeout_s = url.rstrip("/"), api_key, timeout_s

    @staticmethod
    def _png(frame: np.ndarray) -> str:
        from PIL import Image

        out = io.BytesIO()
        Image.fromarray(frame).save(out, format="PNG")
        return base64.b64encode(out.getvalue()).decode("ascii")

    def get_action(self, observation: dict, options: dict | None = None) -> tuple[dict, dict]:
        images = {}
        for cam, value in observation["images"].items():
            pngs = [self._png(f) for f in _frames(value)]
            images[cam] = pngs if isinstance(value, (list, tuple)) else pngs[0]
        body = {"images": images, "instruction": observation["instruction"],
                "state": {k: np.asarray(v, dtype=np.float64).reshape(-1).tolist()
                          for k, v in observation["state"].items()}}
        extras = {**_extras(observation), **(options or {})}
        if "noise" in extras:
            extras["noise"] = np.asarray(extras["noise"], dtype=np.float64).tolist()
        body.update(extras)
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url + "/predict", data=json.dumps(body).encode(), headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as r:
                answer = json.loads(r.read())
        except urllib.error.HTTPError as exc:
            raise PolicyError(f"HTTP {exc.code}: {exc.read().decode(errors='replace')}") from None
        actions = {k: np.asarray(v, dtype=np.float32) for k, v in answer.pop("actions").items()}
        return actions, answer


class ZmqClient:
    """NVIDIA's GR00T PolicyServer protocol: REQ socket, msgpack, ndarrays as ``np.save`` bytes. The camera and
    language keys come from the server's ``get_modality_config`` (asked once)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 5555, api_token: str | None = None,
                 timeout_ms: int = 60_000):
        import zmq

        self._zmq = zmq
        self.api_token, self.timeout_ms = api_token, timeout_ms
        self._address = f"tcp://{host}:{port}"
        self._ctx = zmq.Context()
        self._connect()
        self._modality = None

    def _connect(self):
        self._sock = self._ctx.socket(self._zmq.REQ)
        self._sock.setsockopt(self._zmq.RCVTIMEO, self.timeout_ms)
        self._sock.setsockopt(self._zmq.LINGER, 0)
        self._sock.connect(self._address)

    def call(self, endpoint: str, data: dict | None = None) -> Any:
        request: dict = {"endpoint": endpoint}
        if data is not None:
            request["data"] = data
        if self.api_token:
            request["api_token"] = self.api_token
        self._sock.send(groot_pack(request))
        try:
            reply = groot_unpack(self._sock.recv(), MAX_REPLY_BYTES)
        except self._zmq.Again:
            self._sock.close(0)  # a REQ socket that missed its reply cannot send again
            self._connect()
            raise TimeoutError(f"no reply from {self._address} within {self.timeout_ms} ms") from None
        if isinstance(reply, dict) and "error" in reply:
            raise PolicyError(reply["error"])
        return reply

    def ping(self) -> bool:
        try:
            return self.call("ping").get("status") == "ok"
        except (TimeoutError, PolicyError):
            return False

    def get_modality_config(self) -> dict:
        if self._modality is None:
            self._modality = self.call("get_modality_config")
        return self._modality

    def reset(self) -> dict:
        return self.call("reset", {"options": None})

    def get_action(self, observation: dict, options: dict | None = None) -> tuple[dict, dict]:
        language_key = self.get_modality_config()["language"]["modality_keys"][0]
        obs = {"video": {cam: np.stack(_frames(v))[None] for cam, v in observation["images"].items()},
               "state": {k: np.asarray(v, dtype=np.float64).reshape(1, 1, -1) for k, v in observation["state"].items()},
               "language": {language_key: [[observation["instruction"]]]}}
        extras = {**_extras(observation), **(options or {})}
        if "noise" in extras:
            extras["noise"] = np.asarray(extras["noise"], dtype=np.float32)
        action, info = self.call("get_action", {"observation": obs, "options": extras or None})
        if "action_pred_normalized" in info:  # return_normalized: one observation, so its (T, D)
            info["action_pred_normalized"] = info["action_pred_normalized"][0]
        return {k: v[0] for k, v in action.items()}, info

    def close(self):
        self._sock.close(0)
        self._ctx.term()


class OpenpiClient:
    """The openpi websocket protocol (what ``openpi-client`` speaks), mapping the server's observation form onto
    the ``observation/<key>`` names the server's metadata lists."""

    def __init__(self, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
                 timeout_s: float = 60.0):
        from websockets.sync.client import connect

        headers = {"Authorization": f"Api-Key {api_key}"} if api_key else None
        self._ws = connect(f"ws://{host}:{port}", compression=None, max_size=MAX_REPLY_BYTES,
                           additional_headers=headers, open_timeout=timeout_s)
        self.timeout_s = timeout_s
        self.metadata = openpi_unpack(self._ws.recv(timeout=timeout_s), MAX_REPLY_BYTES)

    def get_action(self, observation: dict, options: dict | None = None) -> tuple[dict, dict]:
        multi = self.metadata.get("frames_per_camera", 1) > 1
        obs = {}
        for cam, value in observation["images"].items():
            frames = _frames(value)
            obs[f"observation/{cam}"] = np.stack(frames) if multi else frames[0]
        obs.update({f"observation/{k}": np.asarray(v, dtype=np.float64).reshape(-1)
                    for k, v in observation["state"].items()})
        obs["prompt"] = observation["instruction"]
        extras = {**_extras(observation), **(options or {})}
        if "noise" in extras:
            extras["noise"] = np.asarray(extras["noise"], dtype=np.float32)
        obs.update(extras)
        self._ws.send(openpi_pack(obs))
        reply = self._ws.recv(timeout=self.timeout_s)
        if isinstance(reply, str):
            raise PolicyError(reply)
        answer = openpi_unpack(reply, MAX_REPLY_BYTES)
        actions = {k.split("/", 1)[1]: v for k, v in answer.items() if k.startswith("action/")}
        return actions, {"server_timing": {}, **{k: v for k, v in answer.items()
                                                 if k != "actions" and not k.startswith("action/")}}

    def close(self):
        self._ws.close()
