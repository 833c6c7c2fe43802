"""Running one turn's server tools: concurrently (bounded), each reported as it finishes, with the
progress a running call reports in between.

A call's progress (an MCP server's ``notifications/progress``) arrives through the handler the
loop puts in :data:`~gateway.tools.interaction.CALL_PROGRESS` for that call's task; the executor
hands it to the source. Each becomes a :class:`ToolProgress` event (streams show it) and an event
on the call's span. A server decides how often it reports, so the loop bounds it per call: at
most one event per :data:`PROGRESS_INTERVAL_S` and :data:`MAX_PROGRESS_EVENTS` in all (the rest
are dropped; the call's end is always reported), each message cut to :data:`MAX_PROGRESS_MESSAGE`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from gateway.canonical import ToolCall
from gateway.loop.events import LoopEvent, ToolFinished, ToolProgress, ToolStarted
from gateway.loop.pairing import ToolResult
from gateway.observability.tracing import NOOP, OUTGOING, Span
from gateway.tools.interaction import CALL_PROGRESS, ProgressHandler

#: the shortest time between two progress events of one call
PROGRESS_INTERVAL_S = 0.1
#: the most progress events one call produces
MAX_PROGRESS_EVENTS = 200
#: a progress message longer than this is cut
MAX_PROGRESS_MESSAGE = 300

# (call, registered tool) -> outcome with .status, .content, .elapsed_ms (and .parts for a rich result)
Execute = Callable[[ToolCall, Any], Any]
# (call, status, elapsed_ms): the loop's record of one finished execution
Record = Callable[[ToolCall, str, float], None]


def _progress_handler(call: ToolCall, child: Span, queue: asyncio.Queue[Any]) -> ProgressHandler:
    """The bounded handler of one call's progress: events into ``queue``, events on its span."""
    last = -PROGRESS_INTERVAL_S
    sent = 0
    call_id, name = call["id"], call["function"]["name"]

    def report(progress: float, total: float | None, message: str | None) -> None:
        nonlocal last, sent
        now = time.monotonic()
        if sent >= MAX_PROGRESS_EVENTS or now - last < PROGRESS_INTERVAL_S:
            return
        last, sent = now, sent + 1
        if message is not None and len(message) > MAX_PROGRESS_MESSAGE:
            message = message[:MAX_PROGRESS_MESSAGE] + "…"
        queue.put_nowait(ToolProgress(call_id, name, progress, total, message))
        if child.recording:
            attributes: dict[str, Any] = {"loopgate.progress": progress}
            if total is not None:
                attributes["loopgate.progress_total"] = total
            if message:
                attributes["loopgate.progress_message"] = message
            child.event("loopgate.tool.progress", attributes)

    return report


async def run_tools(runnable: list[tuple[ToolCall, Any]], execute: Execute, concurrency: int,
                    results: dict[str, ToolResult], record: Record, span: Span = NOOP,
                    waited: Callable[[float], None] | None = None) -> AsyncIterator[LoopEvent]:
    """Run a turn's server tools concurrently, reporting each as it finishes; results keyed by call id.

    ``waited`` is told how long the round took (from its first task to its last result): time the
    request spent waiting on tools, which the gateway-overhead measure leaves out."""
    if not runnable:
        return
    semaphore = asyncio.Semaphore(max(1, concurrency))
    queue: asyncio.Queue[Any] = asyncio.Queue()

    async def one(call: ToolCall, tool: Any) -> None:
        async with semaphore:
            child = span.tool(call, tool)
            if child.recording:
                OUTGOING.set(child.traceparent())  # this task's own context: HTTP tools and MCP servers read it
            CALL_PROGRESS.set(_progress_handler(call, child, queue))
            started = time.perf_counter()
            try:
                outcome = await execute(call, tool)
            except BaseException as exc:
                child.tool_done("cancelled", None)
                queue.put_nowait(exc)
                raise
            child.tool_done(outcome.status, outcome.content)
            queue.put_nowait((call, outcome, (time.perf_counter() - started) * 1000))

    for call, _ in runnable:
        yield ToolStarted(call["id"], call["function"]["name"], call["function"]["arguments"])
    tasks = [asyncio.ensure_future(one(call, tool)) for call, tool in runnable]
    for task in tasks:  # a task's failure is raised from the queue; retrieved here so it is not logged twice
        task.add_done_callback(lambda done: done.cancelled() or done.exception())
    waiting = time.perf_counter()
    try:
        remaining = len(tasks)
        while remaining:
            item = await queue.get()
            if isinstance(item, ToolProgress):
                yield item
                continue
            if isinstance(item, BaseException):
                raise item
            remaining -= 1
            call, outcome, elapsed_ms = item
            elapsed_ms = getattr(outcome, "elapsed_ms", elapsed_ms)
            parts = getattr(outcome, "parts", None)
            message = {"role": "tool", "tool_call_id": call["id"], "content": parts} if parts else None
            results[call["id"]] = ToolResult(outcome.status, outcome.content, elapsed_ms, message)
            record(call, outcome.status, elapsed_ms)
            yield ToolFinished(call["id"], call["function"]["name"], outcome.status, elapsed_ms, outcome.content)
    finally:
        if waited is not None:
            waited(time.perf_counter() - waiting)
        for task in tasks:
            task.cancel()
