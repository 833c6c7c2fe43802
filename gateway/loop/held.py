"""Tool calls held open while a person answers their question, and the way answers and results cross replicas.

The replica whose tool call asked (an MCP elicitation) keeps the call running after the loop
paused; any replica may take the decision. They meet in the store (the tool ledger's records,
tenant-scoped, kept for the continuation TTL), one record per question round ``seq`` of a hold::

    elicit:<hold>:<seq>:answer    written by the deciding replica: {"action", "content"}
    elicit:<hold>:<seq>:ack       written by the holder when the answer (or the time-out) reached the call
    elicit:<hold>:<seq>:outcome   written by the holder when the call ended ({"status", "content"})
                                  or asked its next question ({"asked": pending fields of round seq+1})
    elicit:<hold>:<seq>:taken     a stateless server's round only: who sends its retry, claimed once
                                  ({"by": "holder"} or {"by": <continuation id>})

A stateless MCP server's question (its pending entry has ``retry``: the server's request state)
needs no holder: a deciding replica that does not hold the call claims the round's ``taken``
record and sends the retry with the answer itself (``Continuations`` runs it like an approved
call, ledgered); the holder, if it still lives, claims the same record before it answers (or
declines at the deadline), so exactly one of them sends the retry, and a holder that lost ends its
call unreported (:class:`TakenOver`).

The holder reads the answer record with a short poll (doubling from ``POLL_MIN_S`` to
``POLL_MAX_S``; woken at once when the decision was taken on this replica), retrying through
store errors until the question's deadline. The deciding replica waits for the acknowledgement
at most ``ACK_TIMEOUT_S`` and then for the outcome at most the tool's own ``timeout_s`` plus
``OUTCOME_MARGIN_S``: a holder that is gone ends the call as an error result the model reads,
never a hang. The call is never run again (it may have done its work: the model is told so).

``MAX_HELD_CALLS`` bounds the calls one process holds (a question beyond it is declined).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from gateway.canonical_tool_results import bounded_parts
from gateway.loop.asking import AskingCall
from gateway.loop.pairing import ToolResult, tool_message
from gateway.store.base import Store
from gateway.store.errors import StoreError
from gateway.tools.interaction import ElicitationAnswer

log = logging.getLogger("loopgate.elicitation")

#: calls one process holds open at once, each waiting for a person (more questions are declined)
MAX_HELD_CALLS = 100
POLL_MIN_S = 0.05
POLL_MAX_S = 1.0
#: how long a deciding replica waits for the holder to take the answer before it counts the holder as gone
ACK_TIMEOUT_S = 15.0
#: beyond the tool's own timeout, how long a deciding replica waits for the call's result
OUTCOME_MARGIN_S = 10.0
#: how long a holder shutting down may take to report its calls as ended
SHUTDOWN_REPORT_S = 2.0

HOLDER_GONE = ("The tool call did not finish: the gateway replica holding it open (waiting for the user's "
               "answer) is gone. It may or may not have done its work; do not assume either, and tell the user.")
HOLDER_STOPPED = "The tool call did not finish: the gateway replica holding it open shut down."
NO_RESULT = ("The tool call did not report a result in time after the user's answer. It may or may not have "
             "done its work; do not assume either.")


def record_key(hold: str, seq: int, part: str) -> str:
    return f"elicit:{hold}:{seq}:{part}"


class TakenOver(Exception):
    """A deciding replica sends this stateless call's retry: the holder's call ends here, unreported."""


class HeldCalls:
    """The calls this process holds open for an answer (bounded), and the store records they meet through."""

    def __init__(self, store: Store, ttl_s: int, limit: int = MAX_HELD_CALLS) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self.limit = limit
        self._reserved = 0
        self._held: dict[str, AskingCall] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # -- places --------------------------------------------------------------------------------
    def reserve(self) -> bool:
        if self._reserved >= self.limit:
            return False
        self._reserved += 1
        return True

    def unreserve(self) -> None:
        self._reserved = max(0, self._reserved - 1)

    @property
    def count(self) -> int:
        return self._reserved

    # -- the holder ----------------------------------------------------------------------------
    def adopt(self, tenant: str, asking: AskingCall, task: asyncio.Future[Any]) -> None:
        """Hold ``task`` (the call, still running) until it ends; its questions are answered from the store."""
        asking.holder = self
        asking.tenant = tenant
        self._held[asking.hold] = asking
        asking.adopted.set()
        watcher = asyncio.create_task(self._hold(asking, task), name=f"held-{asking.hold}")
        self._tasks.add(watcher)
        watcher.add_done_callback(self._tasks.discard)

    async def _hold(self, asking: AskingCall, task: asyncio.Future[Any]) -> None:
        try:
            try:
                _, outcome, elapsed_ms = await task
                record = {"status": outcome.status, "content": outcome.content,
                          "elapsed_ms": round(getattr(outcome, "elapsed_ms", elapsed_ms), 2)}
                parts = bounded_parts(getattr(outcome, "parts", None))
                if parts:  # a rich result (images): the resuming replica gives the model the same parts
                    record["parts"] = parts
            except asyncio.CancelledError:
                task.cancel()
                record = {"status": "error", "content": HOLDER_STOPPED, "elapsed_ms": 0.0}
                async with asyncio.timeout(SHUTDOWN_REPORT_S):
                    await self.report(asking, asking.seq, record)
                raise
            except Exception as exc:  # the executor never raises; a bug still ends the call, reported
                if not asking.taken_over:
                    log.exception("held call %s failed", asking.hold)
                record = {"status": "error", "content": f"The tool call failed ({type(exc).__name__}).",
                          "elapsed_ms": 0.0}
            if not asking.taken_over:  # else the deciding replica retried the call: the result is its own
                await self.report(asking, asking.seq, record)
        finally:
            self._held.pop(asking.hold, None)
            if asking.reserved:
                asking.reserved = False
                self.unreserve()

    async def answer_of(self, asking: AskingCall, seq: int) -> ElicitationAnswer:
        """The answer to round ``seq``, read from the store until it is there (the caller bounds the wait)."""
        key = record_key(asking.hold, seq, "answer")
        delay = POLL_MIN_S
        while True:
            try:
                found = await self.store.ledger_get(asking.tenant, key)
            except StoreError as exc:  # the store is away for a moment: keep asking, the deadline bounds it
                log.warning("reading the answer of %s failed (%s); retrying", asking.hold, exc)
                found = None
            if found is not None:
                if asking.asking is not None and asking.asking.retryable:
                    await self.take(asking, seq)
                await self.acknowledge(asking, seq, "answer")
                action = found.get("action")
                if action == "accept":
                    content = found.get("content")
                    return ElicitationAnswer("accept", content if isinstance(content, dict) else None)
                return ElicitationAnswer("cancel" if action == "cancel" else "decline")
            asking.wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await asking.wake.wait()
            delay = min(delay * 2, POLL_MAX_S)

    async def take(self, asking: AskingCall, seq: int) -> None:
        """Claim round ``seq`` of a stateless call for the holder; :class:`TakenOver` when a deciding replica has it.

        A claim the store could not answer counts as lost: a retry sent twice could run the tool twice."""
        key = record_key(asking.hold, seq, "taken")
        try:
            there = await self.store.ledger_claim(asking.tenant, key, {"by": "holder"}, self.ttl_s)
        except StoreError as exc:
            log.warning("claiming %s failed (%s): the call ends, unanswered here", key, exc)
            there = {"by": None}
        if there is not None and there.get("by") != "holder":
            asking.taken_over = True
            log.info("held call %s round %d: another replica sends the retry with the answer; the call ends here",
                     asking.hold, seq)
            raise TakenOver(asking.hold)

    async def acknowledge(self, asking: AskingCall, seq: int, how: str) -> None:
        await self._put(asking.tenant, record_key(asking.hold, seq, "ack"), {"how": how, "ts": time.time()})

    async def report(self, asking: AskingCall, seq: int, record: dict[str, Any]) -> None:
        """Round ``seq`` ended: the call's result, or (``asked``) its next question."""
        await self._put(asking.tenant, record_key(asking.hold, seq, "outcome"), record)

    async def _put(self, tenant: str, key: str, record: dict[str, Any]) -> None:
        """Written with a few retries: a lost record would leave the deciding replica to its time-out."""
        for attempt in range(3):
            try:
                await self.store.ledger_put(tenant, key, record, self.ttl_s)
                return
            except StoreError as exc:
                log.warning("writing %s failed (%s)%s", key, exc, "; retrying" if attempt < 2 else "")
                await asyncio.sleep(0.2 * (attempt + 1))

    def wake(self, hold: str) -> None:
        """A decision for ``hold`` was written here: its holder (if this process) reads it now."""
        asking = self._held.get(hold)
        if asking is not None:
            asking.wake.set()

    async def aclose(self) -> None:
        """Shutdown: held calls end, each reported as ended so a deciding replica does not wait in vain."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    # -- the deciding replica ------------------------------------------------------------------
    async def take_over(self, tenant: str, item: dict[str, Any], answer: dict[str, Any] | None, by: str) -> bool:
        """Whether this replica sends the retry of pending ``item`` (a stateless server's question) itself.

        Not when this process holds the call (its holder answers it, as for any server); otherwise only when
        this replica's claim of the round (``by``: the continuation being resumed) is the one recorded. The
        answer is written too, so a holder that still lives wakes, loses the claim and ends its call."""
        hold, seq = str(item["hold"]), int(item["seq"])
        if hold in self._held:
            return False
        there = await self.store.ledger_claim(tenant, record_key(hold, seq, "taken"), {"by": by}, self.ttl_s)
        if there is not None and there.get("by") != by:
            return False  # the holder answered (or declined at the deadline) first: its outcome is awaited
        await self.store.ledger_put(tenant, record_key(hold, seq, "answer"), answer or {"action": "decline"},
                                    self.ttl_s)
        return True

    async def deliver(self, tenant: str, item: dict[str, Any], answer: dict[str, Any] | None,
                      tool_timeout_s: float) -> ToolResult | dict[str, Any]:
        """Give ``answer`` to the held call of pending ``item`` (None: its question timed out, declined by
        the holder) and wait for what the call did next: its result, or its next question (a dict)."""
        hold, seq = str(item["hold"]), int(item["seq"])
        if answer is not None:
            await self.store.ledger_put(tenant, record_key(hold, seq, "answer"), answer, self.ttl_s)
            self.wake(hold)
        ack_key, outcome_key = record_key(hold, seq, "ack"), record_key(hold, seq, "outcome")
        acked = False
        now = time.monotonic()
        ack_by = now + ACK_TIMEOUT_S
        if answer is None:  # the holder declined at the deadline: give it until then, and the ack time after
            ack_by += max(0.0, float(item.get("elicitation_deadline") or 0) - time.time())
        outcome_by = ack_by + tool_timeout_s + OUTCOME_MARGIN_S
        delay = POLL_MIN_S
        while True:
            outcome = await self.store.ledger_get(tenant, outcome_key)
            if outcome is not None:
                if isinstance(outcome.get("asked"), dict):
                    return outcome["asked"]
                message = tool_message(item["tool_call_id"], outcome.get("parts"))
                return ToolResult("ok" if outcome.get("status") == "ok" else "error", str(outcome.get("content", "")),
                                  float(outcome.get("elapsed_ms") or 0.0), message)
            if not acked:
                acked = await self.store.ledger_get(tenant, ack_key) is not None
                if acked:
                    outcome_by = time.monotonic() + tool_timeout_s + OUTCOME_MARGIN_S
            now = time.monotonic()
            if not acked and now >= ack_by:
                log.warning("held call %s round %d: no replica took the answer in %.0fs; the call ends as an error",
                            hold, seq, ACK_TIMEOUT_S)
                return ToolResult("error", HOLDER_GONE)
            if now >= outcome_by:
                return ToolResult("error", NO_RESULT)
            await asyncio.sleep(delay)
            delay = min(delay * 2, POLL_MAX_S)
