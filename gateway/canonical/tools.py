"""Tool kinds beyond plain functions, in the canonical form: freeform (custom) tools and hosted tools.

**Custom (freeform) tools.** A tool whose input is free text (Codex's ``apply_patch``), possibly held
to a grammar. In the canonical request it is a function tool taking one string, ``input``, its
grammar described in the function's description, so every wire format can offer it; the tool
definition also keeps its Chat Completions form under ``custom`` (``custom_tool_def``), for a
target that takes custom tools natively (OpenAI's GPT-5 family). A call of one is a canonical
function call whose arguments are ``{"input": text}``; once the loop knows the call is a custom
tool's (the caller declared it), its ``type`` is ``"custom"`` (the ``function`` object stays), so a
renderer answers it as the caller's own shape (``custom_tool_call``, a ``custom`` tool call).
Adapters decide by the tool's name, never by the call's type: a call another provider produced is
a plain function call until the loop marks it.

**Namespaced tools.** A member of a caller's ``namespace`` tool (a Responses caller's named group of
function and custom tools) is a canonical tool of its own, named ``{namespace}__{name}``
(``namespaced``) unless that name is invalid or taken (``api/responses/tools.py``); its definition
keeps where it came from under ``namespace`` (``NAMESPACE_KEY``: the namespace's ``name`` and
``description``, the member as the caller wrote it, ``tool``), so an OpenAI Responses target can be
sent the caller's namespace natively and its calls (``function_call`` items with a ``namespace``)
read back as the qualified name. Every other adapter offers the flattened function.

**Hosted tools.** Tools a provider runs on its own servers (the Responses API's ``web_search``,
``file_search``, ...). ``HostedTools`` carries the caller's definitions verbatim on the model
request: a target that runs them natively takes them as they are, one with its own counterpart
maps what it can (``mapped``: the route allows it), the rest are not sent. ``HostedToolCall`` is
what a target reports of a hosted tool it ran (a search and its sources), for renderers that show
it; it never enters the transcript.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

#: the key of a custom tool's definition (its Chat Completions form) on a canonical tool definition
CUSTOM_KEY = "custom"
#: the key of a namespace member's origin on a canonical tool definition: ``{"name", "description", "tool"}``
NAMESPACE_KEY = "namespace"
#: between a namespace's name and its member's in the member's canonical name
NAMESPACE_SEPARATOR = "__"
#: the one argument a custom tool takes in function form
INPUT = "input"
# (``types.ToolDef``, spelled out: ``types`` imports this module for the request and response fields)
ToolDef = dict[str, Any]
INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {INPUT: {"type": "string", "description": "The tool's whole input, as free text (not JSON)."}},
    "required": [INPUT],
    "additionalProperties": False,
}


def custom_tool_def(name: str, description: str | None, grammar: dict[str, Any] | None) -> ToolDef:
    """The canonical definition of a custom tool; ``grammar``: ``{"syntax", "definition"}`` or None (free text)."""
    said = description or ""
    if grammar is not None:
        said = (f"{said}\n\n" if said else "") + (
            f"Pass the whole input as the string argument 'input'. It must match this {grammar['syntax']} "
            f"grammar:\n```\n{grammar['definition']}\n```")
    else:
        said = (f"{said}\n\n" if said else "") + "Pass the whole input as the string argument 'input' (free text)."
    chat: dict[str, Any] = {"name": name}
    if description:
        chat["description"] = description
    chat["format"] = ({"type": "grammar", "grammar": {"syntax": grammar["syntax"], "definition": grammar["definition"]}}
                      if grammar is not None else {"type": "text"})
    return {"type": "function", "function": {"name": name, "description": said, "parameters": INPUT_SCHEMA},
            CUSTOM_KEY: chat}


def namespaced(namespace: str, name: str) -> str:
    """The canonical name of ``name`` in ``namespace`` when it needs no disambiguation."""
    return f"{namespace}{NAMESPACE_SEPARATOR}{name}"


def custom_names(tools: list[ToolDef]) -> frozenset[str]:
    """The names of the custom tools among ``tools``."""
    return frozenset(tool["function"]["name"] for tool in tools if CUSTOM_KEY in tool
                     and tool.get("type") == "function" and isinstance(tool.get("function"), dict))


def custom_arguments(text: str) -> str:
    """A custom tool's input as the arguments of its canonical function call."""
    return orjson.dumps({INPUT: text}).decode()


def custom_input(arguments: Any) -> str:
    """The input of a custom tool's call from its canonical arguments.

    ``{"input": text}`` is the form; a model that named its one string argument otherwise still
    said its input, and arguments that are not a JSON object are the input as they are.
    """
    if not isinstance(arguments, str):
        return ""
    try:
        parsed = orjson.loads(arguments) if arguments else {}
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(parsed, dict):
        value = parsed.get(INPUT)
        if isinstance(value, str):
            return value
        strings = [v for v in parsed.values() if isinstance(v, str)]
        if len(strings) == 1 and len(parsed) == 1:
            return strings[0]
        return arguments if parsed else ""
    return parsed if isinstance(parsed, str) else arguments


@dataclass(slots=True)
class HostedTools:
    """The hosted tools a caller asked for, verbatim (Responses tool definitions), and whether targets may map them.

    ``mapped``: the route's ``hosted_tools`` allows a target with a counterpart of its own (Anthropic's
    web search, Gemini's Google Search grounding) to use it; a target that runs the tools natively
    (an OpenAI Responses upstream) takes them either way. Stored with a pause (``to_dict``).
    """

    tools: list[dict[str, Any]]
    mapped: bool = True

    def kinds(self) -> list[str]:
        return [str(tool.get("type")) for tool in self.tools]

    def first(self, prefix: str) -> dict[str, Any] | None:
        """The first tool whose type starts with ``prefix`` (``web_search`` and its dated variants)."""
        for tool in self.tools:
            if str(tool.get("type")).startswith(prefix):
                return tool
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"tools": self.tools, "mapped": self.mapped}

    @classmethod
    def from_dict(cls, data: Any) -> HostedTools | None:
        if not isinstance(data, dict) or not isinstance(data.get("tools"), list):
            return None
        return cls([tool for tool in data["tools"] if isinstance(tool, dict)], data.get("mapped") is not False)


@dataclass(slots=True)
class HostedToolCall:
    """A hosted tool a target ran within its answer: a stream delta, and in ``ModelResponse.hosted_calls``.

    ``kind``: the Responses tool type it stands for (``web_search``); ``action``: what it did, in the
    Responses API's terms (``{"type": "search", "query": ..., "sources": [{"type": "url", "url": ...}]}``);
    ``status``: ``completed`` or ``failed``. Renderers that have no place for it ignore it.
    """

    kind: str
    call_id: str
    action: dict[str, Any] = field(default_factory=dict)
    status: str = "completed"
