"""The suite's Redis for the usage-store tests: flushed, and never skipped under ``CI=true``."""

from __future__ import annotations

import os

import pytest
import redis.asyncio as aioredis

REDIS_URL = os.environ["LOOPGATE_TEST_REDIS_URL"]  # set by tests/conftest.py
IN_CI = os.environ.get("CI", "").lower() == "true"


async def flushed_redis() -> aioredis.Redis:
    """A client of the suite's Redis after ``FLUSHDB``; skip when it is unreachable (fail under CI)."""
    client = aioredis.Redis.from_url(REDIS_URL, socket_connect_timeout=10)  # generous: a busy machine
    try:
        await client.flushdb()
    except Exception as exc:
        await client.aclose()
        if IN_CI:
            pytest.fail(f"Redis at {REDIS_URL} unreachable under CI=true: {exc}")
        pytest.skip(f"Redis at {REDIS_URL} unreachable: {exc}")
    return client
