#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Smoke test of a running GR00T policy server: health, info, the demo round trip against its expected
actions (PCC), repeat determinism, and that a malformed request is refused with 400.

A server on the mock P150 (``GR00T_TT_MOCK=1``, /info ``backend.mock``) computes nothing, so its round trip
is checked for the action groups and shapes only, and the verdict line says ``MOCK``.

    python code/gr00t_p150/server/smoke_test.py --url http://127.0.0.1:20000

Prints one PASS/FAIL line (details of each check on stderr with -v); exit code 0 on PASS, 1 on FAIL.
Standard library only, so it runs anywhere a robot's client runs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import urllib.error
import urllib.request


def call(url: str, path: str, body: dict | None = None, timeout: float = 300.0) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url.rstrip("/") + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        try:
            return err.code, json.loads(err.read())
        except json.JSONDecodeError:
            return err.code, {}


def pcc(a: list[float], b: list[float]) -> float:
    n = len(a)
    ma, mb = sum(a) / n, sum(b) / n
    sab = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    saa = sum((x - ma) ** 2 for x in a)
    sbb = sum((y - mb) ** 2 for y in b)
    return 1.0 if saa == sbb == 0 else sab / math.sqrt(saa * sbb) if saa and sbb else 0.0


def flat(actions: dict, keys: list[str]) -> list[float]:
    return [v for k in keys for row in actions[k] for v in row]


def run_checks(url: str) -> list[tuple[str, bool, str]]:
    checks: list[tuple[str, bool, str]] = []

    status, health = call(url, "/health")
    checks.append(("health", status == 200 and health.get("status") == "ok", f"{status} {health}"))
    status, info = call(url, "/info")
    gate = (info.get("fidelity") or {}).get("pcc_min", 0.999)
    checks.append(("info", status == 200 and "contract" in info and bool(info.get("stage")),
                   f"{status} version={info.get('version')} stage={info.get('stage')}"))
    status, demo = call(url, "/demo")
    if status != 200:
        checks.append(("demo", False, f"GET /demo -> {status}"))
        return checks
    request, expected = demo["request"], demo["expected"]["actions"]
    status, first = call(url, "/predict", request)
    ok = status == 200 and set(first.get("actions", {})) == set(expected)
    if ok and (info.get("backend") or {}).get("mock"):
        shapes = {k: [len(v), len(v[0])] for k, v in first["actions"].items()}
        ok = shapes == {k: [len(v), len(v[0])] for k, v in expected.items()} and "MOCK" in first.get("warning", "")
        checks.append(("demo_round_trip", ok, f"MOCK device: groups and shapes {shapes} checked, values not "
                                              "compared (the mock computes nothing)"))
    elif ok:
        keys = first["action_keys"]
        score = pcc(flat(first["actions"], keys), flat(expected, keys))
        ok = score >= gate
        checks.append(("demo_round_trip", ok,
                       f"PCC {score:.6f} (gate {gate}), total {first['timing_ms']['total']:.1f} ms"))
    else:
        checks.append(("demo_round_trip", False, f"{status} {str(first)[:200]}"))
    status, second = call(url, "/predict", request)
    same = status == 200 and second.get("actions") == first.get("actions")
    checks.append(("repeat_determinism", same, "bit-identical" if same else "the same request gave different actions"))
    bad = dict(request, state={**request["state"], "not_a_group": [[0.0]]})
    status, err = call(url, "/predict", bad)
    field = (err.get("error") or {}).get("field", "")
    checks.append(("malformed_refused", status == 400 and "not_a_group" in field, f"{status} field={field!r}"))
    return checks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:20000")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    try:
        checks = run_checks(args.url)
    except (urllib.error.URLError, OSError) as exc:
        print(f"FAIL smoke_test {args.url}: server unreachable ({exc})")
        return 1
    for name, ok, detail in checks:
        if args.verbose or not ok:
            print(f"  {'ok  ' if ok else 'FAIL'} {name}: {detail}", file=sys.stderr)
    passed = sum(ok for _, ok, _ in checks)
    verdict = "PASS" if passed == len(checks) else "FAIL"
    demo = next((d for n, _, d in checks if n == "demo_round_trip"), "")
    stage = next((d.split("stage=", 1)[1] for n, _, d in checks if n == "info" and "stage=" in d), "unknown")
    print(f"{verdict} smoke_test {args.url}: {passed}/{len(checks)} checks (stage {stage}; {demo})")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
