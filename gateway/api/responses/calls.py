"""The output items of calls: a paused turn's client calls, and the hosted tools a target ran.

A client call is answered in the caller's own terms (``responses/tools.py``: ``CallerTools``): a
function of a namespace as a ``function_call`` with its ``namespace`` and its own ``name`` (what
Codex routes by), a custom tool's as a ``custom_tool_call`` with its ``input``. A hosted tool a
target ran (a mapped web search: ``canonical.HostedToolCall``) is a ``web_search_call`` item, its
``action.sources`` only when the request's ``include`` asks for them, as OpenAI's. Item ids carry
the call id (``fc_<call>``, ``ctc_<call>``, ``ws_<call>``).
"""

from __future__ import annotations

from typing import Any

from gateway.api.responses.events import Batch, ResponseEvents
from gateway.api.responses.tools import CallerTools, parse_tools
from gateway.canonical import HostedToolCall, ToolCall, custom_input
from gateway.errors import GatewayError

#: the ``include`` value that asks for a web search's sources
SOURCES = "web_search_call.action.sources"
NO_DROPS: dict[str, tuple[str, ...]] = {}  # shared, never written to


def client_call(call: ToolCall, names: CallerTools | None) -> tuple[dict[str, Any], str, str]:
    """(the item of a client call, opened: status ``in_progress`` and its text empty; the field its text goes
    in: ``arguments`` or ``input``; the text)."""
    function = call["function"]
    wire = function["name"]
    tool = names.of(wire) if names is not None else None
    custom = tool.custom if tool is not None else call.get("type") == "custom"
    item: dict[str, Any] = {"id": f"{'ctc' if custom else 'fc'}_{call['id']}",
                            "type": "custom_tool_call" if custom else "function_call", "call_id": call["id"],
                            "name": tool.name if tool is not None else wire}
    if tool is not None and tool.namespace is not None:
        item["namespace"] = tool.namespace
    if custom:
        item["input"] = ""
        item["status"] = "in_progress"
        return item, "input", custom_input(function["arguments"])
    item["arguments"] = ""
    item["status"] = "in_progress"
    return item, "arguments", function["arguments"]


def names_of(tools: Any) -> CallerTools | None:
    """The names of a request's tools as its Response repeats them (a pause decided elsewhere renders with them)."""
    if not isinstance(tools, list) or not tools:
        return None
    try:
        return parse_tools(tools).names
    except GatewayError:
        return None


def hosted_call(call: HostedToolCall, sources: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the item of a hosted tool a target ran, opened; the same item done)."""
    item_id = call.call_id if call.call_id.startswith("ws_") else f"ws_{call.call_id}"
    action = call.action if sources or "sources" not in call.action else \
        {k: v for k, v in call.action.items() if k != "sources"}
    opened = {"id": item_id, "type": "web_search_call", "status": "in_progress"}
    return opened, {**opened, "status": call.status, "action": action}


def warnings(drops: dict[str, tuple[str, ...]], answered_by: Any) -> list[dict[str, Any]]:
    """The ``gateway.warnings`` of hosted tools dropped by the targets that answered (``drops``: by target label)."""
    if not drops or not isinstance(answered_by, list):
        return []
    said: list[dict[str, Any]] = []
    for label in dict.fromkeys(answered_by):
        kinds = drops.get(label)
        if kinds:
            said.append({"type": "hosted_tools_dropped", "target": label, "tools": list(kinds),
                         "message": f"hosted tool(s) {', '.join(kinds)} not run: target {label} has no counterpart "
                                    "the route's 'hosted_tools' allows (docs/configuration.md)"})
    return said


class CallItems(ResponseEvents):
    """The call items of a Response (``render.ResponseBuilder`` is one), on the writing of its events.

    Set by the run that knows them: ``names`` (the caller's namespaced and custom tools), ``hosted_drops``
    (the hosted tools each target drops, warned of when it answered) and ``sources`` (``include`` asks for a
    web search's sources).
    """

    __slots__ = ("hosted_drops", "names", "sources")
    names: CallerTools | None
    hosted_drops: dict[str, tuple[str, ...]]
    sources: bool

    def _client_call(self, call: ToolCall, out: Batch) -> int:
        """A paused call for the client: its ``function_call`` or ``custom_tool_call`` item, its text's events."""
        item, field, text = client_call(call, self.names)
        index = self._add(item, out)
        if self.emit:
            kind = "custom_tool_call_input" if field == "input" else "function_call_arguments"
            out.append(self._event(f"response.{kind}.delta", {"item_id": item["id"], "output_index": index,
                                                              "delta": text}))
            done: dict[str, Any] = {"item_id": item["id"], "output_index": index}
            if field == "arguments":
                done["name"] = item["name"]
            done[field] = text
            out.append(self._event(f"response.{kind}.done", done))
        item[field] = text
        item["status"] = "completed"
        return index

    def _hosted(self, call: HostedToolCall, out: Batch) -> None:
        """A hosted tool the target ran (the open item closed first): its ``web_search_call`` item, opened and done."""
        opened, done = hosted_call(call, self.sources)
        index = self._add(opened, out)
        if self.emit:
            for phase in ("in_progress", "searching", "completed" if call.status == "completed" else "failed"):
                out.append(self._event(f"response.web_search_call.{phase}", {"item_id": opened["id"],
                                                                             "output_index": index}))
        opened.update(done)
        self._done(index, out)

    def warn(self, gateway: dict[str, Any], more: list[dict[str, Any]]) -> None:
        """``gateway.warnings``: the hosted tools the targets that answered dropped, and ``more``."""
        said = warnings(self.hosted_drops, gateway.get("answered_by")) + more
        if said:
            gateway["warnings"] = said
