"""Resuming a paused loop: the steps every way of resuming shares, written once.

Way A (a chat follow-up carrying the tool results), way B (``POST /v1/continuations/{id}``
decisions) and the Responses API's answers to a paused response all go through
:func:`resume_paused`: the route it paused on, the decider's right to decide, the charge to the
key that **asked** (its allow-list, budget, limits and usage), admission, then the claim (at
most once), the notifications, the audit of the decisions and the resumed loop. Everything that
can refuse runs before the claim, so a refused resume leaves the continuation pending (where way A's lookup took
the claim already, a refusal gives it back: ``Continuations.forgo``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any

from gateway.api.request.lifecycle import Work
from gateway.api.services import LoopServices
from gateway.canonical import Message
from gateway.errors import GatewayError, quoted
from gateway.loop.engine import LoopRequest
from gateway.loop.events import LoopEvent
from gateway.loop.pairing import ToolResult
from gateway.loop.results import ResultSlot
from gateway.notify import Notifier
from gateway.routing.routes import RoutePlan, RouteTable
from gateway.store.continuations.base import Continuation


@dataclass(slots=True)
class Resumed:
    """A claimed continuation's loop, ready to run: its route, its request, its events, and the slot
    where the surface that renders it puts the recorder of its result (before pulling an event)."""

    plan: RoutePlan
    loop: LoopRequest
    events: AsyncIterator[LoopEvent]
    slot: ResultSlot


def resume_plan(routes: RouteTable, stored: Continuation) -> RoutePlan:
    """The route a continuation resumes on: the one it paused on, by name (every way alike).

    Never the route of the follow-up request: the stored transcript belongs to its own route's
    tools and targets.
    """
    plan = routes.lookup(stored.model)
    if plan is None:
        raise GatewayError(404, f"the model {quoted(stored.model)} of continuation {stored.id} is no longer "
                           "configured", param="model", code="model_not_found")
    return plan


def asker_of(stored: Continuation) -> str:
    """The id of the key that asked for the paused work ("" for continuations stored before askers were)."""
    asker = stored.data.get("asker")
    return str(asker.get("id") or "") if isinstance(asker, dict) else ""


def denied_reasons(decisions: list[dict[str, Any]]) -> dict[str, str | None]:
    """The calls a (validated) decision list denies, with the person's reason."""
    return {str(d["tool_call_id"]): d["reason"] if isinstance(d.get("reason"), str) else None
            for d in decisions if d.get("approve") is False}


def notify_decisions(notifier: Notifier, claimed: Continuation, decisions: list[dict[str, Any]],
                     decided_by: str | None) -> None:
    """``decided`` for the approve/deny decisions (client outputs are not decisions); ``resumed`` follows
    when the resumed loop ends, naming its result (``Continuations.run_resumed``)."""
    verdicts = [{"tool_call_id": d["tool_call_id"], "approved": d["approve"], "reason": d.get("reason")}
                if "action" not in d else  # an answer to a held call's question: its action, never its content
                {"tool_call_id": d["tool_call_id"], "approved": d["action"] == "accept",
                 "reason": f"elicitation {d['action']}"}
                for d in decisions if "output" not in d]
    if verdicts:
        notifier.decided(claimed, verdicts, decided_by)


def check_pending(stored: Continuation, conflict: str) -> None:
    """409 with ``conflict`` when ``stored`` was resumed already: checked before anything else about it."""
    if stored.status == "resumed":
        raise GatewayError(409, conflict, code="continuation_conflict")


async def resume_paused(services: LoopServices, work: Work, stored: Continuation, *, results: dict[str, ToolResult],
                        approved: list[str], decisions: list[dict[str, Any]] | None, stream: bool,
                        headless: bool, deadline: float, conflict: str,
                        follow_up: list[Message] | None = None, stream_rescue: bool | None = None,
                        answers: dict[str, dict[str, Any] | None] | None = None) -> Resumed:
    """Claim ``stored`` and start its loop with ``results``, charged to the key that asked.

    ``decisions``: way B's (and the Responses answers'), audited and notified as decided by the
    caller; None for way A (the client's own results: nothing was decided). ``conflict``: the
    409's message when the continuation was resumed already. ``follow_up``: messages the client
    sent after its results (way A), placed after the completed turn. ``stream_rescue``: the
    resuming request's own ``gateway.stream_rescue`` (way A), which overrides the paused one's.
    ``answers``: the decisions' answers to held calls' questions (MCP elicitation), delivered under the claim.
    """
    continuations = services.continuations
    try:
        check_pending(stored, conflict)
        decider = work.key
        assert decider is not None, "authenticated by the surface"
        plan = resume_plan(services.routes, stored)
        # Way A is the caller going on with its own conversation; deciding a pause is what approvers may do.
        work.allow(plan, resume=decisions is not None)
        asker = work.charge_to(asker_of(stored), plan)
        params = stored.data.get("params")  # the paused request's: its output cap holds for the rest of the loop
        await work.admit(work.incoming.body_bytes, plan=plan, params=params if isinstance(params, dict) else {})
    except BaseException:
        await continuations.forgo(stored)  # a claim way A's lookup took: a refused resume leaves it pending
        raise
    claimed = await continuations.claim(stored, decider.tenant)
    decided: Awaitable[None] | None = None
    if decisions is not None:
        notify_decisions(continuations.notifier, claimed, decisions, decider.name or None)
        # The decider's identity goes to the audit log only: the work stays the asker's.
        decided = continuations.audit_decided(claimed, approved, denied_reasons(decisions), answers or {},
                                              decider.id, decider.name)
    loop = continuations.resumed_request(claimed, plan, results, approved, stream, deadline, decider.tenant,
                                         headless or asker.headless, follow_up, answers)
    if stream_rescue is not None:
        loop.stream_rescue = stream_rescue
    work.watch(loop)
    slot = ResultSlot()
    events = continuations.run_resumed(claimed, loop, services.deps, decided, slot, "a" if decisions is None else "b")
    return Resumed(plan, loop, events, slot)
