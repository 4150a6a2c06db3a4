# SPDX-License-Identifier: Apache-2.0
"""Long-run fuzz and stress campaign against a real GR00T policy server process.

The tool starts the server as a subprocess (uvicorn, ``gr00t_p150.server.app:app``), or attacks one that is
already running (``--url``), and then runs these phases:

1. campaign      --requests N POST /predict calls from --concurrency keep-alive connections: valid requests
                 (the GET /demo request with a seed from a small pool, or with its own noise) mixed with hostile
                 mutations (missing keys, wrong types, NaN/1e400, lone surrogates and invalid UTF-8 in keys,
                 megabyte instructions, broken base64, truncated PNGs, PNGs whose header lies about their size,
                 JPEG, bad bodies and content types, a lying Content-Length, odd X-Request-ID headers, ...).
                 Every answer is checked: allowed statuses only, a JSON ``error`` body on every refusal, no
                 traceback or server path in it, identical actions for repeated seeds. RSS is sampled throughout.
2. amplification 16 connections x 5 rounds of a small request whose frames are PNGs declaring the largest frame
                 the server accepts by header, with one row of pixel data; peak RSS is reported.
3. stalls        8 sockets that stop inside the headers and 8 that stop inside the body; when does the server
                 close them (408 or close), and is a fresh valid request still answered meanwhile.
4. SIGTERM       (only for a server this tool started) 4 requests in flight, then SIGTERM: are they answered and
                 how does the process exit; then (--double-sigterm) a fresh server, 8 requests, SIGTERM twice.

It prints a summary with PASS/FAIL per criterion, writes everything to a JSON file and exits 0 only when every
criterion passes (1 when one fails, 2 when the server could not be started or reached). Mutations are drawn
from a fixed --seed, so a run is reproducible request by request.

Standard library only (Pillow, when installed, adds a JPEG case); nothing of the server's code is imported. The
parts live in ``stress/`` (hostile requests, HTTP client, checks, server process, phases, SIGTERM drain, report);
``cpu_model`` comes from ``../bench_http.py``.

    .venv/bin/python code/scripts/check/stress_server.py --version n15 --quick --http-protocol h11
    .venv/bin/python code/scripts/check/stress_server.py --version n17 --requests 10000 --concurrency 8
    .venv/bin/python code/scripts/check/stress_server.py --url http://127.0.0.1:20000 --pid 12345 --quick
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
import tempfile
import urllib.parse
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # code/scripts (after check/, which holds stress/)
from bench_http import cpu_model
from stress.client import get_json
from stress.drain import run_sigterm
from stress.hostile import Corpus
from stress.phases import run_amplification, run_campaign, run_stalls
from stress.process import REPO, RssSampler, Server, free_port
from stress.report import criteria, print_summary


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", choices=("n15", "n16", "n17"), default="n15",
                    help="GR00T_VERSION of the started server (n16: --env GR00T_EMBODIMENT=... picks the tag)")
    ap.add_argument("--weights", default="synthetic:tiny", help="GR00T_WEIGHTS (default synthetic:tiny)")
    ap.add_argument("--cache", help="GR00T_CACHE (default: a temporary one, deleted at the end)")
    ap.add_argument("--env", action="append", default=[], metavar="K=V", help="extra server environment")
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs uvicorn")
    ap.add_argument("--http-protocol", default="gr00t_p150.server.web.h11:GuardedH11Protocol",
                    help="uvicorn --http value (h11 for the stock protocol)")
    ap.add_argument("--port", type=int, default=0, help="port of the started server (default: a free one)")
    ap.add_argument("--url", help="attack this running server instead of starting one")
    ap.add_argument("--pid", type=int, help="with --url: the server's pid, for RSS sampling")
    ap.add_argument("--api-key", help="send Authorization: Bearer KEY")
    ap.add_argument("--boot-timeout", type=float, default=600.0)
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=30.0, help="client timeout per request; past it = HANG")
    ap.add_argument("--valid-fraction", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=0, help="seed of the mutation choices")
    ap.add_argument("--amplification", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--stalls", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--stall-bound", type=float, default=40.0, help="stalled sockets must be closed by then (s)")
    ap.add_argument("--stall-cap", type=float, default=60.0, help="stop waiting on a stalled socket after (s)")
    ap.add_argument("--sigterm", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--double-sigterm", action=argparse.BooleanOptionalAction, default=None,
                    help="also: a fresh server, 8 requests, SIGTERM twice (default on, off with --quick)")
    ap.add_argument("--exit-timeout", type=float, default=120.0, help="wait this long for exit after SIGTERM")
    ap.add_argument("--progress-every", type=int, default=1000)
    ap.add_argument("--out-dir", help="server logs go here (default: a temporary directory)")
    ap.add_argument("--json", help="result file (default benchmarks/results/stress_<version>.json)")
    ap.add_argument("--quick", action="store_true",
                    help="self-test: 600 requests, concurrency 4, stall cap 45 s, no double SIGTERM")
    args = ap.parse_args(argv)
    if args.quick:
        args.requests, args.concurrency = 600, 4
        args.double_sigterm = bool(args.double_sigterm)
        args.stall_cap = min(args.stall_cap, max(45.0, args.stall_bound + 5))
        args.progress_every = min(args.progress_every, 100)
    args.double_sigterm = args.double_sigterm is not False
    args.out_dir = Path(args.out_dir or tempfile.mkdtemp(prefix="stress_server_"))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    args.own_cache = not args.cache  # a temporary GR00T_CACHE is deleted at the end (the logs stay)
    args.cache = Path(args.cache) if args.cache else args.out_dir / "cache"
    args.json = Path(args.json) if args.json else REPO / "benchmarks" / "results" / f"stress_{args.version}.json"
    return args


def start_server(args, name: str) -> Server | None:
    server = Server(args, args.port or free_port(), args.out_dir / f"{name}.log")
    server.start()
    if server.wait_ready(args.boot_timeout):
        return server
    server.stop()
    return None


def target_of(args, server: Server | None) -> dict:
    if server is not None:
        return {"host": "127.0.0.1", "port": server.port, "pid": server.pid}
    url = urllib.parse.urlsplit(args.url)
    return {"host": url.hostname or "127.0.0.1", "port": url.port or 80, "pid": args.pid}


def fetch_corpus(target: dict, args) -> Corpus | None:
    try:
        status, demo = get_json(target["host"], target["port"], "/demo", auth=args.api_key)
        _, info = get_json(target["host"], target["port"], "/info", auth=args.api_key)
    except OSError as exc:
        print(f"stress_server: server unreachable: {exc}", file=sys.stderr)
        return None
    if status != 200 or "request" not in demo:
        print(f"stress_server: GET /demo answered {status}", file=sys.stderr)
        return None
    if info.get("version") and info["version"] != args.version:
        args.version = info["version"]
    return Corpus(demo["request"], info.get("contract") or {}, args.seed, args.valid_fraction)


def run_phases(args, server: Server | None, result: dict) -> None:
    target = target_of(args, server)
    result["target"] = f"http://{target['host']}:{target['port']} (pid {target['pid']})"
    corpus = fetch_corpus(target, args)
    if corpus is None:
        raise SystemExit(2)
    result["mutation_kinds"] = sorted(corpus.kinds)
    sampler = RssSampler(target["pid"])
    sampler.start()
    stats, result["rss"] = run_campaign(target, corpus, args, sampler)
    result["campaign"] = stats.summary()
    if args.amplification:
        result["amplification"] = run_amplification(target, corpus, args, sampler)
    sampler.stop_event.set()
    if args.stalls:
        result["stalls"] = run_stalls(target, corpus, args)
    if server is not None and args.sigterm:
        result["sigterm"] = {"single": run_sigterm(server, corpus, args, 4, double=False)}
        print(f"SIGTERM: exit {result['sigterm']['single']['exit_status']} "
              f"after {result['sigterm']['single']['exit_s']} s", flush=True)
        if args.double_sigterm:
            again = start_server(args, "server_double_sigterm")
            if again is not None:
                try:
                    result["sigterm"]["double"] = run_sigterm(again, corpus, args, 8, double=True)
                finally:
                    again.stop()


def redacted(argv: list[str]) -> list[str]:
    """The command line without the value of --api-key or of --env settings (they may hold secrets)."""
    out = list(argv)
    for k, item in enumerate(out[:-1]):
        if item == "--api-key":
            out[k + 1] = "***"
        elif item == "--env":
            out[k + 1] = out[k + 1].partition("=")[0] + "=***"
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    result = {"command": redacted(sys.argv), "date": now,
              "cpu": cpu_model(), "version": args.version, "weights": args.weights,
              "http_protocol": args.http_protocol if not args.url else None, "out_dir": str(args.out_dir),
              "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
                          if k not in ("api_key", "env")}}
    server = None
    if not args.url:
        server = start_server(args, "server")
        if server is None:
            return 2
    try:
        run_phases(args, server, result)
    finally:
        if server is not None:
            server.stop()
        if args.own_cache:
            shutil.rmtree(args.cache, ignore_errors=True)
    result["criteria"] = criteria(result["campaign"], result.get("amplification"), result["rss"],
                                  result.get("stalls"), result.get("sigterm"))
    result["pass"] = all(v["pass"] is not False for v in result["criteria"].values())
    result["json"] = str(args.json)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1, default=str))
    print_summary(result)
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
