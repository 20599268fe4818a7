"""`olp start` as a real process: owner key, config errors, graceful shutdown."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import orjson
import pytest

from olp.accounts import hash_key
from olp.cli.common import client_base_url

from fakes.upstream import FakeUpstream, Slow
from olp_server import ProcessServer, free_port, write_config


def config_for(upstream: FakeUpstream) -> dict[str, object]:
    return {
        "providers": {
            "up": {"type": "openai-http", "base_url": upstream.openai_base_url, "models": ["m"]}
        }
    }


def test_first_start_creates_owner_key_once(tmp_path: Path, upstream: FakeUpstream) -> None:
    home = tmp_path / "home"
    write_config(home, config_for(upstream))
    env = {"OLP_OWNER_TOKEN": ""}
    with ProcessServer(home, env) as server:
        ask = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
        assert httpx.post(f"{server.base_url}/v1/chat/completions", json=ask).status_code == 401
        server.terminate()
        assert server.proc is not None
        _, stderr = server.proc.communicate(timeout=15)
    key = next(line.strip() for line in stderr.splitlines() if line.strip().startswith("olp_"))
    assert len(key) == 4 + 43
    stored = (home / "owner_key.sha256").read_text().strip()
    assert stored == hash_key(key)  # only the hash is kept
    assert key not in stored
    assert oct((home / "owner_key.sha256").stat().st_mode & 0o777) == "0o600"

    with ProcessServer(home, env) as server:
        resp = httpx.post(
            f"{server.base_url}/v1/chat/completions",
            json=ask,
            headers={"authorization": f"Bearer {key}"},
        )
        assert resp.status_code == 200
        server.terminate()
        assert server.proc is not None
        _, stderr = server.proc.communicate(timeout=15)
    assert "olp_" not in stderr  # printed once, never again


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"{broken", "invalid JSON"),
        (
            b'{"providers": {"a": {"type": "openai-http", "base_url": "nope"}}}',
            "providers.a.base_url: not a URL",
        ),
        (b'{"providers": {"a": {"type": "openai-http", "api_key": "sk-1"}}}', "api_key_env"),
        (b'{"server": {"port": 99999}}', "server.port"),
        (b'{"surprise": 1}', "surprise: unknown key"),
        (b'{"providers": {"a": {"type": "no-such-type"}}}', "unknown provider type"),
        (b'{"routing": {"chains": {"x": [{"provider": "ghost"}]}}}', "unknown provider 'ghost'"),
    ],
)
def test_invalid_config_exits_without_traceback(
    tmp_path: Path, content: bytes, fragment: str
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_bytes(content)
    # A free port: a provider type is checked after the port is bound.
    env = {
        **os.environ,
        "OLP_HOME": str(home),
        "OLP_OWNER_TOKEN": "t",
        "OLP_PORT": str(free_port()),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "olp", "start"], env=env, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 2
    assert fragment in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_shutdown_lets_inflight_stream_finish(
    tmp_path: Path, upstream: FakeUpstream, sig: int
) -> None:
    upstream.script(Slow(first_byte_delay_s=0.0, chunk_delay_s=0.25))
    home = tmp_path / "home"
    write_config(home, config_for(upstream))
    received: list[str] = []
    first = threading.Event()
    with ProcessServer(home) as server:

        def consume() -> None:
            with httpx.stream(
                "POST",
                f"{server.base_url}/v1/chat/completions",
                json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]},
                headers={"authorization": "Bearer test-owner-token"},
                timeout=20,
            ) as resp:
                for line in resp.iter_lines():
                    received.append(line)
                    first.set()

        reader = threading.Thread(target=consume)
        reader.start()
        assert first.wait(10)
        server.terminate(sig)
        reader.join(20)
        assert server.proc is not None
        assert server.proc.wait(timeout=20) in (0, -sig, 128 + sig)
        assert server.proc.stderr is not None
        assert "Traceback" not in server.proc.stderr.read()
    assert received[-1] == "data: [DONE]" or "data: [DONE]" in received
    finishes = [
        orjson.loads(line[6:])["choices"][0]["finish_reason"]
        for line in received
        if line.startswith("data: {") and orjson.loads(line[6:])["choices"]
    ]
    assert finishes[-1] == "stop"


def test_port_in_use_is_one_clear_error_before_anything_starts(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_config(home, {})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "OLP_HOME": str(home), "OLP_OWNER_TOKEN": ""}
        proc = subprocess.run(
            [sys.executable, "-m", "olp", "start", "--port", str(port)],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert proc.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in proc.stderr
    assert "--port or OLP_PORT" in proc.stderr
    assert "listening on" not in proc.stderr
    assert "Traceback" not in proc.stderr
    # Nothing was made for a server that never ran: no owner key shown or stored.
    assert "olp_" not in proc.stderr
    assert not (home / "owner_key.sha256").exists()


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:3456/v1"),
        ("0.0.0.0", "http://127.0.0.1:3456/v1"),
        ("::", "http://[::1]:3456/v1"),  # IPv6 only, as asyncio binds it
        ("::1", "http://[::1]:3456/v1"),
        ("olp.lan", "http://olp.lan:3456/v1"),
    ],
)
def test_the_url_a_local_client_is_told(host: str, url: str) -> None:
    assert client_base_url(host, 3456) == url


def test_start_without_config_follows_openai_base_url(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    # No config file: OPENAI_API_KEY makes the provider, OPENAI_BASE_URL says where it is.
    env = {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": upstream.openai_base_url}
    with ProcessServer(tmp_path / "home", env) as server:
        resp = httpx.post(
            f"{server.base_url}/v1/chat/completions",
            json={"model": "openai/m", "messages": [{"role": "user", "content": "x"}]},
            headers={"authorization": "Bearer " + server.env["OLP_OWNER_TOKEN"]},
        )
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-olp-provider-used"] == "openai"
    assert upstream.calls == 1
