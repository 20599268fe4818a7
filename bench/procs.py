"""Child processes of a run: start, wait for readiness, measure (RSS, CPU), always stop.

Every server runs in its own session, so its process group holds exactly what it spawned:
measuring and stopping act on that group, never on anything else on the machine.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

_TICKS = os.sysconf("SC_CLK_TCK")
_REPO = Path(__file__).resolve().parent.parent


class StartError(RuntimeError):
    """A server did not come up; the message carries the end of its log."""


@dataclass(slots=True)
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def group(self) -> list[int]:
        """Live pids in this server's process group (it and any workers it forked)."""
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                stat = _stat(entry.name)
                if stat is not None and int(stat[2]) == self.pid:  # field 5: pgrp
                    pids.append(int(entry.name))
        return pids

    def rss_mib(self) -> float:
        """Resident memory of the group (VmRSS), MiB."""
        kib = 0
        for pid in self.group():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmRSS:"):
                    kib += int(line.split()[1])
        return kib / 1024

    def cpu_s(self) -> float:
        """CPU time (user + system, reaped children included) of the group so far."""
        ticks = 0
        for pid in self.group():
            stat = _stat(str(pid))
            if stat is not None:  # fields 14-17: utime stime cutime cstime
                ticks += sum(int(x) for x in stat[11:15])
        return ticks / _TICKS

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


def _stat(pid: str) -> list[str] | None:
    """/proc/PID/stat fields after the command name (which may contain spaces)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()


def machine_busy_s() -> float:
    """CPU time all cores spent busy since boot, steal included (another VM's work)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / _TICKS


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start(
    name: str, argv: list[str], log_dir: Path, env: Mapping[str, str] | None = None
) -> Server:
    log = log_dir / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            cwd=_REPO,  # `python -m bench.*` resolves from the repository root
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Server(name, proc, log)


def wait_ready(server: Server, probe: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise StartError(
                f"{server.name} exited with {server.proc.returncode}:\n{server.log_tail()}"
            )
        if probe():
            return
        time.sleep(0.1)
    raise StartError(f"{server.name} not ready after {timeout_s:.0f} s:\n{server.log_tail()}")


def stop(server: Server, grace_s: float = 5.0) -> None:
    """SIGTERM the server's group, then SIGKILL whatever is left after the grace period."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            break
        try:
            server.proc.wait(timeout=grace_s)
            if not server.group():
                break
        except subprocess.TimeoutExpired:
            continue
    if server.proc.poll() is None:
        server.proc.wait()


def http(
    method: str, url: str, body: bytes | None = None, headers: Mapping[str, str] | None = None
) -> tuple[int, bytes]:
    """One blocking request for probes and smoke checks; (0, reason) if it never answered."""
    req = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError as exc:  # URLError included: refused, reset, timed out
        return 0, str(exc).encode()


def stop_children_on_sigterm() -> None:
    """SIGTERM raises SystemExit, which unwinds through the `finally` that stops every
    child the run started (the default action would leave them running)."""
    signal.signal(signal.SIGTERM, _exit_on_sigterm)


def _exit_on_sigterm(signum: int, _frame: object) -> NoReturn:
    raise SystemExit(128 + signum)
