# SPDX-License-Identifier: Apache-2.0
"""The verdict: PASS / FAIL / SKIP per criterion from the phases' results, and the printed summary."""

from __future__ import annotations

from collections import Counter

from .judge import MAX_REFUSAL_S

MAX_DRIFT_PCT = 5.0


def criteria(campaign: dict, amplification: dict | None, rss: dict, stalls: dict | None,
             sigterm: dict | None) -> dict[str, dict]:
    fails = Counter(campaign["failures"])
    if amplification:
        fails.update(amplification["failures"])
    out = {
        "no_unexpected_5xx": (fails["unexpected_5xx"] == 0, f"{fails['unexpected_5xx']} unexpected 5xx"),
        "no_hangs": (fails["hang"] == 0, f"{fails['hang']} hangs"),
        "slowest_refusal_under_5s": (campaign["slowest_refusal"]["seconds"] < MAX_REFUSAL_S,
                                     f"{campaign['slowest_refusal']['seconds']:.3f} s"),
        "no_422": (fails["status_422"] == 0, f"{fails['status_422']} x 422"),
        "json_error_bodies": (fails["bad_error_body"] == 0, f"{fails['bad_error_body']} refusals without a JSON "
                                                            "error object"),
        "no_leaks_in_errors": (fails["leak_in_error"] == 0, f"{fails['leak_in_error']} with traceback/path"),
        "determinism": (fails["nondeterministic"] == 0,
                        f"{campaign['determinism']['compared']} repeats compared, "
                        f"{campaign['determinism']['mismatched']} differ"),
        "no_forbidden_accepts": (fails["forbidden_accept"] == 0, f"{fails['forbidden_accept']} hostile requests "
                                                                 "that must be refused got 200"),
    }
    other = {k: v for k, v in fails.items() if k in ("conn_error", "unexpected_status", "valid_refused",
                                                     "wrong_status", "bad_retry_after", "bad_x_request_id",
                                                     "bad_200_body", "seed_not_echoed")}
    out["protocol_checks"] = (not other, ", ".join(f"{k} {v}" for k, v in other.items()) or "ok")
    if rss.get("measured") and rss.get("drift_pct") is not None:
        out["rss_drift_under_5pct"] = (rss["drift_pct"] < MAX_DRIFT_PCT, f"{rss['drift_pct']:+.2f} %")
    else:
        out["rss_drift_under_5pct"] = (None, "not measured (no server pid)")
    if not stalls:
        out["stalls_closed_within_bound"] = (None, "not run")
    else:
        probes = [p["status"] or p["error"] for p in stalls["probes"]]
        out["stalls_closed_within_bound"] = (stalls["all_closed_within_bound"] and stalls["probes_ok"],
                                             f"max {stalls['max_close_s']:.1f} s (bound {stalls['bound_s']:.0f} s),"
                                             f" all closed: {stalls['all_closed_within_bound']}; valid probes "
                                             f"during the stall: {probes} ({'ok' if stalls['probes_ok'] else 'FAILED'}"
                                             ", 200 in < 5 s wanted)")
    if not sigterm:
        out["sigterm_drains_in_flight"] = (None, "not run (--url, or --no-sigterm)")
    else:
        single = sigterm["single"]
        out["sigterm_drains_in_flight"] = (single["all_200"] and single["exit_s"] is not None,
                                           f"{single['statuses']}, exit {single['exit_status']} "
                                           f"after {single['exit_s']} s")
    return {name: {"pass": None if ok is None else bool(ok), "detail": detail} for name, (ok, detail) in out.items()}


def print_kinds(by_kind: dict) -> None:
    labels = sorted({label for counts in by_kind.values() for label in counts}, key=lambda x: (len(x), x))
    print(f"  {'kind':<28}" + "".join(f"{label:>8}" for label in labels))
    for kind, counts in by_kind.items():
        print(f"  {kind:<28}" + "".join(f"{counts.get(label, ''):>8}" for label in labels))


def print_summary(result: dict) -> None:
    c = result["campaign"]
    print("\n==================== stress summary ====================")
    print(f"server: {result['target']}  version {result['version']}  cpu {result['cpu']}")
    print(f"campaign: {c['requests']} requests in {c['seconds']} s")
    print_kinds(c["by_kind"])
    print(f"  failures: {c['failures'] or 'none'}")
    for ex in c["failure_examples"][:12]:
        print(f"    - {ex['reason']}: kind {ex['kind']} #{ex['index']} status {ex['status'] or ex['error']}"
              f"{' (' + ex['note'] + ')' if ex['note'] else ''}: {ex['body'][:160]!r}")
    print(f"  unexpected 5xx by kind: {c['unexpected_5xx_by_kind'] or 'none'}")
    print(f"  accepted mutations (200): {c['accepted_mutations'] or 'none'}")
    lat = c["valid_latency_ms"]
    print(f"  valid latency: n={lat['n']} p50 {lat['p50']} ms, p99 {lat['p99']} ms, max {lat['max']} ms")
    print(f"  slowest refusal: {c['slowest_refusal']}")
    print(f"  determinism: {c['determinism']}")
    rss = result["rss"]
    if rss.get("measured"):
        print(f"RSS: after {rss['warm_mark_requests']} requests {rss['after_warmup_mib']} MiB, final "
              f"{rss['final_mib']} MiB, max {rss['max_mib']} MiB (sampled; VmHWM {rss['hwm_mib']} MiB), "
              f"drift {rss['drift_pct']:+.2f} %")
    else:
        print("RSS: not measured (no server pid)")
    amp = result.get("amplification")
    if amp:
        print(f"amplification: probe {amp['probe']['status']} ({amp['probe']['rule'][:100]!r}), statuses "
              f"{amp['by_kind']}, failures {amp['failures'] or 'none'}")
        print(f"  peak RSS {amp['peak_rss_mib']} MiB sampled (before {amp['rss_before_mib']} MiB); VmHWM "
              f"{amp['hwm_before_mib']} -> {amp['hwm_after_mib']} MiB")
    stalls = result.get("stalls")
    if stalls:
        for name in ("headers", "body"):
            rows = ", ".join(f"{s['outcome']}{'/' + str(s['status']) if s['status'] else ''}@{s['seconds']}s"
                             for s in stalls[name])
            print(f"stalls ({name}): {rows}")
        print(f"  probes during stall: {stalls['probes']}")
    for name, sig in (result.get("sigterm") or {}).items():
        print(f"SIGTERM ({name}): {sig['requests']} in flight, {sig['signals']} signal(s): statuses "
              f"{sig['statuses']}, exit after {sig['exit_s']} s with {sig['exit_status']}")
    print("criteria:")
    for name, verdict in result["criteria"].items():
        word = {True: "PASS", False: "FAIL", None: "SKIP"}[verdict["pass"]]
        print(f"  {word}  {name}: {verdict['detail']}")
    print(f"overall: {'PASS' if result['pass'] else 'FAIL'}   (json: {result['json']})")
