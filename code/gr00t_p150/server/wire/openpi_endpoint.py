# SPDX-License-Identifier: Apache-2.0
"""The openpi websocket policy protocol (what ``openpi-client``'s ``WebsocketClientPolicy`` speaks), on its own
port beside the HTTP server: an adapter onto the same service as ``/predict`` (``service.py``).

On connect the server sends one msgpack map of metadata (action horizon, keys and dims, embodiment, the frame
size the model saw, the observation keys it takes, ``needs_session_id`` false); then each binary message is an
observation (``wire.openpi_observation``: ``observation/<camera>``, ``observation/<state group>``, ``prompt``,
optional ``seed`` or ``noise``, ``return_normalized``, the session keys) answered by ``{"actions": float32
[horizon, Σ dims] (groups side by side in ``action_keys`` order), "action/<group>": float32 [horizon, dim],
"server_timing": {...}}`` (+ ``action_pred_normalized`` float32 [horizon, action_dim] when asked). A refused
observation is answered, as openpi does, with a text frame (here ``"<field>: <rule>"``, never a traceback), and
the connection stays open. ``GET /healthz`` answers 200; with ``GR00T_API_KEY`` set the upgrade needs
``Authorization: Api-Key <key>``. Arrays travel in openpi's msgpack-numpy encoding (``gr00t_client.codecs``): no pickle.
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np
from gr00t_client.codecs import openpi_pack, openpi_unpack

from models.experimental.gr00t.common.errors import InputError

from .observations import openpi_observation, wire_request

log = logging.getLogger("gr00t_p150")


class OpenpiPolicyEndpoint:
    def __init__(self, service, loop, *, host: str, port: int, api_key: str | None, max_bytes: int,
                 max_connections: int):
        from websockets.sync.server import serve

        self.service, self.loop, self.api_key, self.max_bytes = service, loop, api_key, max_bytes
        self.max_connections = max_connections
        self._open = 0
        self._lock = threading.Lock()
        self._server = serve(self._handle, host, port, compression=None, max_size=max_bytes,
                             process_request=self._process_request, server_header=None)
        self.port = self._server.socket.getsockname()[1]
        self.address = f"ws://{host}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="gr00t-openpi", daemon=True)

    def start(self) -> None:
        self._thread.start()
        log.info("openpi websocket protocol on %s", self.address)

    def stop(self) -> None:
        if self._thread.ident is None:  # never started (a later endpoint failed to open): just free the port
            self._server.socket.close()
            return
        self._server.shutdown()
        self._thread.join(timeout=5)

    def metadata(self) -> dict:
        engine = self.service.engine
        lay = engine.layout
        horizon, _ = engine.action_shape
        hw = lay.wire.image_hw  # None where the embodiment's camera size is not known (N1.6 G1)
        return {"action_horizon": int(horizon), "action_keys": lay.action_keys, "action_dims": lay.action_dims,
                "embodiment": lay.embodiment, "embodiment_tag": lay.embodiment, "version": engine.config.version,
                "image_resolution": None if hw is None else list(hw), "frames_per_camera": lay.frames_per_camera,
                "observation_keys": [f"observation/{c}" for c in lay.cameras]
                + [f"observation/{g}" for g, _ in lay.state_groups] + ["prompt"],
                "needs_session_id": False, "sessions": "optional: session_id, seq (increasing), control_hz, rtc "
                                                               "({variant: inpaint|guided, delay, beta, prefix: "
                                                               "{normalized, actions}})",
                "rtc": self.service.rtc_capabilities(), "batching": engine.batching_info()}

    def _process_request(self, connection, request):
        if request.path == "/healthz":
            return connection.respond(200, "OK\n")
        if self.api_key is not None and request.headers.get("Authorization") != f"Api-Key {self.api_key}":
            return connection.respond(401, "missing or wrong Authorization: Api-Key header\n")
        with self._lock:
            if self._open >= self.max_connections:
                return connection.respond(503, f"at most {self.max_connections} connections at once\n")
            self._open += 1
        return None

    def _handle(self, ws) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            ws.send(openpi_pack(self.metadata()))
            while True:
                message = ws.recv()
                ws.send(self.answer(message))
        except ConnectionClosed:
            pass
        finally:
            with self._lock:
                self._open -= 1

    def answer(self, message) -> bytes | str:
        """One ``infer`` message → the reply frame: bytes for actions, text for a refusal."""
        try:
            if isinstance(message, str):
                raise InputError("message", "must be a binary msgpack frame, not text")
            obs = openpi_unpack(message, self.max_bytes)
            body = openpi_observation(obs, self.service.engine.layout)
            request = wire_request("openpi", body, obs, len(message))
            answer = self.service.serve_blocking(request, self.loop)
        except Exception as exc:  # the refusal table's words; never a traceback on the wire (a fault is logged)
            return self.service.answered("openpi", exc, "an openpi request").text
        self.service.answered("openpi")
        result, keys = answer.result, self.service.engine.layout.action_keys
        out = {"actions": np.concatenate([result.actions[k] for k in keys], axis=-1).astype(np.float32)}
        out.update({f"action/{k}": result.actions[k].astype(np.float32) for k in keys})
        out["server_timing"] = {"infer_ms": round(result.timing_ms.get("device", 0.0), 3),
                                "total_ms": round(answer.timing_ms["total"], 3), "sent_at": time.time()}
        if result.batch_size > 1:  # micro-batching (SERVING.md §13)
            out["server_timing"]["batch_size"] = result.batch_size
        if request.return_normalized:  # the model-space chunk: what a client's rtc.prefix needs (§12)
            out["action_pred_normalized"] = result.action_pred.astype(np.float32)
        if answer.session is not None:
            out["session"] = answer.session
        if answer.rtc is not None:
            out["rtc"] = answer.rtc
        return openpi_pack(out)
