"""Ready-to-paste settings for the clients people point at OLP (pure text)."""

from __future__ import annotations

__all__ = ["client_snippets"]


def client_snippets(base_url: str, key: str, model: str) -> str:
    """Settings for curl, the openai SDK, Continue, Cline, Aider and Open WebUI.

    `key` is the real owner key when setup just made it, else a placeholder.
    """
    port = base_url.rsplit(":", 1)[-1].split("/", 1)[0]
    return f"""\
── curl ───────────────────────────────────────────────────────────
curl -sN {base_url}/chat/completions \\
  -H "Authorization: Bearer {key}" -H "Content-Type: application/json" \\
  -d '{{"model": "{model}", "stream": true, "messages": [{{"role": "user", "content": "Hello!"}}]}}'

── Python, the openai SDK ─────────────────────────────────────────
from openai import OpenAI
client = OpenAI(base_url="{base_url}", api_key="{key}")
reply = client.chat.completions.create(
    model="{model}", messages=[{{"role": "user", "content": "Hello!"}}])
print(reply.choices[0].message.content)

── Continue (~/.continue/config.yaml) ─────────────────────────────
name: OLP
version: 0.0.1
schema: v1
models:
  - name: OLP {model}
    provider: openai
    model: {model}
    apiBase: {base_url}
    apiKey: {key}
    roles: [chat, edit, apply]

── Cline (VS Code: Cline settings → API Provider) ─────────────────
API Provider: OpenAI Compatible
Base URL:     {base_url}
API Key:      {key}
Model ID:     {model}

── Aider ──────────────────────────────────────────────────────────
aider --openai-api-base {base_url} --openai-api-key {key} --model openai/{model}
# or: export OPENAI_API_BASE={base_url} OPENAI_API_KEY={key}; aider --model openai/{model}

── Open WebUI ─────────────────────────────────────────────────────
OPENAI_API_BASE_URL={base_url}
OPENAI_API_KEY={key}
# in Docker on Linux, share the host's network so 127.0.0.1 reaches OLP:
# docker run -d --network=host -e OPENAI_API_BASE_URL={base_url} \\
#   -e OPENAI_API_KEY={key} ghcr.io/open-webui/open-webui:main   (UI on :8080)
# Docker Desktop (macOS, Windows): OPENAI_API_BASE_URL=http://host.docker.internal:{port}/v1
"""
