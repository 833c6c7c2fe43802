"""The resume prologue: the paused round, completed by the resume, before the loop's next model call.

A resume (way A, way B, the approvals inbox, a Responses ``function_call_output``) hands the loop the
paused round as a :class:`~gateway.loop.state.ResumeTurn`: the results so far (the client's, the
denials, the timed-out approvals) and the calls to run now. Those are the approved calls, run through
``deps.run_approved`` so the tool ledger lets each run at most once per continuation however often
the resume is retried, and the calls of stateless MCP servers retried with the user's answers. The
round then runs like any other (``engine.run_loop``): paused again if a call asks again, else paired
into the transcript, followed by what the client said after its results.

It runs once per resumed request, never per iteration: the hot path is the loop after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.loop.asking import retrying
from gateway.loop.pairing import ToolResult
from gateway.loop.state import ResumeTurn
from gateway.loop.tool_round import Turn
from gateway.loop.tool_runs import record

if TYPE_CHECKING:
    from gateway.loop.engine import LoopRun


def resumed_turn(run: LoopRun, paused: ResumeTurn) -> Turn:
    """The paused round with its approved and retried calls to run (a tool gone since: an error result)."""
    request, deps = run.request, run.deps
    request.resume = None  # taken: the loop goes on from here
    run.request.span.event("loopgate.resume", {"loopgate.continuation_id": paused.continuation_id})
    run.resumed_from = paused.continuation_id
    execute = deps.run_approved(request.tenant, paused.continuation_id) if deps.run_approved else deps.run_tool
    if paused.retries:  # ledgered like approved calls: a retried resume replays the retry, never sends it twice
        execute = retrying(execute, paused.retries)
    turn = Turn(paused.assistant, execute, paused.results, [], list(paused.asked), paused.follow_up, [])
    retried = [call for call in paused.assistant.get("tool_calls") or () if call["id"] in paused.retries]
    for call in [*paused.approved, *retried]:
        tool = deps.tools.get(call["function"]["name"])
        if tool is not None:
            turn.runnable.append((call, tool))
            continue
        turn.results[call["id"]] = ToolResult("error", f"Tool '{call['function']['name']}' is no longer available "
                                              "on this gateway.")
        record(run.state.tool_records, call, "error", 0.0, "unknown")
    return turn
