# SPDX-License-Identifier: Apache-2.0
"""Clients for the GR00T p150 policy server, one per protocol, each with NVIDIA ``PolicyClient``'s shape:
``get_action(observation) -> (actions, info)``. Numpy and the wire libraries only (no torch, no model code), so a
robot computer installs it alone: ``pip install ./code/gr00t_client``.

- ``HttpClient``: ``POST /predict`` (JSON; frames PNG-encoded here);
- ``ZmqClient``: NVIDIA's GR00T PolicyServer protocol (``GR00T_ZMQ_PORT``);
- ``OpenpiClient``: the openpi websocket protocol (``GR00T_OPENPI_PORT``).

``observation`` is the server's own form for every client: ``{"images": {camera: uint8 (H, W, 3) or a list of
frames}, "state": {group: floats}, "instruction": str}``, plus optional ``seed`` or ``noise``; ``actions`` is
``{group: float32 (horizon, dim)}`` in physical units. SERVING.md says what each protocol carries.
"""

from .clients import HttpClient, OpenpiClient, PolicyError, ZmqClient

__all__ = ["HttpClient", "OpenpiClient", "PolicyError", "ZmqClient"]
