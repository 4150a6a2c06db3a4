# SPDX-License-Identifier: Apache-2.0
"""The load phases: the campaign (``--requests`` from ``--concurrency`` connections, RSS sampled), the
decompression-amplification burst and the stalled sockets."""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from .client import Client
from .hostile import Corpus
from .judge import MAX_REFUSAL_S, Stats
from .process import RssSampler, round1, rss_report, tree_rss_mib


def run_campaign(target: dict, corpus: Corpus, args, sampler: RssSampler) -> tuple[Stats, dict]:
    rss = (lambda: tree_rss_mib(target["pid"])) if target["pid"] else None
    stats = Stats("campaign", args.progress_every, rss)
    counter = iter(range(args.requests))
    counter_lock = threading.Lock()

    def next_index() -> int | None:
        with counter_lock:
            return next(counter, None)

    def worker() -> None:
        client = Client(target["host"], target["port"], args.timeout, args.api_key)
        while (i := next_index()) is not None:
            spec = corpus.build(i)
            stats.record(spec, client.send(spec), index=i)
        client.close()

    print(f"campaign: {args.requests} requests, concurrency {args.concurrency}, "
          f"valid fraction {args.valid_fraction}, seed {args.seed}", flush=True)
    sampler.set_phase("campaign", lambda: stats.done)
    with ThreadPoolExecutor(args.concurrency) as pool:
        for future in [pool.submit(worker) for _ in range(args.concurrency)]:
            future.result()
    sampler.set_phase("idle")
    final = tree_rss_mib(target["pid"])
    return stats, rss_report(sampler, final, min(500, max(1, args.requests // 2)))


def probe_amplification_size(target: dict, corpus: Corpus, args) -> dict:
    """Send the largest-frame PNG once; report whether the server refused it by its header alone."""
    outcome = Client(target["host"], target["port"], args.timeout, args.api_key).send(corpus.amplification())
    rule = ""
    try:
        rule = json.loads(outcome.body)["error"]["rule"]
    except (ValueError, KeyError, TypeError):
        pass
    by_header = any(word in rule for word in (" px", "width/height"))
    return {"frame_wh": list(corpus.max_wh), "status": outcome.status, "rule": rule[:300],
            "refused_by_header": by_header}


def run_amplification(target: dict, corpus: Corpus, args, sampler: RssSampler) -> dict:
    stats = Stats("amplification")
    probe = probe_amplification_size(target, corpus, args)
    spec = corpus.amplification()
    clients = [Client(target["host"], target["port"], args.timeout, args.api_key) for _ in range(16)]
    before, hwm_before = tree_rss_mib(target["pid"]), tree_rss_mib(target["pid"], "VmHWM")
    print(f"amplification: 16 connections x 5 rounds, frames declaring {corpus.max_wh[0]}x{corpus.max_wh[1]} "
          f"with one row ({len(spec.body)} byte body)", flush=True)
    sampler.set_phase("amplification", lambda: stats.done)
    t0 = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        for _ in range(5):
            for outcome in pool.map(lambda client: client.send(spec), clients):
                stats.record(spec, outcome)
    time.sleep(1.0)  # one more sample or two after the last answer
    sampler.set_phase("idle")
    for client in clients:
        client.close()
    peaks = [s[3] for s in sampler.phase_samples("amplification")]
    return {"probe": probe, "body_bytes": len(spec.body), "seconds": round(time.monotonic() - t0, 2),
            "rss_before_mib": round1(before), "peak_rss_mib": max(peaks) if peaks else None,
            "hwm_before_mib": round1(hwm_before), "hwm_after_mib": round1(tree_rss_mib(target["pid"], "VmHWM")),
            **{k: v for k, v in stats.summary().items() if k in ("by_kind", "failures", "failure_examples",
                                                                  "slowest_refusal", "requests")}}


def stall_socket(host: str, port: int, payload: bytes, cap: float) -> dict:
    """Send ``payload`` and nothing more; wait for a response or a close, at most ``cap`` s."""
    t0 = time.monotonic()
    data, status, outcome = b"", None, "open at cap"
    try:
        sock = socket.create_connection((host, port), timeout=10)
        sock.sendall(payload)
    except OSError as exc:
        return {"outcome": f"connect failed: {type(exc).__name__}", "status": None, "seconds": 0.0}
    try:
        while (remaining := cap - (time.monotonic() - t0)) > 0:
            sock.settimeout(remaining)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            except OSError:
                outcome = "reset"
                break
            if not chunk:
                outcome = "closed"
                break
            data += chunk
            if status is None and data.startswith(b"HTTP/") and b"\r\n" in data:
                status = int(data.split(b" ", 2)[1])
            if status is not None and b"\r\n\r\n" in data:
                outcome = "answered"
                break
    finally:
        sock.close()
    return {"outcome": outcome, "status": status, "seconds": round(time.monotonic() - t0, 2)}


def stall_probe(target: dict, corpus: Corpus, args, delay: float) -> dict:
    time.sleep(delay)
    spec = corpus.valid(random.Random(f"{args.seed}:stall:{delay}"))
    outcome = Client(target["host"], target["port"], args.timeout, args.api_key).send(spec)
    return {"at_s": delay, "status": outcome.status, "error": outcome.error, "seconds": round(outcome.seconds, 3)}


def run_stalls(target: dict, corpus: Corpus, args) -> dict:
    host, port, cap = target["host"], target["port"], args.stall_cap
    header_stalls = [b"POST /predict HTTP/1.1\r\nHost: x\r\n", b"POST /predict HTT"]  # in the headers, request line
    body_stall = (b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n" + b'{"images":')
    print(f"stalls: 8 sockets stopping in the request line or headers, 8 in the body (cap {cap:.0f} s), "
          f"a valid request at 2 s and {args.stall_bound / 2:.0f} s", flush=True)
    with ThreadPoolExecutor(18) as pool:
        heads = [pool.submit(stall_socket, host, port, header_stalls[k % 2], cap) for k in range(8)]
        bodies = [pool.submit(stall_socket, host, port, body_stall, cap) for _ in range(8)]
        probes = [pool.submit(stall_probe, target, corpus, args, d) for d in (2.0, args.stall_bound / 2)]
        result = {"headers": [f.result() for f in heads], "body": [f.result() for f in bodies],
                  "probes": [f.result() for f in probes]}
    stalls = result["headers"] + result["body"]
    result["cap_s"] = cap
    result["bound_s"] = args.stall_bound
    result["max_close_s"] = max(s["seconds"] for s in stalls)
    result["all_closed_within_bound"] = all(s["outcome"] in ("closed", "answered", "reset")
                                            and s["seconds"] <= args.stall_bound for s in stalls)
    result["probes_ok"] = all(p["status"] == 200 and p["seconds"] < MAX_REFUSAL_S for p in result["probes"])
    return result
