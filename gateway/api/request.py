"""Validating a chat-completions body before anything is sent upstream.

Checks are the ones an upstream would fail later and less clearly (types, roles, pairing),
plus the gateway's own rules (client tools may not shadow server tools). Everything not
listed is passed through untouched, so OpenAI-compatible servers keep their extensions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.canonical import Message, ToolDef
from gateway.errors import bad_request
from gateway.loop.pairing import pairing_problem

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
# Roles whose message is valid with just text content and no tool calls.
_PLAIN_ROLES = frozenset({"system", "developer", "user", "tool", "assistant"})
# Fields the gateway owns or rewrites; everything else is a parameter sent on every call.
_OWN_FIELDS = frozenset({"model", "messages", "tools", "tool_choice", "stream", "stream_options", "gateway",
                         "functions", "function_call"})


@dataclass(slots=True)
class ChatRequest:
    model: str
    messages: list[Message]
    tools: list[ToolDef]
    tool_choice: Any
    params: dict[str, Any]
    stream: bool
    include_usage: bool
    max_tool_iterations: int | None
    headless: bool


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number",
            type(None): "null"}.get(type(value), type(value).__name__)


def parse_chat_request(body: Any) -> ChatRequest:
    if not isinstance(body, dict):
        raise bad_request(f"the request body must be a JSON object, not {_type_name(body)}")
    model = body.get("model")
    if model is None:
        raise bad_request("you must provide a model parameter", "model")
    if not isinstance(model, str) or not model:
        raise bad_request(f"'model' must be a non-empty string, not {_type_name(model)}", "model")
    messages = body.get("messages")
    if messages is None:
        raise bad_request("'messages' is a required property", "messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty array", "messages")
    for index, message in enumerate(messages):
        _check_message(index, message)
    problem = pairing_problem(messages)
    if problem is not None:
        raise bad_request(str(problem), f"messages[{problem.index}]")

    tools = _tools(body.get("tools"))
    if body.get("functions") is not None:
        tools = tools + [{"type": "function", "function": f} for f in _list(body["functions"], "functions")]
    tool_choice = body.get("tool_choice", body.get("function_call"))
    if tool_choice is not None and not (tool_choice in ("none", "auto", "required") or isinstance(tool_choice, dict)):
        raise bad_request("'tool_choice' must be 'none', 'auto', 'required' or an object", "tool_choice")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad_request(f"'stream' must be a boolean, not {_type_name(stream)}", "stream")
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise bad_request("'stream_options' must be an object", "stream_options")
    n = body.get("n")
    if n is not None and n != 1:
        raise bad_request("'n' other than 1 is not supported by this gateway", "n")
    for key, kind in (("temperature", (int, float)), ("top_p", (int, float)), ("max_tokens", int),
                      ("max_completion_tokens", int), ("seed", int)):
        value = body.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
            raise bad_request(f"'{key}' must be a number, not {_type_name(value)}", key)

    options = body.get("gateway") or {}
    if not isinstance(options, dict):
        raise bad_request("'gateway' must be an object", "gateway")
    max_iterations = options.get("max_tool_iterations")
    if max_iterations is not None and (isinstance(max_iterations, bool) or not isinstance(max_iterations, int)
                                       or max_iterations < 0):
        raise bad_request("'gateway.max_tool_iterations' must be a non-negative integer",
                          "gateway.max_tool_iterations")
    headless = options.get("headless", False)
    if not isinstance(headless, bool):
        raise bad_request("'gateway.headless' must be a boolean", "gateway.headless")

    params = {k: v for k, v in body.items() if k not in _OWN_FIELDS}
    return ChatRequest(model=model, messages=messages, tools=tools, tool_choice=tool_choice, params=params,
                       stream=stream, include_usage=bool(stream_options.get("include_usage")),
                       max_tool_iterations=max_iterations, headless=headless)


def _list(value: Any, param: str) -> list[Any]:
    if not isinstance(value, list):
        raise bad_request(f"'{param}' must be an array, not {_type_name(value)}", param)
    return value


def _tools(value: Any) -> list[ToolDef]:
    if value is None:
        return []
    tools = _list(value, "tools")
    for index, tool in enumerate(tools):
        param = f"tools[{index}]"
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise bad_request("only function tools are supported", param)
        function = tool.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise bad_request("a function tool needs 'function.name'", f"{param}.function.name")
    return tools


def _check_message(index: int, message: Any) -> None:
    if (isinstance(message, dict) and message.get("role") in _PLAIN_ROLES
            and type(message.get("content")) is str and "tool_calls" not in message):
        return  # the common case, valid by the checks below: no error text built for it
    param = f"messages[{index}]"
    if not isinstance(message, dict):
        raise bad_request(f"{param} must be an object, not {_type_name(message)}", param)
    role = message.get("role")
    if role not in ROLES:
        raise bad_request(f"{param}.role must be one of {', '.join(sorted(ROLES))}, got {role!r}", f"{param}.role")
    content = message.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise bad_request(f"{param}.content must be a string or an array of parts, not {_type_name(content)}",
                          f"{param}.content")
    if content is None and role in ("user", "system", "developer"):
        raise bad_request(f"{param}.content is required for role '{role}'", f"{param}.content")
    calls = message.get("tool_calls")
    if calls is not None:
        if role != "assistant" or not isinstance(calls, list):
            raise bad_request(f"{param}.tool_calls must be an array on an assistant message", f"{param}.tool_calls")
        for position, call in enumerate(calls):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise bad_request(f"{param}.tool_calls[{position}] needs function.name",
                                  f"{param}.tool_calls[{position}]")
            arguments = function.get("arguments")
            if arguments is not None and not isinstance(arguments, str):
                raise bad_request(f"{param}.tool_calls[{position}].function.arguments must be a JSON string",
                                  f"{param}.tool_calls[{position}].function.arguments")
