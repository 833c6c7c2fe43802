"""Pausing a loop into the store, and resuming it exactly once.

A continuation holds the whole transcript, including the hidden server-side exchanges and
provider artifacts, the turn's finished results and the loop state, so a resume on any
replica continues exactly where the pause stopped. It is written before the pause is
reported to the client: a pause the client sees always exists.

Resuming claims the continuation atomically (a concurrent or repeated resume gets 409). The
claim is finished when the resumed loop reaches its end (completed, or paused again) and
released on any failure, so a resume that failed upstream can simply be retried. Calls a
human approved are started in the tool ledger before they run and their results recorded after
(``loop/ledger.py``), so a retry never runs them again.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable
from typing import Any

from gateway.canonical import HostedTools, Message, NativeRequest, ToolCall
from gateway.config.notifications_section import NotificationsConfig
from gateway.loop.approvals import (
    audit_decisions,
    audit_expired,
    decision_context,
    expired_calls,
    new_audit_id,
    summary_of,
    timed_out_result,
)
from gateway.loop.artifacts import artifacts_of, reattach
from gateway.loop.decisions import (
    AwaitsDecision,
    decisions_to_results,
    outputs_to_results,
    record_refusal,
)
from gateway.loop.elicitation import audit_answers, deliver_answers
from gateway.loop.engine import (
    ExecuteHook,
    LoopDeps,
    LoopRequest,
    LoopState,
    PendingCall,
    ResumeTurn,
    run_loop,
)
from gateway.loop.events import Finished, LoopEvent
from gateway.loop.held import HeldCalls
from gateway.loop.ledger import ledgered
from gateway.loop.pairing import ToolResult, result_of, stored_result
from gateway.loop.results import ResultSlot, result_record
from gateway.loop.way_a import MAX_WAY_A_LOOKUPS, history_mismatch, may_resume_way_a, trailing_outputs
from gateway.notify import Notifier
from gateway.observability import metrics
from gateway.routing.routes import RoutePlan
from gateway.store.base import Store
from gateway.store.continuations.base import Continuation, ContinuationConflict, claimed
from gateway.store.errors import StoreError

# A claim outlives the longest possible resume (the request deadline) by this much, so a live
# resume never loses its claim, and a replica that dies mid-resume frees it soon after.
CLAIM_LEASE_MARGIN_S = 60.0

log = logging.getLogger("loopgate.continuations")


def paused_data(request: LoopRequest, assistant: Message, results: dict[str, ToolResult]) -> dict[str, Any]:
    """What a continuation keeps of its loop (``Continuation.data``): everything a resume needs, nothing more.

    Left out, because a reader derives them or reads their absence as the default: the decision context
    (``approvals.summary_of`` derives it from the transcript), the loop state but its tool rounds and model
    (a resume starts its own counters), and the optional fields when unset (``native``, ``allowed_tools``,
    ``origin``, ``stream_rescue``, ``hosted``). The keys a resume indexes are always written, so a replica still
    running the previous release resumes what this one paused (and this one what it paused: the fields it wrote
    besides are simply not read).
    """
    data: dict[str, Any] = {
        "transcript": request.messages,
        "assistant": assistant,
        "results": {k: stored_result(r) for k, r in results.items()},
        "client_tools": request.client_tools,
        "tool_choice": request.tool_choice,
        "params": request.params,
        "max_iterations": request.max_iterations,
        "state": {"tool_rounds": request.state.tool_rounds, "model": request.state.model},  # resumed_request
        "asker": {"id": request.key_id, "name": request.key_name},
    }
    if request.native is not None:
        data["native"] = request.native.to_dict()
    if request.allowed_tools is not None:
        data["allowed_tools"] = sorted(request.allowed_tools)
    if request.origin is not None:
        data["origin"] = request.origin
    if request.stream_rescue is not None:
        # The request's own ``gateway.stream_rescue`` holds for the rest of its loop, whoever resumes it.
        data["stream_rescue"] = request.stream_rescue
    if request.hosted is not None:
        data["hosted"] = request.hosted.to_dict()
    if request.max_tool_calls is not None:
        # The cap and what is spent of it: a resume runs only what is left (not in ``state``, which the previous
        # release reads whole with ``LoopState.from_dict``).
        data["max_tool_calls"] = [request.max_tool_calls, request.state.tool_calls_run]
    return data


def _tool_calls_cap(stored: Any, state: LoopState) -> int | None:
    """A pause's ``max_tool_calls``, its spent calls back into ``state``; None when it had none (or unreadable)."""
    if not (isinstance(stored, list) and len(stored) == 2 and all(type(n) is int and n >= 0 for n in stored)):
        return None
    state.tool_calls_run = stored[1]
    return int(stored[0])


def kept_once_resumed(c: Continuation) -> Continuation:
    """What a resumed continuation keeps until its TTL: what ``GET /v1/continuations/{id}`` shows of it (its
    pending calls, who asked, the decision context), not the loop it held. Nothing resumes it again (its
    status refuses a repeat before anything reads its data), and its record is most of a continuation's life."""
    data = c.data
    context = data.get("context")
    if not isinstance(context, dict):
        context = decision_context(list(data.get("transcript") or ()), data.get("assistant") or {})
    return Continuation(id=c.id, tenant=c.tenant, model=c.model, status="resumed", created_at=c.created_at,
                        expires_at=c.expires_at, pending=c.pending,
                        data={"asker": data.get("asker"), "context": context})


class Continuations:
    def __init__(self, store: Store, ttl_s: int, request_timeout_s: float, notifier: Notifier | None = None) -> None:
        self.store = store
        # Disabled (emits nothing) unless notifications.webhooks are configured.
        self.notifier = notifier or Notifier(NotificationsConfig(), None, store)
        self.ttl_s = ttl_s
        self.lease_s = request_timeout_s + CLAIM_LEASE_MARGIN_S
        #: tool calls this process holds open while a person answers their question (MCP elicitation)
        self.held = HeldCalls(store, ttl_s)

    # -- pausing -------------------------------------------------------------------------
    async def pause(self, request: LoopRequest, assistant: Message, results: dict[str, ToolResult],
                    pending: list[PendingCall]) -> str:
        now = time.time()
        items = [self.pending_item(p, now) for p in pending]
        data = paused_data(request, assistant, results)
        continuation = Continuation.new(request.tenant, request.plan.name, items, data, self.ttl_s, now)
        continuation.summary = summary_of(continuation)
        await self.store.save_continuation(continuation, self.ttl_s)
        kept = artifacts_of(assistant)
        if kept:
            await self.store.put_artifacts(request.tenant, kept, self.ttl_s)
        metrics.CONTINUATIONS.inc("paused")
        self.notifier.paused(continuation)
        return continuation.id

    @staticmethod
    def pending_item(p: PendingCall, now: float) -> dict[str, Any]:
        """A pending call as stored: what the model asked, and when an approval times out.

        Its ``arguments_sha256`` is not stored: whoever shows or checks it digests ``arguments`` (continuations
        written before carry it, and it is the same digest).
        """
        item = {"tool_call_id": p.call["id"], "name": p.call["function"]["name"], "reason": p.reason,
                "arguments": p.call["function"]["arguments"]}
        if p.reason == "approval" and p.approval_timeout_s is not None:
            item["approval_deadline"] = now + p.approval_timeout_s
        if p.ask is not None:
            item.update(p.ask)
        return item

    async def audit_denial(self, tenant: str, call: ToolCall, reason: str, key_id: str = "",
                           key_name: str = "", route: str = "") -> None:
        """A headless denial: decided by the asking key's headless mode (``reason``: what it would have needed)."""
        arguments = call["function"]["arguments"].encode()
        await self.store.append_audit({
            "id": new_audit_id(), "tenant": tenant, "ts": time.time(), "event": "headless_denial",
            "key_id": key_id or None, "key_name": key_name or None, "tool": call["function"]["name"],
            "tool_call_id": call["id"], "continuation_id": None, "reason": reason,
            "arguments_sha256": hashlib.sha256(arguments).hexdigest(),
        })
        metrics.CONTINUATIONS.inc("headless_denial")
        self.notifier.headless_denied(tenant, call, reason, key_name, route)

    def ledgered(self, tenant: str, continuation_id: str) -> ExecuteHook:
        """Executes approved calls at most once per continuation (``loop/ledger.py``)."""
        return ledgered(self.store, self.ttl_s, tenant, continuation_id)

    # -- resuming ------------------------------------------------------------------------
    #: way B's check of the decisions (``loop/decisions.py``)
    decisions_to_results = staticmethod(decisions_to_results)

    async def checked_decisions(self, continuation: Continuation, decisions: Any, key_id: str = "",
                                key_name: str = "") -> tuple[dict[str, ToolResult], list[str],
                                                             dict[str, dict[str, Any] | None]]:
        """:func:`decisions_to_results`, with a caller's result for a call awaiting a decision audited as refused."""
        try:
            return decisions_to_results(continuation, decisions)
        except AwaitsDecision as refused:
            await record_refusal(self.store, refused, key_id, key_name)
            raise

    async def way_a(self, tenant: str, messages: list[Message], key_id: str = "",
                    key_name: str = "") -> tuple[Continuation, dict[str, ToolResult]] | None:
        """Resume way A: the continuation a plain follow-up answers, with the client's results; else None.

        None means an ordinary stateless conversation: no trailing tool messages, ids that match no
        live continuation of this tenant (expired and cancelled ones included), or a paused turn that
        is not the one the client sent back. The last case is logged: it is either a reused id or a
        client that changed the paused turn, and either way the continuation stays pending. The
        follow-up of a resumed one, sent again, is a 409 (``ContinuationConflict``).
        A result for a call awaiting a decision is a 400 (:class:`AwaitsDecision`), audited with the
        caller's key (``key_id``/``key_name``); the continuation stays pending, unchanged.
        """
        if not may_resume_way_a(messages):
            return None
        outputs = trailing_outputs(messages)
        # Expired and cancelled ones are not found; nor is one gone between the index lookup and the read. Where
        # the store can, the claim is taken in the same step (``held_until``): given back below, or by the resume
        # (``forgo``) if it is refused, so a refused resume leaves the continuation pending.
        stored = await self.store.find_paused(tenant, list(outputs)[:MAX_WAY_A_LOOKUPS], self.lease_s)
        if stored is None:
            return None
        problem = self.history_mismatch(stored, messages)
        if problem is not None:
            log.warning("way-A follow-up names continuation %s but does not match it (%s); answered statelessly, "
                        "the continuation stays pending", stored.id, problem)
            await self.forgo(stored)
            return None
        if stored.status == "resumed":  # this follow-up again, once answered (a client retrying a lost answer)
            raise ContinuationConflict(stored.id, stored.status, f"continuation {stored.id!r} was resumed already; "
                                       f"its answer is kept at GET /v1/continuations/{stored.id}")
        try:
            return stored, outputs_to_results(stored, outputs)
        except AwaitsDecision as refused:
            await self.forgo(stored)
            await record_refusal(self.store, refused, key_id, key_name)
            raise

    #: why the client's paused turn is not the stored one (``loop/way_a.py``)
    history_mismatch = staticmethod(history_mismatch)

    #: way A's check of the client's results (``loop/decisions.py``)
    outputs_to_results = staticmethod(outputs_to_results)

    async def claim(self, stored: Continuation, tenant: str) -> Continuation:
        """Take the right to resume ``stored`` (read just before): at most once, for this resume's lease.

        A claim way A's lookup took already (``held_until``) is this one: no round trip. Otherwise the store is
        handed the continuation already read, so the claim does not read its body again.
        """
        if stored.held_until is not None:
            return claimed(stored, stored.held_until)
        return await self.store.claim_continuation(stored.id, tenant, self.lease_s, known=stored)

    async def forgo(self, stored: Continuation) -> None:
        """Give back the claim way A's lookup took (``held_until``) for a resume that is then refused (a history
        that does not match, a result for a call awaiting a decision, a refusal of the route, the key or the
        limits), so the continuation is pending again as if never claimed. Nothing to do otherwise. A store that
        fails now leaves the claim to its lease (logged), and the refusal is answered as it would have been."""
        if stored.held_until is None:
            return
        stored.held_until = None
        try:
            await self.store.release_continuation(stored.id, stored.tenant)
        except StoreError as exc:
            log.warning("could not release continuation %s after a refused resume (%s); it is resumable again "
                        "once its claim's lease ends", stored.id, exc)

    def resumed_request(self, continuation: Continuation, plan: RoutePlan, given: dict[str, ToolResult],
                        approved: list[str], stream: bool, deadline: float, tenant: str,
                        headless: bool = False, follow_up: list[Message] | None = None,
                        answers: dict[str, dict[str, Any] | None] | None = None) -> LoopRequest:
        data = continuation.data
        stored = data["state"]  # of the paused loop, only what a resume carries on (paused_data)
        # Counters describe this response; the tool-round budget spans the whole loop.
        state = LoopState(tool_rounds=stored.get("tool_rounds", 0), model=stored.get("model", ""))
        results = {k: result_of(k, v) for k, v in data["results"].items()}
        # Fail-closed: a deadline that passed after the decision was checked still denies the call.
        timed_out = sorted(expired_calls(continuation))
        given = {**given, **{call_id: ToolResult("denied", timed_out_result()) for call_id in timed_out}}
        approved = [call_id for call_id in approved if call_id not in timed_out]
        results.update(given)
        assistant = data["assistant"]
        calls = {c["id"]: c for c in assistant.get("tool_calls") or ()}
        asker = data.get("asker") or {}
        allowed = data.get("allowed_tools")
        for call_id, result in given.items():
            if result.status == "denied":
                state.tool_records.append({"id": call_id, "name": calls[call_id]["function"]["name"],
                                           "status": "denied", "elapsed_ms": 0.0})
        return LoopRequest(
            plan=plan, messages=list(data["transcript"]), client_tools=data["client_tools"],
            tool_choice=data["tool_choice"], params=data["params"], max_iterations=data["max_iterations"],
            headless=headless, tenant=tenant, stream=stream, deadline=deadline, state=state,
            resume=ResumeTurn(assistant=assistant, results=results, approved=[calls[i] for i in approved],
                              continuation_id=continuation.id, timed_out=timed_out, follow_up=follow_up or [],
                              answers=answers or {}),
            # The asker's identity and tool allow-list, whoever resumes (an approver's key has neither).
            key_id=str(asker.get("id") or ""), key_name=str(asker.get("name") or ""),
            allowed_tools=None if allowed is None else frozenset(allowed),
            native=NativeRequest.from_dict(data.get("native")),
            stream_rescue=rescue if isinstance(rescue := data.get("stream_rescue"), bool) else None,
            hosted=HostedTools.from_dict(data.get("hosted")),
            max_tool_calls=_tool_calls_cap(data.get("max_tool_calls"), state),
        )

    async def run_resumed(self, continuation: Continuation, request: LoopRequest, deps: LoopDeps,
                          decided: Awaitable[None] | None = None, slot: ResultSlot | None = None,
                          way: str = "b") -> AsyncIterator[LoopEvent]:
        """The resumed loop; the claim is finished at its end and released on any failure or disconnect.

        ``decided`` records the decisions (way B's audit entries), and timed-out approvals are
        recorded here too: both under the claim, so a failure to record releases it like any other.
        ``slot``'s recorder (when the surface put one there) sees every event; its result is stored
        with the finish, and the ``resumed`` notification (``way``) then names it.
        """
        finished = False
        timed_out = set(request.resume.timed_out) if request.resume is not None else set()
        try:
            if decided is not None:
                await decided
            if timed_out:
                await audit_expired(self.store, continuation, timed_out)
            # Held calls get their answers (under the claim: at most once) and report what they did next.
            await deliver_answers(self.held, continuation, request, deps.tools)
            async for event in run_loop(request, deps):
                recorder = slot.recorder if slot is not None else None
                if recorder is not None:
                    recorder.feed(event)
                if isinstance(event, Finished):
                    result_id, result = result_record(recorder)
                    await self.store.finish_continuation(continuation.id, continuation.tenant, result,
                                                         kept_once_resumed(continuation))
                    finished = True
                    metrics.CONTINUATIONS.inc("resumed")
                    self.notifier.resumed(continuation, way, result_id, event.result.status)
                yield event
        finally:
            if not finished:
                metrics.CONTINUATIONS.inc("resume_failed")
                await self.store.release_continuation(continuation.id, continuation.tenant)

    # -- the surfaces' reads and writes (they reach the store through these, never past them) ----
    def get(self, continuation_id: str, tenant: str) -> Awaitable[Continuation]:
        """The continuation as stored, in any live status (``ContinuationNotFound`` for an unknown,
        expired, cancelled or other tenant's id)."""
        return self.store.get_continuation(continuation_id, tenant)

    def cancel(self, continuation_id: str, tenant: str) -> Awaitable[bool]:
        """A pending continuation deleted, so nothing can resume it (``ContinuationConflict`` for a live claim)."""
        return self.store.cancel_continuation(continuation_id, tenant)

    def page(self, tenant: str, limit: int, before: tuple[float, str] | None = None
             ) -> Awaitable[tuple[list[dict[str, Any]], bool]]:
        """Up to ``limit`` of the tenant's live continuations (their summaries and status), newest first,
        strictly before ``before``; and whether more follow."""
        return self.store.list_continuations(tenant, limit, before)

    def find_by_tool_call(self, tenant: str, tool_call_id: str) -> Awaitable[str | None]:
        """The id of the tenant's live continuation waiting for ``tool_call_id``, if any."""
        return self.store.find_continuation_by_tool_call(tenant, tool_call_id)

    def reattach(self, tenant: str, messages: list[Message]) -> Awaitable[int]:
        """The provider artifacts a pause kept (``pause``), put back on a client's history in place."""
        return reattach(self.store, tenant, messages)

    async def audit_decided(self, continuation: Continuation, approved: list[str], denied: dict[str, str | None],
                            answers: dict[str, dict[str, Any] | None], key_id: str, key_name: str) -> None:
        """A decision's audit entries (the approvals and denials, then the answers to held calls' questions),
        in the decider's name; ``run_resumed`` awaits it under the claim (its ``decided``)."""
        await audit_decisions(self.store, continuation, approved, denied, key_id, key_name)
        await audit_answers(self.store, continuation, answers, key_id, key_name)
