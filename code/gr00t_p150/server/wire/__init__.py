# SPDX-License-Identifier: Apache-2.0
"""The wire protocols beside HTTP (SERVING.md §11): NVIDIA's GR00T PolicyServer over ZMQ and openpi's websocket
protocol. Each is an adapter onto the same service as ``/predict``: its message → ``PolicyRequest``, the
``Answer`` → its reply, a refusal → its error form (``refusals.py``). Imported at boot, never by the app module."""

from __future__ import annotations

from ..exceptions import BootError


def open_endpoints(cfg, service, loop) -> list:
    """The protocols the configuration turns on, each on its own port and thread, sharing ``/predict``'s admission
    queue, sessions and metrics through ``service``."""
    endpoints = []
    try:
        if cfg.zmq_port is not None:
            from .zmq_endpoint import ZmqPolicyEndpoint

            endpoints.append(ZmqPolicyEndpoint(service, loop, host=cfg.zmq_host, port=cfg.zmq_port,
                                               api_key=cfg.api_key, allow_kill=cfg.zmq_allow_kill,
                                               max_bytes=cfg.max_body_bytes))
        if cfg.openpi_port is not None:
            from .openpi_endpoint import OpenpiPolicyEndpoint

            endpoints.append(OpenpiPolicyEndpoint(service, loop, host=cfg.openpi_host, port=cfg.openpi_port,
                                                  api_key=cfg.api_key, max_bytes=cfg.max_body_bytes,
                                                  max_connections=cfg.max_queue))
    except Exception as exc:  # e.g. the port is taken (OSError; ZMQError for the ZMQ socket)
        for endpoint in endpoints:
            endpoint.stop()
        raise BootError(f"could not open a protocol endpoint: {exc}") from None
    for endpoint in endpoints:
        endpoint.start()
    return endpoints
