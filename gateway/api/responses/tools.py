"""A Responses request's ``tools`` and ``tool_choice``: function, namespace, custom and hosted tools.

What the loop gets is chat-shaped function tools (``canonical``), so each kind is translated here:

* ``function``: its name, description, parameters and ``strict``;
* ``namespace`` (a named group of function and custom tools, Codex's ``multi_agent_v1``, an MCP
  server's tools): each member becomes a tool of its own, named ``{namespace}__{name}`` so two
  namespaces never clash; a name that would not be a valid function name for every provider
  (``^[a-zA-Z_][a-zA-Z0-9_-]*$``, at most ``MAX_WIRE_NAME`` characters) or that another tool of the
  request already has is made unique deterministically (its valid characters, cut, and 8 hex
  digits of its hash). The namespace's description opens each member's, and the member keeps its
  origin (``canonical.NAMESPACE_KEY``) for an OpenAI Responses target, which is sent the namespace natively;
* ``custom`` (freeform, with or without a grammar): its function form (``canonical.custom_tool_def``);
* hosted tools (``web_search`` and its dated variants, ``file_search``, ``mcp``, ...): kept verbatim
  for the targets that run or map them (``providers/hosted.py``); never a 400.

``CallerTools`` maps the names the model sees back to the caller's (namespace, name, kind), for the
renderer (a ``function_call`` item with its ``namespace``, a ``custom_tool_call``) and for input
items (the caller's ``function_call`` of ``namespace``/``name`` is the model's qualified name again).
The mapping depends only on the tools' list, so the same tools give the same names on every
request of a conversation (a resend, a resume).

Bounds (a caller controls every count): ``MAX_TOOLS`` entries in ``tools``, ``MAX_TOOL_DEFINITIONS``
function and custom tools once namespaces are opened (a namespace's list is counted before it is
read), names of at most ``MAX_NAME_CHARS`` characters, a grammar of at most ``MAX_GRAMMAR_CHARS``;
a namespace holds no namespace.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from gateway.api.chat.request import _expect, _function, type_name
from gateway.api.responses.echo import tool_echo
from gateway.canonical import NAMESPACE_KEY, NAMESPACE_SEPARATOR, ToolDef, custom_tool_def
from gateway.errors import bad_request, quoted

MAX_TOOLS = 256
MAX_TOOL_DEFINITIONS = 1024
MAX_NAME_CHARS = 128
MAX_GRAMMAR_CHARS = 100_000
#: the longest function name every provider takes (OpenAI's and Gemini's limit)
MAX_WIRE_NAME = 64
SEPARATOR = NAMESPACE_SEPARATOR

# Tool types a provider runs on its own servers (OpenAI's Responses API): passed to targets that run them,
# mapped where a target has its own, else dropped with a warning (``hosted_tools`` on the route).
HOSTED_TOOL_TYPES = frozenset({
    "web_search", "web_search_preview", "web_search_preview_2025_03_11", "web_search_2025_08_26",
    "file_search", "code_interpreter", "computer_use_preview", "computer", "computer_use", "image_generation",
    "mcp", "local_shell", "shell", "apply_patch", "tool_search", "programmatic_tool_calling",
})
_CALLER_TYPES = ("function", "custom", "namespace")
_VALID_WIRE_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_-]*")
_INVALID_CHAR = re.compile(r"[^a-zA-Z0-9_-]")
_GRAMMAR_SYNTAX = ("lark", "regex")


def is_hosted(kind: Any) -> bool:
    return isinstance(kind, str) and (kind in HOSTED_TOOL_TYPES or kind.startswith("web_search"))


@dataclass(frozen=True, slots=True)
class CallerTool:
    """A tool as the caller declared it: its ``name``, its ``namespace`` (None: top level), whether it is ``custom``."""

    name: str
    namespace: str | None
    custom: bool


@dataclass(slots=True)
class CallerTools:
    """The caller's function and custom tools by the name the model sees, and back (see the module docstring)."""

    by_wire: dict[str, CallerTool] = field(default_factory=dict)
    by_caller: dict[tuple[str | None, str], str] = field(default_factory=dict)

    def of(self, wire_name: str) -> CallerTool | None:
        return self.by_wire.get(wire_name)

    def wire_name(self, namespace: str | None, name: str) -> str:
        """The name the model sees for the caller's (``namespace``, ``name``): a tool of this request's, or the
        name such a tool would have (a history item of a tool the caller no longer sends)."""
        known = self.by_caller.get((namespace, name))
        if known is not None:
            return known
        return name if namespace is None else qualified(namespace, name)


def qualified(namespace: str, name: str, taken: set[str] | frozenset[str] = frozenset()) -> str:
    """The function name of ``name`` in ``namespace``: ``namespace__name`` when valid, short enough and free, else
    its valid characters cut and a hash of the pair (also hashed with a counter while ``taken``)."""
    joined = f"{namespace}{SEPARATOR}{name}"
    if len(joined) <= MAX_WIRE_NAME and _VALID_WIRE_NAME.fullmatch(joined) and joined not in taken:
        return joined
    clean = _INVALID_CHAR.sub("_", joined)
    if not clean[:1].isalpha():
        clean = "_" + clean
    seed = f"{namespace}\0{name}"
    for attempt in range(len(taken) + 1):
        digest = hashlib.blake2b(f"{seed}\0{attempt}".encode() if attempt else seed.encode(), digest_size=4)
        candidate = f"{clean[:MAX_WIRE_NAME - 9]}_{digest.hexdigest()}"
        if candidate not in taken:
            return candidate
    raise AssertionError("unreachable: len(taken) + 1 candidates cannot all be taken")


# A custom or namespaced tool to name: (its param, its definition, its namespace, the namespace's description).
Grouped = tuple[str, dict[str, Any], str | None, Any]


@dataclass(slots=True)
class ParsedTools:
    """``tools`` read: the canonical definitions (``params``: the caller's path of each, for errors), the names
    (None when every tool is a plain function: nothing to map), the hosted tools verbatim, and the echo."""

    tools: list[ToolDef]
    params: list[str]
    names: CallerTools | None
    hosted: list[dict[str, Any]]
    echo: list[Any]


def parse_tools(value: Any) -> ParsedTools:
    """The request's ``tools`` (see the module docstring); a 400 naming the first bad entry."""
    if not isinstance(value, list):
        raise bad_request(f"'tools' must be an array, not {type_name(value)}", "tools")
    if len(value) > MAX_TOOLS:
        raise bad_request(f"'tools' has {len(value)} entries; at most {MAX_TOOLS} are allowed", "tools")
    parsed = ParsedTools([], [], None, [], value)
    grouped: list[Grouped] = []  # named once the plain functions have their names
    count = 0
    for index, tool in enumerate(value):
        param = f"tools[{index}]"
        if not isinstance(tool, dict):
            raise bad_request(f"'{param}' must be an object, not {type_name(tool)}", param)
        kind = tool.get("type")
        if kind == "function":
            parsed.tools.append(_function_tool(tool, param))
            parsed.params.append(param)
            count += 1
        elif kind == "custom":
            grouped.append((param, tool, None, None))
            count += 1
        elif kind == "namespace":
            members, namespace = _namespace(tool, param, count)
            said = tool.get("description")
            grouped.extend((f"{param}.tools[{i}]", member, namespace, said) for i, member in enumerate(members))
            count += len(members)
        elif is_hosted(kind):
            parsed.hosted.append(tool)
        else:
            raise bad_request(f"tool type {quoted(kind)} is not supported; supported: function, custom, namespace and "
                              f"the hosted tools ({', '.join(sorted(HOSTED_TOOL_TYPES))})", f"{param}.type")
        if count > MAX_TOOL_DEFINITIONS:
            raise bad_request(f"'tools' define more than {MAX_TOOL_DEFINITIONS} function and custom tools", param)
    if grouped:
        _name_grouped(parsed, grouped)
    echo = [tool_echo(tool) for tool in value]  # function tools show description, parameters, strict
    parsed.echo = value if all(shown is tool for shown, tool in zip(echo, value, strict=True)) else echo
    return parsed


def _name(tool: dict[str, Any], param: str) -> str:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise bad_request(f"a tool needs a non-empty string 'name' ({param}.name)", f"{param}.name")
    if len(name) > MAX_NAME_CHARS:
        raise bad_request(f"'{param}.name' is {len(name)} characters; at most {MAX_NAME_CHARS} are allowed",
                          f"{param}.name")
    return name


def _function_tool(tool: dict[str, Any], param: str) -> ToolDef:
    _name(tool, param)
    function = {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}
    return {"type": "function", "function": _function(function, param)}


def _namespace(tool: dict[str, Any], param: str, count: int) -> tuple[list[dict[str, Any]], str]:
    """A namespace's members (checked: functions and custom tools, within the bound) and its name."""
    namespace = _name(tool, param)
    _expect(tool.get("description"), (str,), f"{param}.description")
    members = tool.get("tools")
    if not isinstance(members, list):
        raise bad_request(f"'{param}.tools' must be an array, not {type_name(members)}", f"{param}.tools")
    if count + len(members) > MAX_TOOL_DEFINITIONS:
        raise bad_request(f"'tools' define more than {MAX_TOOL_DEFINITIONS} function and custom tools "
                          f"('{param}.tools' has {len(members)})", f"{param}.tools")
    for index, member in enumerate(members):
        where = f"{param}.tools[{index}]"
        if not isinstance(member, dict):
            raise bad_request(f"'{where}' must be an object, not {type_name(member)}", where)
        if member.get("type") not in ("function", "custom"):
            raise bad_request(f"a namespace holds only function and custom tools, not {quoted(member.get('type'))}",
                              f"{where}.type")
    return members, namespace


def _grammar(tool: dict[str, Any], param: str) -> dict[str, Any] | None:
    """A custom tool's ``format``: None (free text) or its grammar ``{syntax, definition}``."""
    fmt = tool.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "grammar"):
        raise bad_request("'format' must be {type: 'text'} or {type: 'grammar', syntax, definition}",
                          f"{param}.format")
    if fmt["type"] == "text":
        return None
    syntax, definition = fmt.get("syntax"), fmt.get("definition")
    if syntax not in _GRAMMAR_SYNTAX:
        raise bad_request("'format.syntax' must be 'lark' or 'regex'", f"{param}.format.syntax")
    if not isinstance(definition, str) or not definition or len(definition) > MAX_GRAMMAR_CHARS:
        raise bad_request(f"'format.definition' must be a grammar of 1 to {MAX_GRAMMAR_CHARS} characters",
                          f"{param}.format.definition")
    return {"syntax": syntax, "definition": definition}


def _name_grouped(parsed: ParsedTools, grouped: list[Grouped]) -> None:
    """The custom and namespaced tools named (the plain functions keep theirs, so they are taken first)."""
    names = parsed.names = CallerTools()
    taken = {tool["function"]["name"] for tool in parsed.tools}
    for tool in parsed.tools:
        name = tool["function"]["name"]
        names.by_caller[(None, name)] = name
    for param, tool, namespace, said in grouped:
        name = _name(tool, param)
        description = tool.get("description")
        _expect(description, (str,), f"{param}.description")
        custom = tool.get("type") == "custom"
        wire = qualified(namespace, name, taken) if namespace is not None else name
        definition = custom_tool_def(wire, description, _grammar(tool, param)) if custom else \
            _function_tool({**tool, "name": wire}, param)
        if isinstance(said, str) and said.strip():  # the namespace's description opens its members'
            function = definition["function"]
            function["description"] = f"{said}\n\n{function.get('description') or ''}".rstrip()
        if namespace is not None:  # where it came from, for a target that takes the namespace natively
            definition[NAMESPACE_KEY] = {"name": namespace, "description": said if isinstance(said, str) else "",
                                         "tool": tool}
        taken.add(wire)
        parsed.tools.append(definition)
        parsed.params.append(param)
        names.by_wire[wire] = CallerTool(name, namespace, custom)
        names.by_caller[(namespace, name)] = wire


def tool_choice(choice: Any, names: CallerTools | None) -> Any:
    """The Responses ``tool_choice`` in chat shape, a namespaced or custom tool by the name the model sees.

    A hosted tool's choice (``{type: "web_search"}``) is ``auto``: the tool may not run on the target.
    """
    if choice is None or choice in ("none", "auto", "required"):
        return choice
    if not isinstance(choice, dict):
        raise bad_request(f"'tool_choice' must be 'none', 'auto', 'required' or an object, not {quoted(choice)}",
                          "tool_choice")
    kind = choice.get("type")
    if kind in ("function", "custom", "mcp") and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": _chosen(choice, names)}}
    if kind == "allowed_tools":
        mode = choice.get("mode")
        tools = choice.get("tools")
        if mode not in ("auto", "required") or not isinstance(tools, list) or len(tools) > MAX_TOOL_DEFINITIONS:
            raise bad_request("'tool_choice' allowed_tools needs mode 'auto' or 'required' and an array 'tools'",
                              "tool_choice")
        named = [t for t in tools if not (isinstance(t, dict) and is_hosted(t.get("type")))]
        if not all(isinstance(t, dict) and isinstance(t.get("name"), str) for t in named):
            raise bad_request("'tool_choice.tools' entries must be objects with a string 'name'", "tool_choice.tools")
        return {"type": "allowed_tools", "allowed_tools": {
            "mode": mode, "tools": [{"type": "function", "function": {"name": _chosen(t, names)}} for t in named]}}
    if is_hosted(kind):
        return "auto"
    raise bad_request("'tool_choice' must be 'none', 'auto', 'required', {type: 'function', name}, "
                      "{type: 'custom', name} or {type: 'allowed_tools', ...}", "tool_choice")


def _chosen(choice: dict[str, Any], names: CallerTools | None) -> str:
    namespace = choice.get("namespace")
    name: str = choice["name"]
    if names is None:
        return name if not isinstance(namespace, str) else qualified(namespace, name)
    return names.wire_name(namespace if isinstance(namespace, str) else None, name)
