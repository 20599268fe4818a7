"""`openai-http`: any OpenAI-compatible Chat Completions server (OpenAI, OpenRouter,
DeepSeek, Groq, Ollama, vLLM, llama.cpp, ...)."""

from __future__ import annotations

from olp.providers.base import ProviderPlugin
from olp.providers.openai_http.provider import OpenAIHttpProvider
from olp.registry.known import KnownApi

__all__ = ["OpenAIHttpProvider", "plugin"]

plugin = ProviderPlugin(
    type="openai-http",
    factory=OpenAIHttpProvider,
    summary="Any OpenAI-compatible server: POST {base_url}/chat/completions",
    default_api_key_env=OpenAIHttpProvider.default_api_key_env,
    apis=(
        KnownApi(
            name="openai",
            key_env=OpenAIHttpProvider.default_api_key_env,
            base_url="https://api.openai.com/v1",
            models=("gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "gpt-5", "gpt-5-mini"),
            default_model="gpt-5",
            base_url_env="OPENAI_BASE_URL",
        ),
        KnownApi(
            name="mistral",
            key_env="MISTRAL_API_KEY",
            base_url="https://api.mistral.ai/v1",
            models=(
                "mistral-large-latest",
                "mistral-small-latest",
                "codestral-latest",
                "devstral-medium-latest",
            ),
            default_model="mistral-large-latest",
        ),
        KnownApi(
            name="deepseek",
            key_env="DEEPSEEK_API_KEY",
            base_url="https://api.deepseek.com/v1",
            models=("deepseek-chat", "deepseek-reasoner"),
            default_model="deepseek-chat",
        ),
        KnownApi(
            name="groq",
            key_env="GROQ_API_KEY",
            base_url="https://api.groq.com/openai/v1",
            models=("llama-3.3-70b-versatile", "llama-3.1-8b-instant"),
            default_model="llama-3.3-70b-versatile",
        ),
        KnownApi(
            name="openrouter",
            key_env="OPENROUTER_API_KEY",
            base_url="https://openrouter.ai/api/v1",
            default_model="anthropic/claude-sonnet-4.5",
            aggregator=True,
        ),
    ),
)
