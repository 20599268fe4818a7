"""`qwen-cli`: Qwen Code (Qwen OAuth, Alibaba Coding Plan or any key) through `qwen`."""

from __future__ import annotations

from olp.providers.base import ProviderPlugin
from olp.providers.qwen_cli.provider import QwenCliProvider

__all__ = ["QwenCliProvider", "plugin"]

plugin = ProviderPlugin(
    type="qwen-cli",
    factory=QwenCliProvider,
    summary="Qwen Code CLI: qwen --output-format stream-json (token streaming)",
)
