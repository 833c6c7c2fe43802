"""The shared rules for numbers and names an upstream reports: Retry-After, token counts, model names."""

from __future__ import annotations

import time
from email.utils import formatdate
from typing import Any

import pytest

from gateway.canonical import MAX_TOKEN_COUNT, token_count
from gateway.providers.base import MAX_RETRY_AFTER_S, error_from_status, reported_model, retry_after_seconds


@pytest.mark.parametrize(("headers", "expected"), [
    ({"retry-after": "7"}, 7.0),
    ({"retry-after": "0.5"}, 0.5),
    ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
    ({"retry-after": "inf"}, None),
    ({"retry-after": "-inf"}, None),
    ({"retry-after": "nan"}, None),
    ({"retry-after": "NaN"}, None),
    ({"retry-after": "infinity"}, None),
    ({"retry-after": "-5"}, None),
    ({"retry-after": "1e308"}, MAX_RETRY_AFTER_S),
    ({"retry-after": "1e400"}, None),  # float() says inf
    ({"retry-after-ms": "nan", "retry-after": "3"}, 3.0),  # a nonsense ms header falls back to the other
    ({"retry-after-ms": "inf"}, None),
    ({"retry-after-ms": "1e308"}, MAX_RETRY_AFTER_S),
    ({"retry-after": "soon"}, None),
    ({"retry-after": "Fri, 31 Dec 99999 23:59:59 GMT"}, None),  # ValueError inside mktime_tz today
    ({"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"}, MAX_RETRY_AFTER_S),
    ({"retry-after": "Mon, 01 Jan 2001 00:00:00 GMT"}, 0.0),  # in the past: retry now
    ({}, None),
])
def test_retry_after_is_finite_non_negative_and_capped_or_absent(headers: dict[str, str],
                                                                 expected: float | None) -> None:
    assert retry_after_seconds(headers) == expected


def test_retry_after_as_a_near_date() -> None:
    seconds = retry_after_seconds({"retry-after": formatdate(time.time() + 30, usegmt=True)})
    assert seconds is not None and 25 <= seconds <= 31


def test_an_error_with_a_hostile_retry_after_is_still_an_error() -> None:
    for value in ("inf", "nan", "1e308", "-1", "Fri, 31 Dec 99999 23:59:59 GMT"):
        error = error_from_status(429, {"retry-after": value}, "slow down")
        assert error.retryable and (error.retry_after is None or error.retry_after <= MAX_RETRY_AFTER_S)


@pytest.mark.parametrize(("value", "expected"), [
    (12, 12), (0, 0), (12.0, 12), (MAX_TOKEN_COUNT, MAX_TOKEN_COUNT), (MAX_TOKEN_COUNT + 1, 0), (-1, 0),
    (1.5, 0), (1e300, 0), (float("inf"), 0), (float("nan"), 0), ("12", 0), (True, 0), (None, 0), ([3], 0),
])
def test_token_counts_that_are_not_plausible_count_as_absent(value: Any, expected: int) -> None:
    assert token_count(value) == expected


@pytest.mark.parametrize(("value", "expected"), [
    ("gpt-4.1-2025-04-14", "gpt-4.1-2025-04-14"), ("models/gemini-2.5-flash", "models/gemini-2.5-flash"),
    ("", ""), (None, ""), (5, ""), (["m"], ""), ("m" * 257, ""), ("evil\nINFO forged", ""), ("x\x1b[31m", ""),
])
def test_reported_model_names_must_be_plausible(value: Any, expected: str) -> None:
    assert reported_model(value) == expected
