"""Real tool functions the Python-source tests point at (``tests.tools.sample_tools:NAME``)."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import time
from typing import Any

from gateway.tools import ToolFailure

# Finish order of the sleeping tools, and the tags of calls that were cancelled.
finished: list[str] = []
cancelled: list[str] = []


def sync_thread_id(**kwargs: Any) -> str:
    """Returns the id of the thread it ran in, and the arguments it received."""
    return f"{threading.get_ident()}|{sorted(kwargs.items())}"


async def async_thread_id() -> str:
    return str(threading.get_ident())


async def add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


def raises(city: str) -> str:
    raise ValueError(f"no weather for {city}")


def raises_tool_failure() -> str:
    raise ToolFailure("the record is locked, try again later")


def returns_dict(city: str) -> dict[str, Any]:
    return {"city": city, "temp_c": 21.5, "tags": {"sunny"}, "at": dt.date(2024, 5, 1), 7: "seven"}


def returns_none() -> None:
    return None


def no_args() -> str:
    return "pong"


async def sleep_async(tag: str, delay: float) -> str:
    try:
        await asyncio.sleep(delay)
    except asyncio.CancelledError:
        cancelled.append(tag)
        raise
    finished.append(tag)
    return tag


def sleep_sync(tag: str, delay: float) -> str:
    time.sleep(delay)
    finished.append(tag)
    return tag


class AsyncCallable:
    async def __call__(self, x: int) -> int:
        return x * 2


async_callable = AsyncCallable()

NOT_CALLABLE = 42
