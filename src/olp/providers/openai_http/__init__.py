"""`openai-http`: any OpenAI-compatible Chat Completions server (OpenAI, OpenRouter,
DeepSeek, Groq, Ollama, vLLM, llama.cpp, ...)."""

from __future__ import annotations

from olp.providers.base import ProviderPlugin
from olp.providers.openai_http.provider import OpenAIHttpProvider

__all__ = ["OpenAIHttpProvider", "plugin"]

plugin = ProviderPlugin(
    type="openai-http",
    factory=OpenAIHttpProvider,
    summary="Any OpenAI-compatible server: POST {base_url}/chat/completions",
    default_api_key_env="OPENAI_API_KEY",
)
