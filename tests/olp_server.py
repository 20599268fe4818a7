"""Run a real OLP server for tests: in a thread (fast) or as an `olp start` subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson

from olp.config import Config, load_config
from olp.server import OLPApp, create_app
from olp.server.serve import OLPServer, uvicorn_config

OWNER_TOKEN = "test-owner-token"


def write_config(home: Path, config: Mapping[str, Any] | None) -> None:
    home.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (home / "config.json").write_bytes(orjson.dumps(config))


def server_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {"OLP_HOME": str(home), "OLP_OWNER_TOKEN": OWNER_TOKEN, "OLP_LOG_LEVEL": "warn"}
    env.update(extra or {})
    return env


class ThreadServer:
    """OLP's ASGI app under uvicorn on 127.0.0.1:<free port>, in a background thread."""

    def __init__(
        self, config: Config, *, uvicorn_options: Mapping[str, Any] | None = None, **app_kwargs: Any
    ) -> None:
        self.config = config
        self.app: OLPApp = create_app(config, **app_kwargs)
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._server = OLPServer(
            self.app,
            uvicorn_config(
                self.app,
                config,
                log_level="warning",
                timeout_graceful_shutdown=5,
                **(uvicorn_options or {}),
            ),
        )
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.loop: asyncio.AbstractEventLoop | None = None

    def _run(self) -> None:
        async def serve() -> None:
            self.loop = asyncio.get_running_loop()
            await self._server.serve(sockets=[self._sock])

        asyncio.run(serve())

    def __enter__(self) -> ThreadServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("OLP test server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()

    def call(self, coro: Any) -> Any:
        """Run a coroutine on the server's loop (to inspect state) and return its result."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=10)


@contextmanager
def olp_server(
    tmp_path: Path,
    config: Mapping[str, Any] | None,
    env: Mapping[str, str] | None = None,
    *,
    uvicorn_options: Mapping[str, Any] | None = None,
    **app_kwargs: Any,
) -> Iterator[ThreadServer]:
    home = tmp_path / "olp-home"
    write_config(home, config)
    cfg = load_config(server_env(home, env), detect_local_servers=False)
    with ThreadServer(cfg, uvicorn_options=uvicorn_options, **app_kwargs) as server:
        yield server


def eventually(check: Callable[[], bool], within_s: float = 5.0) -> bool:
    """Whether `check` comes true within `within_s` (a server acting in its own time)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ProcessServer:
    """`olp start` as a real child process (for signals, the CLI and the owner key)."""

    def __init__(
        self,
        home: Path,
        env: Mapping[str, str] | None = None,
        *,
        fd_limit: int | None = None,
        umask: int | None = None,
    ) -> None:
        self.home = home
        self.fd_limit = fd_limit  # the child's RLIMIT_NOFILE, soft and hard
        self.umask = umask
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, **server_env(home), "OLP_PORT": str(self.port), **(env or {})}
        self.proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> ProcessServer:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "olp", "start"],
            env=self.env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=self._limit_fds if self.fd_limit is not None else None,
            umask=-1 if self.umask is None else self.umask,
        )
        try:
            self._wait_ready()
        except BaseException:
            # `with` runs no __exit__ when __enter__ fails: stop the child and close its
            # pipes here, or a slow start (a loaded machine) leaves both behind.
            self.__exit__()
            raise
        return self

    def _limit_fds(self) -> None:
        assert self.fd_limit is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.fd_limit, self.fd_limit))

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"olp start exited: {self.proc.stderr.read() if self.proc.stderr else ''}"
                )
            try:
                if httpx.get(f"{self.base_url}/health", timeout=0.5).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.05)
        raise RuntimeError("olp start did not become ready")

    def terminate(self, sig: int = signal.SIGTERM) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()


def sse_text(body: str) -> str:
    """The text content of an OLP SSE answer (every `delta.content`, in order)."""
    text = ""
    for line in body.splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line.removeprefix("data: ")).get("choices", []):
                text += choice["delta"].get("content") or ""
    return text
