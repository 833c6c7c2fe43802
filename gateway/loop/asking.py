"""A running tool call asking the user for input (an MCP elicitation): the loop pauses for it.

"Pauses of every kind are one thing": an elicitation during a tool call pauses the loop like an
approval does. The call itself cannot be stored (it is a live request on the replica that holds
the MCP session), so the pause stores the question and this replica keeps the call running:

1. the call's ``elicit`` handler (one :class:`AskingCall` per call) declines at once when the
   server's policy says ``decline``, the request runs headless, or the held-call registry is full;
   otherwise it reserves a place in the registry and tells the turn (:class:`TurnAsks`);
2. when every call still running waits for an answer, the turn stops (``tool_runs.run_tools``)
   and the loop stores a continuation whose pending entry holds the question (reason
   ``elicitation``), its hold id and round;
3. only then are the calls adopted by the registry (``loop/held.py``): the handler starts
   reading the answer from the store, where a decision on any replica writes it;
4. the answer goes to the server, the call goes on, and its result (or its next question) goes
   back through the store to the replica that resumes the loop.

Each question waits at most the server's ``elicitation_timeout_s`` and is then declined.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.canonical import ToolCall
from gateway.config.mcp_section import DEFAULT_ELICITATION_TIMEOUT_S, ElicitationPolicy
from gateway.tools.interaction import (
    CALL_RETRY,
    CallInteractions,
    ElicitationAnswer,
    ElicitationRequest,
    InputRetry,
    SamplingHandler,
)

if TYPE_CHECKING:
    from gateway.loop.held import HeldCalls

log = logging.getLogger("loopgate.elicitation")

DECLINE = ElicitationAnswer("decline")


@dataclass(frozen=True, slots=True)
class AskPolicy:
    """What a server's ``elicitation/create`` gets: a pause (bounded by ``timeout_s``), or declined at once."""

    mode: ElicitationPolicy = "pause"
    timeout_s: float = DEFAULT_ELICITATION_TIMEOUT_S


#: (the asking tool's source name, the server named in the request) -> the policy that applies
PolicyLookup = Callable[[str, str], AskPolicy]
#: (the asking tool's source name) -> the sampling handler offered to its calls, or None (not offered)
SamplerLookup = Callable[[str], SamplingHandler | None]


def question_view(request: ElicitationRequest) -> dict[str, Any]:
    """The question as the caller, the inbox and webhooks see it (``gateway.pending[].elicitation``)."""
    # The configured server name (an MCP source names itself ``mcp:NAME``, as routes list it).
    view: dict[str, Any] = {"server": request.server.removeprefix("mcp:"), "mode": request.mode,
                            "message": request.message}
    if request.mode == "url":
        view["url"] = request.url or ""
    else:
        view["requested_schema"] = request.requested_schema or {"type": "object", "properties": {}}
    return view


@dataclass(frozen=True, slots=True)
class Ask:
    """One question of a call: what it asked, which round of the call it is, until when it waits."""

    request: ElicitationRequest
    seq: int
    #: wall clock: other replicas read it from the store
    deadline: float

    @property
    def retryable(self) -> bool:
        """A stateless server's question: a deciding replica may send the retry itself (``loop/held.py``)."""
        return self.request.retry is not None

    def pending_fields(self, hold: str) -> dict[str, Any]:
        """What the continuation's pending entry carries beyond the call (``Continuations.pending_item``);
        ``retry`` (a stateless server's round, never shown to callers) lets any replica finish the call."""
        fields = {"elicitation": question_view(self.request), "hold": hold, "seq": self.seq,
                  "elicitation_deadline": self.deadline}
        if self.request.retry is not None:
            fields["retry"] = self.request.retry
        return fields


class AskingCall:
    """One tool call's ``elicit`` handler through its whole life: in its turn, then held after the pause."""

    def __init__(self, call: ToolCall, source: str, turn: TurnAsks, give_back: Callable[[], None]) -> None:
        self.call = call
        self.source = source
        self.turn = turn
        self.hold = "hold_" + secrets.token_urlsafe(18)
        self.seq = 0
        #: the question waiting for its answer (None between questions)
        self.asking: Ask | None = None
        #: the registry holding the call once the pause is stored
        self.holder: HeldCalls | None = None
        self.tenant = ""
        self.adopted = asyncio.Event()
        #: set by the registry when a decision was written on this replica: read the store now
        self.wake = asyncio.Event()
        self.reserved = False
        #: a deciding replica took the question over (it retries the stateless call): this call ends unreported
        self.taken_over = False
        self._give_back = give_back

    async def elicit(self, request: ElicitationRequest) -> ElicitationAnswer:
        turn = self.turn
        policy = turn.policy(self.source, request.server)
        if policy.mode == "decline":
            return DECLINE
        if turn.headless:
            await turn.headless_denied(self.call)
            return DECLINE
        if self.asking is not None:  # a second question while the first waits: one at a time
            return DECLINE
        if not self.reserved:
            if not turn.held.reserve():
                log.warning("elicitation from MCP server %r declined: %d calls are held already "
                            "(the per-process bound)", request.server, turn.held.limit)
                return DECLINE
            self.reserved = True
        self.seq += 1
        ask = Ask(request, self.seq, time.time() + policy.timeout_s)
        holder = self.holder
        if holder is not None:  # a later question of a held call: the resuming replica pauses again
            await holder.report(self, ask.seq - 1, {"asked": ask.pending_fields(self.hold)})
        self.asking = ask
        if holder is None:
            self._give_back()
            turn.asked()
        try:
            return await self._answer(ask)
        finally:
            self.asking = None

    async def _answer(self, ask: Ask) -> ElicitationAnswer:
        try:
            async with asyncio.timeout(max(0.0, ask.deadline - time.time())):
                await self.adopted.wait()
                assert self.holder is not None
                return await self.holder.answer_of(self, ask.seq)
        except TimeoutError:
            if self.holder is not None:
                if ask.retryable:
                    await self.holder.take(self, ask.seq)  # a decider that took it over sends the retry instead
                await self.holder.acknowledge(self, ask.seq, "timeout")
            log.info("elicitation %s round %d timed out: declined", self.hold, ask.seq)
            return DECLINE


def retrying(execute: Callable[[ToolCall, Any], Awaitable[Any]], retries: dict[str, InputRetry]
             ) -> Callable[[ToolCall, Any], Awaitable[Any]]:
    """``execute`` where a stateless server's call named in ``retries`` is sent as its retry with the answer."""

    async def run(call: ToolCall, tool: Any) -> Any:
        retry = retries.get(call["id"])
        if retry is None:
            return await execute(call, tool)
        token = CALL_RETRY.set(retry)
        try:
            return await execute(call, tool)
        finally:
            CALL_RETRY.reset(token)

    return run


class TurnAsks:
    """The elicitations of one turn's calls, and the calls handed on when the turn pauses for them."""

    def __init__(self, held: HeldCalls, policy: PolicyLookup, sampler: SamplerLookup | None, headless: bool,
                 denied: Callable[[ToolCall], Awaitable[None]]) -> None:
        self.held = held
        self.policy = policy
        self.sampler = sampler
        self.headless = headless
        self.headless_denied = denied
        self.calls: dict[str, AskingCall] = {}
        #: set by the turn running the calls: told when a call starts waiting for an answer
        self.on_ask: Callable[[], None] | None = None
        #: call id -> its task, still running, once the turn stopped for their questions
        self.handed: dict[str, asyncio.Future[Any]] = {}

    def interactions(self, call: ToolCall, tool: Any, give_back: Callable[[], None]) -> CallInteractions:
        """The handlers of one call; its :class:`AskingCall` is made when it first asks (most calls never do)."""
        source = str(getattr(tool.spec, "source", ""))
        call_id = call["id"]

        made: list[AskingCall] = []  # the call's own, kept by this handler after the turn (a held call asks again)

        def elicit(request: ElicitationRequest) -> Awaitable[ElicitationAnswer]:
            if not made:
                made.append(AskingCall(call, source, self, give_back))
                self.calls[call_id] = made[0]
            return made[0].elicit(request)

        sample = self.sampler(source) if self.sampler is not None else None
        return CallInteractions(elicit=elicit, sample=sample)

    def asked(self) -> None:
        if self.on_ask is not None:
            self.on_ask()

    def waiting(self) -> set[str]:
        """The calls of this turn waiting for an answer that no one can give before the pause."""
        return {call_id for call_id, asking in self.calls.items()
                if asking.asking is not None and asking.holder is None}

    def hand(self, tasks: dict[str, asyncio.Future[Any]]) -> None:
        self.handed = tasks

    def pending(self) -> list[tuple[ToolCall, dict[str, Any]]]:
        """The handed calls with their questions, for the continuation's pending entries."""
        out = []
        for call_id in self.handed:
            asking = self.calls[call_id]
            assert asking.asking is not None
            out.append((asking.call, asking.asking.pending_fields(asking.hold)))
        return out

    def adopt(self, tenant: str) -> None:
        """The pause is stored: the registry holds the handed calls from now on."""
        for call_id, task in self.handed.items():
            self.held.adopt(tenant, self.calls[call_id], task)
        self.handed = {}
        self.finish()

    def abandon(self) -> None:
        """The pause could not be stored: the handed calls end (cancelled), nothing waits for them."""
        for task in self.handed.values():
            task.cancel()
        self.handed = {}
        self.finish()

    def finish(self) -> None:
        """The turn is over: places reserved by calls that were not handed on are free again."""
        for asking in self.calls.values():
            if asking.reserved and asking.holder is None:
                asking.reserved = False
                self.held.unreserve()
        self.calls = {}
