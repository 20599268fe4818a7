"""`olp setup`, the pure part: what was found on the machine → a config.json to write.

No I/O here: detection (`setup_detect`) fills a `Machine`, this module turns it into
candidate providers, default chains per model family and the config document, so every
rule is unit-tested without a real CLI, key or server. What each provider type is called,
serves and defaults to comes from its plugin (`Known`, `olp.registry.known`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from olp.registry import Registry
from olp.registry.known import Known, KnownApi, KnownCli

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "FAMILIES",
    "Candidate",
    "FoundCli",
    "FoundServer",
    "Login",
    "Machine",
    "Plan",
    "build_config",
    "candidates",
    "default_plan",
    "plan_chains",
]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 3456

Login = Literal["yes", "no", "unknown"]
Kind = Literal["subscription", "api", "local"]


# Chain name → hops in order of preference (provider name as setup names it, model id).
# Subscriptions first (already paid for), the vendor's API next, OpenRouter last.
# A hop is kept only when its provider was added; a chain only when a hop is left.
FAMILIES: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("sonnet", (("claude", "claude-sonnet-4-5"), ("anthropic", "claude-sonnet-4-5"),
                ("openrouter", "anthropic/claude-sonnet-4.5"))),
    ("opus", (("claude", "claude-opus-4-1"), ("anthropic", "claude-opus-4-1"),
              ("openrouter", "anthropic/claude-opus-4.1"))),
    ("haiku", (("claude", "claude-haiku-4-5"), ("anthropic", "claude-haiku-4-5"),
               ("openrouter", "anthropic/claude-haiku-4.5"))),
    ("gpt-5", (("codex", "gpt-5"), ("openai", "gpt-5"), ("openrouter", "openai/gpt-5"))),
    ("codex", (("codex", "gpt-5-codex"), ("openai", "gpt-5-codex"),
               ("openrouter", "openai/gpt-5-codex"))),
    ("devstral", (("vibe", "devstral-medium-latest"), ("mistral", "devstral-medium-latest"),
                  ("openrouter", "mistralai/devstral-medium"))),
    ("mistral", (("vibe", "mistral-large-latest"), ("mistral", "mistral-large-latest"),
                 ("openrouter", "mistralai/mistral-large"))),
    ("gemini-pro", (("gemini", "gemini-2.5-pro"), ("openrouter", "google/gemini-2.5-pro"))),
    ("gemini-flash", (("gemini", "gemini-2.5-flash"),
                      ("openrouter", "google/gemini-2.5-flash"))),
    ("qwen-coder", (("qwen", "qwen3-coder-plus"), ("openrouter", "qwen/qwen3-coder"))),
    ("deepseek", (("deepseek", "deepseek-chat"), ("openrouter", "deepseek/deepseek-chat"))),
    ("llama", (("groq", "llama-3.3-70b-versatile"),
               ("openrouter", "meta-llama/llama-3.3-70b-instruct"))),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class FoundCli:
    """A CLI found on PATH."""

    type: str  # e.g. "claude-cli"
    facts: KnownCli  # what its plugin declares
    path: str
    version: str | None  # first line of `--version`; None: it did not answer in time
    works: bool  # False: `--version` failed (the binary is broken)
    login: Login
    login_source: str = ""  # "~/.claude/.credentials.json", "CLAUDE_CODE_OAUTH_TOKEN", ...
    login_env: tuple[str, ...] = ()  # variables to hand the child through `env`


@dataclass(frozen=True, slots=True)
class FoundAccount:
    """A second login of a CLI found: `$OLP_HOME/accounts/<name>/` holds its credentials."""

    cli: FoundCli  # the CLI it is a login of
    name: str  # the account folder's name
    home: str  # that folder: the provider's `credentials_home`


@dataclass(frozen=True, slots=True)
class FoundServer:
    """An OpenAI-compatible server answering on this machine."""

    name: str  # provider name: "ollama", "vllm", "llamacpp", "local-server", "lmstudio"
    label: str  # for people: "Ollama", "LM Studio", ...
    base_url: str  # the API root, ending in /v1
    models: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Machine:
    clis: tuple[FoundCli, ...] = ()
    api_keys: tuple[str, ...] = ()  # names of the API-key variables that are set
    servers: tuple[FoundServer, ...] = ()
    accounts: tuple[FoundAccount, ...] = ()
    # API name -> the base URL its SDK variable (OPENAI_BASE_URL, …) points at, where set.
    base_urls: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A provider setup can add, and what adding it needs."""

    name: str
    type: str
    kind: Kind
    tier: str  # risk tier from the registry ("?" if the registry does not know the type)
    summary: str  # one line for people
    entry: Mapping[str, Any]  # providers.<name> in config.json (without `consent`)
    default_model: str | None  # its hop in the `default` chain; None: no model known
    # Another login of that provider's CLI: its hops become a pool with that provider's.
    pool_of: str | None = None

    @property
    def default_on(self) -> bool:
        """Only tier D is safe to add without asking (seeds' risk tier guide)."""
        return self.tier == "D"

    @property
    def needs_consent(self) -> bool:
        return self.tier == "B"


@dataclass(frozen=True, slots=True)
class Plan:
    config: dict[str, Any]
    providers: tuple[Candidate, ...]
    chains: dict[str, list[dict[str, Any]]]
    # What was left out and why, and what to do when nothing was found.
    notes: tuple[str, ...] = field(default=())


def candidates(
    machine: Machine, known: Known, registry: Registry
) -> tuple[list[Candidate], list[str]]:
    """Every provider setup could add, in chain order, and notes on what it left out."""
    notes: list[str] = []
    found = [c for cli in machine.clis if (c := _cli_candidate(cli, known, registry, notes))]
    found += [_account_candidate(a, found) for a in machine.accounts if _has_cli(a, found)]
    found += _api_candidates(machine, known, registry)
    found += _server_candidates(machine, known, registry, notes)
    for c in found:
        if c.tier == "A":
            notes.append(f"{c.name} ({c.type}) is risk tier A: excluded, it cannot be enabled")
    return [c for c in found if c.tier != "A"], notes


def _cli_candidate(
    cli: FoundCli, known: Known, registry: Registry, notes: list[str]
) -> Candidate | None:
    facts = cli.facts
    reason = _cli_unusable(cli, known)
    if reason:
        notes.append(reason)
        return None
    login = "logged in" if cli.login == "yes" else "login not verifiable"
    source = f" ({cli.login_source})" if cli.login_source else ""
    entry: dict[str, Any] = {"type": cli.type, "models": list(facts.models)}
    if cli.login_env:
        entry["env"] = {var: f"${{{var}}}" for var in cli.login_env}
    return Candidate(
        name=facts.name,
        type=cli.type,
        kind="subscription",
        tier=_tier(registry, cli.type),
        summary=f"{facts.product} through `{facts.command}`, {login}{source}",
        entry=entry,
        default_model=facts.default_model,
    )


def _has_cli(account: FoundAccount, found: Sequence[Candidate]) -> bool:
    return any(c.name == account.cli.facts.name for c in found)


def _account_candidate(account: FoundAccount, found: Sequence[Candidate]) -> Candidate:
    """A second login of a CLI that is a candidate itself: the same entry, its own home."""
    base = next(c for c in found if c.name == account.cli.facts.name)
    return replace(
        base,
        name=f"{base.name}-{account.name}",
        summary=f"{account.cli.facts.product}, second login in {account.home}",
        entry={**base.entry, "credentials_home": account.home},
        pool_of=base.name,
    )


def _api_candidates(machine: Machine, known: Known, registry: Registry) -> list[Candidate]:
    """The APIs whose key is set, in plugin order with the aggregators last."""
    found = [(t, api) for t, api in known.apis if api.key_env in machine.api_keys]
    found.sort(key=lambda pair: pair[1].aggregator)
    return [_api_candidate(ptype, api, machine, registry) for ptype, api in found]


def _api_candidate(ptype: str, api: KnownApi, machine: Machine, registry: Registry) -> Candidate:
    base_url = machine.base_urls.get(api.name, api.base_url)
    entry: dict[str, Any] = {"type": ptype, "base_url": base_url, "api_key_env": api.key_env}
    if api.models:
        entry["models"] = list(api.models)
    return Candidate(
        name=api.name,
        type=ptype,
        kind="api",
        tier=_tier(registry, ptype),
        summary=f"{base_url} with the key in {api.key_env}",
        entry=entry,
        default_model=api.default_model,
    )


def _server_candidates(
    machine: Machine, known: Known, registry: Registry, notes: list[str]
) -> list[Candidate]:
    found: list[Candidate] = []
    for server in machine.servers:
        if "openai-http" not in known.types:
            notes.append(f"{server.label} found, but no openai-http provider plugin is installed")
            continue
        entry: dict[str, Any] = {"type": "openai-http", "base_url": server.base_url}
        if server.models:
            entry["models"] = list(server.models)
        else:
            notes.append(f"{server.label} answers but serves no model yet (e.g. `ollama pull`)")
        found.append(
            Candidate(
                name=server.name,
                type="openai-http",
                kind="local",
                tier=_tier(registry, "openai-http"),
                summary=f"{server.label} at {server.base_url}, {len(server.models)} model(s)",
                entry=entry,
                default_model=server.models[0] if server.models else None,
            )
        )
    return found


def _cli_unusable(cli: FoundCli, known: Known) -> str | None:
    name, hint = cli.facts.name, cli.facts.login_hint
    if not cli.works:
        return f"{name} at {cli.path} fails `{cli.facts.command} --version`: reinstall it"
    if cli.type not in known.types:
        return (
            f"{name} found, but this OLP has no {cli.type} provider plugin installed "
            "(upgrade OLP to use it)"
        )
    if cli.login == "no":
        return f"{name} found, but not logged in: {hint}, then run `olp setup` again"
    return None


def _tier(registry: Registry, ptype: str) -> str:
    info = registry.provider_type(ptype)
    return info.risk_tier if info else "?"


def plan_chains(providers: Sequence[Candidate]) -> dict[str, list[dict[str, Any]]]:
    """Default chains over the chosen providers: one per model family, `local`, `default`.
    A CLI with more logins (`$OLP_HOME/accounts/`) gets a pool hop of all of them."""
    accounts = [c for c in providers if c.pool_of is not None]
    providers = [c for c in providers if c.pool_of is None]
    names = {c.name for c in providers}
    chains: dict[str, list[dict[str, Any]]] = {}
    for family, hops in FAMILIES:
        kept = [{"provider": p, "model": m} for p, m in hops if p in names]
        if kept:
            chains[family] = kept
    local = [_hop(c) for c in providers if c.kind == "local" and c.default_model]
    if local:
        chains["local"] = local
    ordered = sorted(providers, key=lambda c: ("subscription", "api", "local").index(c.kind))
    default = [_hop(c) for c in ordered if c.default_model]
    if default:
        chains["default"] = default
    return {name: [_pooled(hop, accounts) for hop in hops] for name, hops in chains.items()}


def _pooled(hop: dict[str, Any], accounts: Sequence[Candidate]) -> dict[str, Any]:
    """The hop as a pool of its provider and that CLI's other logins, if it has any."""
    others = [c.name for c in accounts if c.pool_of == hop["provider"]]
    if not others:
        return hop
    return {"pool": [hop["provider"], *others], "model": hop["model"]}


def _hop(c: Candidate) -> dict[str, str]:
    assert c.default_model is not None  # callers filter
    return {"provider": c.name, "model": c.default_model}


def build_config(
    providers: Sequence[Candidate],
    chains: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    port: int = DEFAULT_PORT,
    host: str = DEFAULT_HOST,
) -> dict[str, Any]:
    """The config.json document. Choosing a tier-B provider *is* the recorded consent:
    the wizard only offers it after the owner accepted the risk."""
    entries: dict[str, Any] = {}
    for c in providers:
        entry = dict(c.entry)
        if c.needs_consent:
            entry["consent"] = True
        entries[c.name] = entry
    return {
        "server": {"host": host, "port": port},
        "auth": {"allow_anonymous": False},
        "providers": entries,
        "routing": {"chains": {name: [dict(h) for h in hops] for name, hops in chains.items()}},
    }


def default_plan(
    machine: Machine,
    known: Known,
    registry: Registry,
    *,
    port: int = DEFAULT_PORT,
) -> Plan:
    """What `olp setup --yes` writes: every tier-D provider found, all default chains.

    Tier C (opt-in) and tier B (opt-in with consent) are never added without a question.
    """
    found, notes = candidates(machine, known, registry)
    chosen = [c for c in found if c.default_on]
    for c in found:
        if not c.default_on:
            notes.append(opt_in_note(c, registry))
    chains = plan_chains(chosen)
    if not chosen:
        notes.append(nothing_found_note(known))
    return Plan(build_config(chosen, chains, port=port), tuple(chosen), chains, tuple(notes))


def opt_in_note(c: Candidate, registry: Registry) -> str:
    meaning = registry.risk_tiers.get(c.tier, "not in the models registry")
    return (
        f"{c.name} ({c.type}) found but not added: risk tier {c.tier} ({meaning}); "
        "run `olp setup` without --yes to opt in"
    )


def nothing_found_note(known: Known) -> str:
    clis = ", ".join(cli.name for _, cli in known.clis)
    keys = ", ".join(api.key_env for _, api in known.apis)
    return (
        "no usable provider found. Any one of these is enough: log in to a subscription CLI "
        f"({clis}), set an API key variable ({keys}), or start a local server "
        "(Ollama, vLLM, llama.cpp, LM Studio); then run `olp setup` again"
    )
