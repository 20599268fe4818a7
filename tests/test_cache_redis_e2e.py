"""Two OLP replicas sharing one Redis cache, through real servers, SDKs and the real CLI."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from olp.cache import MemoryStore
from olp.config import load_config
from olp.errors import ConfigError
from redis_fixtures import REDIS_URL

from fakes.upstream import FakeUpstream, Text
from olp_server import OWNER_TOKEN, ThreadServer, free_port, olp_server, server_env, write_config

QUESTION = [{"role": "user", "content": "What is 2+2?"}]
AUTH = {"authorization": f"Bearer {OWNER_TOKEN}"}


def shared_config(up: FakeUpstream, redis_prefix: str, url: str = REDIS_URL) -> dict[str, Any]:
    return {
        "providers": {
            "up": {"type": "openai-http", "base_url": up.openai_base_url, "models": ["m"]}
        },
        "cache": {"redis_url": url, "redis_prefix": redis_prefix},
    }


def client(server: ThreadServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=OWNER_TOKEN, max_retries=0)


def ask(server: ThreadServer) -> tuple[str | None, str]:
    """The answer's text, and its X-OLP-Cache."""
    with client(server) as sdk:
        raw = sdk.chat.completions.with_raw_response.create(
            model="m", messages=QUESTION, temperature=0
        )
        return raw.parse().choices[0].message.content, raw.headers["x-olp-cache"]


def streamed(server: ThreadServer) -> tuple[list[str], str]:
    """The streamed answer's text chunks, and its X-OLP-Cache."""
    with client(server) as sdk:
        raw = sdk.chat.completions.with_raw_response.create(
            model="m", messages=QUESTION, stream=True, temperature=0
        )
        chunks = [c.choices[0].delta.content for c in raw.parse() if c.choices]
        return [c for c in chunks if c], raw.headers["x-olp-cache"]


def held_in_memory_becomes_empty(server: ThreadServer, within: float = 5.0) -> bool:
    """Until the replica's memory front holds nothing (`MemoryStore`'s own view)."""
    store = server.app.ctx.cache.store
    deadline = time.monotonic() + within
    while MemoryStore.namespaces(store) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not MemoryStore.namespaces(store)


def olp_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **server_env(home)}
    return subprocess.run(
        [sys.executable, "-m", "olp", *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_replicas_share_answers_and_a_cli_clear(
    tmp_path: Path, upstream: FakeUpstream, redis_prefix: str
) -> None:
    upstream.script(Text("one two three", chunks=3))
    config = shared_config(upstream, redis_prefix)
    with ExitStack() as stack:
        a = stack.enter_context(olp_server(tmp_path / "a", config))
        b = stack.enter_context(olp_server(tmp_path / "b", config))
        live, cache = streamed(a)
        assert cache == "miss" and len(live) == 3 and "".join(live) == "one two three"
        a.call(a.app.ctx.cache.store.flush())  # (the write is queued off the request path)
        replayed, cache = streamed(b)
        assert cache == "hit"  # written by a, answered by b
        assert replayed == live  # with the original chunk boundaries
        assert ask(b) == ("one two three", "hit")
        assert upstream.calls == 1

        stats = httpx.get(f"{b.base_url}/cache/stats", headers=AUTH, timeout=10).json()
        assert stats["store"] == "redis" and stats["persistent"] is True
        home = tmp_path / "a" / "olp-home"
        shown = orjson.loads(olp_cli(home, "cache", "stats", "--json").stdout)
        assert shown["store"] == "redis"
        assert shown["entries"] == 1

        cleared = olp_cli(home, "cache", "clear", "--yes")
        assert cleared.returncode == 0, cleared.stderr
        assert "cleared 1 stored answer" in cleared.stdout
        assert held_in_memory_becomes_empty(b)  # each replica polls Redis every second
        assert ask(b)[1] == "miss"
        assert upstream.calls == 2


def test_an_owner_clear_over_http_reaches_the_other_replica(
    tmp_path: Path, upstream: FakeUpstream, redis_prefix: str
) -> None:
    upstream.script(Text("four"))
    config = shared_config(upstream, redis_prefix)
    with olp_server(tmp_path / "a", config) as a, olp_server(tmp_path / "b", config) as b:
        ask(a)
        a.call(a.app.ctx.cache.store.flush())
        assert ask(b)[1] == "hit"
        gone = httpx.delete(f"{a.base_url}/cache", headers=AUTH, timeout=10)
        assert gone.status_code == 200 and gone.json()["cleared"] == 1
        assert held_in_memory_becomes_empty(b)
        assert ask(b)[1] == "miss"
        assert upstream.calls == 2


def test_requests_are_served_while_redis_is_down(tmp_path: Path, upstream: FakeUpstream) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"redis://127.0.0.1:{s.getsockname()[1]}/0"
    upstream.script(Text("four"))
    with olp_server(tmp_path, shared_config(upstream, "olptest-dead:", dead)) as server:
        assert ask(server) == ("four", "miss")
        assert ask(server) == ("four", "hit")  # from this replica's memory
        gone = httpx.delete(f"{server.base_url}/cache", headers=AUTH, timeout=10)
        assert gone.status_code == 503
        assert gone.json()["error"]["code"] == "cache_unavailable"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://127.0.0.1:6379", "not a Redis URL"),
        ("127.0.0.1:6379", "not a Redis URL"),
        ("", "non-empty string"),
    ],
)
def test_a_bad_redis_url_is_a_config_error(tmp_path: Path, url: str, problem: str) -> None:
    (tmp_path / "config.json").write_bytes(orjson.dumps({"cache": {"redis_url": url}}))
    with pytest.raises(ConfigError) as failed:
        load_config(server_env(tmp_path), detect_local_servers=False)
    assert "cache.redis_url" in failed.value.message
    assert problem in failed.value.message


def env_without_redis(tmp_path: Path, config: dict[str, Any]) -> dict[str, str]:
    """An OLP home with `config`, and a child environment where `import redis` fails."""
    blocked = tmp_path / "no-redis" / "redis"  # shadows the installed package in the child
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('not installed (test)')\n")
    home = tmp_path / "home"
    write_config(home, config)
    return {**os.environ, **server_env(home), "PYTHONPATH": str(blocked.parent)}


def test_a_shared_cache_without_the_redis_package_says_how_to_install_it(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    env = env_without_redis(tmp_path, shared_config(upstream, "olptest-none:"))
    started = subprocess.run(
        [sys.executable, "-m", "olp", "start", "--port", str(free_port())],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert started.returncode != 0
    assert "pip install 'olp[redis]'" in started.stderr
    assert "Traceback" not in started.stderr


def test_doctor_checks_the_shared_cache(tmp_path: Path, upstream: FakeUpstream) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"redis://:hunter2@127.0.0.1:{s.getsockname()[1]}/0"
    for url, healthy in ((REDIS_URL, True), (dead, False)):
        home = tmp_path / ("up" if healthy else "down")
        write_config(home, shared_config(upstream, "olptest-doctor:", url))
        checked = olp_cli(home, "doctor", "--json", "--timeout", "3")
        report = orjson.loads(checked.stdout)
        assert report["cache"]["ok"] is healthy
        assert checked.returncode == (0 if healthy else 1)
        if not healthy:
            assert "start Redis at" in report["cache"]["fix"]
            assert "hunter2" not in checked.stdout


def test_the_redis_url_takes_its_secret_from_the_environment(tmp_path: Path) -> None:
    written = {"cache": {"redis_url": "redis://:${REDIS_PASSWORD}@127.0.0.1:6379/0"}}
    (tmp_path / "config.json").write_bytes(orjson.dumps(written))
    env = server_env(tmp_path, {"REDIS_PASSWORD": "s3cret"})
    config = load_config(env, detect_local_servers=False)
    assert config.cache.redis_url == "redis://:s3cret@127.0.0.1:6379/0"
    with pytest.raises(ConfigError) as failed:
        load_config(server_env(tmp_path), detect_local_servers=False)
    assert "cache.redis_url: refers to unset variable(s): REDIS_PASSWORD" in failed.value.message
    bad = {"cache": {"redis_url": "http://:${REDIS_PASSWORD}@127.0.0.1:6379"}}
    (tmp_path / "config.json").write_bytes(orjson.dumps(bad))
    with pytest.raises(ConfigError) as failed:
        load_config(env, detect_local_servers=False)
    assert "not a Redis URL" in failed.value.message
    assert "s3cret" not in failed.value.message


def test_doctor_says_to_install_the_redis_extra_when_it_is_missing(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    env = env_without_redis(tmp_path, shared_config(upstream, "olptest-doctor:"))
    checked = subprocess.run(
        [sys.executable, "-m", "olp", "doctor", "--json", "--timeout", "3"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    report = orjson.loads(checked.stdout)
    assert checked.returncode == 1
    assert report["cache"]["ok"] is False
    assert report["cache"]["fix"] == "pip install 'olp[redis]'"
