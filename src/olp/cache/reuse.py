"""Who may be answered from the cache: pressing "regenerate" must give a new answer.

A request sampled at a temperature above zero asks for *an* answer, not *the* answer: a
chat UI's regenerate button sends the same body again and expects a different reply. So by
default only deterministic requests are answered from the cache: `temperature: 0`, or a
`seed`. Other requests still store their answer (a later opted-in request may use it) but
never look one up. The owner opts every request in with `cache.serve_nondeterministic`; a
client opts one request in with the header `X-OLP-Cache: allow`.
"""

from __future__ import annotations

from olp.errors import InvalidRequest
from olp.ir import ChatRequest

__all__ = ["OPT_IN_HEADER", "may_reuse"]

OPT_IN_HEADER = b"x-olp-cache"
_ALLOW = b"allow"


def may_reuse(request: ChatRequest, serve_nondeterministic: bool, opt_in: bytes | None) -> bool:
    """Whether `request` may be answered from the cache (`opt_in`: its X-OLP-Cache header).

    Raises InvalidRequest for an X-OLP-Cache header other than `allow`.
    """
    if opt_in is not None and opt_in.strip().lower() != _ALLOW:
        shown = opt_in.decode("latin-1")[:40]
        raise InvalidRequest(
            f"Header X-OLP-Cache must be 'allow' (got {shown!r}); "
            "leave it out to serve only deterministic requests from the cache."
        )
    if request.temperature == 0 or request.seed is not None:
        return True
    return serve_nondeterministic or opt_in is not None
