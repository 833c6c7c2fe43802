"""The benchmark's tool, ``bench_tool``: answers at once, so a turn's time is gateway + model time.

Loopgate loads it as a Python tool (``python: "bench.tools:bench_tool"``); the client-driven agent
scenario calls the same function itself.
"""

from __future__ import annotations

from typing import Any


def bench_tool(step: int = 0, **_: Any) -> str:
    """Return a short result naming the step."""
    return f"bench_tool result for step {step}"
