"""OpenAI Responses, the request's parameters: tools, ``tool_choice``, ``text``, ``reasoning``, sampling.

The canonical request is chat-shaped (``ModelRequest.params`` holds every other chat body field);
this says it in the Responses API's fields. Policies the reference leaves to the gateway:

* custom (freeform) tools go natively to the GPT-5 family and later, as their function form elsewhere;
  so do a caller's ``namespace`` tools (``namespaces``: the members keep their own names, a call comes
  back with its ``namespace``); a member whose canonical name is not ``{namespace}__{name}`` (it had to
  be disambiguated) goes flat under that name, as everywhere else;
* function tools are flat (``{"type": "function", "name", ...}``) and sent with ``strict: false``
  unless the caller said otherwise: the Responses API makes a function strict when ``strict`` is
  absent, which refuses the schemas a chat caller wrote for chat completions (not strict by default);
* ``max_completion_tokens`` / ``max_tokens`` -> ``max_output_tokens``, at least 16 (the API's
  minimum: a smaller value would be the upstream's 400 for what chat completions accepts);
* ``response_format`` -> ``text.format`` (``json_schema`` flattened), ``verbosity`` -> ``text.verbosity``,
  ``reasoning_effort`` -> ``reasoning.effort``;
* the fields the Responses API shares with chat completions pass on (``PASSED``); the chat-only
  ones (``stop``, ``seed``, penalties, ``logit_bias``, ``logprobs``, audio, ``prediction``, ...) are
  dropped: the Responses API refuses unknown fields. ``n > 1`` is a 400 (one answer per request).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from gateway.canonical import CUSTOM_KEY, NAMESPACE_KEY, ToolDef, namespaced
from gateway.providers.base import ErrorClass, ProviderError

#: chat parameters the Responses API takes under the same name and meaning
PASSED = frozenset({"temperature", "top_p", "user", "safety_identifier", "prompt_cache_key",
                    "prompt_cache_retention", "service_tier", "metadata", "truncation", "top_logprobs"})
MIN_OUTPUT_TOKENS = 16


def bad_request(message: str) -> ProviderError:
    return ProviderError(ErrorClass.BAD_REQUEST, message, status=400)


def _custom(tool: ToolDef) -> dict[str, Any]:
    """A custom (freeform) tool in the Responses API's own form (its grammar one level up)."""
    chat = tool[CUSTOM_KEY]
    native: dict[str, Any] = {"type": "custom", "name": chat["name"]}
    if chat.get("description"):
        native["description"] = chat["description"]
    grammar = (chat.get("format") or {}).get("grammar")
    native["format"] = {"type": "grammar", **grammar} if isinstance(grammar, dict) else {"type": "text"}
    return native


def native_members(tools: Sequence[ToolDef]) -> dict[str, tuple[str, str]]:
    """The namespace members among ``tools`` that go natively, by canonical name: (namespace, own name)."""
    members: dict[str, tuple[str, str]] = {}
    for tool in tools:
        space = tool.get(NAMESPACE_KEY) if isinstance(tool, dict) else None
        if not isinstance(space, dict):
            continue
        member, name = space.get("tool"), space.get("name")
        own = member.get("name") if isinstance(member, dict) else None
        wire = (tool.get("function") or {}).get("name")
        if isinstance(name, str) and isinstance(own, str) and wire == namespaced(name, own):
            members[wire] = (name, own)
    return members


def _member(tool: ToolDef) -> dict[str, Any]:
    """A namespace's member as the caller wrote it; a function ``strict: false`` unless it said otherwise."""
    member: dict[str, Any] = tool[NAMESPACE_KEY]["tool"]
    if member.get("type") == "function" and not isinstance(member.get("strict"), bool):
        return {**member, "strict": False}
    return member


def translate_tools(tools: Sequence[ToolDef], custom: bool = False,
                    members: Mapping[str, tuple[str, str]] | None = None) -> list[dict[str, Any]]:
    """Chat function tools -> Responses function tools (flat, ``strict: false`` unless the caller set it); a custom
    tool natively where the model takes one (``custom``), else as its function form; the namespace ``members`` (by
    canonical name, ``native_members``) in their caller's namespaces, in the order each namespace first appears."""
    native: list[dict[str, Any]] = []
    spaces: dict[str, dict[str, Any]] = {}
    for index, tool in enumerate(tools):
        if members and isinstance(tool, dict) and (tool.get("function") or {}).get("name") in members:
            space = tool[NAMESPACE_KEY]
            group = spaces.get(space["name"])
            if group is None:
                group = spaces[space["name"]] = {"type": "namespace", "name": space["name"],
                                                 "description": space.get("description") or "", "tools": []}
                native.append(group)
            group["tools"].append(_member(tool))
            continue
        if custom and isinstance(tool, dict) and CUSTOM_KEY in tool and tool.get("type") == "function":
            native.append(_custom(tool))
            continue
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or tool.get("type", "function") != "function":
            raise bad_request(f"tools[{index}]: only function tools can be sent to the OpenAI Responses API")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise bad_request(f"tools[{index}]: function has no name")
        parameters = function.get("parameters")
        entry: dict[str, Any] = {"type": "function", "name": name}
        if function.get("description"):
            entry["description"] = function["description"]
        entry["parameters"] = parameters if isinstance(parameters, dict) else {"type": "object", "properties": {}}
        strict = function.get("strict")
        entry["strict"] = strict if isinstance(strict, bool) else False
        native.append(entry)
    return native


def _function_name(entry: Any) -> Any:
    if not isinstance(entry, dict):
        return None
    function = entry.get("function")
    return function.get("name") if isinstance(function, dict) else entry.get("name")


def _chosen(name: str, custom: frozenset[str], members: Mapping[str, tuple[str, str]]) -> dict[str, Any]:
    """A named tool as the Responses API's choice names it (a native namespace's member by its namespace)."""
    kind = "custom" if name in custom else "function"
    member = members.get(name)
    return {"type": kind, "name": name} if member is None else {"type": kind, "name": member[1],
                                                               "namespace": member[0]}


def translate_tool_choice(choice: Any, custom: frozenset[str] = frozenset(),
                          members: Mapping[str, tuple[str, str]] | None = None) -> Any:
    """Chat ``tool_choice`` -> the Responses one (the named function and ``allowed_tools`` lose a level); a custom
    tool sent natively (``custom``: their names) is chosen as one, a native namespace's member (``members``) with
    its ``namespace``."""
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    members = members or {}
    if isinstance(choice, dict) and choice.get("type") == "function" and _function_name(choice):
        return _chosen(_function_name(choice), custom, members)
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        spec = choice["allowed_tools"] if isinstance(choice.get("allowed_tools"), dict) else choice
        names = [_function_name(entry) for entry in spec.get("tools") or ()]
        mode = spec.get("mode") if spec.get("mode") in ("auto", "required") else "auto"
        return {"type": "allowed_tools", "mode": mode,
                "tools": [_chosen(name, frozenset(), members) for name in names if isinstance(name, str)]}
    raise bad_request(f"tool_choice {orjson.dumps(choice).decode()} is not supported by the OpenAI Responses API")


def text_format(value: Any) -> dict[str, Any] | None:
    """``response_format`` -> ``text.format``; None for plain text (the default)."""
    kind = value.get("type") if isinstance(value, dict) else value
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        spec = value.get("json_schema") if isinstance(value, dict) else None
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise bad_request("response_format json_schema needs json_schema.schema")
        assert isinstance(spec, dict)
        native: dict[str, Any] = {"type": "json_schema", "name": spec.get("name") or "response", "schema": schema}
        for key in ("description", "strict"):
            if spec.get(key) is not None:
                native[key] = spec[key]
        return native
    raise bad_request(f"response_format type {orjson.dumps(kind).decode()} is not supported by the OpenAI "
                      "Responses API")


def output_limit(params: Mapping[str, Any]) -> int | None:
    value = params.get("max_completion_tokens")
    if value is None:
        value = params.get("max_tokens")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise bad_request("max_tokens / max_completion_tokens must be a positive integer")
    return max(value, MIN_OUTPUT_TOKENS)


def translate_params(params: Mapping[str, Any], body: dict[str, Any]) -> None:
    """The chat parameters, as Responses fields, into ``body`` (see the module docstring)."""
    if not params:  # the common request: nothing to translate
        return
    n = params.get("n")
    if isinstance(n, int) and not isinstance(n, bool) and n > 1:
        raise bad_request("n > 1 is not supported by the OpenAI Responses API (one answer per request)")
    for name, value in params.items():
        if name in PASSED and value is not None:
            body[name] = value
    limit = output_limit(params)
    if limit is not None:
        body["max_output_tokens"] = limit
    text: dict[str, Any] = {}
    native_format = text_format(params.get("response_format"))
    if native_format is not None:
        text["format"] = native_format
    if params.get("verbosity") is not None:
        text["verbosity"] = params["verbosity"]
    if text:
        body["text"] = text
    effort = params.get("reasoning_effort")
    if effort is not None:
        body["reasoning"] = {"effort": effort}
