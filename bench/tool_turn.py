"""What the elicitation handlers cost a turn of server tools that never asks: ``run_tools`` with and
without a turn's :class:`~gateway.loop.asking.TurnAsks`, in process, tools that answer at once.

``python -m bench.tool_turn [--calls 4] [--turns 20000] [--rounds 3]``

Each round runs ``--turns`` turns of ``--calls`` trivial calls both ways (the loop's own task
handling, permits, progress and interaction handlers; no executor, no source) and reports the wall
time per turn; the median of the rounds is printed. One process, the default event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass
from typing import Any

from gateway.loop.asking import AskPolicy, TurnAsks
from gateway.loop.held import HeldCalls
from gateway.loop.tool_runs import run_tools
from gateway.store.memory import MemoryStore
from gateway.tools.base import ToolOutcome


@dataclass
class _Spec:
    name: str
    source: str = "mcp:bench"


@dataclass
class _Tool:
    spec: _Spec


async def _execute(call: dict[str, Any], tool: _Tool) -> ToolOutcome:
    return ToolOutcome("ok", "done", 0.1)


async def _denied(_: Any) -> None:
    return None


async def _turns(calls: int, turns: int, with_asks: bool, held: HeldCalls) -> float:
    runnable = [({"id": f"c{i}", "type": "function", "function": {"name": "t", "arguments": "{}"}}, _Tool(_Spec("t")))
                for i in range(calls)]
    started = time.perf_counter()
    for _ in range(turns):
        asks = TurnAsks(held, lambda source, server: AskPolicy(), None, False, _denied) if with_asks else None
        async for _event in run_tools(runnable, _execute, calls, {}, lambda c, s, e: None, asks=asks):
            pass
        if asks is not None:
            asks.abandon()
    return (time.perf_counter() - started) / turns * 1e6


async def main(calls: int, turns: int, rounds: int) -> None:
    held = HeldCalls(MemoryStore(), 600)
    results: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(rounds):
        for with_asks in (False, True):
            results[with_asks].append(await _turns(calls, turns, with_asks, held))
    for with_asks, label in ((False, "without TurnAsks"), (True, "with TurnAsks")):
        print(f"{label}: {statistics.median(results[with_asks]):.1f} µs per {calls}-call turn")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--turns", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.turns, args.rounds))
