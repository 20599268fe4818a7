"""`olp setup`, the looking part: CLIs on PATH and their logins, API-key variables, local
servers. Every probe has a short timeout and reports one progress line as it goes.

(`olp.config.detect` finds API keys, Ollama and logged-in CLIs for a config-less start;
setup looks further — CLI versions, logins by variable, vLLM/llama.cpp, LM Studio — so it
has its own probes here. What to look for comes from the installed plugins: `Known`.)
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

from olp.cli.setup_plan import FoundAccount, FoundCli, FoundServer, Login, Machine
from olp.config import PROVIDER_NAME_RULE, is_provider_name
from olp.registry.known import Known, KnownCli

__all__ = [
    "LOCAL_SERVERS",
    "Progress",
    "detect_machine",
    "probe_ollama",
    "probe_openai_compatible",
]

Progress = Callable[[str], None]

# (label, host:port, kind): Ollama's own API names it for sure; the others answer
# OpenAI's GET /v1/models.
LOCAL_SERVERS = (
    ("Ollama", "127.0.0.1:11434", "ollama"),
    ("an OpenAI-compatible server (vLLM, llama.cpp)", "127.0.0.1:8000", "openai"),
    ("LM Studio", "127.0.0.1:1234", "lmstudio"),
)
_VERSION_TIMEOUT_S = 10.0  # vibe starts a Python app server: seconds, not milliseconds
_HTTP_TIMEOUT_S = 1.0
_MAX_MODELS = 200  # a models listing is untrusted input; keep the config readable
_MAX_BODY = 2_000_000


def detect_machine(
    env: Mapping[str, str],
    known: Known,
    progress: Progress,
    *,
    probe_local: bool = True,
    accounts_dir: Path | None = None,
) -> Machine:
    clis = tuple(
        cli for ptype, facts in known.clis if (cli := _detect_cli(ptype, facts, env, progress))
    )
    accounts = _detect_accounts(accounts_dir, clis, progress) if accounts_dir else ()
    keys = tuple(api.key_env for _, api in known.apis if env.get(api.key_env))
    progress("checking API key variables… " + (f"set: {', '.join(keys)}" if keys else "none set"))
    base_urls = _api_base_urls(env, known, keys, progress)
    servers: list[FoundServer] = []
    if probe_local:
        for label, where, kind in LOCAL_SERVERS:
            found = _detect_server(label, where, kind)
            progress(
                f"checking {label} on {where}… "
                + (f"found {len(found.models)} model(s)" if found else "not running")
            )
            if found:
                servers.append(found)
    else:
        progress("local servers: not checked (--no-local)")
    return Machine(
        clis=clis, api_keys=keys, servers=tuple(servers), base_urls=base_urls, accounts=accounts
    )


def _detect_accounts(
    accounts_dir: Path, clis: tuple[FoundCli, ...], progress: Progress
) -> tuple[FoundAccount, ...]:
    """More logins of the CLIs found: `<accounts_dir>/<name>/` holding one of a CLI's
    credential files (log one in with `HOME=<that folder> claude`, docs/fallback.md)."""
    try:
        folders = sorted(p for p in accounts_dir.iterdir() if p.is_dir())
    except OSError:
        return ()
    found = []
    for folder in folders:
        for cli in clis:
            if not any((folder / rel).is_file() for rel in cli.facts.credential_files):
                continue
            name = f"{cli.facts.name}-{folder.name}"  # its provider's name (setup_plan)
            if not is_provider_name(name):
                progress(
                    f"checking {folder}… a second {cli.facts.command} login, left out: its "
                    f"provider would be {name!r}, and {PROVIDER_NAME_RULE}; rename the folder"
                )
                continue
            progress(f"checking {folder}… a second {cli.facts.command} login")
            found.append(FoundAccount(cli, folder.name, str(folder)))
    return tuple(found)


def _api_base_urls(
    env: Mapping[str, str], known: Known, keys: tuple[str, ...], progress: Progress
) -> dict[str, str]:
    """API name -> the endpoint its SDK's base-URL variable names, for the APIs found."""
    base_urls: dict[str, str] = {}
    for _, api in known.apis:
        if api.key_env not in keys or api.base_url_env is None:
            continue
        base_url, problem = api.endpoint(env)
        if problem:
            progress(problem)
        elif base_url != api.base_url:
            progress(f"{api.base_url_env} is set: {api.name} goes to {base_url}")
            base_urls[api.name] = base_url
    return base_urls


def _detect_cli(
    ptype: str, facts: KnownCli, env: Mapping[str, str], progress: Progress
) -> FoundCli | None:
    name = facts.command
    path = shutil.which(name, path=env.get("PATH") or None)
    if path is None:
        progress(f"checking {name}… not on PATH")
        return None
    works, version = _version(path)
    login, source, login_env = _login(ptype, facts, env)
    if not works:
        progress(f"checking {name}… {path}: `--version` failed")
    else:
        state = {"yes": "logged in", "no": "not logged in", "unknown": "login unknown"}[login]
        shown = f" ({source})" if source else ""
        progress(f"checking {name}… {path} {version or '(version unknown)'}, {state}{shown}")
    return FoundCli(
        type=ptype,
        facts=facts,
        path=path,
        version=version,
        works=works,
        login=login,
        login_source=source,
        login_env=login_env,
    )


def _version(path: str) -> tuple[bool, str | None]:
    """(works, first line of `--version`). A timeout is not proof of a broken binary."""
    try:
        done = subprocess.run(
            [path, "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_VERSION_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return True, None
    except OSError:
        return False, None
    if done.returncode != 0:
        return False, None
    text = (done.stdout or done.stderr).decode("utf-8", "replace").strip()
    return True, (text.splitlines()[0][:80] if text else None)


def _login(
    ptype: str, facts: KnownCli, env: Mapping[str, str]
) -> tuple[Login, str, tuple[str, ...]]:
    home = Path(env.get("HOME") or Path.home())
    for rel in facts.credential_files:
        if (home / rel).is_file():
            return "yes", f"~/{rel}", ()
    for var in facts.login_env:
        if env.get(var):
            return "yes", var, (var,)
    if ptype == "claude-cli" and sys.platform == "darwin":
        # Claude Code on macOS keeps its login in the Keychain, not in a file.
        return "unknown", "macOS Keychain", ()
    return "no", "", ()


def _detect_server(label: str, where: str, kind: str) -> FoundServer | None:
    base = f"http://{where}"
    if kind == "ollama":
        models = probe_ollama(base)
        return None if models is None else FoundServer("ollama", label, f"{base}/v1", models)
    listing = probe_openai_compatible(f"{base}/v1")
    if listing is None:
        return None
    models, owner = listing
    if kind == "lmstudio":
        return FoundServer("lmstudio", label, f"{base}/v1", models)
    name = {"vllm": "vllm", "llamacpp": "llamacpp"}.get(owner, "local-server")
    shown = {"vllm": "vLLM", "llamacpp": "llama.cpp"}.get(owner, "OpenAI-compatible server")
    return FoundServer(name, shown, f"{base}/v1", models)


def probe_ollama(base: str) -> tuple[str, ...] | None:
    """Model names from Ollama's `GET /api/tags`; None if nothing (or not Ollama) answers."""
    data = _get_json(f"{base}/api/tags")
    if not isinstance(data, dict) or not isinstance(data.get("models"), list):
        return None
    return _names(data["models"], "name")


def probe_openai_compatible(api_root: str) -> tuple[tuple[str, ...], str] | None:
    """(model ids, the first model's `owned_by`) from `GET {api_root}/models`, or None."""
    data = _get_json(f"{api_root}/models")
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        return None
    first = data["data"][0] if data["data"] else None
    owner = first.get("owned_by") if isinstance(first, dict) else None
    return _names(data["data"], "id"), owner if isinstance(owner, str) else ""


def _names(items: list[Any], key: str) -> tuple[str, ...]:
    names = [i[key] for i in items if isinstance(i, dict) and isinstance(i.get(key), str)]
    return tuple(n for n in names if n.strip())[:_MAX_MODELS]


# No proxy: these are loopback probes, and an HTTP(S)_PROXY from the shell must not
# send them elsewhere.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get_json(url: str) -> object:
    try:
        with _OPENER.open(url, timeout=_HTTP_TIMEOUT_S) as resp:
            return orjson.loads(resp.read(_MAX_BODY))
    except (OSError, urllib.error.URLError, orjson.JSONDecodeError, ValueError):
        return None
