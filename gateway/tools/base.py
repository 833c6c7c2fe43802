"""The vocabulary every tool source shares: a tool's spec, the source interface, an outcome.

A *source* (HTTP endpoints, Python callables, later MCP servers) only lists tools and
executes calls. Everything around a call (argument parsing, schema validation, timeouts,
turning failures into results the model can read) lives once in the executor, so a new
source is a small class and behaves like every other one. Policy (server / approval /
client) is carried per tool on the spec, independent of which source provides it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from gateway.canonical_tool_results import ContentPart

Approval = Literal["never", "required"]


@dataclass(frozen=True, slots=True)
class ToolTimeouts:
    """A tool source's two clocks, built once from its config (``timeout_s``, ``approval_timeout_s``).

    ``call`` bounds one call (for an MCP server also one listing or handshake); ``approval`` is how
    long a pending approval of its tools may wait before it counts as denied (None: only the
    continuation's TTL). Each listed ``ToolSpec`` carries both as ``timeout_s``/``approval_timeout_s``.
    """

    call: float = 30.0
    approval: float | None = None


#: a source's values when its config sets none of the keys
DEFAULT_TOOL_TIMEOUTS = ToolTimeouts()


def resolve_approval(mode: str, annotations: Any = None) -> Approval:
    """A configured mode (required | never | auto) as the policy of one tool.

    ``auto`` follows MCP tool annotations: ``readOnlyHint: true`` needs no approval, nor does an
    explicit ``destructiveHint: false`` (a tool that only adds); ``destructiveHint: true``, no
    annotations or anything unreadable needs a human (fail-closed: a hint is the server's claim).
    """
    if mode != "auto":
        return "required" if mode == "required" else "never"
    if isinstance(annotations, dict):
        if annotations.get("readOnlyHint") is True:
            return "never"
        if annotations.get("destructiveHint") is False:
            return "never"
    return "required"


class ToolFailure(Exception):
    """A failure the model should read as the tool's result (HTTP 503, the tool raised, ...).

    Sources raise it for errors that are part of normal operation; the executor turns it
    into an ``error`` outcome whose content is ``message``. Anything else a source raises is
    treated as a gateway bug: logged with its traceback, still reported to the model.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool as a source lists it; immutable so a registry snapshot can be shared freely.

    ``parameters`` is excluded from the hash (a dict is unhashable) but still compared, so
    the registry can tell on refresh whether a tool changed and its validator must be rebuilt.
    """

    name: str
    description: str
    parameters: dict[str, Any] = field(hash=False)
    approval: Approval = "never"
    timeout_s: float = 30.0
    source: str = ""
    #: a pending approval older than this counts as denied (None: only the continuation's TTL)
    approval_timeout_s: float | None = None

    def definition(self) -> dict[str, Any]:
        """The OpenAI ``tools[]`` entry the model sees (``parameters`` is shared, not copied)."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


@dataclass(frozen=True, slots=True)
class ToolContent:
    """A result with more than text (an image an MCP tool returned), as a source returns it.

    ``parts`` is what a target that takes images in tool results gets (canonical content parts,
    ``gateway.canonical_tool_results``); ``text`` is the same result for everyone else, each image
    described in a few words. A text-only result stays a plain ``str``: the common case costs nothing.
    """

    text: str
    parts: tuple[ContentPart, ...]


@runtime_checkable
class ToolSource(Protocol):
    """Where tools come from and how they run.

    ``list_tools`` is called at start-up and on every registry refresh, so a source whose
    tool set changes at run time (an MCP server) needs nothing more than this. ``call`` gets
    arguments already parsed and validated against the tool's schema; it returns the text the
    model sees (a :class:`ToolContent` when there is more than text) and raises
    :class:`ToolFailure` for errors the model should see. Timeouts are the executor's job: a
    source must simply be cancellable.
    """

    @property
    def name(self) -> str: ...

    async def list_tools(self) -> list[ToolSpec]: ...

    async def call(self, tool: str, arguments: dict[str, Any]) -> str | ToolContent: ...

    async def aclose(self) -> None: ...


@dataclass(slots=True)
class ToolOutcome:
    """The result of one execution: what the model sees, and whether it went well.

    ``content`` is always the text (ledgers, spans, the caller's view); ``parts`` is set only for a
    rich result, the canonical content parts the model's tool message carries instead.
    """

    status: Literal["ok", "error"]
    content: str
    elapsed_ms: float
    parts: list[ContentPart] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"
