"""Pausing a loop into the store, and rebuilding it to resume.

A continuation holds the whole transcript, including the hidden server-side exchanges and
provider artifacts, the turn's finished results and the loop state, so a resume on any
replica continues exactly where the pause stopped. It is written before the pause is
reported to the client: a pause the client sees always exists.
"""

from __future__ import annotations

from typing import Any

from gateway import metrics
from gateway.canonical import Message
from gateway.loop.engine import LoopRequest, PendingCall
from gateway.loop.pairing import ToolResult
from gateway.store.base import Continuation, Store


class Continuations:
    def __init__(self, store: Store, ttl_s: int) -> None:
        self.store = store
        self.ttl_s = ttl_s

    async def pause(self, request: LoopRequest, assistant: Message, results: dict[str, ToolResult],
                    pending: list[PendingCall]) -> str:
        data: dict[str, Any] = {
            "transcript": request.messages,
            "assistant": assistant,
            "results": {k: [r.status, r.content, r.elapsed_ms] for k, r in results.items()},
            "client_tools": request.client_tools,
            "tool_choice": request.tool_choice,
            "params": request.params,
            "max_iterations": request.max_iterations,
            "headless": request.headless,
            "state": request.state.to_dict(),
        }
        items = [{"tool_call_id": p.call["id"], "name": p.call["function"]["name"], "reason": p.reason,
                  "arguments": p.call["function"]["arguments"]} for p in pending]
        continuation = Continuation.new(request.tenant, request.plan.name, items, data, self.ttl_s)
        await self.store.save_continuation(continuation, self.ttl_s)
        metrics.CONTINUATIONS.inc("paused")
        return continuation.id
