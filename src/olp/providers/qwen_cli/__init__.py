"""`qwen-cli`: Qwen Code (Qwen OAuth, Alibaba Coding Plan or any key) through `qwen`."""

from __future__ import annotations

from olp.providers.base import ProviderPlugin
from olp.providers.qwen_cli import translate
from olp.providers.qwen_cli.provider import QwenCliProvider
from olp.registry.known import KnownCli

__all__ = ["QwenCliProvider", "plugin"]

plugin = ProviderPlugin(
    type="qwen-cli",
    factory=QwenCliProvider,
    summary="Qwen Code CLI: qwen --output-format stream-json (token streaming)",
    cli=KnownCli(
        name="qwen",
        command=translate.DEFAULT_COMMAND,
        product="Qwen Code",
        credential_files=tuple(src for src, _ in translate.CREDENTIALS),
        login_hint=translate.LOGIN_HINT,
        models=("qwen3-coder-plus", "qwen3-coder-flash"),
        default_model="qwen3-coder-plus",
    ),
)
