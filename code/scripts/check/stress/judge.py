# SPDX-License-Identifier: Apache-2.0
"""The checks on every answer (``Stats``): allowed statuses only, a JSON ``error`` body on every refusal with no
traceback or server path in it, sane Retry-After and X-Request-ID, seeds echoed, bit-identical actions for
repeated seeds (determinism); plus the counts and latencies a phase reports."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

from .client import Outcome
from .hostile import Spec

ALLOWED_REFUSALS = (400, 408, 413, 415, 429)  # plus 504 always, 503 during shutdown
LEAK_MARKERS = ("Traceback", 'File "', "/work/", "/tmp/", "/home/", "/usr/lib", "site-packages")
MAX_REFUSAL_S = 5.0
MAX_XRID_CHARS = 128


def snippet(data: bytes, limit: int = 300) -> str:
    return data[:limit].decode("utf-8", "replace")


def error_body_ok(body: bytes) -> bool:
    try:
        parsed = json.loads(body)
    except ValueError:
        return False
    return isinstance(parsed, dict) and isinstance(parsed.get("error"), dict)


def leaks(body: bytes) -> list[str]:
    text = body.decode("utf-8", "replace")
    return [m for m in LEAK_MARKERS if m in text]


def xrid_ok(value: str | None) -> bool:
    return value is None or (len(value) <= MAX_XRID_CHARS and value.isascii() and value.isprintable())


def retry_after_ok(value: str | None) -> bool:
    return value is not None and value.strip().isdigit() and int(value) > 0


class Stats:
    """Everything recorded about one phase's answers (thread-safe)."""

    def __init__(self, name: str, progress_every: int = 0, rss=None):
        self.name = name
        self.lock = threading.Lock()
        self.by_kind: dict[str, Counter] = {}
        self.failures: Counter = Counter()
        self.examples: list[dict] = []
        self.accepted: Counter = Counter()  # hostile kinds answered 200
        self.server_errors: Counter = Counter()  # kind -> count of unexpected 5xx
        self.valid_ms: list[float] = []
        self.slowest_refusal: dict = {"seconds": 0.0}
        self.actions: dict[str, object] = {}
        self.determinism = {"compared": 0, "mismatched": 0, "keys": 0}
        self.done = 0
        self.progress_every = progress_every
        self.rss = rss
        self.t0 = time.monotonic()

    def fail(self, reason: str, spec: Spec, outcome: Outcome, index: int | None, note: str = "") -> None:
        self.failures[reason] += 1
        if len(self.examples) < 100:
            self.examples.append({"reason": reason, "kind": spec.kind, "index": index, "status": outcome.status,
                                  "error": outcome.error, "note": note, "body": snippet(outcome.body)})

    def record(self, spec: Spec, outcome: Outcome, index: int | None = None, shutdown: bool = False) -> None:
        with self.lock:
            label = outcome.error.split(":")[0] if outcome.error else str(outcome.status)
            self.by_kind.setdefault(spec.kind, Counter())[label] += 1
            self.judge(spec, outcome, index, shutdown)
            self.done += 1
            if self.progress_every and self.done % self.progress_every == 0:
                rss = self.rss() if self.rss else None
                rss_text = f", server RSS {rss:.0f} MiB" if rss else ""
                print(f"  [{self.name}] {self.done} requests, {time.monotonic() - self.t0:.0f} s{rss_text}",
                      flush=True)

    def judge(self, spec: Spec, outcome: Outcome, index, shutdown: bool) -> None:
        if outcome.error == "HANG":
            return self.fail("hang", spec, outcome, index)
        if outcome.error:
            if not shutdown:
                self.fail("conn_error", spec, outcome, index, outcome.error)
            return None
        if outcome.status == 200:
            return self.judge_ok(spec, outcome, index)
        return self.judge_refusal(spec, outcome, index, shutdown)

    def judge_ok(self, spec: Spec, outcome: Outcome, index) -> None:
        if spec.expect != "ok":
            self.accepted[spec.kind] += 1
            if spec.expect == "refuse":
                self.fail("forbidden_accept", spec, outcome, index)
        try:
            answer = json.loads(outcome.body)
            actions = answer["actions"]
        except (ValueError, KeyError, TypeError):
            return self.fail("bad_200_body", spec, outcome, index)
        if spec.expect == "ok" or spec.kind.startswith("valid"):
            self.valid_ms.append(outcome.seconds * 1e3)
        if spec.check_xrid and not xrid_ok(outcome.headers.get("x-request-id")):
            self.fail("bad_x_request_id", spec, outcome, index, repr(outcome.headers.get("x-request-id"))[:200])
        if spec.seed is not None and answer.get("seed") != spec.seed:
            self.fail("seed_not_echoed", spec, outcome, index, f"sent {spec.seed}, got {answer.get('seed')}")
        if spec.det_key:
            self.compare_actions(spec, outcome, index, actions)
        return None

    def compare_actions(self, spec: Spec, outcome: Outcome, index, actions) -> None:
        first = self.actions.setdefault(spec.det_key, actions)
        if first is actions:
            self.determinism["keys"] += 1
            return
        self.determinism["compared"] += 1
        if first != actions:
            self.determinism["mismatched"] += 1
            self.fail("nondeterministic", spec, outcome, index, spec.det_key)

    def judge_refusal(self, spec: Spec, outcome: Outcome, index, shutdown: bool) -> None:
        status = outcome.status
        if outcome.seconds > self.slowest_refusal["seconds"]:
            self.slowest_refusal = {"seconds": round(outcome.seconds, 4), "kind": spec.kind, "status": status,
                                    "index": index, "body_bytes": len(spec.body)}
        if status == 422:
            self.fail("status_422", spec, outcome, index)
        elif status >= 500 and not (status == 504 or (status == 503 and shutdown)):
            self.server_errors[spec.kind] += 1
            self.fail("unexpected_5xx", spec, outcome, index)
        elif status < 500 and status not in ALLOWED_REFUSALS:
            self.fail("unexpected_status", spec, outcome, index)
        if spec.expect == "ok" and status in (400, 413, 415):
            self.fail("valid_refused", spec, outcome, index)
        if spec.statuses and status not in spec.statuses:
            self.fail("wrong_status", spec, outcome, index, f"expected {spec.statuses}")
        if status == 429 and not retry_after_ok(outcome.headers.get("retry-after")):
            self.fail("bad_retry_after", spec, outcome, index, repr(outcome.headers.get("retry-after")))
        if not error_body_ok(outcome.body):
            self.fail("bad_error_body", spec, outcome, index)
        found = leaks(outcome.body)
        if found:
            self.fail("leak_in_error", spec, outcome, index, ", ".join(found))

    def summary(self) -> dict:
        ms = sorted(self.valid_ms)
        return {
            "requests": self.done,
            "by_kind": {k: dict(sorted(v.items())) for k, v in sorted(self.by_kind.items())},
            "failures": dict(self.failures),
            "failure_examples": self.examples,
            "accepted_mutations": dict(self.accepted),
            "unexpected_5xx_by_kind": dict(self.server_errors),
            "valid_latency_ms": {"n": len(ms), "p50": percentile(ms, 50), "p99": percentile(ms, 99),
                                 "max": round(ms[-1], 2) if ms else None},
            "slowest_refusal": self.slowest_refusal,
            "determinism": self.determinism,
            "seconds": round(time.monotonic() - self.t0, 2),
        }


def percentile(ordered: list[float], pct: float) -> float | None:
    if not ordered:
        return None
    return round(ordered[min(len(ordered) - 1, int(round(pct / 100 * (len(ordered) - 1))))], 2)
