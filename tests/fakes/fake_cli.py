#!/usr/bin/env python3
"""A fake coding CLI: replays a captured run of the real one, or misbehaves on purpose.

Installed under the real CLI's name (`claude`, `qwen`, `codex`, ...) by
`fakes.cli.install()`; everything is chosen through the child's environment, which tests
set through the provider's `env` config:

    FAKE_CLI_RECORD     append one JSON line per run: argv, env, cwd (+ listing), HOME
                        (+ listing, symlink targets), stdin, pid/pgid, grandchild pid
    FAKE_CLI_SCENARIO   a capture name in the fixture dir (stdout replayed byte for byte,
                        then its stderr, then its exit code; a capture the harness had to
                        kill (exit 124) hangs after its output), or a synthetic mode:
                        hang | die_midstream | garbage | huge_line | never_ends |
                        ignore_sigterm | spawn_grandchild
    FAKE_CLI_FIXTURES   the fixture dir (default tests/fixtures/cli/<name run as>)
    FAKE_CLI_EXT        stdout file extension (default: jsonl, then json, then txt)
    FAKE_CLI_BASE       capture whose lines the synthetic modes print (default: the first
                        of success_stream_json_partial*, success_stream_json*, success*)
    FAKE_CLI_CUT        how many base lines die_midstream & co print (default: half)
    FAKE_CLI_DELAY      seconds between stdout lines (shows streaming; default 0)
    FAKE_CLI_EXIT       exit status override
    FAKE_CLI_HUGE_BYTES size of huge_line's line (default 50 MB)
    FAKE_CLI_VERSION    what `--version` prints (default 9.9.9); `--version` neither
                        records nor replays unless FAKE_CLI_VERSION_TOO is set
    FAKE_CLI_JSONRPC    set: the CLI is spoken to over stdio (codex app-server): stdin is
                        read line by line, and each request `{"id": n, "method": …}` gets
                        the capture's lines up to its response `{"id": n}`; the last
                        request gets the rest. Recorded once the last request came in.

Run with `--input-format stream-json` (Claude Code), stdin is read line by line up to the
first user message, as the real CLI does: its control requests are answered first, in
the real CLI's shapes (`initialize`: success; `mcp_status`: each MCP server of the
`--mcp-config` file `pending`, as in a CLI still connecting to it). With

    FAKE_CLI_MCP_TOOLS  comma-separated tool names: `mcp_status` says each server
                        `connected`, listing no tools for the first FAKE_CLI_MCP_LATE
                        answers (default 1), as a CLI started ahead that has not taken
                        the changed list yet, then these tools; or `failed`

A capture's `<name>.export.json` (Vibe's `--output-dir` export) is written to
`<--output-dir>/export.json` when the CLI was given that flag.

Standard library only: it runs under whatever `python3` the child's PATH finds.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "cli"


def main() -> int:
    env = os.environ
    name = Path(sys.argv[0]).name
    fixtures = Path(env.get("FAKE_CLI_FIXTURES") or FIXTURES / name)
    scenario = env.get("FAKE_CLI_SCENARIO", "")
    if sys.argv[1:] == ["--version"] and not env.get("FAKE_CLI_VERSION_TOO"):
        print(f"{env.get('FAKE_CLI_VERSION', '9.9.9')} ({name}, fake)")
        return 0
    grandchild = _grandchild() if scenario == "spawn_grandchild" else None
    if scenario == "ignore_sigterm":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if env.get("FAKE_CLI_JSONRPC") and scenario not in _SILENT_MODES:
        # Stdin stays open (a conversation): recorded when the last request came in.
        _PENDING_RECORD.update(name=name, scenario=scenario, grandchild=grandchild)
    else:
        stdin = b"" if env.get("FAKE_CLI_JSONRPC") else _read_stdin()
        _record(name, stdin, scenario, grandchild)
    mode = MODES.get(scenario)
    if mode is not None:
        return mode(fixtures)
    return _replay(fixtures, scenario)


def _read_stdin() -> bytes:
    if not _stream_json_input():
        return sys.stdin.buffer.read()
    received = bytearray()
    for raw in iter(sys.stdin.buffer.readline, b""):
        received += raw
        message = _json(raw)
        if message.get("type") == "user":
            break
        request = message.get("request")
        if message.get("type") == "control_request" and isinstance(request, dict):
            _emit([_control_response(str(message.get("request_id")), request) + b"\n"])
    return bytes(received)


def _stream_json_input() -> bool:
    return _flag("--input-format") == "stream-json"


def _flag(name: str) -> str | None:
    """The value given to the flag `name` on the command line, if any."""
    return next((value for flag, value in itertools.pairwise(sys.argv[1:]) if flag == name), None)


def _control_response(request_id: str, request: dict[str, object]) -> bytes:
    answer: dict[str, object] = {}
    if request.get("subtype") == "mcp_status":
        answer = {"mcpServers": [_mcp_status(name) for name in _mcp()]}
    response = {"subtype": "success", "request_id": request_id, "response": answer}
    return json.dumps({"type": "control_response", "response": response}).encode()


_STATUS_ASKED = [0]


def _mcp_status(name: str) -> dict[str, object]:
    tools = os.environ.get("FAKE_CLI_MCP_TOOLS")
    if tools is None:
        return {"name": name, "status": "pending", "scope": "dynamic"}
    if tools == "failed":
        return {"name": name, "status": "failed", "scope": "dynamic"}
    _STATUS_ASKED[0] += 1
    late = _STATUS_ASKED[0] <= int(os.environ.get("FAKE_CLI_MCP_LATE") or 1)
    listed = [] if late else [{"name": t, "annotations": {}} for t in tools.split(",")]
    return {"name": name, "status": "connected", "scope": "dynamic", "tools": listed}


def _mcp() -> list[str]:
    """The MCP servers named in the `--mcp-config` file (relative to the cwd)."""
    path = _flag("--mcp-config")
    if path is None:
        return []
    servers = json.loads(Path(path).read_text()).get("mcpServers", {})
    return list(servers)


# -- recording -------------------------------------------------------------------------


def _record(name: str, stdin: bytes, scenario: str, grandchild: int | None) -> None:
    path = os.environ.get("FAKE_CLI_RECORD")
    if not path:
        return
    home = os.environ.get("HOME", "")
    doc = {
        "name": name,
        "argv": sys.argv[1:],
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        "cwd_listing": sorted(os.listdir(".")),
        "home": home,
        "home_listing": _listing(home),
        "stdin": stdin.decode("utf-8", "replace"),
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "grandchild_pid": grandchild,
        "scenario": scenario,
        "t": time.time(),
    }
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(doc) + "\n")


def _listing(root: str) -> dict[str, str | None]:
    """Every file under `root`: its symlink target, or None for a plain file."""
    found: dict[str, str | None] = {}
    if not root or not os.path.isdir(root):
        return found
    for folder, _, files in os.walk(root):
        for file in files:
            full = os.path.join(folder, file)
            rel = os.path.relpath(full, root)
            found[rel] = os.readlink(full) if os.path.islink(full) else None
    return found


def _grandchild() -> int:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(3600)"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return child.pid


# -- replaying -------------------------------------------------------------------------


def _capture(fixtures: Path, name: str) -> Path:
    exts = [os.environ["FAKE_CLI_EXT"]] if os.environ.get("FAKE_CLI_EXT") else []
    for ext in [*exts, "jsonl", "json", "txt"]:
        path = fixtures / f"{name}.{ext}"
        if path.is_file():
            return path
    sys.stderr.write(f"fake_cli: no capture {name!r} in {fixtures}\n")
    raise SystemExit(99)


def _meta(fixtures: Path, name: str) -> dict[str, object]:
    path = fixtures / f"{name}.meta.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _write_lines(lines: list[bytes]) -> None:
    if os.environ.get("FAKE_CLI_JSONRPC"):
        lines = _answer_requests(lines)
    delay = float(os.environ.get("FAKE_CLI_DELAY") or 0)
    out = sys.stdout.buffer
    for i, line in enumerate(lines):
        if delay and i:
            time.sleep(delay)
        out.write(line)
        out.flush()


_PENDING_RECORD: dict[str, object] = {}


def _answer_requests(lines: list[bytes]) -> list[bytes]:
    """Pace `lines` by the JSON-RPC requests read from stdin; returns what is left."""
    ids = [_json(line).get("id") for line in lines]
    response_ids = [
        i
        for i, line in zip(ids, lines, strict=True)
        if i is not None and "method" not in _json(line)
    ]
    last = response_ids[-1] if response_ids else None
    received: list[bytes] = []
    pos = 0
    for raw in iter(sys.stdin.buffer.readline, b""):
        received.append(raw)
        request = _json(raw)
        if request.get("id") is None or "method" not in request:
            continue
        if request["id"] == last or request["id"] not in ids[pos:]:
            break
        end = pos + ids[pos:].index(request["id"]) + 1
        _emit(lines[pos:end])
        pos = end
    if _PENDING_RECORD:
        _record(
            str(_PENDING_RECORD["name"]),
            b"".join(received),
            str(_PENDING_RECORD["scenario"]),
            _PENDING_RECORD["grandchild"],  # type: ignore[arg-type]
        )
        _PENDING_RECORD.clear()
    return lines[pos:]


def _json(line: bytes) -> dict[str, object]:
    try:
        doc = json.loads(line)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _emit(lines: list[bytes]) -> None:
    out = sys.stdout.buffer
    for line in lines:
        out.write(line)
    out.flush()


def _exit(default: int) -> int:
    value = os.environ.get("FAKE_CLI_EXIT")
    return int(value) if value else default


def _replay(fixtures: Path, name: str) -> int:
    _write_lines(_capture(fixtures, name).read_bytes().splitlines(keepends=True))
    _write_export(fixtures / f"{name}.export.json")
    stderr = fixtures / f"{name}.stderr.txt"
    if stderr.is_file():
        sys.stderr.buffer.write(stderr.read_bytes())
        sys.stderr.flush()
    meta = _meta(fixtures, name)
    if meta.get("timed_out_by_harness") or meta.get("exit_code") == 124:
        _sleep_forever()
    code = meta.get("exit_code")
    return _exit(code if isinstance(code, int) else 0)


def _write_export(export: Path) -> None:
    args = sys.argv[1:]
    if export.is_file() and "--output-dir" in args[:-1]:
        out = Path(args[args.index("--output-dir") + 1])
        out.mkdir(parents=True, exist_ok=True)
        (out / "export.json").write_bytes(export.read_bytes())


def _base_lines(fixtures: Path) -> list[bytes]:
    name = os.environ.get("FAKE_CLI_BASE")
    if not name:
        for pattern in ("success_stream_json_partial*", "success_stream_json*", "success*"):
            found = sorted(p for p in fixtures.glob(pattern) if ".meta." not in p.name)
            found = [p for p in found if not p.name.endswith((".stderr.txt", ".requests.jsonl"))]
            if found:
                name = found[0].name.split(".", 1)[0]
                break
    if not name:
        return []
    return _capture(fixtures, name).read_bytes().splitlines(keepends=True)


def _cut(lines: list[bytes]) -> list[bytes]:
    cut = os.environ.get("FAKE_CLI_CUT")
    return lines[: int(cut) if cut else max(1, len(lines) // 2)]


def _sleep_forever() -> None:
    while True:
        time.sleep(3600)


# -- synthetic modes -------------------------------------------------------------------


def _hang(fixtures: Path) -> int:
    _sleep_forever()
    return 0


def _die_midstream(fixtures: Path) -> int:
    _write_lines(_cut(_base_lines(fixtures)))
    sys.stderr.write("fake_cli: died mid-stream\n")
    sys.stderr.flush()
    if os.environ.get("FAKE_CLI_DIE_SIGNAL"):
        os.kill(os.getpid(), getattr(signal, "SIG" + os.environ["FAKE_CLI_DIE_SIGNAL"]))
    return _exit(1)


def _garbage(fixtures: Path) -> int:
    out = sys.stdout.buffer
    out.write(b"\x00\xff\xfe garbage {not json\n")
    out.write(b"Traceback (most recent call last): nonsense\n")
    out.write(bytes(range(1, 256)).replace(b"\n", b"") + b"\n")
    out.write(b'{"type": "unknown_event", "x": 1}\n')
    out.flush()
    return _exit(0)


def _huge_line(fixtures: Path) -> int:
    size = int(os.environ.get("FAKE_CLI_HUGE_BYTES") or 50 * 1024 * 1024)
    out = sys.stdout.buffer
    block = b"x" * (1024 * 1024)
    for _ in range(size // len(block)):
        out.write(block)
    out.write(b"\n")
    out.flush()
    return _exit(0)


def _never_ends(fixtures: Path) -> int:
    out = sys.stdout.buffer
    while True:
        out.write(b'{"type":"system","subtype":"status","status":"requesting"}\n')
        out.flush()
        time.sleep(0.01)


def _stall_after_cut(fixtures: Path) -> int:
    _write_lines(_cut(_base_lines(fixtures)))
    _sleep_forever()
    return 0


# Modes that never read stdin nor replay a capture.
_SILENT_MODES = ("hang", "garbage", "huge_line", "never_ends")

MODES = {
    "hang": _hang,
    "die_midstream": _die_midstream,
    "garbage": _garbage,
    "huge_line": _huge_line,
    "never_ends": _never_ends,
    "ignore_sigterm": _stall_after_cut,
    "spawn_grandchild": _stall_after_cut,
}


if __name__ == "__main__":
    sys.exit(main())
