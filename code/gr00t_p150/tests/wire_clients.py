# SPDX-License-Identifier: Apache-2.0
"""What the protocol tests drive a server with: a client of NVIDIA's GR00T PolicyServer protocol written from its
published ``PolicyClient`` (REQ socket; msgpack; ndarrays as ``np.save`` bytes under ``__ndarray_class__``), and a
demo request turned into each protocol's observation; ``serve_every_protocol`` boots a server with all three."""

from __future__ import annotations

import base64
import io
from contextlib import contextmanager

import msgpack
import numpy as np
from fastapi.testclient import TestClient
from PIL import Image

from .conftest import free_port


class NvidiaWireClient:
    """The client side of NVIDIA's ``PolicyClient`` protocol, written from its published description."""

    def __init__(self, port: int, api_token: str | None = None, timeout_ms: int = 60_000):
        import zmq

        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.REQ)
        self.sock.setsockopt(zmq.RCVTIMEO, timeout_ms)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(f"tcp://127.0.0.1:{port}")
        self.api_token = api_token

    @staticmethod
    def _encode(obj):
        if isinstance(obj, np.ndarray):
            out = io.BytesIO()
            np.save(out, obj, allow_pickle=False)
            return {"__ndarray_class__": True, "as_npy": out.getvalue()}
        return obj

    @staticmethod
    def _decode(obj):
        if "__ndarray_class__" in obj:
            return np.load(io.BytesIO(obj["as_npy"]), allow_pickle=False)
        if "__ModalityConfig_class__" in obj:
            return obj["as_json"]
        return obj

    def send_raw(self, payload: bytes):
        self.sock.send(payload)
        return msgpack.unpackb(self.sock.recv(), object_hook=self._decode)

    def call(self, endpoint: str, data: dict | None = None):
        request = {"endpoint": endpoint}
        if data is not None:
            request["data"] = data
        if self.api_token:
            request["api_token"] = self.api_token
        return self.send_raw(msgpack.packb(request, default=self._encode))

    def get_action(self, observation: dict, options: dict | None = None):
        return tuple(self.call("get_action", {"observation": observation, "options": options}))

    def close(self):
        self.sock.close(0)
        self.ctx.term()


def frames_of(request: dict, cam: str) -> np.ndarray:
    """The request's base64 PNG frames of ``cam`` decoded by Pillow: uint8 (T, H, W, 3)."""
    value = request["images"][cam]
    return np.stack([np.asarray(Image.open(io.BytesIO(base64.b64decode(f))).convert("RGB"))
                     for f in (value if isinstance(value, list) else [value])])


def groot_observation(request: dict, layout, language_key: str, batch: int = 1) -> dict:
    def rep(a):
        return np.repeat(a[None], batch, axis=0)

    return {"video": {cam: rep(frames_of(request, cam)) for cam in layout.cameras},
            "state": {g: rep(np.asarray(request["state"][g], dtype=np.float64).reshape(1, -1))
                      for g, _ in layout.state_groups},
            "language": {language_key: [[request["instruction"]]] * batch}}


def client_observation(request: dict, layout) -> dict:
    """The request as ``gr00t_client`` takes it: decoded frames (a list per camera when it takes several)."""
    return {"images": {cam: list(frames_of(request, cam)) if layout.frames_per_camera > 1
                       else frames_of(request, cam)[0] for cam in layout.cameras},
            "state": request["state"], "instruction": request["instruction"]}


def openpi_observation(request: dict, layout) -> dict:
    obs = {f"observation/{cam}": (frames_of(request, cam) if layout.frames_per_camera > 1
                                  else frames_of(request, cam)[0]) for cam in layout.cameras}
    obs.update({f"observation/{g}": np.asarray(request["state"][g], dtype=np.float64).reshape(-1)
                for g, _ in layout.state_groups})
    obs["prompt"] = request["instruction"]
    return obs


@contextmanager
def serve_every_protocol(server_env: dict, version: str):
    """(http TestClient, NvidiaWireClient, config, the demo request) of a server with ZMQ and openpi on."""
    from gr00t_p150.server.app import create_app
    from gr00t_p150.server.settings import load_config

    env = {**server_env, "GR00T_VERSION": version, "GR00T_ZMQ_PORT": str(free_port()),
           "GR00T_OPENPI_PORT": str(free_port())}
    config = load_config(env)
    with TestClient(create_app(config), raise_server_exceptions=False) as http:
        zmq_client = NvidiaWireClient(config.zmq_port)
        try:
            yield http, zmq_client, config, http.get("/demo").json()["request"]
        finally:
            zmq_client.close()
