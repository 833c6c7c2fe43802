"""A round of tool calls as the loop sorts it, before its server tools run (``engine.run_loop`` runs them).

Every call of the model's message is classified (:func:`triage`): a server tool runs now; a server
tool needing approval or a client tool waits (the loop pauses for it); an unknown tool gets an error
result; and in headless mode a call that would wait gets a "denied (headless)" result, audited
(:func:`audit_denials`). The context guard may then cut the round short (``LoopRun.made_room``).

When every server call has run, a call still waiting pauses the loop (``pausing.store_pause``: the
continuation is stored first, and only then is the pause reported); otherwise the round goes through
``pairing.tool_turn`` into the transcript. A resumed pause (``prologue.py``) is a round too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.canonical import Message, ToolCall, custom_names
from gateway.loop.pairing import ToolResult
from gateway.loop.pausing import PendingCall
from gateway.loop.tool_runs import ExecuteHook, record

if TYPE_CHECKING:
    from gateway.loop.engine import LoopRun
    from gateway.loop.state import LoopRequest, LoopState


class Turn:
    """A round of tool calls: the model's message, the results it has, what runs now and what waits."""

    __slots__ = ("assistant", "denied", "execute", "follow_up", "pending", "results", "runnable")

    def __init__(self, assistant: Message, execute: ExecuteHook, results: dict[str, ToolResult],
                 runnable: list[tuple[ToolCall, Any]], pending: list[PendingCall], follow_up: list[Message],
                 denied: list[tuple[ToolCall, str]]) -> None:
        self.assistant = assistant
        # How a server call of this round runs: the registry's executor, or on a resume the ledger's.
        self.execute = execute
        self.results = results
        self.runnable = runnable
        self.pending = pending
        # What the client said after its tool results on a resume (a Messages caller's text): after the round.
        self.follow_up = follow_up
        # Headless denials still to audit: (call, reason).
        self.denied = denied


def headless_denial(name: str, reason: str) -> str:
    who = "a human's approval" if reason == "approval" else "the client to run it"
    return (f"Tool '{name}' was not run: it needs {who}, and this request runs headless with no one to "
            "answer. Continue without it.")


def calls_limit_result(name: str, cap: int) -> str:
    return (f"Tool '{name}' was not run: this response's limit of {cap} server tool call"
            f"{'' if cap == 1 else 's'} (max_tool_calls) has been reached. Do not call it again; answer with "
            "what you have.")


def over_cap(request: LoopRequest, state: LoopState, call: ToolCall, results: dict[str, ToolResult]) -> bool:
    """Whether ``request.max_tool_calls`` refuses this server call (its result written); else it is admitted and
    counted. A call counts when it is admitted: run now, or put to a human (a denied approval counted too)."""
    cap = request.max_tool_calls
    if cap is None:
        return False
    if state.tool_calls_run < cap:
        state.tool_calls_run += 1
        return False
    name = call["function"]["name"]
    results[call["id"]] = ToolResult("skipped", calls_limit_result(name, cap))
    record(state.tool_records, call, "skipped", 0.0)
    return True


def client_tool_names(request: LoopRequest) -> set[str]:
    """The caller's tools by name (a native caller's as its own format declares them, typed ones too)."""
    names = {t.get("function", {}).get("name") for t in request.client_tools}
    if request.native is not None:
        names.update(t.get("name") for t in request.native.tools)
    return names


def triage(run: LoopRun, assistant: Message, calls: list[ToolCall], execute: ExecuteHook) -> Turn:
    """Sort the model's calls: a server tool runs now, one needing approval or a client's waits; an unknown
    tool gets an error result, and headless, a call that would wait is denied (audited after). A server call past
    ``max_tool_calls`` gets a "limit reached" result; a round with nothing else to run or wait for makes the next
    call the finalize call (``LoopRun.calls_spent``)."""
    request, state = run.request, run.state
    results: dict[str, ToolResult] = {}
    runnable: list[tuple[ToolCall, Any]] = []
    pending: list[PendingCall] = []
    denied: list[tuple[ToolCall, str]] = []
    refused = False  # a server call past max_tool_calls
    tools = run.deps.tools
    server_names = run.route_tools
    client_names: set[str] | None = None  # looked up only for a call that is not a server tool's
    customs: frozenset[str] | None = None  # the caller's custom tools: looked up only for a client call
    for call in calls:
        name = call["function"]["name"]
        tool = tools.get(name) if name in server_names else None
        if tool is not None and tool.spec.approval != "required":
            if over_cap(request, state, call, results):
                refused = True
            else:
                runnable.append((call, tool))
            continue
        if tool is None and client_names is None:
            client_names = client_tool_names(request)
        reason = "approval" if tool is not None else "client" if client_names and name in client_names else None
        if reason == "client":
            customs = custom_names(request.client_tools) if customs is None else customs
            if name in customs:
                call["type"] = "custom"  # a freeform tool's: answered in the caller's custom form (canonical/tools.py)
        if reason is None:
            available = ", ".join(sorted({*server_names, *(client_names or ())})) or "none"
            results[call["id"]] = ToolResult("error", f"Unknown tool '{name}'. Available tools: {available}.")
            record(state.tool_records, call, "error", 0.0, "unknown")
        elif request.headless:
            results[call["id"]] = ToolResult("denied", headless_denial(name, reason))
            state.headless_denials.append({"tool_call_id": call["id"], "name": name, "reason": reason})
            request.span.event("loopgate.denial", {"gen_ai.tool.name": name, "gen_ai.tool.call.id": call["id"],
                                                   "loopgate.reason": reason})
            record(state.tool_records, call, "denied", 0.0, None if reason == "approval" else "client")
            denied.append((call, reason))
        elif tool is not None and over_cap(request, state, call, results):
            refused = True
        else:
            pending.append(PendingCall(call, reason, tool.spec.approval_timeout_s if tool is not None else None))
    if refused and not (runnable or pending or denied):
        run.calls_spent = True  # nothing but calls refused (or unknown): the next call is the finalize call
    return Turn(assistant, execute, results, runnable, pending, [], denied)


async def audit_denials(run: LoopRun, turn: Turn) -> None:
    """Each headless denial audited (and notified) with the asking key and the route, in call order."""
    request = run.request
    for call, reason in turn.denied:
        await run.deps.audit(request.tenant, call, reason, request.key_id, request.key_name, request.plan.name)
