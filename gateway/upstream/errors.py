"""The canonical failure every upstream call ends in, whatever the transport or wire format.

The transport raises these for what it sees on the wire (connect, timeouts, limits, broken
bodies); adapters raise them for what a provider said. The router acts on the class only.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorClass(StrEnum):
    RATE_LIMITED = "rate_limited"
    OVERLOADED = "overloaded"
    SERVER_ERROR = "server_error"
    TIMEOUT = "timeout"
    CONNECTION = "connection"
    AUTH = "auth"
    BAD_REQUEST = "bad_request"
    CONTEXT_LENGTH = "context_length_exceeded"
    NOT_FOUND = "not_found"
    INVALID_RESPONSE = "invalid_response"


# Failures that say nothing about the caller's request: another attempt or target may succeed.
RETRYABLE = frozenset({ErrorClass.RATE_LIMITED, ErrorClass.OVERLOADED, ErrorClass.SERVER_ERROR,
                       ErrorClass.TIMEOUT, ErrorClass.CONNECTION, ErrorClass.INVALID_RESPONSE})
# Failures of the target itself (its key, its model name): the next target may succeed, a retry won't.
TARGET_FAULTS = frozenset({ErrorClass.AUTH, ErrorClass.NOT_FOUND})


class ProviderError(Exception):
    """An upstream failure in canonical form."""

    def __init__(self, error_class: ErrorClass, message: str, status: int | None = None,
                 retry_after: float | None = None, no_retry: bool = False, responded: bool = False) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.message = message
        self.status = status
        self.retry_after = retry_after
        # Set when the provider says retrying is pointless (quota exhausted, x-should-retry: false).
        self.no_retry = no_retry
        # Set by the transport when some of the upstream's response (its status line or later)
        # had arrived before the failure: a timeout without it means the target is not answering
        # at all, and the router moves on at once instead of retrying it.
        self.responded = responded

    @property
    def retryable(self) -> bool:
        return self.error_class in RETRYABLE and not self.no_retry

    def __repr__(self) -> str:
        return f"ProviderError({self.error_class.value}, {self.status}, {self.message!r})"


class ResponseTooLarge(ProviderError):
    """A response past its provider's ``max_response_bytes`` (as received, decompressed, or a whole stream).

    A class of its own because a stream past it is never rescued (``routing/rescue.py``): continuing it would
    keep, and send again as a prefill, more than the bound allows; the stream ends with a clean error instead.
    """

    def __init__(self, message: str) -> None:
        super().__init__(ErrorClass.INVALID_RESPONSE, message)
