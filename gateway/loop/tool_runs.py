"""Running one turn's server tools: concurrently (bounded), each reported as it finishes, with the
progress a running call reports in between; a call that asks the user for input is handed on.

A call's progress (an MCP server's ``notifications/progress``) arrives through the handler the
loop puts in :data:`~gateway.tools.interaction.CALL_PROGRESS` for that call's task; the executor
hands it to the source. Each becomes a :class:`ToolProgress` event (streams show it) and an event
on the call's span. A server decides how often it reports, so the loop bounds it per call: at
most one event per :data:`PROGRESS_INTERVAL_S` and :data:`MAX_PROGRESS_EVENTS` in all (the rest
are dropped; the call's end is always reported), each message cut to :data:`MAX_PROGRESS_MESSAGE`.

A call may also ask the user for input (an MCP elicitation, ``loop/asking.py``): its handlers are
put in :data:`~gateway.tools.interaction.CALL_INTERACTIONS` for its task. A call waiting for an
answer gives its concurrency slot back (a person's answer must not hold the turn's other calls
back), and when every call still running waits for an answer, the turn stops waiting: those tasks
are handed to the turn's :class:`TurnAsks` (still running), which gives them to the held-call
registry once the pause is stored. Every other task is cancelled when the turn ends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from gateway.canonical import ToolCall
from gateway.loop.asking import TurnAsks
from gateway.loop.events import LoopEvent, ToolFinished, ToolProgress, ToolStarted
from gateway.loop.pairing import ToolResult
from gateway.observability import metrics
from gateway.observability.tracing import NOOP, OUTGOING, Span
from gateway.tools.interaction import CALL_INTERACTIONS, CALL_PROGRESS, ProgressHandler

#: the shortest time between two progress events of one call
PROGRESS_INTERVAL_S = 0.1
#: the most progress events one call produces
MAX_PROGRESS_EVENTS = 200
#: a progress message longer than this is cut
MAX_PROGRESS_MESSAGE = 300

# (call, registered tool) -> outcome with .status, .content, .elapsed_ms (and .parts for a rich result)
Execute = Callable[[ToolCall, Any], Any]
ExecuteHook = Callable[[ToolCall, Any], Awaitable[Any]]
# (call, status, elapsed_ms): the loop's record of one finished execution
Record = Callable[[ToolCall, str, float], None]
#: put in the turn's queue when a call starts waiting for an answer: the turn looks whether it can stop
_ASKED = object()


def record(records: list[dict[str, Any]], call: ToolCall, status: str, elapsed_ms: float,
           metric_name: str | None = None) -> None:
    """``metric_name`` replaces a name that is not a server tool's (``unknown``, ``client``): a model or a
    caller may invent any tool name, and each would become a new metrics series."""
    name = call["function"]["name"]
    records.append({"id": call["id"], "name": name, "status": status, "elapsed_ms": round(elapsed_ms, 2)})
    metrics.TOOL_CALLS.inc(metric_name or name, status)


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


class _Permit:
    """A call's slot under the turn's concurrency bound, given back once (when it ends, or when it starts
    waiting for a user)."""

    __slots__ = ("_semaphore", "held")

    def __init__(self, semaphore: asyncio.Semaphore) -> None:
        self._semaphore = semaphore
        self.held = False

    async def take(self) -> None:
        await self._semaphore.acquire()
        self.held = True

    def give_back(self) -> None:
        if self.held:
            self.held = False
            self._semaphore.release()


async def run_tools(runnable: list[tuple[ToolCall, Any]], execute: Execute, concurrency: int,
                    results: dict[str, ToolResult], record: Record, span: Span = NOOP,
                    waited: Callable[[float], None] | None = None, asks: TurnAsks | None = None
                    ) -> AsyncIterator[LoopEvent]:
    """Run a turn's server tools concurrently, reporting each as it finishes; results keyed by call id.

    ``waited`` is told how long the round took (to its last result, or to the pause): time spent waiting
    on tools, which the gateway-overhead measure leaves out. With ``asks``, calls waiting for a user's
    answer when nothing else runs end up in ``asks.handed`` (still running), not in ``results``."""
    if not runnable:
        return
    semaphore = asyncio.Semaphore(max(1, concurrency))
    queue: asyncio.Queue[Any] = asyncio.Queue()
    for call, _ in runnable:
        yield ToolStarted(call["id"], call["function"]["name"], call["function"]["arguments"])
    if asks is not None:
        asks.on_ask = lambda: queue.put_nowait(_ASKED)
    tasks = {call["id"]: asyncio.ensure_future(_run_call(call, tool, execute, _Permit(semaphore), queue, span, asks))
             for call, tool in runnable}
    for task in tasks.values():  # a task's failure is raised from the queue; retrieved here so it is not logged twice
        task.add_done_callback(lambda done: done.cancelled() or done.exception())
    remaining = set(tasks)
    round_began = time.perf_counter()
    try:
        while remaining:
            if asks is not None:
                waiting = asks.waiting()
                if waiting and remaining <= waiting:  # every call left waits for a person: the turn pauses
                    asks.hand({call_id: tasks[call_id] for call_id in remaining})
                    return
            item = await queue.get()
            if item is _ASKED:
                continue
            if isinstance(item, ToolProgress):
                yield item
                continue
            if isinstance(item, BaseException):
                raise item
            call, outcome, elapsed_ms = item
            remaining.discard(call["id"])
            elapsed_ms = getattr(outcome, "elapsed_ms", elapsed_ms)
            parts = getattr(outcome, "parts", None)
            message = {"role": "tool", "tool_call_id": call["id"], "content": parts} if parts else None
            results[call["id"]] = ToolResult(outcome.status, outcome.content, elapsed_ms, message)
            record(call, outcome.status, elapsed_ms)
            yield ToolFinished(call["id"], call["function"]["name"], outcome.status, elapsed_ms, outcome.content)
    finally:
        if waited is not None:
            waited(time.perf_counter() - round_began)
        if asks is not None:
            asks.on_ask = None
        handed = asks.handed if asks is not None else {}
        for call_id, task in tasks.items():
            if call_id not in handed:
                task.cancel()


async def _run_call(call: ToolCall, tool: Any, execute: Execute, permit: _Permit, queue: asyncio.Queue[Any],
                    span: Span, asks: TurnAsks | None) -> tuple[ToolCall, Any, float]:
    """One call's task: its slot taken, its span, progress and interaction handlers set in its own context,
    and its outcome (or its failure) put in the turn's queue."""
    await permit.take()
    try:
        child = span.tool(call, tool)
        if child.recording:
            OUTGOING.set(child.traceparent())  # this task's own context: HTTP tools and MCP servers read it
        CALL_PROGRESS.set(_progress_handler(call, child, queue))
        if asks is not None:
            CALL_INTERACTIONS.set(asks.interactions(call, tool, permit.give_back))
        started = time.perf_counter()
        try:
            outcome = await execute(call, tool)
        except BaseException as exc:
            child.tool_done("cancelled", None)
            queue.put_nowait(exc)
            raise
        child.tool_done(outcome.status, outcome.content)
        item = (call, outcome, (time.perf_counter() - started) * 1000)
        queue.put_nowait(item)
        return item  # a held call's outcome goes to the registry, which awaits the task itself
    finally:
        permit.give_back()
