"""Answers to a paused loop checked against its pending calls: who may give which result.

A pending call of reason ``client`` takes the caller's result (way A's ``tool`` message, way B's
``output``, a Responses ``function_call_output``). A pending approval or question to the user
(MCP elicitation) is a **server** tool's call: its result comes from the gateway alone, after a
decision (way B or the inbox). A caller's result for one is refused with :class:`AwaitsDecision`
(400, naming the calls and where to decide them) before anything is claimed, so the continuation
stays pending and unchanged, and the attempt is audited (``result_refused``) and logged.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from gateway.errors import GatewayError, bad_request, quoted
from gateway.loop.approvals import arguments_digest, audit_entry, expired_calls, timed_out_result
from gateway.loop.elicitation import answer_of, is_elicitation, question_expired
from gateway.loop.pairing import ToolResult
from gateway.observability import metrics
from gateway.store.base import Store
from gateway.store.continuations.base import Continuation

log = logging.getLogger("loopgate.continuations")
#: how many refused call ids a message or log line names
_NAMED = 5


def declined(reason: str | None) -> str:
    text = "The user declined to run this tool call."
    return f"{text} Reason: {reason}" if reason else text


def check_digest(decision: dict[str, Any], item: dict[str, Any], param: str) -> None:
    """A decision carrying ``arguments_sha256`` applies only to exactly those arguments: else 409, nothing changes."""
    if "arguments_sha256" not in decision:
        return
    sent = decision["arguments_sha256"]
    if not isinstance(sent, str):
        raise bad_request(f"{param}.arguments_sha256 must be a string", f"{param}.arguments_sha256")
    if sent.lower() != (item.get("arguments_sha256") or arguments_digest(item.get("arguments"))):
        raise GatewayError(409, f"{param}: the arguments of {quoted(item['tool_call_id'])} are not the ones "
                           "this decision was made for (arguments_sha256 differs)", param=f"{param}.arguments_sha256",
                           code="arguments_mismatch")


def awaits_decision(item: dict[str, Any], expired: set[str]) -> bool:
    """Whether only a decision may answer ``item``: an approval not timed out yet, or a question to the user.

    A timed-out approval is decided already (denied): a result sent for it is ignored, the denial applies.
    """
    return is_elicitation(item) or (item.get("reason") == "approval" and item["tool_call_id"] not in expired)


class AwaitsDecision(GatewayError):
    """400: a caller sent its own result for calls whose result only the gateway gives, after a decision."""

    def __init__(self, continuation: Continuation, items: list[dict[str, Any]], param: str | None) -> None:
        self.continuation = continuation
        self.items = items
        asking = any(is_elicitation(item) for item in items)
        ids = ", ".join(quoted(item["tool_call_id"]) for item in items[:_NAMED])
        waits = "wait(s) for the user's input" if asking else "await(s) approval"
        where = f"/v1/continuations/{continuation.id}"
        super().__init__(400, f"tool call(s) {ids} of continuation {continuation.id} {waits}: only a decision answers "
                         f"them (POST {where}, or the approvals inbox), never a result sent by the caller; the "
                         "continuation is unchanged", param=param,
                         code="elicitation_pending" if asking else "approval_pending")


async def record_refusal(store: Store, refused: AwaitsDecision, key_id: str, key_name: str) -> None:
    """One ``result_refused`` audit entry per call (``reason``: what it awaits) and a warning; never raises, so the
    caller gets the 400 even when the store cannot take the entry."""
    c = refused.continuation
    metrics.CONTINUATIONS.inc("result_refused")
    log.warning("refused a caller's result for tool call(s) %s of continuation %s (key %s): they await a decision",
                ", ".join(quoted(item["tool_call_id"]) for item in refused.items[:_NAMED]), c.id, quoted(key_name))
    try:
        for item in refused.items:
            awaited = "elicitation" if is_elicitation(item) else "approval"
            await store.append_audit(audit_entry(c, item, "result_refused", key_id, key_name, awaited))
    except Exception:
        log.exception("could not audit the refused result for continuation %s", c.id)


def decisions_to_results(continuation: Continuation, decisions: Any
                         ) -> tuple[dict[str, ToolResult], list[str], dict[str, dict[str, Any] | None]]:
    """Way B: check the decisions against the pending calls; returns (results, approved ids, answers to
    held calls' questions: call id -> {"action", "content"}, None for a question that timed out).

    One pass over the decisions, each checked in the order a reader expects the errors: its shape, an
    unknown or twice-decided call, the arguments' digest, then what its call takes."""
    if not isinstance(decisions, list):
        raise bad_request("'decisions' must be an array", "decisions")
    pending = {p["tool_call_id"]: p for p in continuation.pending}
    expired = expired_calls(continuation)
    results: dict[str, ToolResult] = {}
    approved: list[str] = []
    answers: dict[str, dict[str, Any] | None] = {}
    decided: set[str] = set()
    now = time.time()
    for index, decision in enumerate(decisions):
        param = f"decisions[{index}]"
        call_id, item = _decided_call(decision, param, pending, decided)
        check_digest(decision, item, param)
        if "output" in decision and awaits_decision(item, expired):
            raise AwaitsDecision(continuation, [item], f"{param}.output")  # 'output' is a client call's result only
        if is_elicitation(item):
            answers[call_id] = answer_of(decision, item, param, now)
        elif call_id in expired:
            results[call_id] = _expired_approval(decision, call_id, param)
        else:
            result = _result_of(decision, item, call_id, param)
            if result is None:
                approved.append(call_id)
            else:
                results[call_id] = result
    _decided_by_time(pending, expired, results, answers, now)
    missing = [p for p in pending if p not in results and p not in approved and p not in answers]
    if missing:
        raise bad_request(f"no decision for pending tool call(s): {', '.join(missing)}", "decisions")
    return results, approved, answers


def _decided_call(decision: Any, param: str, pending: dict[str, dict[str, Any]], decided: set[str]
                  ) -> tuple[str, dict[str, Any]]:
    """The pending call a decision names (its shape checked first); each call takes one decision."""
    if not isinstance(decision, dict):
        raise bad_request(f"{param} must be an object", param)
    if not isinstance(decision.get("tool_call_id"), str):
        raise bad_request(f"{param}.tool_call_id must be a string", f"{param}.tool_call_id")
    call_id = decision["tool_call_id"]
    item = pending.get(call_id)
    if item is None:
        raise bad_request(f"{param}: {quoted(call_id)} is not a pending call of this continuation",
                          f"{param}.tool_call_id")
    if call_id in decided:
        raise bad_request(f"{param}: {quoted(call_id)} has more than one decision", f"{param}.tool_call_id")
    decided.add(call_id)
    return call_id, item


def _expired_approval(decision: dict[str, Any], call_id: str, param: str) -> ToolResult:
    """An approval whose time ran out counts as denied: approving it now is a 409, anything else the denial."""
    if decision.get("approve") is True:
        raise GatewayError(409, f"the approval of {quoted(call_id)} timed out; it counts as denied",
                           param=param, code="approval_expired")
    return ToolResult("denied", timed_out_result())


def _result_of(decision: dict[str, Any], item: dict[str, Any], call_id: str, param: str) -> ToolResult | None:
    """A client call's ``output``, or an approval's yes (None: the call runs) or no (a denial with its reason)."""
    if "output" in decision:
        output = decision["output"]
        if not isinstance(output, str):
            raise bad_request(f"{param}.output must be a string", f"{param}.output")
        return ToolResult("client", output)
    approve = decision.get("approve")
    if not isinstance(approve, bool):
        raise bad_request(f"{param} needs 'approve' (true/false) or 'output'", param)
    if approve:
        if item["reason"] != "approval":
            raise bad_request(f"{param}: {quoted(call_id)} is a client tool; send its 'output'", param)
        return None
    reason = decision.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise bad_request(f"{param}.reason must be a string", f"{param}.reason")
    return ToolResult("denied", declined(reason))


def _decided_by_time(pending: dict[str, dict[str, Any]], expired: set[str], results: dict[str, ToolResult],
                     answers: dict[str, dict[str, Any] | None], now: float) -> None:
    """What time decided without a decision: a timed-out approval is denied, an expired question unanswered."""
    for call_id in expired:
        results.setdefault(call_id, ToolResult("denied", timed_out_result()))
    for call_id, item in pending.items():
        if is_elicitation(item) and call_id not in answers and question_expired(item, now):
            answers[call_id] = None


def outputs_to_results(continuation: Continuation, outputs: dict[str, str]) -> dict[str, ToolResult]:
    """Way A: one client ``tool`` message per pending call of the client.

    A result for a call awaiting approval or the user's input is refused (:class:`AwaitsDecision`):
    the follow-up never decides it. An approval that timed out is decided (denied): its denial applies.
    """
    expired = expired_calls(continuation)
    awaiting = [p for p in continuation.pending if p["tool_call_id"] in outputs and awaits_decision(p, expired)]
    if awaiting:
        raise AwaitsDecision(continuation, awaiting, "messages")
    missing = [p["tool_call_id"] for p in continuation.pending if p["tool_call_id"] not in outputs]
    if missing:
        raise bad_request(f"the follow-up must answer every pending tool call of continuation {continuation.id}; "
                          f"missing: {', '.join(missing)}", "messages")
    return {p["tool_call_id"]: ToolResult("denied", timed_out_result()) if p["tool_call_id"] in expired
            else ToolResult("client", outputs[p["tool_call_id"]]) for p in continuation.pending}
