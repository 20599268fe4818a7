"""The servers of a run: start each, check it answers right, read what it recorded, stop all.

The upstream (reached directly as the `direct` endpoint), the passthrough, and one
`olp start` per OLP variant — each variant with its own OLP_HOME, port and config.json,
and, for a member-key variant, a key created in that home before OLP starts.
"""

from __future__ import annotations

import sqlite3
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from olp.accounts import KeyLimits
from olp.accounts.keystore import KeyStore, keys_db_path
from olp.accounts.ledger_rows import LEDGER_FILE

from bench import procs
from bench.payloads import CHAT_PATH, TOKEN, request_body

PY = sys.executable
SMOKE_REQUESTS = 2  # chat requests smoke_check() sends to each endpoint
# The counters of GET /cache/stats a restarted variant carries over.
_CACHE_COUNTERS = ("hits", "misses", "shared", "bypasses")


@dataclass(frozen=True, slots=True)
class Variant:
    """One `olp start` of the run; run.py owns these, so the bench's OLP setup is in one place."""

    name: str  # server and endpoint name, e.g. "olp-hit"
    config: Callable[[int], dict[str, Any]]  # upstream port -> config.json
    # Serve a member key with these limits, created in the variant's home before OLP
    # starts; None serves the owner token.
    member_limits: KeyLimits | None = None


@dataclass(frozen=True, slots=True)
class OlpLaunch:
    variants: tuple[Variant, ...]
    argv: Callable[[int], list[str]]  # OLP port -> command line
    env: Callable[[Path], dict[str, str]]  # OLP_HOME -> environment


@dataclass(frozen=True, slots=True)
class Endpoint:
    url: str  # chat completions URL
    token: str  # the bearer token the generator sends
    server: str | None  # the proxy server in front of the upstream; None for direct


class Targets:
    """Owns the server processes; stop() must run whatever happened."""

    def __init__(self, workdir: Path, upstream_delay_ms: float = 0.0) -> None:
        self.workdir = workdir
        self.upstream_delay_ms = upstream_delay_ms
        self.servers: dict[str, procs.Server] = {}
        self.endpoints: dict[str, Endpoint] = {}
        self.homes: dict[str, Path] = {}  # OLP variant -> its OLP_HOME
        self.notes: list[str] = []
        # OLP variant -> how it was started (argv, env, base URL), for `restart`.
        self._launches: dict[str, tuple[list[str], dict[str, str], str]] = {}
        # OLP variant -> its cache counters from processes that have since been restarted.
        self._earlier_counts: dict[str, Counter[str]] = {}

    def start(self, olp: OlpLaunch | None) -> None:
        up_port = procs.free_port()
        base = f"http://127.0.0.1:{up_port}"
        delay = str(self.upstream_delay_ms)
        argv = [PY, "-m", "bench.fake_upstream", "--port", str(up_port), "--delay-ms", delay]
        up = self._spawn("upstream", argv)
        procs.wait_ready(up, lambda: _ok("GET", base + "/v1/models"))
        self.endpoints["direct"] = Endpoint(base + CHAT_PATH, TOKEN, None)

        pt_port = procs.free_port()
        argv = [PY, "-m", "bench.passthrough", "--port", str(pt_port), "--upstream", base]
        pt = self._spawn("passthrough", argv)
        pt_url = f"http://127.0.0.1:{pt_port}{CHAT_PATH}"
        procs.wait_ready(pt, lambda: _ok("POST", pt_url))
        self.endpoints["passthrough"] = Endpoint(pt_url, TOKEN, "passthrough")

        for name, endpoint in self.endpoints.items():
            if problem := smoke_check(endpoint.url, endpoint.token):
                raise RuntimeError(f"{name} fails its smoke check: {problem}")
        if olp is not None:
            for variant in olp.variants:
                self._start_olp(olp, variant, up_port)

    def _start_olp(self, olp: OlpLaunch, variant: Variant, up_port: int) -> None:
        name = variant.name
        home = self.workdir / f"{name}-home"
        home.mkdir()
        self.homes[name] = home
        (home / "config.json").write_bytes(orjson.dumps(variant.config(up_port)))
        token = TOKEN if variant.member_limits is None else member_key(home, variant.member_limits)
        port = procs.free_port()
        base = f"http://127.0.0.1:{port}"
        server = self._spawn(name, olp.argv(port), olp.env(home))
        try:
            procs.wait_ready(server, lambda: _ok("GET", base + "/health"))
            if problem := smoke_check(base + CHAT_PATH, token):
                raise procs.StartError(f"{name} fails its smoke check: {problem}")
        except procs.StartError as exc:
            # The other targets still make a useful report; it says why this one is missing.
            print(f"{name} not measured: {exc}", file=sys.stderr)
            detail = " / ".join(line.strip() for line in str(exc).splitlines() if line.strip())
            self.notes.append(f"{name} not measured: {detail[:500]}")
            procs.stop(self.servers.pop(name))
            return
        self._launches[name] = (olp.argv(port), olp.env(home), base)
        self.endpoints[name] = Endpoint(base + CHAT_PATH, token, name)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> procs.Server:
        server = procs.start(name, argv, self.workdir, env)
        self.servers[name] = server  # registered at once, so stop() reaches it
        return server

    def restart(self, name: str) -> None:
        """A fresh process for the OLP variant `name`: same home, config and port.

        Its ledger is flushed at shutdown and its cache file kept, so the checks after the
        run still see every request; its cache counters are carried over (`cache_stats`).
        """
        argv, env, base = self._launches[name]
        stats = self._own_cache_stats(name)
        if stats is not None:
            self._earlier_counts.setdefault(name, Counter()).update(
                {k: stats[k] for k in _CACHE_COUNTERS}
            )
        procs.stop(self.servers[name])
        server = self._spawn(name, argv, env)
        procs.wait_ready(server, lambda: _ok("GET", base + "/health"))

    def involved(self, endpoint: str) -> list[procs.Server]:
        """The servers a request to `endpoint` may pass through (the upstream always)."""
        up = self.servers["upstream"]
        server = self.endpoints[endpoint].server
        return [up] if server is None else [self.servers[server], up]

    def cache_stats(self, name: str) -> dict[str, Any] | None:
        """GET /cache/stats of a running OLP variant (owner view), or None; its counters
        include those of the variant's earlier processes (`restart`)."""
        stats = self._own_cache_stats(name)
        if stats is not None:
            for counter, earlier in self._earlier_counts.get(name, Counter()).items():
                stats[counter] += earlier
        return stats

    def _own_cache_stats(self, name: str) -> dict[str, Any] | None:
        """GET /cache/stats of the variant's current process alone."""
        endpoint = self.endpoints.get(name)
        if endpoint is None:
            return None
        url = endpoint.url.removesuffix(CHAT_PATH) + "/cache/stats"
        status, body = procs.http("GET", url, None, {"Authorization": f"Bearer {TOKEN}"})
        if status != 200:
            self.notes.append(f"GET /cache/stats on {name}: HTTP {status}: {body[:200]!r}")
            return None
        stats: dict[str, Any] = orjson.loads(body)
        return stats

    def ledger_rows(self, name: str) -> int | None:
        """Request rows in a stopped variant's ledger (0 if it has none), or None."""
        home = self.homes.get(name)
        if home is None or name not in self.endpoints:
            return None
        path = home / LEDGER_FILE
        if not path.exists():
            return 0
        try:
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
                (rows,) = conn.execute("SELECT COUNT(*) FROM ledger_requests").fetchone()
        except sqlite3.Error as exc:
            self.notes.append(f"reading {name}'s ledger failed: {exc}")
            return None
        return int(rows)

    def stop(self) -> None:
        for server in reversed(list(self.servers.values())):
            procs.stop(server)


def member_key(home: Path, limits: KeyLimits) -> str:
    """A new member key with `limits` in the key store of `home` (before OLP starts there)."""
    store = KeyStore.open(keys_db_path(home))
    try:
        key = store.create("bench-member", tier="member", limits=limits)
    finally:
        store.close()
    return key.secret


def chat_headers(token: str) -> dict[str, str]:
    """The headers of a chat request sent with `token`."""
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def _ok(method: str, url: str) -> bool:
    body = request_body(stream=False) if method == "POST" else None
    return procs.http(method, url, body, chat_headers(TOKEN))[0] == 200


def smoke_check(url: str, token: str) -> str | None:
    """One request per mode before any load: what is wrong, or None."""
    status, body = procs.http("POST", url, request_body(stream=False), chat_headers(token))
    if status != 200:
        return f"non-streaming: HTTP {status}: {body[:300]!r}"
    try:
        content = orjson.loads(body)["choices"][0]["message"]["content"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        return f"non-streaming: not a chat completion: {body[:300]!r}"
    if not content:
        return "non-streaming: empty content"
    status, body = procs.http("POST", url, request_body(stream=True), chat_headers(token))
    if status != 200:
        return f"streaming: HTTP {status}: {body[:300]!r}"
    if b'"content":"' not in body or not body.rstrip().endswith(b"data: [DONE]"):
        return f"streaming: not an SSE chat stream ending in [DONE]: {body[-300:]!r}"
    return None
