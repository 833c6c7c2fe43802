"""The request rules a strict OpenAI Responses server enforces (``POST /v1/responses``), as a pure function.

The fake Responses upstream (``tests/fakes/openai_responses.py``) answers 400 with these messages;
adapter tests run every body they build through it. The rules are the ones the real API applies
(or is documented to apply) and that a translator can get wrong: unknown top-level parameters,
item shapes and roles, ``function_call`` / ``function_call_output`` pairing, reasoning items under
``store: false`` (``encrypted_content`` required, a following item required, the content issued by
this server: another account's cannot be decrypted), flat function tools (a ``strict`` schema must
be closed), ``max_output_tokens`` of at least 16, reasoning fields for a model that does not reason,
and no artifact of the chat-shaped transcript leaking through. Error texts follow the real ones
where they are known.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

TOP_LEVEL = {"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "max_output_tokens",
             "temperature", "top_p", "text", "reasoning", "store", "include", "stream", "stream_options", "metadata",
             "user", "safety_identifier", "prompt_cache_key", "prompt_cache_retention", "service_tier", "truncation",
             "top_logprobs", "previous_response_id", "max_tool_calls", "background", "prompt", "conversation",
             "context_management", "client_metadata"}
HOSTED_TOOLS = {"web_search", "web_search_preview", "file_search", "code_interpreter", "image_generation", "mcp",
                "computer_use_preview", "computer_use", "local_shell", "shell", "apply_patch", "custom", "namespace",
                "tool_search"}
INCLUDABLE = {"reasoning.encrypted_content", "message.output_text.logprobs", "web_search_call.action.sources",
              "code_interpreter_call.outputs", "file_search_call.results", "message.input_image.image_url",
              "computer_call_output.output.image_url"}
# The input item types of the hosted tools and of the other tool calls the API takes back (besides function calls).
HOSTED_ITEMS = {
    "web_search_call", "file_search_call", "code_interpreter_call", "image_generation_call", "mcp_call",
    "mcp_list_tools",
    "custom_tool_call", "custom_tool_call_output", "computer_call", "computer_call_output", "local_shell_call",
    "local_shell_call_output", "shell_call", "shell_call_output", "apply_patch_call", "apply_patch_call_output",
    "tool_search_call", "tool_search_output"}
# Keys of the gateway's chat-shaped transcript that are no Responses field anywhere.
FOREIGN = {"reasoning_content", "reasoning_origin", "thinking_blocks", "extra_content", "anthropic_content",
           "openai_output", "openai_hosted", "tool_calls", "tool_call_id", "function"}
_USER_PARTS = {"input_text", "input_image", "input_file"}
_ASSISTANT_PARTS = {"output_text", "refusal"}
_NOT_REASONING = re.compile(r"^(?:gpt-4|gpt-3\.5|chatgpt-4o)")
MIN_OUTPUT_TOKENS = 16


def _foreign(value: Any, path: str, problems: list[str]) -> None:
    if isinstance(value, dict):
        for key, sub in value.items():
            if key in FOREIGN:
                problems.append(f"Unknown parameter: '{path}.{key}'.")
            if key not in ("parameters", "schema", "arguments"):
                _foreign(sub, f"{path}.{key}", problems)
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            _foreign(sub, f"{path}[{index}]", problems)


def _json_object(text: Any) -> bool:
    try:
        return isinstance(text, str) and isinstance(orjson.loads(text), dict)
    except orjson.JSONDecodeError:
        return False


def _message(item: dict[str, Any], path: str, problems: list[str]) -> None:
    role, content = item.get("role"), item.get("content")
    if role not in ("user", "system", "developer", "assistant"):
        problems.append(f"Invalid value: '{role}'. Supported values are: 'assistant', 'system', 'developer', and "
                        f"'user'. ({path}.role)")
        return
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        problems.append(f"Invalid type for '{path}.content': expected a string or an array.")
        return
    allowed = _ASSISTANT_PARTS if role == "assistant" else _USER_PARTS
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in allowed:
            problems.append(f"Invalid value: '{kind}'. Supported values are: {', '.join(sorted(allowed))}. "
                            f"({path}.content[{index}].type)")
        elif kind == "input_image" and not (part.get("image_url") or part.get("file_id")):
            problems.append(f"Missing required parameter: '{path}.content[{index}].image_url'.")


def _function_tool(tool: dict[str, Any], path: str, problems: list[str]) -> None:
    if not isinstance(tool.get("name"), str) or "function" in tool:
        problems.append(f"Missing required parameter: '{path}.name'.")
    schema = tool.get("parameters")
    # Absent ``strict`` is true here: the schema must then be closed.
    if tool.get("strict", True) and not (isinstance(schema, dict) and schema.get("additionalProperties") is False):
        problems.append(f"Invalid schema for function '{tool.get('name')}': In context=(), "
                        "'additionalProperties' is required to be supplied and to be false.")


def _namespace_tool(tool: dict[str, Any], path: str, problems: list[str]) -> None:
    """A namespace: a name, a description, and function or custom tools (nothing canonical in them)."""
    if not isinstance(tool.get("name"), str) or not isinstance(tool.get("description"), str):
        problems.append(f"Missing required parameter: '{path}.description'.")
    members = tool.get("tools")
    if not isinstance(members, list):
        problems.append(f"Missing required parameter: '{path}.tools'.")
        return
    for index, member in enumerate(members):
        kind = member.get("type") if isinstance(member, dict) else None
        if kind == "function":
            _function_tool(member, f"{path}.tools[{index}]", problems)
        elif kind != "custom" or not isinstance(member.get("name"), str):
            problems.append(f"Invalid value: '{kind}'. ({path}.tools[{index}].type)")


def _tools(tools: Any, problems: list[str]) -> None:
    for index, tool in enumerate(tools if isinstance(tools, list) else ()):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "function":
            _function_tool(tool, f"tools[{index}]", problems)
        elif kind == "namespace":
            _namespace_tool(tool, f"tools[{index}]", problems)
        elif kind not in HOSTED_TOOLS:
            problems.append(f"Invalid value: '{kind}'. ({f'tools[{index}].type'})")


def _top_level(body: dict[str, Any], model: str, plain: bool, problems: list[str]) -> None:
    for key in body:
        if key not in TOP_LEVEL:
            problems.append(f"Unknown parameter: '{key}'.")
    limit = body.get("max_output_tokens")
    if limit is not None and (not isinstance(limit, int) or limit < MIN_OUTPUT_TOKENS):
        problems.append(f"Invalid 'max_output_tokens': integer below minimum value. Expected a value >= "
                        f"{MIN_OUTPUT_TOKENS}, but got {limit} instead.")
    for value in body.get("include") or ():
        if value not in INCLUDABLE:
            problems.append(f"Invalid value: '{value}'. (include)")
    if plain or _NOT_REASONING.search(model):
        if body.get("reasoning"):
            problems.append("Unsupported parameter: 'reasoning.effort' is not supported with this model.")
        if "reasoning.encrypted_content" in (body.get("include") or ()):
            problems.append("Encrypted content is not supported with this model.")
    _tools(body.get("tools"), problems)


def _output_item(item: Any) -> bool:
    """An item a model produces (what a reasoning item must lead to): not reasoning, not the caller's."""
    if not isinstance(item, dict):
        return False
    kind = item.get("type", "message")
    if kind == "message":
        return item.get("role") == "assistant"
    return kind not in ("reasoning", "function_call_output", "custom_tool_call_output")


def _items(items: list[Any], store: bool, issuer: str, problems: list[str]) -> None:
    """Item by item: shapes, call pairing, reasoning under ``store: false``."""
    calls: dict[str, bool] = {}  # call_id -> answered
    for index, item in enumerate(items):
        path = f"input[{index}]"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "message":
            _message(item, path, problems)
        elif kind == "function_call":
            if not isinstance(item.get("call_id"), str) or not isinstance(item.get("name"), str):
                problems.append(f"Missing required parameter: '{path}.call_id'.")
            elif not _json_object(item.get("arguments")):
                problems.append(f"Invalid '{path}.arguments': the arguments must be a JSON object string.")
            else:
                calls[item["call_id"]] = False
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if call_id not in calls:
                problems.append(f"No tool call found for function call output with call_id {call_id}.")
            else:
                calls[call_id] = True
        elif kind == "reasoning":
            encrypted = item.get("encrypted_content")
            if not store and not encrypted:
                problems.append(f"Item with id '{item.get('id')}' not found. Items are not persisted when `store` "
                                "is set to false. Try again with `store` set to true, or remove this item from "
                                "your input.")
            elif encrypted and not str(encrypted).startswith(f"enc:{issuer}:"):
                problems.append(f"The encrypted content for item {item.get('id')} could not be verified.")
            following = items[index + 1] if index + 1 < len(items) else None
            if not _output_item(following):
                problems.append(f"Item '{item.get('id')}' of type 'reasoning' was provided without its required "
                                "following item.")
        elif kind not in HOSTED_ITEMS:
            problems.append(f"Invalid value: '{kind}'. ({path}.type)")
    for call_id, answered in calls.items():
        if not answered:
            problems.append(f"No tool output found for function call {call_id}.")


#: what ``POST /v1/responses/input_tokens`` takes
INPUT_TOKENS_FIELDS = {"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "reasoning",
                       "text", "truncation", "conversation", "previous_response_id", "personality"}


def input_tokens_problems(body: dict[str, Any], issuer: str = "") -> list[str]:
    """A count request: only the fields the endpoint takes, and an input a create request could have."""
    problems = [f"Unknown parameter: '{key}'." for key in body if key not in INPUT_TOKENS_FIELDS]
    items = body.get("input")
    if isinstance(items, list):
        _foreign(items, "input", problems)
        _items(items, False, issuer, problems)
    return problems


def responses_request_problems(body: dict[str, Any], model: str = "", issuer: str = "",
                               plain: bool = False) -> list[str]:
    """What a strict Responses server refuses in ``body``; ``issuer``: the account whose encrypted reasoning it is;
    ``plain``: the model does not reason (as ``gpt-4*`` do by name)."""
    problems: list[str] = []
    _top_level(body, model or str(body.get("model") or ""), plain, problems)
    items = body.get("input")
    if isinstance(items, str):
        return problems
    if not isinstance(items, list) or not items:
        return [*problems, "Invalid 'input': expected a string or a non-empty array of items."]
    _foreign(items, "input", problems)
    _items(items, body.get("store", True) is not False, issuer, problems)
    return problems
