"""Validating a chat-completions body before anything is sent upstream.

Checks are the ones an upstream would fail later and less clearly (types, roles, pairing),
plus the gateway's own rules (client tools may not shadow server tools). Every field the
gateway or an adapter reads is type-checked here, so a wrong type is a 400 naming the
parameter (``messages[0].role``), never an exception deep in a translator. Everything not
listed is passed through untouched, so OpenAI-compatible servers keep their extensions.
Caller values quoted in a message are cut (``quoted``). Custom (freeform) tools are taken in their
canonical function form (``canonical/tools.py``), their calls in the history too; a paused call of one
comes back as a ``custom`` tool call (``chat/render.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.api.loop.stream_options import stream_rescue_option
from gateway.canonical import (
    MAX_JSON_DEPTH,
    Message,
    ToolDef,
    arguments_too_deep,
    custom_arguments,
    custom_tool_def,
)
from gateway.errors import bad_request, quoted
from gateway.loop.pairing import pairing_problem

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
# Roles whose message is valid with just text content and no tool calls.
_PLAIN_ROLES = frozenset({"system", "developer", "user", "tool", "assistant"})
# Fields the gateway owns or rewrites; everything else is a parameter sent on every call.
_OWN_FIELDS = frozenset({"model", "messages", "tools", "tool_choice", "stream", "stream_options", "gateway",
                         "functions", "function_call"})
_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})

_NUMBER = (int, float)
# Request parameters an adapter reads, with the JSON types OpenAI documents for them (null is always allowed).
_PARAM_TYPES: dict[str, tuple[type, ...]] = {
    "temperature": _NUMBER, "top_p": _NUMBER, "presence_penalty": _NUMBER, "frequency_penalty": _NUMBER,
    "max_tokens": (int,), "max_completion_tokens": (int,), "seed": (int,), "n": (int,), "top_logprobs": (int,),
    "stop": (str, list), "response_format": (dict,), "reasoning_effort": (str,), "user": (str,),
    "metadata": (dict,), "parallel_tool_calls": (bool,), "logprobs": (bool,), "logit_bias": (dict,),
    "include_reasoning": (bool,), "service_tier": (str,), "store": (bool,), "thinking": (dict,),
}
# Keys only the gateway sets on a message (gateway/canonical/types.py): they name the provider that made a turn's
# artifacts (``openai_output``, ``reasoning_origin``), stand for an Anthropic answer or a /v1/messages caller's
# blocks (``anthropic_content``) or for a Responses caller's hosted items (``openai_hosted``). A caller's are
# dropped: its reasoning must not reach a provider as that provider's own (``reasoning_content``,
# ``thinking_blocks``, ``extra_content`` are the caller's to send back).
GATEWAY_KEYS = ("openai_output", "reasoning_origin", "anthropic_content", "openai_hosted")
# Optional message fields and their types (null allowed); role, content and tool_calls are checked apart.
_MESSAGE_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,), "tool_call_id": (str,), "refusal": (str,), "reasoning_content": (str,),
    "thinking_blocks": (list,), "extra_content": (dict,), "function_call": (dict,),
}


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
    stream_rescue: bool | None = None
    #: chat completions are canonical already: no native request for a target to take (Messages has one)
    native: None = None


def type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number",
            type(None): "null"}.get(type(value), type(value).__name__)


def _is(value: Any, kinds: tuple[type, ...]) -> bool:
    """JSON typing: ``true`` is not a number (Python's bool is an int)."""
    return isinstance(value, kinds) and (not isinstance(value, bool) or bool in kinds)


_KIND_NAMES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
               float: "a number"}


def _expect(value: Any, kinds: tuple[type, ...], param: str) -> None:
    if value is not None and not _is(value, kinds):
        shown = tuple(kind for kind in kinds if kind is not int) if float in kinds else kinds
        names = " or ".join(_KIND_NAMES[kind] for kind in shown)
        raise bad_request(f"'{param}' must be {names}, not {type_name(value)}", param)


def parse_chat_request(body: Any) -> ChatRequest:
    if not isinstance(body, dict):
        raise bad_request(f"the request body must be a JSON object, not {type_name(body)}")
    model = body.get("model")
    if model is None:
        raise bad_request("you must provide a model parameter", "model")
    if not isinstance(model, str) or not model:
        raise bad_request(f"'model' must be a non-empty string, not {type_name(model)}", "model")
    messages = body.get("messages")
    if messages is None:
        raise bad_request("'messages' is a required property", "messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request(f"'messages' must be a non-empty array, not {type_name(messages)}", "messages")
    found = 0
    for index, message in enumerate(messages):
        found |= _check_message(index, message)
    problem = pairing_problem(messages)
    if problem is not None:
        raise bad_request(str(problem), f"messages[{problem.index}]")
    if found & _CUSTOM_CALLS:
        messages = [_canonical_calls(message) for message in messages]
    if found & _GATEWAY_KEYS_FOUND:
        messages = [{k: v for k, v in message.items() if k not in GATEWAY_KEYS} for message in messages]

    tools = _tools(body.get("tools"))
    if body.get("functions") is not None:
        tools = tools + [{"type": "function", "function": _function(f, f"functions[{i}]")}
                         for i, f in enumerate(_list(body["functions"], "functions"))]
    tool_choice = body.get("tool_choice", body.get("function_call"))
    _check_tool_choice(tool_choice, "tool_choice" if "tool_choice" in body else "function_call")
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "custom":  # a custom tool's, in function form
        tool_choice = {"type": "function", "function": {"name": (tool_choice.get("custom") or {}).get("name")}}
    stream = body.get("stream")
    if stream is None:
        stream = False
    elif not isinstance(stream, bool):
        raise bad_request(f"'stream' must be a boolean, not {type_name(stream)}", "stream")
    stream_options = body.get("stream_options")
    if stream_options is None:
        stream_options = {}
    elif not isinstance(stream_options, dict):
        raise bad_request(f"'stream_options' must be an object, not {type_name(stream_options)}", "stream_options")
    include_usage = stream_options.get("include_usage")
    _expect(include_usage, (bool,), "stream_options.include_usage")
    for key, value in body.items():
        kinds = _PARAM_TYPES.get(key)
        if kinds is not None and value is not None and not _is(value, kinds):
            _expect(value, kinds, key)
    n = body.get("n")
    if n is not None and n != 1:
        raise bad_request("'n' other than 1 is not supported by this gateway", "n")
    stop = body.get("stop")
    if isinstance(stop, list) and not all(isinstance(item, str) for item in stop):
        raise bad_request("'stop' must be a string or an array of strings", "stop")
    if isinstance(body.get("response_format"), dict):
        _expect(body["response_format"].get("type"), (str,), "response_format.type")
        _expect(body["response_format"].get("json_schema"), (dict,), "response_format.json_schema")

    options = body.get("gateway")
    if options is None:
        options = {}
    elif not isinstance(options, dict):
        raise bad_request(f"'gateway' must be an object, not {type_name(options)}", "gateway")
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
                       stream=stream, include_usage=bool(include_usage), max_tool_iterations=max_iterations,
                       headless=headless, stream_rescue=stream_rescue_option(options))


def _list(value: Any, param: str) -> list[Any]:
    if not isinstance(value, list):
        raise bad_request(f"'{param}' must be an array, not {type_name(value)}", param)
    return value


def _function(function: Any, param: str) -> dict[str, Any]:
    """A function definition: the name every adapter needs, and a JSON Schema object if any."""
    if not isinstance(function, dict):
        raise bad_request(f"'{param}' must be an object, not {type_name(function)}", param)
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise bad_request(f"a function tool needs a non-empty string 'name' ({param}.name)", f"{param}.name")
    _expect(function.get("description"), (str,), f"{param}.description")
    parameters = function.get("parameters")
    _expect(parameters, (dict,), f"{param}.parameters")
    if isinstance(parameters, dict):  # the top level every adapter reads; deeper schema is the upstream's to judge
        _expect(parameters.get("type"), (str, list), f"{param}.parameters.type")
        _expect(parameters.get("properties"), (dict,), f"{param}.parameters.properties")
        required = parameters.get("required")
        if required is not None and not (isinstance(required, list) and all(isinstance(r, str) for r in required)):
            raise bad_request(f"'{param}.parameters.required' must be an array of strings",
                              f"{param}.parameters.required")
    _expect(function.get("strict"), (bool,), f"{param}.strict")
    return function


def _tools(value: Any) -> list[ToolDef]:
    """Function tools as they are; a custom (freeform) tool in its canonical function form (``canonical/tools.py``)."""
    if value is None:
        return []
    tools = _list(value, "tools")
    out = tools
    for index, tool in enumerate(tools):
        param = f"tools[{index}]"
        if not isinstance(tool, dict):
            raise bad_request(f"'{param}' must be an object, not {type_name(tool)}", param)
        kind = tool.get("type", "function")
        if kind == "custom":
            if out is tools:
                out = list(tools)
            out[index] = _custom_tool(tool.get("custom"), f"{param}.custom")
            continue
        if kind != "function":
            raise bad_request(f"only function and custom tools are supported, not type {quoted(kind)}",
                              f"{param}.type")
        _function(tool.get("function"), f"{param}.function")
    return out


def _custom_tool(custom: Any, param: str) -> ToolDef:
    """A Chat Completions custom tool (``{name, description, format}``) in canonical form."""
    if not isinstance(custom, dict):
        raise bad_request(f"'{param}' must be an object, not {type_name(custom)}", param)
    name = custom.get("name")
    if not isinstance(name, str) or not name:
        raise bad_request(f"a custom tool needs a non-empty string 'name' ({param}.name)", f"{param}.name")
    _expect(custom.get("description"), (str,), f"{param}.description")
    fmt = custom.get("format")
    grammar = fmt.get("grammar") if isinstance(fmt, dict) and fmt.get("type") == "grammar" else None
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") in ("text", "grammar")):
        raise bad_request(f"'{param}.format' must be {{type: 'text'}} or {{type: 'grammar', grammar}}",
                          f"{param}.format")
    if fmt is not None and fmt.get("type") == "grammar" and not (
            isinstance(grammar, dict) and grammar.get("syntax") in ("lark", "regex")
            and isinstance(grammar.get("definition"), str)):
        raise bad_request(f"'{param}.format.grammar' needs a syntax ('lark' or 'regex') and a string definition",
                          f"{param}.format.grammar")
    return custom_tool_def(name, custom.get("description"), grammar)


def _canonical_calls(message: Message) -> Message:
    """A message with its custom tool calls (``{type: "custom", custom: {name, input}}``) in canonical form."""
    calls = message.get("tool_calls")
    if not calls or not any(call.get("type") == "custom" for call in calls):
        return message
    return {**message, "tool_calls": [
        {"id": call.get("id"), "type": "custom", "function": {
            "name": call["custom"]["name"], "arguments": custom_arguments(call["custom"]["input"])}}
        if call.get("type") == "custom" else call for call in calls]}


def _check_tool_choice(choice: Any, param: str) -> None:
    if choice is None or choice in ("none", "auto", "required"):
        return
    if not isinstance(choice, dict):
        raise bad_request(f"'{param}' must be 'none', 'auto', 'required' or an object, not {quoted(choice)}", param)
    _expect(choice.get("type"), (str,), f"{param}.type")
    _expect(choice.get("name"), (str,), f"{param}.name")
    function = choice.get("function")
    if function is not None:
        _expect(function, (dict,), f"{param}.function")
        _expect(function.get("name"), (str,), f"{param}.function.name")
    allowed = choice.get("allowed_tools")
    if allowed is not None:
        _expect(allowed, (dict,), f"{param}.allowed_tools")
        _expect(allowed.get("mode"), (str,), f"{param}.allowed_tools.mode")
        _expect(allowed.get("tools"), (list,), f"{param}.allowed_tools.tools")


_CUSTOM_CALLS = 1
_GATEWAY_KEYS_FOUND = 2


def _check_message(index: int, message: Any) -> int:
    """A message's checks; what it has besides: ``_CUSTOM_CALLS`` (a caller's freeform tool's calls),
    ``_GATEWAY_KEYS_FOUND`` (keys only the gateway sets, dropped by the caller)."""
    if type(message) is dict:
        role = message.get("role")
        # The common case, valid by the checks below: no error text built for it.
        if type(role) is str and type(message.get("content")) is str and role in _PLAIN_ROLES and (
                len(message) == 2 or (len(message) == 3 and "tool_call_id" in message)):
            return 0
    param = f"messages[{index}]"
    if not isinstance(message, dict):
        raise bad_request(f"{param} must be an object, not {type_name(message)}", param)
    role = message.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise bad_request(f"{param}.role must be one of {', '.join(sorted(ROLES))}, got {quoted(role)}",
                          f"{param}.role")
    content = message.get("content")
    if content is None:
        if role in ("user", "system", "developer"):
            raise bad_request(f"{param}.content is required for role '{role}'", f"{param}.content")
    elif isinstance(content, list):
        for position, part in enumerate(content):
            _check_part(part, f"{param}.content[{position}]")
    elif not isinstance(content, str):
        raise bad_request(f"{param}.content must be a string or an array of parts, not {type_name(content)}",
                          f"{param}.content")
    for key, kinds in _MESSAGE_FIELD_TYPES.items():
        value = message.get(key)
        if value is not None and not _is(value, kinds):
            _expect(value, kinds, f"{param}.{key}")
    for position, block in enumerate(message.get("thinking_blocks") or ()):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise bad_request(f"{param}.thinking_blocks[{position}] must be an object with a string 'type'",
                              f"{param}.thinking_blocks[{position}]")
    calls = message.get("tool_calls")
    found = _GATEWAY_KEYS_FOUND if ("openai_output" in message or "reasoning_origin" in message
                                    or "anthropic_content" in message or "openai_hosted" in message
                                    ) else 0  # GATEWAY_KEYS, no generator
    if calls is not None:
        if role != "assistant" or not isinstance(calls, list):
            raise bad_request(f"{param}.tool_calls must be an array on an assistant message", f"{param}.tool_calls")
        for position, call in enumerate(calls):
            if _check_call(call, f"{param}.tool_calls[{position}]"):
                found |= _CUSTOM_CALLS
    return found


def _check_part(part: Any, param: str) -> None:
    """One content part: the fields the adapters read, typed (unknown part types pass through)."""
    if isinstance(part, str):
        return
    if not isinstance(part, dict):
        raise bad_request(f"{param} must be an object, not {type_name(part)}", param)
    kind = part.get("type")
    if not isinstance(kind, str):
        raise bad_request(f"{param}.type must be a string, not {type_name(kind)}", f"{param}.type")
    if kind in _TEXT_PARTS:
        _expect(part.get("text"), (str,), f"{param}.text")
    elif kind == "image_url":
        image = part.get("image_url")
        _expect(image, (dict, str), f"{param}.image_url")
        if isinstance(image, dict):
            _expect(image.get("url"), (str,), f"{param}.image_url.url")
    elif kind in ("input_audio", "file"):
        _expect(part.get(kind), (dict,), f"{param}.{kind}")
    _expect(part.get("cache_control"), (dict,), f"{param}.cache_control")


def _check_call(call: Any, param: str) -> bool:
    """A tool call's checks; whether it is a custom tool's."""
    if not isinstance(call, dict):
        raise bad_request(f"{param} must be an object, not {type_name(call)}", param)
    if call.get("type") == "custom":
        custom = call.get("custom")
        if not isinstance(custom, dict) or not isinstance(custom.get("name"), str) or not custom["name"] \
                or not isinstance(custom.get("input"), str):
            raise bad_request(f"{param} needs custom.name and a string custom.input", f"{param}.custom")
        _expect(call.get("id"), (str,), f"{param}.id")
        return True
    function = call.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise bad_request(f"{param} needs function.name", f"{param}.function.name")
    arguments = function.get("arguments")
    if arguments is not None and not isinstance(arguments, str):
        raise bad_request(f"{param}.function.arguments must be a JSON string", f"{param}.function.arguments")
    if arguments is not None and arguments_too_deep(arguments):
        raise bad_request(f"{param}.function.arguments is nested deeper than {MAX_JSON_DEPTH} levels",
                          f"{param}.function.arguments")
    _expect(call.get("type"), (str,), f"{param}.type")
    _expect(call.get("extra_content"), (dict,), f"{param}.extra_content")
    return False
