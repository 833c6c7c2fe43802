"""OpenAI Chat Completions and every server that speaks it (vLLM, Ollama, Groq, DeepSeek, Azure).

The canonical transcript is already this shape, so translation is mostly *removal*: artifacts
owned by other wire formats are stripped, and ``reasoning_content`` goes back per ``reasoning_passback``:
by default (``auto``) only to the provider that produced it, for the current request's tool-call turns
(DeepSeek answers 400 without it there; strict servers such as Groq answer 400 to the field).

Custom (freeform) tools go natively (``type: "custom"``, their calls too) to OpenAI's own GPT-5 family
and later (``takes_custom_tools``), as their function form of one string argument elsewhere. Hosted
tools (a Responses caller's ``web_search``, ...) are not sent: Chat Completions runs none.

This module is the request side and the adapter; the response side (a whole answer, the stream
parser, in-body errors) is ``openai_stream.py``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.canonical import (
    CUSTOM_KEY,
    NAMESPACE_KEY,
    Message,
    ModelRequest,
    ModelResponse,
    ToolDef,
    custom_input,
    custom_names,
    history_arguments_text,
    strip_artifacts,
)
from gateway.canonical_tool_results import takes_tool_result_images, tool_messages_for
from gateway.config.providers_section import ProviderConfig
from gateway.providers import urls
from gateway.providers.base import (
    MALFORMED,
    ErrorClass,
    ProviderError,
    UpstreamRequest,
    error_from_status,
    forced_choice_problem,
    invalid_response,
    load_body,
    unreadable_error,
)
from gateway.providers.openai_stream import OpenAIStreamParser, in_body_error, response_from

# Gemini's OpenAI-compatible endpoint returns thought signatures in tool_calls[].extra_content and
# (Gemini 3) rejects a tool turn that comes back without them: the one OpenAI-format server to keep them for.
_SIGNATURE_PASSBACK_HOSTS = ("generativelanguage.googleapis.com", "aiplatform.googleapis.com")


@functools.cache  # base URLs come from the config: a handful, each decided once
def _keeps_call_extra(base_url: str) -> bool:
    return any(host in base_url for host in _SIGNATURE_PASSBACK_HOSTS)


# OpenAI's own API (and Azure OpenAI) takes custom (freeform) tools on Chat Completions, for the GPT-5
# family and later; every other OpenAI-format server gets them as functions of one string argument.
_CUSTOM_TOOL_HOSTS = ("api.openai.com", ".openai.azure.com", ".cognitiveservices.azure.com")
_GPT_VERSION = re.compile(r"(?:^|[/-])gpt-(\d+)")


@functools.lru_cache(maxsize=256)  # a direct route's model names are the caller's: bounded
def takes_custom_model(model: str) -> bool:
    """Whether OpenAI's ``model`` takes custom (freeform) tools: the GPT-5 family and later."""
    version = _GPT_VERSION.search(model)
    return version is not None and int(version.group(1)) >= 5


def takes_custom_tools(base_url: str, model: str) -> bool:
    """Whether this target takes ``type: "custom"`` tools natively (else they go as functions)."""
    return takes_custom_model(model) and any(host in base_url for host in _CUSTOM_TOOL_HOSTS)


def _tools_for(tools: list[ToolDef], native: bool) -> list[ToolDef]:
    """The request's tools for this server: a custom tool natively or as its function form, a namespace's member
    as its function (the list as it is when it has neither)."""
    out = tools
    for index, tool in enumerate(tools):
        if (CUSTOM_KEY in tool or NAMESPACE_KEY in tool) and tool.get("type") == "function":  # canonical/tools.py
            if out is tools:
                out = list(tools)
            out[index] = {"type": "custom", "custom": tool[CUSTOM_KEY]} if native and CUSTOM_KEY in tool else \
                {"type": "function", "function": tool["function"]}
    return out


def _choice_for(choice: Any, custom: frozenset[str]) -> Any:
    """A tool choice naming a custom tool, in the custom form (a server taking custom tools natively)."""
    if not isinstance(choice, dict):
        return choice
    if choice.get("type") == "function" and (choice.get("function") or {}).get("name") in custom:
        return {"type": "custom", "custom": {"name": choice["function"]["name"]}}
    allowed = choice.get("allowed_tools")
    if choice.get("type") == "allowed_tools" and isinstance(allowed, dict) and isinstance(allowed.get("tools"), list):
        tools = [_choice_for(tool, custom) for tool in allowed["tools"]]
        return {**choice, "allowed_tools": {**allowed, "tools": tools}}
    return choice


def _messages_for(provider: ProviderConfig, messages: list[Message], custom: frozenset[str] = frozenset(),
                  native: bool = False) -> list[Message]:
    """The transcript as this server takes it: foreign artifacts stripped, reasoning per ``reasoning_passback``.

    History tool calls whose arguments are not a JSON object go as ``{}`` (``history_arguments``):
    OpenAI-compatible servers answer 400 to invalid JSON there. A call of a custom tool (``custom``:
    their names) goes in the custom form to a server that takes them (``native``), else as a function call.
    """
    keep_call_extra = _keeps_call_extra(provider.base_url)
    passback = provider.reasoning_passback
    owned: int | None = None
    if passback == "auto":
        owned = _current_turn_start(provider.name, messages)
        passback = owned is not None
    out = []
    for position, message in enumerate(messages):
        clean = strip_artifacts(message)
        calls = message.get("tool_calls")
        if calls:
            if keep_call_extra and clean is not message:
                clean = {**clean, "tool_calls": calls}
            clean = _valid_arguments(clean, custom if native else frozenset())
        if not passback:
            out.append(clean)
            continue
        if owned is not None:  # auto: only the current turn's tool calls, only this provider's own reasoning
            if calls and position > owned:
                mine = message.get("reasoning_origin") == provider.name
                clean = {**clean, "reasoning_content": (message.get("reasoning_content") or "") if mine else ""}
        elif message.get("role") == "assistant" and calls:
            clean = {**clean, "reasoning_content": message.get("reasoning_content") or ""}
        elif "reasoning_content" in message:
            clean = {**clean, "reasoning_content": message["reasoning_content"]}
        out.append(clean)
    return out


def _current_turn_start(provider_name: str, messages: list[Message]) -> int | None:
    """``auto``: the index of the last user message when a tool-call turn after it has this provider's reasoning.

    None means nothing to pass back: reasoning goes only to the provider that produced it, and only
    for the tool-call turns of the current request (after the last user message), where DeepSeek,
    Kimi and vLLM reasoning parsers need it; every tool-call turn there then carries the field
    (``""`` when it has no reasoning of this provider), as DeepSeek requires.
    """
    found = False
    for position in range(len(messages) - 1, -1, -1):
        message = messages[position]
        role = message.get("role")
        if role == "user":
            return position if found else None
        if (role == "assistant" and message.get("reasoning_origin") == provider_name
                and message.get("reasoning_content") and message.get("tool_calls")):
            found = True
    return -1 if found else None


def _valid_arguments(message: Message, custom: frozenset[str]) -> Message:
    """``message`` with every tool call's arguments a JSON object string (a copy only when one was not), a
    custom tool's call (``custom``: the names a server takes natively) in the custom form, and no other
    call typed anything but ``function``."""
    calls = message["tool_calls"]
    fixed = None
    for index, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        arguments = function.get("arguments")
        if custom and function.get("name") in custom:
            if fixed is None:
                fixed = list(calls)
            fixed[index] = {"id": call.get("id"), "type": "custom",
                            "custom": {"name": function["name"], "input": custom_input(arguments)}}
            continue
        text = history_arguments_text(arguments)
        if text is not arguments or call.get("type", "function") != "function":
            if fixed is None:
                fixed = list(calls)
            fixed[index] = {**call, "type": "function", "function": {**function, "arguments": text}}
    return message if fixed is None else {**message, "tool_calls": fixed}


def request_headers(provider: ProviderConfig) -> dict[str, str]:
    """Azure deployments (``api_version`` set) take the key as ``api-key``; other OpenAI-format servers a bearer."""
    headers = {"content-type": "application/json"}
    if provider.api_key:
        if provider.api_version:
            headers["api-key"] = provider.api_key
        else:
            headers["authorization"] = f"Bearer {provider.api_key}"
    headers.update(provider.headers)
    return headers


class OpenAIAdapter:
    wire_format = "openai"

    def build_request(self, request: ModelRequest, provider: ProviderConfig, model: str,
                      stream: bool) -> UpstreamRequest:
        problem = forced_choice_problem(request)
        if problem is not None:
            raise problem
        body: dict[str, Any] = dict(request.params)
        body["model"] = model
        # Tool results with images: as text here (capability data, ``canonical_tool_results``).
        messages = tool_messages_for(request.messages, takes_tool_result_images(self.wire_format, model))
        tools = request.tools
        custom = custom_names(tools) if tools else frozenset()
        native = bool(custom) and takes_custom_tools(provider.base_url, model)
        body["messages"] = _messages_for(provider, messages, custom, native)
        if tools:
            body["tools"] = _tools_for(tools, native)
            if request.tool_choice is not None:
                body["tool_choice"] = _choice_for(request.tool_choice, custom) if native else request.tool_choice
        else:
            body.pop("parallel_tool_calls", None)
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        url = (urls.azure_chat(provider.base_url, model, provider.api_version) if provider.api_version
               else urls.openai_chat(provider.base_url))
        return UpstreamRequest(url=url, headers=request_headers(provider), body=orjson.dumps(body))

    def parse_response(self, body: bytes) -> ModelResponse:
        payload = load_body(body)
        if not isinstance(payload, dict):
            raise ProviderError(ErrorClass.INVALID_RESPONSE, "upstream returned an unexpected JSON document")
        if payload.get("error"):  # "error": null beside an answer (some compatible servers) is no error
            raise in_body_error(payload["error"])
        try:
            return response_from(payload)
        except MALFORMED as exc:
            raise invalid_response(exc) from None

    def new_stream_parser(self, target: str = "", model: str = "") -> OpenAIStreamParser:
        return OpenAIStreamParser(target, model)

    def parse_error(self, status: int, headers: Mapping[str, str], body: bytes) -> ProviderError:
        try:
            fields = _error_fields(body)
            if fields is None:
                return unreadable_error(status, headers, body)
            message, code, kind = fields
            no_retry = "insufficient_quota" in f"{code} {kind}"
        except MALFORMED:
            message, code, no_retry = "", None, False
        if code == "tool_use_failed":
            # Groq could not parse the model's own tool call: an upstream failure, not the client's 400.
            return ProviderError(ErrorClass.INVALID_RESPONSE, message or "upstream failed to parse a tool call",
                                 status=status)
        return error_from_status(status, headers, message or f"upstream returned HTTP {status}", code, no_retry)


def _error_fields(body: bytes) -> tuple[str, Any, Any] | None:
    """(message, code, type) of an error body; None when it is not JSON."""
    try:
        payload = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return None
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        return str(error.get("message") or ""), error.get("code"), error.get("type")
    if isinstance(error, str):
        return error, None, None
    if isinstance(payload, dict) and "message" in payload:
        return str(payload["message"]), None, None
    return "", None, None
