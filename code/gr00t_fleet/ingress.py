# SPDX-License-Identifier: Apache-2.0
"""The fleet's front door: the single server's HTTP contract in front of the policy replicas (FLEET.md).

Every request is forwarded whole to one replica, whose single-server app answers it; the ingress only chooses
the replica (``router.py``: by ``session_id`` for /predict and /reset, else the least busy), retries where that is
safe, and says which replica answered (header ``X-Gr00t-Replica``; /predict's body gains ``fleet``:
``{"replica", "moved_from"?}``). /health, /info and /metrics ask every replica and report the fleet.

Failover:
- A replica that answers 503 never ran the request (not ready, draining, or its backend lost): the request goes
  once to another replica, and a lost one is set aside until Ray's health check replaces it.
- A replica that dies under a request (process killed): the request is sent once to another replica when the
  answer cannot depend on the replica (everything but real-time chunking from the session's memory: the
  single server's noise is seeded, so any replica computes the same chunk); a server-side RTC request gets
  503 + ``Retry-After: 1`` instead, and its client resends, with ``rtc.prefix`` to keep chunking continuous.
- Ray's queue in front of the replicas is bounded (the deployment's ``max_queued_requests``); past it the
  ingress answers 429 + ``Retry-After`` as a full single server does. A replica's own admission limit answers
  429 itself (its ``max_ongoing_requests`` is above ``GR00T_MAX_QUEUE``, so Ray delivers the request to it).
"""


import asyncio
import json
import logging
import time
from collections import OrderedDict

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from .asgi import Exchange
from .metrics import FleetMetrics, merge
from .registry import live_replicas, no_replica_live, set_aside

log = logging.getLogger("ray.serve")
api = FastAPI(title="GR00T policy fleet", description="The GR00T policy server's HTTP contract over Ray Serve "
                                                       "replicas (FLEET.md).")
SESSION_ROUTES = ("/predict", "/reset")
MAX_OWNERS = 100_000  # sessions whose last replica the ingress remembers (to say when one moved)
SET_ASIDE_S = 30.0


def error(status: int, rule: str, retry_after: int | None = None, field: str | None = None) -> JSONResponse:
    """The single server's error shape."""
    body = {"field": field, "rule": rule, "message": f"{field}: {rule}" if field else rule}
    headers = {}
    if retry_after is not None:
        body["retry_after_s"] = retry_after
        headers["Retry-After"] = str(retry_after)
    return JSONResponse({"error": body}, status_code=status, headers=headers)


def routing_fields(body: bytes) -> tuple[str | None, bool]:
    """``(session_id, safe to retry on another replica)`` of a /predict or /reset body; a body that is not a JSON
    object routes as sessionless (its replica answers 400)."""
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None, True
    if not isinstance(value, dict):
        return None, True
    session = value.get("session_id")
    rtc = value.get("rtc")
    server_memory = isinstance(rtc, dict) and rtc.get("prefix") is None  # RTC steered by the dead replica's chunk
    return (session if isinstance(session, str) else None), not server_memory


def _response(replica: str, ex: Exchange, extra: dict | None = None) -> Response:
    headers = {k: v for k, v in ex.headers if k.lower() not in ("content-length", "content-type")}
    headers["X-Gr00t-Replica"] = replica
    body = ex.body
    if extra is not None and ex.status == 200 and body.endswith(b"}"):  # /predict's JSON object gains "fleet"
        body = body[:-1] + b',"fleet":' + json.dumps(extra, separators=(",", ":")).encode() + b"}"
    media = next((v for k, v in ex.headers if k.lower() == "content-type"), None)
    return Response(body, status_code=ex.status, headers=headers, media_type=media)


class FleetIngress:
    def __init__(self, policy, max_body_bytes: int = 64 * 2**20, forward_timeout_s: float = 600.0,
                 describe_timeout_s: float = 5.0):
        self.policy = policy  # the PolicyReplica deployment's handle (its router: router.SessionAffinityRouter)
        self.max_body_bytes, self.forward_timeout_s = max_body_bytes, forward_timeout_s
        self.describe_timeout_s = describe_timeout_s
        self.metrics = FleetMetrics()
        self.owners: OrderedDict[str, str] = OrderedDict()

    # ---- forwarding -----------------------------------------------------------------------------
    async def _body(self, request: Request) -> bytes | None:
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_body_bytes:
            return None
        chunks, seen = [], 0
        async for chunk in request.stream():
            seen += len(chunk)
            if seen > self.max_body_bytes:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    async def _send(self, method: str, path: str, headers: list[tuple[str, str]], body: bytes, *,
                    session: str | None = None, replica: str | None = None, avoid: list[str] | None = None,
                    timeout_s: float | None = None) -> tuple[str, Exchange]:
        prefer = None if session is None else self.owners.get(session)  # the replica that served it last
        call = self.policy.forward.remote(method, path, headers, body, session=session, replica=replica,
                                          avoid=avoid or [], prefer=prefer)
        return await self._call(call, timeout_s or self.forward_timeout_s)

    @staticmethod
    async def _call(response, timeout_s: float):
        """A handle call's result within ``timeout_s``; past it the call is cancelled (also while still routing)."""
        try:
            return await asyncio.wait_for(response, timeout_s)
        except TimeoutError:
            response.cancel()
            raise

    async def forward(self, request: Request, route: str) -> Response:
        """``request`` to its replica, with the failover rules of this module's docstring."""
        import ray.exceptions
        from ray.serve.exceptions import BackPressureError

        t0 = time.perf_counter()
        body = await self._body(request)
        if body is None:
            return error(413, f"body over GR00T_MAX_BODY_BYTES ({self.max_body_bytes} bytes)", field="body")
        session, retry_safe = routing_fields(body) if route in SESSION_ROUTES else (None, True)
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in ("host", "transfer-encoding",
                                                                                    "content-length")]
        headers.append(("content-length", str(len(body))))
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        if no_replica_live():  # every replica died or is still booting: say so now rather than wait for one
            return error(503, "no policy replica is ready (booting or replaced); retry", retry_after=1)
        avoid: list[str] = []
        for attempt in (0, 1):
            try:
                replica, ex = await self._send(request.method, path, headers, body, session=session, avoid=avoid)
            except BackPressureError:
                return error(429, "every replica's queue is full (the fleet's max_queued_requests)", retry_after=1)
            except TimeoutError:
                return error(504, f"no answer from a replica within {self.forward_timeout_s:g} s")
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
                if attempt == 0 and retry_safe:
                    if session is not None and session in self.owners:  # most likely the replica that died
                        avoid.append(self.owners[session])
                    self.metrics.retries.labels("replica_died").inc()
                    log.warning("gr00t fleet: a replica died under %s %s (%s); sending it to another", request.method,
                                route, type(exc).__name__)
                    continue
                self.metrics.failover_errors.inc()
                return error(503, "the replica serving this session died during the request; resend it (with "
                                  "rtc.prefix to continue real-time chunking on the next replica)", retry_after=1)
            if ex.status == 503 and attempt == 0:  # not ready, draining or lost: it never ran the request
                set_aside(replica, SET_ASIDE_S)
                avoid.append(replica)
                self.metrics.retries.labels("replica_unavailable").inc()
                continue
            break
        extra = None
        if route == "/predict":
            extra = {"replica": replica}
            if session is not None and ex.status == 200:
                before = self.owners.pop(session, None)
                self.owners[session] = replica
                if len(self.owners) > MAX_OWNERS:
                    self.owners.popitem(last=False)
                if before is not None and before != replica:
                    extra["moved_from"] = before
                    self.metrics.moves.inc()
        elif route == "/reset" and session is not None:
            self.owners.pop(session, None)
        self.metrics.forward_seconds.labels(route).observe(time.perf_counter() - t0)
        self.metrics.requests.labels(route, str(ex.status)).inc()
        return _response(replica, ex, extra)

    # ---- the fleet's own views ------------------------------------------------------------------
    async def replica_ids(self) -> list[str]:
        ids = live_replicas()
        if not ids:  # this process's router starts with the first call, which waits for a ready replica
            try:
                await self._call(self.policy.describe.remote(), self.describe_timeout_s)
            except TimeoutError:  # none ready yet (booting): /health says unavailable
                return []
            ids = live_replicas()
        return ids

    async def each(self, method: str, path: str, request: Request) -> dict[str, Exchange | BaseException]:
        """``method path`` on every live replica (pinned), with the client's headers (auth). One after another:
        Ray gives every handle call made while serving one ingress request the same internal request id, and its
        router matches a chosen replica to a waiting request by that id, so concurrent calls would wait forever."""
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in ("host", "content-length")]
        answers: dict[str, Exchange | BaseException] = {}
        for r in await self.replica_ids():
            try:
                answers[r] = (await self._send(method, path, headers, b"", replica=r,
                                               timeout_s=self.describe_timeout_s))[1]
            except Exception as exc:  # reported per replica
                answers[r] = exc
        return answers

    async def describe_all(self) -> list[dict]:
        """Every live replica's ``describe()``, one after another (see ``each``)."""
        out = []
        for r in await self.replica_ids():
            try:
                out.append(await self._call(self.policy.describe.remote(replica=r), self.describe_timeout_s))
            except Exception as exc:  # reported per replica
                out.append({"id": r, "state": "unreachable", "error": type(exc).__name__})
        return out


# ---- routes: module-level functions on the module's app (the deployment pickles ``api`` by reference, so each
# ingress replica imports it with these routes), each reaching its replica's ``FleetIngress`` instance ----------
def ingress() -> FleetIngress:
    from ray import serve

    return serve.get_replica_context().servable_object


@api.post("/predict")
async def predict(request: Request):
    return await ingress().forward(request, "/predict")


@api.post("/reset")
async def reset(request: Request):
    return await ingress().forward(request, "/reset")


@api.get("/health")
async def health(request: Request):
    """200 while at least one replica serves (``status`` ok, or ``degraded`` when some do not); 503 when
    none does. The single server's fields, summed over the replicas, and each replica's own /health."""
    answers = await ingress().each("GET", "/health", request)
    replicas, bodies = [], []
    for r, a in sorted(answers.items()):
        if isinstance(a, BaseException):
            replicas.append({"id": r, "http_status": None, "status": "unreachable", "error": type(a).__name__})
            continue
        try:
            b = json.loads(a.body)
        except ValueError:
            b = {}
        replicas.append({"id": r, "http_status": a.status, "status": b.get("status", "not_ready")})
        if "queue_depth" in b:
            bodies.append(b)
    serving = [r for r in replicas if r["http_status"] == 200]
    status = "ok" if serving and len(serving) == len(replicas) else "degraded" if serving else "unavailable"
    errors = [b["last_device_error"] for b in bodies if b.get("last_device_error")]
    body = {"status": status, "version": bodies[0]["version"] if bodies else None,
            "weights_synthetic": any(b.get("weights_synthetic") for b in bodies),
            "queue_depth": sum(b["queue_depth"] for b in bodies),
            "queue_limit": sum(b["queue_limit"] for b in bodies if b.get("status") == "ok"),
            "device_errors": sum(b.get("device_errors", 0) for b in bodies),
            "last_device_error": max(errors, key=lambda e: e.get("at", "")) if errors else None,
            "replicas": replicas}
    return JSONResponse(body, status_code=200 if serving else 503)


@api.get("/info")
async def info(request: Request):
    """One serving replica's /info (what is served: the same on every replica), with ``fleet``: every
    replica's state, pid, host, device and sessions, and how requests are routed."""
    described = await ingress().describe_all()
    response = await ingress().forward(request, "/info")
    if response.status_code != 200:
        return response
    body = json.loads(response.body)
    body["fleet"] = {"replicas": described, "routing": "session_id: rendezvous hashing over the live replica "
                     "ids (router.SessionAffinityRouter); no session: fewest requests in flight",
                     "metrics": "per replica (label replica) plus the ingress's gr00t_fleet_*",
                     "failover": "503 from a replica: sent once to another; a replica that dies under a "
                                 "request: sent once to another unless it asked for server-side RTC (503 + "
                                 "Retry-After)"}
    return JSONResponse(body)


@api.get("/metrics")
async def metrics(request: Request):
    answers = await ingress().each("GET", "/metrics", request)
    for a in answers.values():
        if not isinstance(a, BaseException) and a.status == 401:
            return _response("-", a)
    texts = {r: a.body.decode() for r, a in answers.items() if not isinstance(a, BaseException) and a.status == 200}
    from prometheus_client.exposition import CONTENT_TYPE_LATEST

    return Response(merge(ingress().metrics, texts), media_type=CONTENT_TYPE_LATEST)


@api.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"],
               include_in_schema=False)
async def other(path: str, request: Request):
    """Everything else (/demo, /v1/models, /docs, /openapi.json, unknown paths): any replica answers."""
    return await ingress().forward(request, "/" + path)
