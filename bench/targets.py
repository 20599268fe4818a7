"""The three targets of a run: start each server, check it answers right, stop them all."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench import procs
from bench.payloads import CHAT_PATH, TOKEN, request_body

PY = sys.executable
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


@dataclass(frozen=True, slots=True)
class OlpLaunch:
    """How to start OLP: run.py owns these, so the bench's OLP setup lives in one place."""

    config: Callable[[int], dict[str, Any]]  # upstream port -> config.json
    argv: Callable[[int], list[str]]  # OLP port -> command line
    env: Callable[[Path], dict[str, str]]  # OLP_HOME -> environment


class Targets:
    """Owns the server processes; stop() must run whatever happened."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.servers: dict[str, procs.Server] = {}
        self.urls: dict[str, str] = {}  # target name -> chat completions URL
        self.notes: list[str] = []

    def start(self, olp: OlpLaunch | None) -> None:
        up_port = procs.free_port()
        base = f"http://127.0.0.1:{up_port}"
        up = self._spawn("upstream", [PY, "-m", "bench.fake_upstream", "--port", str(up_port)])
        procs.wait_ready(up, lambda: _ok("GET", base + "/v1/models"))
        self.urls["direct"] = base + CHAT_PATH

        pt_port = procs.free_port()
        argv = [PY, "-m", "bench.passthrough", "--port", str(pt_port), "--upstream", base]
        pt = self._spawn("passthrough", argv)
        pt_url = f"http://127.0.0.1:{pt_port}{CHAT_PATH}"
        procs.wait_ready(pt, lambda: _ok("POST", pt_url))
        self.urls["passthrough"] = pt_url

        for target in ("direct", "passthrough"):
            if problem := smoke_check(self.urls[target]):
                raise RuntimeError(f"{target} fails its smoke check: {problem}")
        if olp is not None:
            self._start_olp(olp, up_port)

    def _start_olp(self, olp: OlpLaunch, up_port: int) -> None:
        home = self.workdir / "olp-home"
        home.mkdir()
        (home / "config.json").write_bytes(orjson.dumps(olp.config(up_port)))
        port = procs.free_port()
        base = f"http://127.0.0.1:{port}"
        server = self._spawn("olp", olp.argv(port), olp.env(home))
        try:
            procs.wait_ready(server, lambda: _ok("GET", base + "/health"))
            if problem := smoke_check(base + CHAT_PATH):
                raise procs.StartError(f"OLP fails its smoke check: {problem}")
        except procs.StartError as exc:
            # Direct and passthrough still make a useful report; it says why OLP is missing.
            print(f"OLP not measured: {exc}", file=sys.stderr)
            detail = " / ".join(line.strip() for line in str(exc).splitlines() if line.strip())
            self.notes.append(f"OLP not measured: {detail[:500]}")
            procs.stop(self.servers.pop("olp"))
            return
        self.urls["olp"] = base + CHAT_PATH

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> procs.Server:
        server = procs.start(name, argv, self.workdir, env)
        self.servers[name] = server  # registered at once, so stop() reaches it
        return server

    def involved(self, target: str) -> list[procs.Server]:
        """The servers a request to `target` passes through."""
        up = self.servers["upstream"]
        return [up] if target == "direct" else [self.servers[target], up]

    def stop(self) -> None:
        for server in reversed(list(self.servers.values())):
            procs.stop(server)


def _ok(method: str, url: str) -> bool:
    body = request_body(stream=False) if method == "POST" else None
    return procs.http(method, url, body, AUTH)[0] == 200


def smoke_check(url: str) -> str | None:
    """One request per mode before any load: what is wrong, or None."""
    status, body = procs.http("POST", url, request_body(stream=False), AUTH)
    if status != 200:
        return f"non-streaming: HTTP {status}: {body[:300]!r}"
    try:
        content = orjson.loads(body)["choices"][0]["message"]["content"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        return f"non-streaming: not a chat completion: {body[:300]!r}"
    if not content:
        return "non-streaming: empty content"
    status, body = procs.http("POST", url, request_body(stream=True), AUTH)
    if status != 200:
        return f"streaming: HTTP {status}: {body[:300]!r}"
    if b'"content":"' not in body or not body.rstrip().endswith(b"data: [DONE]"):
        return f"streaming: not an SSE chat stream ending in [DONE]: {body[-300:]!r}"
    return None
