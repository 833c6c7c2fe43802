"""The chain a follow-up shares with its parent (gateway/api/responses/chain.py), on the real memory records.

A follow-up names its ancestors and keeps only what it adds, unless the loop rewrote the parent's
messages (then it stores everything); a chain at MAX_CHAIN_LINKS starts over; a missing ancestor
is OpenAI's 400 ``previous_response_not_found``, naming it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.api.responses.chain import parent_chain
from gateway.errors import GatewayError
from gateway.store.responses.base import MAX_CHAIN_LINKS
from gateway.store.responses.memory import MemoryResponseRecords


def _record(i: int, ancestors: list[str]) -> dict[str, Any]:
    record: dict[str, Any] = {"response": {"id": f"r{i}"}, "input": [], "continuation_id": None,
                              "transcript": [{"role": "user", "content": f"q{i}"},
                                             {"role": "assistant", "content": f"a{i}"}]}
    if ancestors:
        record["ancestors"] = ancestors
    return record


def test_a_follow_up_keeps_what_it_adds_unless_the_parent_part_was_rewritten() -> None:
    records = MemoryResponseRecords()

    async def scenario() -> None:
        await records.put("t", "r0", _record(0, []), 600)
        await records.put("t", "r1", _record(1, ["r0"]), 600)
        parent = await records.get("t", "r1")
        assert parent is not None
        messages, chain = await parent_chain(records, "t", "r1", parent)
        assert [m["content"] for m in messages] == ["q0", "a0", "q1", "a1"]
        assert chain.ancestors == ["r0", "r1"]
        added = {"role": "user", "content": "q2"}
        assert chain.segment([*messages, added]) == [added]
        rewritten = [dict(messages[0]), *messages[1:], added]  # e.g. the context guard replaced a message
        assert chain.segment(rewritten) is None
        assert chain.segment(messages[:2]) is None

        await records.delete("t", "r0")
        with pytest.raises(GatewayError) as caught:
            await parent_chain(records, "t", "r1", parent)
        error = caught.value
        assert (error.status, error.code, error.param) == (400, "previous_response_not_found", "previous_response_id")
        assert "'r0'" in error.message and "'r1'" in error.message

    asyncio.run(scenario())


def test_a_chain_at_its_longest_starts_over() -> None:
    records = MemoryResponseRecords()

    async def scenario() -> None:
        ancestors = [f"r{i}" for i in range(MAX_CHAIN_LINKS)]  # a full chain: its next response would be one more
        for i, _ in enumerate(ancestors):
            await records.put("t", f"r{i}", _record(i, ancestors[:i]), 600)
        last = await records.get("t", ancestors[-1])
        assert last is not None
        messages, chain = await parent_chain(records, "t", ancestors[-1], last)
        assert len(messages) == 2 * len(ancestors)
        assert chain.ancestors == [] and chain.segment(messages) == messages  # stored whole: a new root

    asyncio.run(scenario())
