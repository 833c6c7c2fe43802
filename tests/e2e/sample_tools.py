"""Server-side tools the end-to-end gateway loads by import path."""

from __future__ import annotations

import asyncio
import threading
import time

RUNS: list[str] = []
_lock = threading.Lock()


def get_weather(city: str) -> str:
    return f"{city}: 18C, sunny"


async def add(a: int, b: int) -> dict[str, int]:
    return {"sum": a + b}


async def slow(seconds: float = 5.0) -> str:
    await asyncio.sleep(seconds)
    return "finished"


def explode() -> str:
    raise RuntimeError("database is on fire")


async def sleepy(ms: int, stamp: bool = False) -> str:
    """``stamp``: also say when the sleep began and ended (wall clock), so a test can see calls overlap."""
    began = time.time()
    await asyncio.sleep(ms / 1000)
    return f"slept {ms} from {began:.6f} to {time.time():.6f}" if stamp else f"slept {ms}"


def delete_record(id: str) -> str:
    return f"deleted {id}"


def big(kb: int, tag: str = "row") -> str:
    """About ``kb`` KB of varied text (several times a small window once a few are in the transcript)."""
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
    lines = []
    size = 0
    i = 0
    while size < kb * 1024:
        line = f"{tag} {i}: " + " ".join(words[(i * 7 + j) % len(words)] for j in range(12)) + f" value={i * 31 % 997}"
        lines.append(line)
        size += len(line) + 1
        i += 1
    return "\n".join(lines)
