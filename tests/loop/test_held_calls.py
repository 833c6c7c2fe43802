"""The held-call machinery on its own: a turn stops for calls asking the user, the registry holds them, an
answer written to the store reaches the call, and the outcome comes back; on the in-memory store.

The tools here are plain coroutines reading ``CALL_INTERACTIONS`` as a tool source does; what is under
test is ``loop/tool_runs.py``, ``loop/asking.py`` and ``loop/held.py``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from gateway.loop import held as held_module
from gateway.loop.asking import AskPolicy, TurnAsks
from gateway.loop.held import HOLDER_GONE, HeldCalls, TakenOver
from gateway.loop.pairing import ToolResult
from gateway.loop.tool_runs import run_tools
from gateway.store.memory import MemoryStore
from gateway.tools.base import ToolOutcome
from gateway.tools.interaction import CALL_INTERACTIONS, ElicitationRequest

TENANT = "team-a"


@dataclass
class Spec:
    name: str
    source: str = "mcp:crm"


@dataclass
class Tool:
    spec: Spec


def call(call_id: str, name: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


async def execute(tool_call: dict[str, Any], tool: Tool) -> ToolOutcome:
    """``asks`` asks once and reports the answer; ``plain`` just answers."""
    if tool.spec.name == "plain":
        return ToolOutcome("ok", "plain done", 1.0)
    interactions = CALL_INTERACTIONS.get()
    assert interactions is not None and interactions.elicit is not None
    answer = await interactions.elicit(ElicitationRequest(server="crm", mode="form", message="Which account?",
                                                          requested_schema={"type": "object"}))
    return ToolOutcome("ok", f"{answer.action} {answer.content}", 1.0)


PAUSE = AskPolicy()


def turn(held: HeldCalls, policy: AskPolicy = PAUSE, headless: bool = False) -> TurnAsks:
    async def denied(_: Any) -> None:
        return None

    return TurnAsks(held, lambda source, server: policy, None, headless, denied)


async def run(asks: TurnAsks, concurrency: int = 1) -> dict[str, ToolResult]:
    results: dict[str, ToolResult] = {}
    runnable = [(call("c1", "asks"), Tool(Spec("asks"))), (call("c2", "plain"), Tool(Spec("plain")))]
    async with asyncio.timeout(10):
        async for _ in run_tools(runnable, execute, concurrency, results, lambda c, s, e: None, asks=asks):
            pass
    return results


async def test_a_call_waiting_for_a_person_does_not_hold_back_the_turn_and_gets_its_answer() -> None:
    store = MemoryStore()
    held = HeldCalls(store, ttl_s=600)
    asks = turn(held)
    results = await run(asks)  # one slot: the plain call runs once the asking call gave its slot back
    assert list(results) == ["c2"] and list(asks.handed) == ["c1"]
    [(asked_call, fields)] = asks.pending()
    assert asked_call["id"] == "c1" and fields["elicitation"]["message"] == "Which account?"
    assert fields["seq"] == 1 and fields["hold"].startswith("hold_")
    asks.adopt(TENANT)
    assert held.count == 1
    item = {"tool_call_id": "c1", **fields}
    async with asyncio.timeout(10):
        outcome = await held.deliver(TENANT, item, {"action": "accept", "content": {"account": "ACME"}}, 5.0)
    assert outcome == ToolResult("ok", "accept {'account': 'ACME'}", 1.0)
    async with asyncio.timeout(5):
        while held.count:
            await asyncio.sleep(0.01)


async def test_a_holder_that_is_gone_is_an_error_result(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(held_module, "ACK_TIMEOUT_S", 0.3)
    held = HeldCalls(MemoryStore(), ttl_s=600)
    item = {"tool_call_id": "c1", "hold": "hold_nobody", "seq": 1, "elicitation_deadline": 0}
    async with asyncio.timeout(10):
        outcome = await held.deliver(TENANT, item, {"action": "decline"}, 5.0)
    assert outcome == ToolResult("error", HOLDER_GONE)


async def test_an_unanswered_question_is_declined_at_its_deadline() -> None:
    held = HeldCalls(MemoryStore(), ttl_s=600)
    asks = turn(held, AskPolicy("pause", 0.3))
    await run(asks)
    [(_, fields)] = asks.pending()
    asks.adopt(TENANT)
    async with asyncio.timeout(10):  # no answer: the holder declines at the deadline and reports the result
        outcome = await held.deliver(TENANT, {"tool_call_id": "c1", **fields}, None, 5.0)
    assert outcome == ToolResult("ok", "decline None", 1.0)


@pytest.mark.parametrize(("policy", "headless", "limit"), [
    (AskPolicy("decline"), False, 100), (AskPolicy(), True, 100), (AskPolicy(), False, 0)])
async def test_declined_at_once_by_policy_headless_or_a_full_registry(policy: AskPolicy, headless: bool,
                                                                      limit: int) -> None:
    asks = turn(HeldCalls(MemoryStore(), ttl_s=600, limit=limit), policy, headless)
    results = await run(asks)
    assert asks.handed == {} and results["c1"] == ToolResult("ok", "decline None", 1.0)


async def test_a_pause_that_could_not_be_stored_ends_the_waiting_calls() -> None:
    held = HeldCalls(MemoryStore(), ttl_s=600)
    asks = turn(held)
    await run(asks)
    [task] = asks.handed.values()
    asks.abandon()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert held.count == 0


# -- a stateless server's question: any replica may send the retry ---------------------------------------
RETRY = {"server": "mcp:crm", "tool": "asks", "request_state": "state-1", "input_key": "q1"}


async def execute_retryable(tool_call: dict[str, Any], tool: Tool) -> ToolOutcome:
    """Asks as a stateless server's round does (the question carries its retry), and reports the answer."""
    interactions = CALL_INTERACTIONS.get()
    assert interactions is not None and interactions.elicit is not None
    answer = await interactions.elicit(ElicitationRequest(server="crm", mode="form", message="Which account?",
                                                          requested_schema={"type": "object"}, retry=RETRY))
    return ToolOutcome("ok", f"{answer.action} {answer.content}", 1.0)


async def held_retryable(held: HeldCalls, policy: AskPolicy = PAUSE) -> tuple[dict[str, Any], asyncio.Future[Any]]:
    asks = turn(held, policy)
    async with asyncio.timeout(10):
        async for _ in run_tools([(call("c1", "asks"), Tool(Spec("asks")))], execute_retryable, 1, {},
                                 lambda c, s, e: None, asks=asks):
            pass
    [(_, fields)] = asks.pending()
    [task] = asks.handed.values()
    asks.adopt(TENANT)
    return {"tool_call_id": "c1", "name": "asks", **fields}, task


async def test_a_deciding_replica_takes_a_stateless_question_over_and_the_holder_ends_unreported() -> None:
    store = MemoryStore()
    holder, decider = HeldCalls(store, ttl_s=600), HeldCalls(store, ttl_s=600)  # two replicas, one store
    item, task = await held_retryable(holder)
    assert item["retry"] == RETRY
    answer = {"action": "accept", "content": {"account": "ACME"}}
    assert await holder.take_over(TENANT, item, answer, "cont_1") is False  # the holder answers its own calls
    assert await decider.take_over(TENANT, item, answer, "cont_1") is True
    assert await decider.take_over(TENANT, item, answer, "cont_1") is True  # a retried resume: still its own
    assert await decider.take_over(TENANT, item, answer, "cont_2") is False
    async with asyncio.timeout(10):
        with pytest.raises(TakenOver):
            await task
        while holder.count:
            await asyncio.sleep(0.01)
    assert await store.ledger_get(TENANT, f"elicit:{item['hold']}:1:outcome") is None
    assert await store.ledger_get(TENANT, f"elicit:{item['hold']}:1:taken") == {"by": "cont_1"}


async def test_a_holder_that_declined_at_its_deadline_keeps_the_round() -> None:
    store = MemoryStore()
    holder, decider = HeldCalls(store, ttl_s=600), HeldCalls(store, ttl_s=600)
    item, _ = await held_retryable(holder, AskPolicy("pause", 0.3))
    async with asyncio.timeout(10):
        while await store.ledger_get(TENANT, f"elicit:{item['hold']}:1:taken") is None:
            await asyncio.sleep(0.02)
        assert await decider.take_over(TENANT, item, None, "cont_1") is False
        outcome = await decider.deliver(TENANT, item, None, 5.0)
    assert outcome == ToolResult("ok", "decline None", 1.0)
