"""A WebSocket connection's records: its ``store: false`` responses kept whole in its memory (bounded), read
before the store, never seen by another connection, and never named as the ancestor of a stored one."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from gateway.api.responses.ws_records import ConnectionRecords
from gateway.store.responses.base import TRANSCRIPT_HEAD
from gateway.store.responses.memory import MemoryResponseRecords


def record(answer: str, head: list[dict[str, Any]], ancestors: list[str] | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {
        "response": orjson.Fragment(orjson.dumps({"output": [
            {"type": "message", "content": [{"type": "output_text", "text": answer}]}]})),
        "input": [], TRANSCRIPT_HEAD: head, "continuation_id": None, "instructions_first": False}
    if ancestors is not None:
        found["ancestors"] = ancestors
    return found


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def test_kept_responses_are_whole_and_only_this_connections() -> None:
    async def scenario() -> None:
        shared = MemoryResponseRecords()
        mine, other = ConnectionRecords(shared, 4, 1 << 20), ConnectionRecords(shared, 4, 1 << 20)
        await mine.keep("t", "r1", record("A1", [user("q1")]))
        await mine.keep("t", "r2", record("A2", [user("q2")], ancestors=["r1"]))  # a follow-up: only what it adds
        second = await mine.get("t", "r2")
        assert second is not None and "ancestors" not in second
        assert second[TRANSCRIPT_HEAD] == [user("q1"), assistant("A1"), user("q2")]
        assert await mine.full_transcript("t", second) == [user("q1"), assistant("A1"), user("q2"), assistant("A2")]
        assert await other.get("t", "r2") is None and await shared.get("t", "r2") is None
        assert await mine.get("other-tenant", "r2") is None
        assert await shared.stored_bytes("t") == 0  # nothing reached the store

    asyncio.run(scenario())


def test_a_stored_response_continuing_a_kept_one_is_stored_whole() -> None:
    async def scenario() -> None:
        shared = MemoryResponseRecords()
        mine = ConnectionRecords(shared, 4, 1 << 20)
        await mine.keep("t", "r1", record("A1", [user("q1")]))
        await mine.put("t", "r2", record("A2", [user("q2")], ancestors=["r1"]), 60)
        stored = await shared.get("t", "r2")
        assert stored is not None and "ancestors" not in stored
        assert await shared.full_transcript("t", stored) == [user("q1"), assistant("A1"), user("q2"), assistant("A2")]
        # a chain of stored responses stays a chain
        await mine.put("t", "r3", record("A3", [user("q3")], ancestors=["r2"]), 60)
        assert (await shared.get("t", "r3") or {}).get("ancestors") == ["r2"]
        both = await mine.get_many("t", ["r1", "r3", "nope"])
        assert [found is not None for found in both] == [True, True, False]

    asyncio.run(scenario())


def test_the_newest_are_kept_within_the_count_and_the_bytes() -> None:
    async def scenario() -> None:
        mine = ConnectionRecords(MemoryResponseRecords(), 2, 4000)
        for index in range(5):
            await mine.keep("t", f"r{index}", record(f"A{index}", [user("q")]))
        assert len(mine) == 2 and await mine.get("t", "r2") is None and await mine.get("t", "r4") is not None
        await mine.keep("t", "huge", record("x" * 5000, [user("q")]))  # larger than the bound alone: not kept
        assert await mine.get("t", "huge") is None and len(mine) == 2
        await mine.keep("t", "big", record("y" * 3700, [user("q")]))  # fits alone: the older ones make room
        assert await mine.get("t", "big") is not None and len(mine) == 1 and mine.kept_bytes <= 4000
        off = ConnectionRecords(MemoryResponseRecords(), 0, 4000)
        await off.keep("t", "r", record("A", [user("q")]))
        assert len(off) == 0

    asyncio.run(scenario())


def test_a_response_whose_conversation_is_gone_is_not_kept_and_nothing_fails() -> None:
    async def scenario() -> None:
        mine = ConnectionRecords(MemoryResponseRecords(), 4, 1 << 20)
        await mine.keep("t", "r2", record("A2", [user("q2")], ancestors=["gone"]))
        assert await mine.get("t", "r2") is None

    asyncio.run(scenario())
