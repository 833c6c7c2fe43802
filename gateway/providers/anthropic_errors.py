"""Anthropic's errors, classified: an error body's ``type`` -> the canonical class the router acts on.

Shared by the adapter (an HTTP error's body) and the answer side (an ``error`` stream event, a
``{"type": "error"}`` 200 body), so both read one table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.providers.base import ErrorClass, ProviderError, looks_like_context_overflow

ERROR_TYPES: dict[str, ErrorClass] = {
    "invalid_request_error": ErrorClass.BAD_REQUEST,
    "request_too_large": ErrorClass.BAD_REQUEST,
    "authentication_error": ErrorClass.AUTH,
    "permission_error": ErrorClass.AUTH,
    "not_found_error": ErrorClass.NOT_FOUND,
    "rate_limit_error": ErrorClass.RATE_LIMITED,
    # Out of credit: like the spend cap, another target may serve it but a retry here won't.
    "billing_error": ErrorClass.RATE_LIMITED,
    "api_error": ErrorClass.SERVER_ERROR,
    "timeout_error": ErrorClass.TIMEOUT,
    "overloaded_error": ErrorClass.OVERLOADED,
}

SPEND_LIMIT = "enforced_spend_limit_reached"


def is_context_overflow(message: str) -> bool:
    # "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000" is not in the shared list.
    return looks_like_context_overflow(message) or "context limit" in message.lower()


def no_retry_for(error: Mapping[str, Any]) -> bool:
    """Errors that look retryable by class but are not: the monthly spend cap and billing."""
    details = error.get("details")
    code = details.get("error_code") if isinstance(details, dict) else None
    return code == SPEND_LIMIT or error.get("type") == "billing_error"


def error_from_body(error: Any) -> ProviderError:
    """The ``error`` object of a ``{"type": "error"}`` body or stream event, classified by its type."""
    if not isinstance(error, dict):
        return ProviderError(ErrorClass.SERVER_ERROR, str(error or "upstream error"))
    message = str(error.get("message") or error.get("type") or "upstream error")
    error_class = ERROR_TYPES.get(str(error.get("type")), ErrorClass.SERVER_ERROR)
    if error_class is ErrorClass.BAD_REQUEST and is_context_overflow(message):
        error_class = ErrorClass.CONTEXT_LENGTH
    return ProviderError(error_class, message, no_retry=no_retry_for(error))
