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
        await mine.keep("t", "r1", record("A1", [user("q1")]), "A1")
        # a follow-up is handed over whole (``ResponseRun.record(chained=False)``): the loop's transcript
        await mine.keep("t", "r2", record("A2", [user("q1"), assistant("A1"), user("q2")]), "A2")
        second = await mine.get("t", "r2")
        assert second == {"transcript": [user("q1"), assistant("A1"), user("q2"), assistant("A2")],
                          "continuation_id": None, "instructions_first": False}
        assert await mine.full_transcript("t", second) == second["transcript"]
        assert await other.get("t", "r2") is None and await shared.get("t", "r2") is None
        assert await mine.get("other-tenant", "r2") is None
        assert await shared.stored_bytes("t") == 0  # nothing reached the store
        await mine.keep("t", "prepared", record("", [user("q")]), None)  # generate: false: no answer to add
        assert (await mine.get("t", "prepared") or {})["transcript"] == [user("q")]
        paused = {**record("", [user("q")]), TRANSCRIPT_HEAD: None, "continuation_id": "c1"}
        await mine.keep("t", "paused", paused, "")
        assert await mine.get("t", "paused") == {"transcript": None, "continuation_id": "c1",
                                                 "instructions_first": False}

    asyncio.run(scenario())


def test_a_stored_response_continuing_a_kept_one_is_stored_whole() -> None:
    async def scenario() -> None:
        shared = MemoryResponseRecords()
        mine = ConnectionRecords(shared, 4, 1 << 20)
        await mine.keep("t", "r1", record("A1", [user("q1")]), "A1")
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
            await mine.keep("t", f"r{index}", record(f"A{index}", [user("q")]), f"A{index}")
        assert len(mine) == 2 and await mine.get("t", "r2") is None and await mine.get("t", "r4") is not None
        await mine.keep("t", "huge", record("", [user("q")]), "x" * 5000)  # larger than the bound alone: not kept
        assert await mine.get("t", "huge") is None and len(mine) == 2
        await mine.keep("t", "big", record("", [user("q")]), "y" * 3800)  # fits alone: the older ones make room
        assert await mine.get("t", "big") is not None and len(mine) == 1 and mine.kept_bytes <= 4000
        off = ConnectionRecords(MemoryResponseRecords(), 0, 4000)
        await off.keep("t", "r", record("A", [user("q")]), "A")
        assert len(off) == 0

    asyncio.run(scenario())


def test_past_the_count_the_newest_is_kept() -> None:
    async def scenario() -> None:
        mine = ConnectionRecords(MemoryResponseRecords(), 1, 1 << 20)
        await mine.keep("t", "r1", record("A1", [user("q1")]), "A1")
        await mine.keep("t", "other", record("B", [user("p")]), "B")  # pushes r1 out (one kept at most)
        assert await mine.get("t", "r1") is None

    asyncio.run(scenario())
