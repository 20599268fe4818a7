"""Client-facing wire protocols and their translation to and from the IR (layer L2).

`sse` decodes the Server-Sent-Events byte streams upstreams send; `openai_chat` is the
OpenAI Chat Completions surface OLP serves to its clients.
"""

from __future__ import annotations

__all__: list[str] = []
