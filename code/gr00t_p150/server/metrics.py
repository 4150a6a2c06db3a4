# SPDX-License-Identifier: Apache-2.0
"""Prometheus metrics (``prometheus-client``), one registry per app, served at ``GET /metrics``.

Names follow the ``<namespace>_<what>_<unit>`` convention tt-media-server uses (``…_requests_total``,
``…_request_duration_seconds``); the namespace here is ``gr00t``.
"""

from __future__ import annotations

import statistics

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# 1 ms … 30 s: a tiny CPU model answers in a few ms, a full-size one on a 2-core CPU in tens of seconds.
BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
             20.0, 30.0)
STAGES = ("decode", "encode", "device", "decode_actions", "total")
# Route labels are these paths or "other", so a scanner cannot grow the label set without bound.
ROUTES = ("/predict", "/reset", "/health", "/info", "/demo", "/metrics", "/v1/models", "/docs", "/redoc",
          "/openapi.json")
CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    def __init__(self):
        r = self.registry = CollectorRegistry()
        self.requests = Counter("gr00t_requests", "HTTP requests by route and status", ("route", "status"),
                                registry=r)
        self.stage_seconds = Histogram("gr00t_request_stage_duration_seconds",
                                       "Server-side time of each stage of a served request (every protocol)",
                                       ("stage",), buckets=BUCKETS_S, registry=r)
        self.policy_requests = Counter("gr00t_policy_requests", "Action requests by protocol (http = /predict, zmq "
                                       "= get_action, openpi = infer) and status (HTTP's code for the outcome)",
                                       ("protocol", "status"), registry=r)
        self.policy_seconds = Histogram("gr00t_policy_request_duration_seconds",
                                        "Server-side total time of a served action request, by protocol",
                                        ("protocol",), buckets=BUCKETS_S, registry=r)
        self.queue_depth = Gauge("gr00t_queue_depth", "Requests admitted now (decoding, waiting or on the device)",
                                 registry=r)
        self.queue_limit = Gauge("gr00t_queue_limit", "GR00T_MAX_QUEUE", registry=r)
        self.refused = Counter("gr00t_admission_refused", "Requests refused before any work, by reason",
                               ("reason",), registry=r)
        self.device_errors = Counter("gr00t_device_errors", "Unexpected errors on the device thread", registry=r)
        self.ready = Gauge("gr00t_ready", "1 once boot, warm-up and the fidelity gate are done", registry=r)
        self.warmup_seconds = Gauge("gr00t_warmup_median_seconds", "Median warm-up prediction time", registry=r)
        self.fidelity_pcc = Gauge("gr00t_fidelity_gate_pcc", "Warm-up PCC against the golden (NaN when skipped)",
                                  registry=r)
        self.fidelity_passed = Gauge("gr00t_fidelity_gate_passed", "1 passed, 0 failed, -1 skipped (mock device)",
                                     registry=r)
        self.model = Gauge("gr00t_model_info", "Served model, weights and backend (value 1)",
                           ("version", "model", "stage", "backend", "device", "dtype", "weights_source",
                            "weights_revision", "synthetic"), registry=r)

    def route(self, path: str) -> str:
        return path if path in ROUTES else "other"

    def observe_stages(self, timing_ms: dict[str, float], protocol: str) -> None:
        """A served request's stage times (ms), whichever protocol it came by."""
        for stage in STAGES:
            if stage in timing_ms:
                self.stage_seconds.labels(stage).observe(timing_ms[stage] / 1e3)
        if "total" in timing_ms:
            self.policy_seconds.labels(protocol).observe(timing_ms["total"] / 1e3)

    def answered(self, protocol: str, status: int) -> None:
        """One action request answered over ``protocol`` with ``status`` (200, or its refusal's HTTP code)."""
        self.policy_requests.labels(protocol, str(status)).inc()

    def booted(self, engine) -> None:
        """Record what boot found (called once the engine is ready)."""
        from .contract import model_name

        boot, b = engine.booted, engine.describe_backend()
        c, w = boot.config, boot.weights
        self.model.labels(c.version, model_name(c.version), engine.stage, str(b.get("name", "")),
                          str(b.get("device", "")), str(b.get("dtype", "")), w.source, w.revision or "",
                          str(w.synthetic is not None).lower()).set(1)
        if boot.warmup_ms:
            self.warmup_seconds.set(statistics.median(boot.warmup_ms) / 1e3)
        f = boot.fidelity
        self.fidelity_pcc.set(f.pcc if f else float("nan"))
        self.fidelity_passed.set(-1 if f is None else int(f.passed))
        self.ready.set(1)

    def render(self) -> bytes:
        return generate_latest(self.registry)
