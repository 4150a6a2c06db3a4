# SPDX-License-Identifier: Apache-2.0
"""The server process: RSS sampling from /proc (the server with its children), and a uvicorn server started,
awaited and stopped by this tool."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from .client import get_json

REPO = Path(__file__).resolve().parents[4]
APP = "gr00t_p150.server.app:app"


# ------------------------------------------------------------------------------------------------ RSS

def status_kib(pid: int, name: str = "VmRSS") -> int:
    """A ``/proc/<pid>/status`` figure in KiB: VmRSS (resident now) or VmHWM (the most it ever was)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(name + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def child_pids(pid: int) -> list[int]:
    """Every descendant of ``pid`` (scans /proc for parent ids)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        found.extend(kids)
        todo.extend(kids)
    return found


def tree_rss_mib(pid: int | None, name: str = "VmRSS") -> float | None:
    """The server's figure plus its descendants' (MiB), None when there is no such process."""
    if not pid or not os.path.exists(f"/proc/{pid}"):
        return None
    return (status_kib(pid, name) + sum(status_kib(p, name) for p in child_pids(pid))) / 1024


def round1(value: float | None) -> float | None:
    return round(value, 1) if value is not None else None


class RssSampler(threading.Thread):
    """Samples the server's RSS (with its children) every ``period`` s as (seconds, phase, done, MiB)."""

    def __init__(self, pid: int | None, period: float = 0.5):
        super().__init__(daemon=True)
        self.pid, self.period = pid, period
        self.samples: list[tuple[float, str, int, float]] = []
        self.phase, self.done = "idle", lambda: 0
        self.stop_event = threading.Event()
        self.t0 = time.monotonic()

    def set_phase(self, phase: str, done=lambda: 0) -> None:
        self.phase, self.done = phase, done

    def run(self) -> None:
        while not self.stop_event.wait(self.period):
            rss = tree_rss_mib(self.pid)
            if rss is not None:
                self.samples.append((round(time.monotonic() - self.t0, 2), self.phase, self.done(), round(rss, 1)))

    def phase_samples(self, phase: str) -> list[tuple[float, str, int, float]]:
        return [s for s in self.samples if s[1] == phase]


def rss_report(sampler: RssSampler, final_mib: float | None, warm_mark: int) -> dict:
    samples = sampler.phase_samples("campaign")
    if not samples or final_mib is None:
        return {"measured": False}
    at_warm = next((s[3] for s in samples if s[2] >= warm_mark), samples[-1][3])
    peak = max([s[3] for s in samples] + [final_mib])
    drift = (final_mib - at_warm) / at_warm * 100 if at_warm else None
    return {"measured": True, "warm_mark_requests": warm_mark, "after_warmup_mib": at_warm,
            "final_mib": round(final_mib, 1), "max_mib": peak, "drift_pct": round(drift, 2) if drift is not None
            else None, "hwm_mib": round1(tree_rss_mib(sampler.pid, "VmHWM")),
            "samples": [list(s) for s in samples[:: max(1, len(samples) // 400)]]}


# ------------------------------------------------------------------------------------------------ server

class Server:
    """A uvicorn process serving the app, started by this tool."""

    def __init__(self, args, port: int, log_path: Path):
        self.args, self.port, self.log_path = args, port, log_path
        self.proc: subprocess.Popen | None = None

    def env(self) -> dict:
        env = dict(os.environ)
        env.update({"GR00T_VERSION": self.args.version, "GR00T_WEIGHTS": self.args.weights,
                    "GR00T_CACHE": str(self.args.cache), "PYTHONPATH": str(REPO / "code")})
        for item in self.args.env:
            key, _, value = item.partition("=")
            env[key] = value
        return env

    def command(self) -> list[str]:
        return [self.args.python, "-m", "uvicorn", "--http", self.args.http_protocol, "--host", "127.0.0.1",
                "--port", str(self.port), "--lifespan", "on", APP]

    def start(self) -> None:
        log = open(self.log_path, "ab")
        print(f"starting server: {' '.join(self.command())}  (log {self.log_path})", flush=True)
        self.proc = subprocess.Popen(self.command(), env=self.env(), cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout: float) -> bool:
        t0 = last = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                print(f"server exited during boot with {format_exit(self.proc.returncode)}; log tail:")
                print(tail(self.log_path))
                return False
            if health_ok("127.0.0.1", self.port):
                print(f"server ready after {time.monotonic() - t0:.1f} s (pid {self.pid})", flush=True)
                return True
            if time.monotonic() - last >= 10:
                last = time.monotonic()
                print(f"  waiting for /health ... {last - t0:.0f} s", flush=True)
            time.sleep(0.5)
        print(f"server not ready after {timeout:.0f} s; log tail:")
        print(tail(self.log_path))
        return False

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def health_ok(host: str, port: int) -> bool:
    try:
        status, _ = get_json(host, port, "/health", timeout=5)
    except OSError:
        return False
    return status == 200


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def format_exit(returncode: int | None) -> str:
    """Popen's returncode as a shell shows it: -15 (killed by the signal) and 143 both read "143 (SIGTERM)"."""
    if returncode is None:
        return "did not exit"
    if returncode < 0:
        return f"{128 - returncode} ({signal_name(-returncode)}, killed by the signal)"
    if returncode > 128:
        return f"{returncode} ({signal_name(returncode - 128)})"
    return str(returncode)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
