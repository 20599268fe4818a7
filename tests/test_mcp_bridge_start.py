"""The MCP tool bridge's first use in a running OLP: loading it must not stop the server."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx

from fakes.cli import fake_env, install
from olp_server import OWNER_TOKEN, ProcessServer, write_config

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]


def test_the_first_request_with_tools_leaves_other_requests_answered(tmp_path: Path) -> None:
    """The MCP SDK takes about a second to load, on the first request with tools: the
    event loop must keep answering meanwhile (here /health, every 20 ms)."""
    bin_dir = install(tmp_path / "bin", "claude")
    owner = tmp_path / "owner"
    (owner / ".claude").mkdir(parents=True)
    (owner / ".claude" / ".credentials.json").write_text('{"claudeAiOauth": {}}')
    home = tmp_path / "home"
    scenario = fake_env(tmp_path / "record.jsonl", "tool_use_parallel_bridged")
    provider = {
        "type": "claude-cli",
        "command": str(bin_dir / "claude"),
        "env": scenario,
        "credentials_home": str(owner),
        "consent": True,
    }
    write_config(
        home,
        {
            "providers": {"cli": provider},
            "routing": {"chains": {"sonnet": [{"provider": "cli", "model": "claude-sonnet-4-5"}]}},
            "cache": {"enabled": False},
        },
    )
    waits: list[float] = []
    done = threading.Event()

    def poll_health(base_url: str) -> None:
        with httpx.Client(timeout=10) as client:
            while not done.is_set():
                started = time.perf_counter()
                client.get(f"{base_url}/health")
                waits.append(time.perf_counter() - started)
                time.sleep(0.02)

    with ProcessServer(home) as server:
        poller = threading.Thread(target=poll_health, args=(server.base_url,))
        poller.start()
        try:
            time.sleep(0.2)
            resp = httpx.post(
                f"{server.base_url}/v1/chat/completions",
                json={
                    "model": "sonnet",
                    "messages": [{"role": "user", "content": "Weather in Paris, and the time?"}],
                    "tools": TOOLS,
                },
                headers={"authorization": f"Bearer {OWNER_TOKEN}"},
                timeout=30,
            )
            time.sleep(0.2)
        finally:
            done.set()
            poller.join()
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["tool_calls"]
    assert max(waits) < 0.5, f"/health waited {max(waits):.2f}s"
