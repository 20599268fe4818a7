"""config.json edits apply to a running `olp start`: on change, or on SIGHUP; a bad edit
keeps the running configuration (real server processes, real upstreams)."""

from __future__ import annotations

import dataclasses
import itertools
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from olp.config import Config
from olp.server.reload import LIVE_FIELDS, restart_needed, restart_only_fields

from fakes.upstream import FakeUpstream, Hang, Slow
from olp_server import OWNER_TOKEN, ProcessServer, eventually, write_config

HEADERS = {"Authorization": f"Bearer {OWNER_TOKEN}"}
INFO = {"OLP_LOG_LEVEL": "info"}
_ASKED = itertools.count()
RELOAD_S = 10.0  # the server looks once a second; a loaded CI machine is slow


def chat(server: ProcessServer, model: str, **extra: Any) -> httpx.Response:
    # A new question each time: every request reaches a provider (the cache is on).
    question = f"question {next(_ASKED)}"
    body = {"model": model, "messages": [{"role": "user", "content": question}], **extra}
    return httpx.post(
        f"{server.base_url}/v1/chat/completions", json=body, headers=HEADERS, timeout=30
    )


def provider(up: FakeUpstream) -> dict[str, Any]:
    return {"type": "openai-http", "base_url": up.openai_base_url}


def answered_by(server: ProcessServer, model: str, name: str) -> bool:
    resp = chat(server, model)
    return resp.status_code == 200 and resp.headers["x-olp-provider-used"] == name


def config_status(server: ProcessServer) -> dict[str, Any]:
    resp = httpx.get(f"{server.base_url}/v0/management/status", headers=HEADERS)
    config: dict[str, Any] = resp.json()["config"]
    return config


class LogTail:
    """The server's stderr (its JSON log), read as it comes."""

    def __init__(self, server: ProcessServer) -> None:
        assert server.proc is not None and server.proc.stderr is not None
        self._server = server
        self._lines: list[str] = []
        stream = server.proc.stderr
        self._reader = threading.Thread(target=lambda: self._lines.extend(stream), daemon=True)
        self._reader.start()

    def has(self, text: str) -> bool:
        return eventually(lambda: any(text in line for line in list(self._lines)), RELOAD_S)

    def stop(self) -> str:
        """Stop the server; its whole log."""
        self._server.terminate()
        assert self._server.proc is not None
        self._server.proc.wait(timeout=30)
        self._reader.join(timeout=10)
        log = "".join(self._lines)
        assert "Traceback" not in log
        return log


def test_an_edit_applies_without_a_restart_and_spares_requests_in_flight(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    home = tmp_path / "home"
    write_config(
        home,
        {
            "providers": {"a": provider(alpha)},
            "routing": {"chains": {"m": [{"provider": "a", "model": "x"}]}},
        },
    )
    with ProcessServer(home, INFO) as server:
        log = LogTail(server)
        assert answered_by(server, "m", "a")
        # A stream that takes ~2 s on provider `a`, which the edit below removes.
        alpha.script(Slow(chunk_delay_s=0.3, chunks=7, text="one two three four five six seven"))
        streamed: list[httpx.Response] = []
        slow = threading.Thread(target=lambda: streamed.append(chat(server, "m", stream=True)))
        slow.start()
        assert alpha.wait_for(lambda: alpha.calls == 2)
        write_config(
            home,
            {
                "providers": {"b": provider(beta)},
                "routing": {
                    "chains": {
                        "m": [{"provider": "b", "model": "x"}],
                        "n": [{"provider": "b", "model": "y"}],
                    }
                },
            },
        )
        assert eventually(lambda: answered_by(server, "m", "b"), RELOAD_S)
        assert answered_by(server, "n", "b")  # a chain the running server did not have
        slow.join(timeout=30)
        # The retired provider finished the request it had: a whole answer, not a cut one.
        (done,) = streamed
        assert done.status_code == 200
        assert done.headers["x-olp-provider-used"] == "a"
        assert '"finish_reason":"stop"' in done.text
        assert '"finish_reason":"length"' not in done.text
        models = httpx.get(f"{server.base_url}/v1/models", headers=HEADERS).json()
        assert {"m", "n"} <= {m["id"] for m in models["data"]}
        stderr = log.stop()
    reloaded = [orjson.loads(line) for line in stderr.splitlines() if "config_reloaded" in line]
    assert reloaded and reloaded[0]["added"] == ["b"] and reloaded[0]["removed"] == ["a"]


def test_a_bad_edit_keeps_the_running_config(tmp_path: Path, alpha: FakeUpstream) -> None:
    home = tmp_path / "home"
    good = {
        "providers": {"a": provider(alpha)},
        "routing": {"chains": {"m": [{"provider": "a", "model": "x"}]}},
    }
    write_config(home, good)
    with ProcessServer(home, INFO) as server:
        log = LogTail(server)
        bad_edits = [
            # An editor's half-written save; a chain naming no provider; a provider type
            # this OLP cannot build.
            (b'{"providers": {"a": ', "invalid JSON"),
            (
                orjson.dumps({**good, "routing": {"chains": {"m": [{"provider": "ghost"}]}}}),
                "unknown provider 'ghost'",
            ),
            (orjson.dumps({"providers": {"a": {"type": "warp-drive"}}}), "unknown provider type"),
        ]
        for edit, problem in bad_edits:
            (home / "config.json").write_bytes(edit)
            assert log.has(problem), problem
            assert answered_by(server, "m", "a")
            # The owner sees it in the status (and the dashboard's banner) too.
            assert problem in (config_status(server)["reload_error"] or "")
        # Fixed: the next save applies.
        write_config(
            home, {**good, "routing": {"chains": {"renamed": good["routing"]["chains"]["m"]}}}
        )
        assert eventually(lambda: answered_by(server, "renamed", "a"), RELOAD_S)
        assert chat(server, "m").status_code == 404
        status = config_status(server)
        assert status["reload_error"] is None and status["reloads"] == 1
        stderr = log.stop()
    failed = [orjson.loads(ln) for ln in stderr.splitlines() if "config_reload_failed" in ln]
    assert len(failed) >= 3  # (a save caught half-written fails once more)


def test_sighup_reloads_and_says_which_fields_need_a_restart(
    tmp_path: Path, alpha: FakeUpstream
) -> None:
    home = tmp_path / "home"
    path = home / "config.json"

    def config(model: str, grace_s: int) -> dict[str, Any]:
        return {
            # How long streams may finish at shutdown: the server is given it at start.
            "server": {"shutdown_grace_s": grace_s},
            "providers": {"a": provider(alpha)},
            "routing": {"chains": {"m": [{"provider": "a", "model": model}]}},
        }

    write_config(home, config("model-1", 10))
    with ProcessServer(home, INFO) as server:
        log = LogTail(server)
        assert answered_by(server, "m", "a")
        assert alpha.requests[-1].json["model"] == "model-1"
        # The same size and times: only SIGHUP can tell the server to look.
        st = path.stat()
        path.write_bytes(orjson.dumps(config("model-2", 20)))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        time.sleep(1.5)
        assert answered_by(server, "m", "a")
        assert alpha.requests[-1].json["model"] == "model-1"
        server.terminate(signal.SIGHUP)

        def on_model_2() -> bool:
            return answered_by(server, "m", "a") and alpha.requests[-1].json["model"] == "model-2"

        assert eventually(on_model_2, RELOAD_S)
        assert config_status(server)["restart_needed"] == ["server.shutdown_grace_s"]
        stderr = log.stop()
    restart = [
        orjson.loads(ln) for ln in stderr.splitlines() if "config_reload_needs_restart" in ln
    ]
    assert restart and restart[0]["fields"] == ["server.shutdown_grace_s"]


def test_server_and_cache_limits_apply_without_a_restart(
    tmp_path: Path, alpha: FakeUpstream
) -> None:
    home = tmp_path / "home"

    def config(**sections: dict[str, Any]) -> dict[str, Any]:
        return {
            "providers": {"a": provider(alpha)},
            "routing": {"chains": {"m": [{"provider": "a", "model": "x"}]}},
            **sections,
        }

    def ask(question: str) -> httpx.Response:
        body = {"model": "m", "temperature": 0, "messages": [{"role": "user", "content": question}]}
        url = f"{server.base_url}/v1/chat/completions"
        return httpx.post(url, json=body, headers=HEADERS, timeout=30)

    def entries() -> int:
        stats = httpx.get(f"{server.base_url}/cache/stats", headers=HEADERS).json()
        return int(stats["entries"])

    write_config(home, config(cache={"max_entries_per_key": 5}))
    with ProcessServer(home, INFO) as server:
        log = LogTail(server)
        for question in ("one", "two", "three", "four"):
            assert ask(question).headers["x-olp-cache"] == "miss"
        assert ask("four").headers["x-olp-cache"] == "hit"
        assert entries() == 4 and alpha.calls == 4

        # Fewer entries per key: the least recently used go at once, not at the next write.
        # A smaller body limit: the next request over it is refused.
        write_config(
            home,
            config(cache={"max_entries_per_key": 2}, server={"max_body_bytes": 2_000}),
        )
        assert eventually(lambda: entries() == 2, RELOAD_S)
        assert ask("four").headers["x-olp-cache"] == "hit"  # the most recently used stays
        assert ask("one").headers["x-olp-cache"] == "miss"  # the oldest went
        too_big = ask("x" * 3_000)
        assert too_big.status_code == 413
        assert "server.max_body_bytes" in too_big.json()["error"]["message"]

        # A shorter ttl_s applies to answers already stored: 0 ends them all.
        write_config(home, config(cache={"ttl_s": 0}))
        assert eventually(lambda: entries() == 0, RELOAD_S)
        assert ask("four").headers["x-olp-cache"] == "miss"
        assert config_status(server)["restart_needed"] == []

        # Turning the cache off changes which store OLP runs: that one waits for a restart.
        write_config(home, config(cache={"enabled": False}))
        assert eventually(
            lambda: config_status(server)["restart_needed"] == ["cache.enabled"], RELOAD_S
        )
        assert ask("five").headers["x-olp-cache"] == "miss"  # still the running cache
        stderr = log.stop()
    dropped = [orjson.loads(ln) for ln in stderr.splitlines() if "cache_entries_dropped" in ln]
    # Two past the new limit; then the two held (four, and one, stored since).
    assert [d["entries"] for d in dropped] == [2, 2]


def test_auth_applies_without_a_restart(tmp_path: Path, alpha: FakeUpstream) -> None:
    home = tmp_path / "home"

    def config(anonymous: bool) -> dict[str, Any]:
        return {
            "auth": {"allow_anonymous": anonymous},
            "providers": {"a": provider(alpha)},
            "routing": {"chains": {"m": [{"provider": "a", "model": "m"}]}},
        }

    def anonymous_status() -> int:
        body = {"model": "m", "messages": [{"role": "user", "content": f"q{next(_ASKED)}"}]}
        url = f"{server.base_url}/v1/chat/completions"
        return httpx.post(url, json=body, timeout=30).status_code

    write_config(home, config(True))
    with ProcessServer(home, INFO) as server:
        log = LogTail(server)
        assert anonymous_status() == 200
        # Closing the door must not wait for a restart.
        write_config(home, config(False))
        assert eventually(lambda: anonymous_status() == 401, RELOAD_S)
        assert config_status(server)["restart_needed"] == []
        assert log.has('"event":"config_reloaded"')
        stderr = log.stop()
    assert "config_reload_needs_restart" not in stderr


def test_new_prices_apply_to_the_next_requests(tmp_path: Path, alpha: FakeUpstream) -> None:
    home = tmp_path / "home"

    def config(input_usd: float, output_usd: float) -> dict[str, Any]:
        return {
            "providers": {"a": provider(alpha)},
            "routing": {"chains": {"m": [{"provider": "a", "model": "priced-model"}]}},
            "pricing": {"a/priced-model": {"input": input_usd, "output": output_usd}},
        }

    write_config(home, config(1.0, 2.0))  # USD per million tokens
    with ProcessServer(home, INFO) as server:
        assert chat(server, "m").status_code == 200
        write_config(home, config(10.0, 20.0))
        assert eventually(lambda: config_status(server)["reloads"] == 1, RELOAD_S)
        assert chat(server, "m").status_code == 200
        LogTail(server).stop()  # every ledger row is written at shutdown
    rows = sqlite3.connect(home / "ledger.db").execute(
        "SELECT prompt_tokens, completion_tokens, cost_usd FROM ledger_requests ORDER BY id"
    )
    (p1, c1, cost1), (p2, c2, cost2) = rows
    assert p1 and c1  # the fake upstream reports usage
    assert cost1 == pytest.approx((p1 * 1.0 + c1 * 2.0) / 1e6)
    assert cost2 == pytest.approx((p2 * 10.0 + c2 * 20.0) / 1e6)  # the new prices


def test_the_ledger_stops_and_starts_writing_without_a_restart(
    tmp_path: Path, alpha: FakeUpstream
) -> None:
    home = tmp_path / "home"

    def config(ledger: bool) -> dict[str, Any]:
        return {
            "providers": {"a": provider(alpha)},
            "routing": {"chains": {"m": [{"provider": "a", "model": "x"}]}},
            "ledger": {"enabled": ledger},
        }

    def applied(reloads: int) -> bool:
        return bool(config_status(server)["reloads"] == reloads)

    write_config(home, config(True))
    with ProcessServer(home, INFO) as server:
        first = chat(server, "m")
        write_config(home, config(False))
        assert eventually(lambda: applied(1), RELOAD_S)
        unrecorded = [chat(server, "m"), chat(server, "m")]
        write_config(home, config(True))
        assert eventually(lambda: applied(2), RELOAD_S)
        last = chat(server, "m")
        assert config_status(server)["restart_needed"] == []
        LogTail(server).stop()  # every ledger row is written at shutdown
    assert all(r.status_code == 200 for r in (first, *unrecorded, last))
    recorded = [first.headers["x-olp-request-id"], last.headers["x-olp-request-id"]]
    db = sqlite3.connect(home / "ledger.db")
    requests = db.execute("SELECT request_id FROM ledger_requests ORDER BY id").fetchall()
    assert [row[0] for row in requests] == recorded
    attempts = db.execute("SELECT DISTINCT request_id FROM ledger_attempts").fetchall()
    assert sorted(row[0] for row in attempts) == sorted(recorded)


def test_health_checks_after_a_reload_are_of_the_new_providers(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    home = tmp_path / "home"
    write_config(home, {"providers": {"a": provider(alpha)}})
    with ProcessServer(home, INFO) as server:
        alpha.script(Hang(3.0))  # a's health check (its model list) takes 3 s
        status = httpx.get(f"{server.base_url}/v0/management/status", headers=HEADERS)
        assert status.status_code == 200  # it started a round of checks in the background
        assert alpha.wait_for(lambda: alpha.calls == 1)
        write_config(home, {"providers": {"b": provider(beta)}})
        assert eventually(lambda: config_status(server)["reloads"] == 1, RELOAD_S)
        # /health waits for fresh checks: of b, not the round of a still under way.
        health = httpx.get(f"{server.base_url}/health", headers=HEADERS, timeout=30).json()
        assert list(health["providers"]) == ["b"]
        assert health["providers"]["b"]["health"]["ok"] is True
        assert beta.calls == 1
        LogTail(server).stop()


def test_every_live_field_exists_and_every_other_field_waits_for_a_restart(
    tmp_path: Path,
) -> None:
    started = Config(home=tmp_path)
    for section, live in LIVE_FIELDS.items():
        names = {f.name for f in dataclasses.fields(getattr(started, section))}
        assert live <= names, f"LIVE_FIELDS[{section!r}] names no field {live - names}"
    edited = dataclasses.replace(
        started,
        server=dataclasses.replace(started.server, port=1, max_body_bytes=2),
        cache=dataclasses.replace(started.cache, redis_prefix="x:", ttl_s=5),
        ledger=dataclasses.replace(started.ledger, enabled=False),
    )
    assert restart_needed(edited, started) == ("server.port", "cache.redis_prefix")
    assert restart_needed(started, started) == ()
    # What `olp config check` names as read at start only: every field no reload changes.
    every = {
        f"{section}.{f.name}"
        for section in LIVE_FIELDS
        for f in dataclasses.fields(getattr(started, section))
    }
    live = {f"{section}.{name}" for section, names in LIVE_FIELDS.items() for name in names}
    assert set(restart_only_fields()) == every - live
    assert "server.port" in restart_only_fields() and "cache.ttl_s" not in restart_only_fields()
