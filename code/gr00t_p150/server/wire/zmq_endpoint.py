# SPDX-License-Identifier: Apache-2.0
"""NVIDIA's GR00T PolicyServer wire protocol (Isaac-GR00T N1.6/N1.7 ``gr00t/policy/server_client.py``) on a ZMQ
REP socket, beside the HTTP server: an adapter onto the same service as ``/predict`` (``service.py``).

A request is the msgpack map ``{"endpoint": name, "data": {...}, "api_token"?: str}`` (``endpoint`` defaults to
``get_action``, as in NVIDIA's server). Endpoints: ``ping``; ``get_action`` (``data = {"observation": ...,
"options": ...}`` → ``[action, info]``, action ``{group: (B, T, D) float32}`` in physical units); ``reset``
(``options.session_id`` forgets that session, SERVING.md §12; else ``{}``); ``get_modality_config``;
``get_server_info`` (ours: sessions, real-time chunking and micro-batching as /info says them); ``kill``
only with ``GR00T_ZMQ_ALLOW_KILL=1`` (it stops the whole server, as SIGTERM does). Errors come back as
``{"error": "<field>: <rule>"}``, never a traceback. ``options`` may carry ``seed`` (int) or ``noise`` (ndarray
[horizon, action_dim]), ``return_normalized`` (then ``info["action_pred_normalized"]``, float32 (B, T, D)) and
``session_id`` / ``seq`` / ``control_hz`` / ``rtc`` (its ``prefix`` rows as ndarrays or lists), as ``/predict``'s
fields do; without a seed or noise the layout's default seed applies, so the same observation gives the same
actions over every protocol.

REP is one request at a time; the socket binds ``GR00T_ZMQ_HOST`` (default 127.0.0.1, not NVIDIA's ``*``)
and drops messages over ``GR00T_MAX_BODY_BYTES`` before reading them.
"""

from __future__ import annotations

import logging
import os
import signal
import threading

import numpy as np
from gr00t_client.codecs import ModalityConfigJSON, groot_pack, groot_unpack

from models.experimental.gr00t.common.errors import InputError

from ..refusals import refusal
from ..sessions import check_session_fields
from .observations import OPTION_KEYS, groot_observations, modality_config, wire_request

log = logging.getLogger("gr00t_p150")
POLL_MS = 200  # how often the loop looks at its stop flag


class ZmqPolicyEndpoint:
    def __init__(self, service, loop, *, host: str, port: int, api_key: str | None, allow_kill: bool,
                 max_bytes: int):
        import zmq

        self.service, self.loop, self.api_key, self.allow_kill = service, loop, api_key, allow_kill
        self.max_bytes = max_bytes
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.REP)
        self._sock.setsockopt(zmq.MAXMSGSIZE, max_bytes)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.bind(f"tcp://{host}:{port}")
        self.address = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="gr00t-zmq", daemon=True)

    def start(self) -> None:
        self._thread.start()
        log.info("GR00T PolicyServer protocol (ZMQ) on %s", self.address)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=5)
        self._sock.close(0)
        self._ctx.term()

    def _serve(self) -> None:
        import zmq

        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(POLL_MS):
                continue
            try:
                message = self._sock.recv(copy=True)
            except zmq.ZMQError:
                continue
            reply, kill = self.handle(message)
            self._sock.send(reply)
            if kill:
                log.warning("ZMQ kill endpoint called: stopping the server")
                os.kill(os.getpid(), signal.SIGTERM)

    def handle(self, message: bytes) -> tuple[bytes, bool]:
        """One message → (reply bytes, whether to stop the server)."""
        endpoint = None
        try:
            request = groot_unpack(message, self.max_bytes)
            if not isinstance(request, dict):
                raise InputError("message", "must be a map with endpoint and data")
            if self.api_key is not None and request.get("api_token") != self.api_key:
                return groot_pack({"error": "Unauthorized: Invalid API token"}), False
            endpoint = request.get("endpoint", "get_action")
            if endpoint == "ping":
                return groot_pack({"status": "ok", "message": "Server is running"}), False
            if endpoint == "kill":
                if not self.allow_kill:
                    raise InputError("endpoint", "kill is disabled on this server (GR00T_ZMQ_ALLOW_KILL=1 enables it)")
                return groot_pack(None), True
            if endpoint == "reset":
                return groot_pack(self._reset(request.get("data"))), False
            engine = self.service.engine
            if endpoint == "get_server_info":  # ours, beside NVIDIA's endpoints: sessions, RTC, batching
                return groot_pack({"sessions": self.service.runtime.sessions.describe(),
                                   "rtc": self.service.rtc_capabilities(),
                                   "batching": engine.batching_info()}), False
            if endpoint == "get_modality_config":  # NVIDIA's PolicyClient gets its ModalityConfig objects back
                config = engine.modality_config() or modality_config(engine.layout, engine.action_shape[0])
                return groot_pack({k: ModalityConfigJSON(v) for k, v in config.items()}), False
            if endpoint != "get_action":
                names = "ping, get_action, reset, get_modality_config, get_server_info"
                raise InputError("endpoint", f"unknown endpoint {endpoint!r}; this server has {names}"
                                             + (", kill" if self.allow_kill else ""))
            reply = groot_pack(list(self._get_action(request.get("data"), len(message))))
            self.service.answered("zmq")
            return reply, False
        except Exception as exc:  # the refusal table's words; never a traceback on the wire (a fault is logged)
            found = self.service.answered("zmq", exc, "a ZMQ request") if endpoint in (None, "get_action") \
                else refusal(exc, "a ZMQ request")
            return groot_pack({"error": found.text}), False

    def _get_action(self, data, size: int) -> tuple[dict, dict]:
        if not isinstance(data, dict) or "observation" not in data:
            raise InputError("data", "must be a map with observation (and optionally options)")
        options = data.get("options") or {}
        if not isinstance(options, dict):
            raise InputError("options", "must be a map or null")
        unknown = sorted(set(options) - set(OPTION_KEYS))
        if unknown:
            raise InputError(f"options.{unknown[0]}", f"unknown option; this server takes {', '.join(OPTION_KEYS)}")
        bodies = groot_observations(data["observation"], self.service.engine.layout)
        if len(bodies) > 1 and options.get("session_id") is not None:
            raise InputError("options.session_id", "a session is one robot: send its observations one at a time")
        answers = [self.service.serve_blocking(wire_request("zmq", body, options, size), self.loop)
                   for body in bodies]  # each item of a batched request runs alone, in order
        results = [a.result for a in answers]
        actions = {k: np.stack([r.actions[k] for r in results]).astype(np.float32) for k in results[0].actions}
        info = {"seed": [r.seed for r in results], "noise_source": [r.noise_source for r in results],
                "server_ms": [round(a.timing_ms["total"], 3) for a in answers],
                "device_ms": [round(r.timing_ms.get("device", 0.0), 3) for r in results]}
        if options.get("return_normalized"):  # the model-space chunk: what a client's rtc.prefix needs (§12)
            info["action_pred_normalized"] = np.stack([r.action_pred for r in results]).astype(np.float32)
        if any(r.batch_size > 1 for r in results):  # micro-batching with other clients (SERVING.md §13)
            info["batch_size"] = [r.batch_size for r in results]
        if answers[0].session is not None:
            info["session"] = answers[0].session
        if answers[0].rtc is not None:
            info["rtc"] = answers[0].rtc
        return actions, info

    def _reset(self, data) -> dict:
        """``reset``: with ``options.session_id``, forget that session; without, nothing to forget."""
        options = (data or {}).get("options") if isinstance(data, dict) else None
        sid = options.get("session_id") if isinstance(options, dict) else None
        if sid is None:
            return {}
        check_session_fields(sid, None, None)
        return {"session_id": sid, "reset": self.service.runtime.sessions.reset(sid)}
