"""OpenAI Chat Completions and every server that speaks it (vLLM, Ollama, Groq, DeepSeek, Azure).

The canonical transcript is already this shape, so translation is mostly *removal*: artifacts
owned by other wire formats are stripped, and ``reasoning_content`` goes back per ``reasoning_passback``:
by default (``auto``) only to the provider that produced it, for the current request's tool-call turns
(DeepSeek answers 400 without it there; strict servers such as Groq answer 400 to the field).

This module is the request side and the adapter; the response side (a whole answer, the stream
parser, in-body errors) is ``openai_stream.py``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.canonical import (
    Message,
    ModelRequest,
    ModelResponse,
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


def _messages_for(provider: ProviderConfig, messages: list[Message]) -> list[Message]:
    """The transcript as this server takes it: foreign artifacts stripped, reasoning per ``reasoning_passback``.

    History tool calls whose arguments are not a JSON object go as ``{}`` (``history_arguments``):
    OpenAI-compatible servers answer 400 to invalid JSON there.
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
            clean = _valid_arguments(clean)
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


def _valid_arguments(message: Message) -> Message:
    """``message`` with every tool call's arguments a JSON object string (a copy only when one was not)."""
    calls = message["tool_calls"]
    fixed = None
    for index, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        arguments = function.get("arguments")
        text = history_arguments_text(arguments)
        if text is not arguments:
            if fixed is None:
                fixed = list(calls)
            fixed[index] = {**call, "function": {**function, "arguments": text}}
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
        body["messages"] = _messages_for(provider, messages)
        if request.tools:
            body["tools"] = request.tools
            if request.tool_choice is not None:
                body["tool_choice"] = request.tool_choice
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
