"""One exception tree for everything OLP says went wrong.

    OLPError                      code, http_status, type, param, provider, retry_after
    ├── ConfigError               a config file or flag that cannot be used (never on the wire)
    ├── InvalidRequest            400 invalid_request_error (the message names the field)
    ├── AuthRequired              401 auth_required
    ├── InvalidApiKey             401 invalid_api_key
    ├── Forbidden                 403 model_not_allowed / owner_required
    ├── NotFound                  404 not_found (unknown route)
    ├── MethodNotAllowed          405 method_not_allowed
    ├── ModelNotFound             404 model_not_found
    ├── RequestTimeout            408 request_timeout (the body stalled)
    ├── RequestTooLarge           413 request_too_large
    ├── UnsupportedMediaType      415 unsupported_media_type
    ├── KeyLimitExceeded          429 key_limit_exceeded (+ Retry-After)
    ├── NoProviderAvailable       503 no_provider_available (every provider disabled)
    ├── ProviderError             one failed hop; `failure` is the taxonomy code (docs/design.md §5)
    └── ChainFailed               every hop failed or was skipped; carries each attempt

Errors carry data, not prose for the wire: `olp.wire` turns any of them into OpenAI's
error shape in one place.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "AuthRequired",
    "CacheUnavailable",
    "ChainFailed",
    "ConfigError",
    "Failure",
    "Forbidden",
    "HeaderFieldsTooLarge",
    "HopFailure",
    "InvalidApiKey",
    "InvalidRequest",
    "KeyLimitExceeded",
    "MethodNotAllowed",
    "ModelNotFound",
    "NoProviderAvailable",
    "NotFound",
    "OLPError",
    "ProviderError",
    "RequestTimeout",
    "RequestTooLarge",
    "ShuttingDown",
    "UnpricedModel",
    "UnsupportedMediaType",
]


class OLPError(Exception):
    """Base of every error OLP raises on purpose."""

    code: str = "internal_error"
    http_status: int = 500
    type: str = "server_error"

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        provider: str | None = None,
        retry_after: float | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.provider = provider
        self.retry_after = retry_after
        if code is not None:
            self.code = code


class ConfigError(OLPError):
    """A configuration problem. `path` is the JSON path (or flag) at fault."""

    code = "config_error"

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}" if path else reason)
        self.path = path
        self.reason = reason


class InvalidRequest(OLPError):
    code = "invalid_request_error"
    http_status = 400
    type = "invalid_request_error"


class AuthRequired(OLPError):
    code = "auth_required"
    http_status = 401
    type = "authentication_error"


class InvalidApiKey(OLPError):
    code = "invalid_api_key"
    http_status = 401
    type = "authentication_error"


class Forbidden(OLPError):
    code = "model_not_allowed"
    http_status = 403
    type = "permission_error"


class UnpricedModel(Forbidden):
    """A key with a USD budget asked for a model OLP cannot price: fail closed."""

    code = "unpriced_model"


class NotFound(OLPError):
    code = "not_found"
    http_status = 404
    type = "invalid_request_error"


class MethodNotAllowed(OLPError):
    code = "method_not_allowed"
    http_status = 405
    type = "invalid_request_error"

    def __init__(self, message: str, *, allow: tuple[str, ...]) -> None:
        super().__init__(message)
        self.allow = allow  # the `Allow` header: the methods the path answers


class ModelNotFound(OLPError):
    code = "model_not_found"
    http_status = 404
    type = "invalid_request_error"


class RequestTimeout(OLPError):
    code = "request_timeout"
    http_status = 408
    type = "invalid_request_error"


class RequestTooLarge(OLPError):
    code = "request_too_large"
    http_status = 413
    type = "invalid_request_error"


class HeaderFieldsTooLarge(OLPError):
    code = "request_header_fields_too_large"
    http_status = 431
    type = "invalid_request_error"


class UnsupportedMediaType(OLPError):
    code = "unsupported_media_type"
    http_status = 415
    type = "invalid_request_error"


class KeyLimitExceeded(OLPError):
    code = "key_limit_exceeded"
    http_status = 429
    type = "rate_limit_error"


class Failure(enum.StrEnum):
    """The trigger taxonomy of docs/design.md §5. What each one *does* lives in engine.classify."""

    RATE_LIMITED = "RATE_LIMITED"
    QUOTA_EXHAUSTED = "QUOTA_EXHAUSTED"
    OVERLOADED = "OVERLOADED"
    UPSTREAM_ERROR = "UPSTREAM_ERROR"
    TRANSPORT = "TRANSPORT"
    TIMEOUT = "TIMEOUT"
    SPAWN_FAILED = "SPAWN_FAILED"
    CLI_NOT_FOUND = "CLI_NOT_FOUND"
    CONCURRENCY_LIMIT = "CONCURRENCY_LIMIT"
    SOFT_TRIGGER = "SOFT_TRIGGER"
    SHARE_SPENT = "SHARE_SPENT"
    COOLDOWN = "COOLDOWN"
    # The provider cannot honour a feature the request asks for (tools, tool_choice,
    # response_format): skipped without a call, never answered without it.
    UNSUPPORTED = "UNSUPPORTED"
    AUTH_FAILED = "AUTH_FAILED"
    INVALID_REQUEST = "INVALID_REQUEST"


class NoProviderAvailable(OLPError):
    """Every provider a model could use is disabled (skips by cooldown raise ChainFailed)."""

    code = "no_provider_available"
    http_status = 503
    type = "provider_error"


class CacheUnavailable(OLPError):
    """The shared cache (Redis) did not answer an owner's request to change it."""

    code = "cache_unavailable"
    http_status = 503
    type = "server_error"


class ShuttingDown(OLPError):
    """OLP stopped before this request was answered (SIGTERM past `server.shutdown_grace_s`).

    It says to retry in a few seconds (Retry-After): a supervisor restarts OLP by then.
    """

    code = "server_shutting_down"
    http_status = 503
    type = "server_error"

    def __init__(self, message: str) -> None:
        super().__init__(message, retry_after=5)


class ProviderError(OLPError):
    """One hop failed. Raised by providers; classified by the engine.

    `upstream_status` is the HTTP status the provider saw (or a CLI exit status mapped to
    one); `reset_at` is a unix time when a quota signal says the provider is back.
    """

    type = "provider_error"

    def __init__(
        self,
        failure: Failure,
        message: str,
        *,
        provider: str | None = None,
        upstream_status: int | None = None,
        retry_after: float | None = None,
        reset_at: float | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message, provider=provider, retry_after=retry_after, param=param)
        self.failure = failure
        self.upstream_status = upstream_status
        self.reset_at = reset_at
        self.code, self.http_status = _wire_code(failure, upstream_status)

    def __repr__(self) -> str:
        return f"ProviderError({self.failure}, {self.message!r}, provider={self.provider!r})"


def _wire_code(failure: Failure, upstream_status: int | None) -> tuple[str, int]:
    if failure is Failure.AUTH_FAILED:
        return "provider_auth_failed", 502
    if failure is Failure.INVALID_REQUEST:
        status = upstream_status if upstream_status and 400 <= upstream_status < 500 else 400
        return "provider_invalid_request", status
    return "provider_error", 502


@dataclass(frozen=True, slots=True)
class HopFailure:
    """What happened at one hop of a chain that did not serve the request."""

    hop: int
    provider: str
    model: str
    error: ProviderError
    # "fallback" (went on), "skip" (not attempted) or "stop" (ended the chain).
    trigger: str


class ChainFailed(OLPError):
    """No hop served the request.

    `shown` is the error the client sees: the first hop's on exhaustion (docs/design.md §5 rule 5),
    or the one that stopped the chain (auth failure, invalid request).
    """

    type = "provider_error"

    def __init__(
        self,
        failures: tuple[HopFailure, ...],
        shown: ProviderError,
        *,
        http_status: int,
        code: str,
        retry_after: float | None,
    ) -> None:
        super().__init__(
            shown.message,
            provider=shown.provider,
            retry_after=retry_after,
            code=code,
            param=shown.param,
        )
        self.failures = failures
        self.shown = shown
        self.http_status = http_status
        self.exhausted = code in ("all_providers_failed", "no_provider_available")
