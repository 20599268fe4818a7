"""The MCP tool bridge's first use in a running OLP: loading it must not stop the server,
and a server whose providers take client tools loads it once it listens, not on the first
request with tools."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

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
    """The MCP SDK takes about a second to load (once the server listens, and on the first
    request with tools if that comes first): the event loop must keep answering meanwhile
    (here /health, every 20 ms)."""
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


# Run in a fresh interpreter: the test process has long imported the bridge. Prints whether
# the bridge was imported once the app was built, and once the server listened (a request
# answered: the server has called `on_listening`) and its preload thread, if any, ended.
_IMPORTED_WHEN = """
import json, sys, threading
from pathlib import Path
import httpx
from olp.config import load_config
from olp_server import ThreadServer, server_env, write_config

BRIDGE = "olp.providers._mcp_bridge"
home, providers = Path(sys.argv[1]), json.loads(sys.argv[2])
write_config(home, {"providers": providers})
server = ThreadServer(load_config(server_env(home), detect_local_servers=False))
built = BRIDGE in sys.modules
with server:
    httpx.get(server.base_url + "/health").raise_for_status()
    for thread in threading.enumerate():
        if thread.name == "olp-preload":
            thread.join()
    listening = BRIDGE in sys.modules
print(json.dumps({"built": built, "listening": listening}))
"""


def _bridge_imported(tmp_path: Path, providers: dict[str, Any]) -> dict[str, bool]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTED_WHEN, str(tmp_path / "home"), json.dumps(providers)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, bool] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_a_provider_with_client_tools_has_the_bridge_imported_once_the_server_listens(
    tmp_path: Path,
) -> None:
    bin_dir = install(tmp_path / "bin", "claude")
    provider = {"type": "claude-cli", "command": str(bin_dir / "claude"), "consent": True}
    imported = _bridge_imported(tmp_path, {"cli": provider})
    assert imported == {"built": False, "listening": True}


def test_without_a_provider_that_bridges_tools_the_bridge_is_not_imported(
    tmp_path: Path,
) -> None:
    """An HTTP provider takes client tools itself: no MCP SDK for it."""
    provider = {"type": "openai-http", "base_url": "http://127.0.0.1:9/v1", "models": ["m"]}
    imported = _bridge_imported(tmp_path, {"api": provider})
    assert imported == {"built": False, "listening": False}
