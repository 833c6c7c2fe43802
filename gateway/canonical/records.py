"""What a request's work leaves for its metering and its access record: the model calls it made and what they used.

Metering (usage rows, cost, budgets), the access record and the request metrics read a request's
work through :class:`WorkRecord` only, so they take a loop's state (``LoopState``, which
satisfies it as it is) and the record of work that runs no loop (:class:`CallRecord`: an
embeddings call, an MCP server's sampling) alike, and none of them depends on the loop engine.
"""

from __future__ import annotations

from collections.abc import Sized
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from gateway.canonical.types import Usage


class WorkRecord(Protocol):
    """The model calls of one request's work, as its readers see them (read-only: the work writes them)."""

    @property
    def usage(self) -> Usage:
        """Every answered call's usage, summed."""

    @property
    def calls(self) -> list[list[Any]]:
        """One entry per answered call: ``[target label, prompt, completion, cached, reasoning tokens]``;
        pricing charges each at its own target's prices (gateway/usage/pricing.py)."""

    @property
    def answered_by(self) -> list[str]:
        """The label of the target that answered each call, in order."""

    @property
    def iterations(self) -> int:
        """How many model calls the work made."""

    @property
    def waited_s(self) -> float:
        """Seconds the request waited on its model calls and tools: the gateway's overhead is the rest."""

    @property
    def tool_records(self) -> Sized:
        """The server tools it ran (only their number is read)."""


@dataclass(slots=True)
class CallRecord:
    """The :class:`WorkRecord` of work that runs no loop: its calls, each its failover walk over a route's targets.

    ``attempts`` is handed to the walk (``Router.complete``, ``Embedder.embed``), which appends one
    entry per target it tried; ``answered`` records each call once a target answered it.
    """

    attempts: list[dict[str, Any]] = field(default_factory=list)
    answered_by: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    calls: list[list[Any]] = field(default_factory=list)
    iterations: int = 0
    #: the model that answered the last call, as its response named it
    model: str = ""
    waited_s: float = 0.0
    #: work without a loop runs no tools
    tool_records: ClassVar[tuple[()]] = ()

    def answered(self, target: str, model: str, usage: Usage) -> None:
        """A call answered: by the target labelled ``target``, as ``model``, having used ``usage``."""
        self.iterations += 1
        self.model = model
        self.answered_by.append(target)
        self.usage.add(usage)
        self.calls.append([target, usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens,
                           usage.reasoning_tokens])
