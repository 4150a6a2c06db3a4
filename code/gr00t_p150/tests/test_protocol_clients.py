# SPDX-License-Identifier: Apache-2.0
"""What real clients and monitoring see of the wire protocols beside HTTP: NVIDIA's own decoder gets its
``ModalityConfig`` objects from ``get_modality_config``, and ``/metrics`` counts the requests of every protocol."""

from __future__ import annotations

import io
from dataclasses import dataclass

import msgpack
import numpy as np
import pytest

from models.experimental.gr00t.common.versions import VERSIONS

from .conftest import metrics_of
from .wire_clients import groot_observation, openpi_observation, serve_every_protocol


@pytest.fixture(scope="module", params=VERSIONS)
def served(request, server_env):
    with serve_every_protocol(server_env, request.param) as s:
        yield s


@dataclass
class ModalityConfig:
    """NVIDIA's ``gr00t.data.types.ModalityConfig`` fields, as its ``PolicyClient`` rebuilds them."""

    delta_indices: list
    modality_keys: list
    sin_cos_embedding_keys: list | None = None
    mean_std_embedding_keys: list | None = None
    action_configs: list | None = None


def nvidia_decode(obj):
    """The object hook of NVIDIA's published ``MsgSerializer.from_bytes`` (Isaac-GR00T
    ``gr00t/policy/server_client.py``): only the class-marker form becomes a ``ModalityConfig``."""
    if "__ModalityConfig_class__" in obj:
        return ModalityConfig(**obj["as_json"])
    if "__ndarray_class__" in obj:
        return np.load(io.BytesIO(obj["as_npy"]), allow_pickle=False)
    return obj


def test_nvidias_client_gets_modality_config_objects_back(served):
    import zmq

    http, _, config, _ = served
    layout = http.app.state.engine.layout
    ctx = zmq.Context()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.RCVTIMEO, 60_000)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(f"tcp://127.0.0.1:{config.zmq_port}")
        sock.send(msgpack.packb({"endpoint": "get_modality_config"}))
        answer = msgpack.unpackb(sock.recv(), object_hook=nvidia_decode)
    finally:
        sock.close(0)
        ctx.term()
    assert set(answer) == {"video", "state", "action", "language"}
    assert all(isinstance(v, ModalityConfig) for v in answer.values()), answer  # not bare maps
    assert answer["video"].modality_keys == list(layout.cameras)
    assert answer["language"].modality_keys == [layout.wire.language_key]
    assert answer["action"].delta_indices == list(range(http.app.state.engine.action_shape[0]))


def test_metrics_count_the_requests_of_every_protocol(served):
    from openpi_client.websocket_client_policy import WebsocketClientPolicy


    http, zmq_client, config, demo = served
    layout = http.app.state.engine.layout
    stage_total = ("gr00t_request_stage_duration_seconds_count", frozenset({("stage", "total")}))

    def counted(protocol: str, status: str) -> float:
        m = metrics_of(http.get("/metrics").text)
        return m.get(("gr00t_policy_requests_total", frozenset({("protocol", protocol), ("status", status)})), 0.0)

    before = {p: counted(p, "200") for p in ("http", "zmq", "openpi")}
    refused_before = counted("zmq", "400")
    served_before = metrics_of(http.get("/metrics").text).get(stage_total, 0.0)
    assert http.post("/predict", json=demo).status_code == 200
    zmq_client.get_action(groot_observation(demo, layout, layout.wire.language_key))
    assert "error" in zmq_client.call("get_action", {"observation": {}})
    policy = WebsocketClientPolicy(host="127.0.0.1", port=config.openpi_port)
    policy.infer(openpi_observation(demo, layout))
    m = metrics_of(http.get("/metrics").text)
    assert {p: counted(p, "200") - before[p] for p in before} == {"http": 1, "zmq": 1, "openpi": 1}
    assert counted("zmq", "400") == refused_before + 1
    assert m[stage_total] == served_before + 3  # the same stage histograms, whatever the protocol
    for protocol in ("http", "zmq", "openpi"):
        assert m[("gr00t_policy_request_duration_seconds_count", frozenset({("protocol", protocol)}))] >= 1
