"""Anthropic Messages API (``POST /v1/messages``): the request body and the adapter.

A chat-completions or Responses request is translated: its transcript in ``anthropic_messages``,
its parameters (tools, thinking, sampling, ``response_format``) in ``anthropic_params``, where
the policies the reference leaves to the gateway are written down. What Anthropic cannot honour
(``n > 1``, ``json_object``) fails as a 400 rather than quietly answering something else; what it
does not know (seed, penalties, logprobs, stream_options, unknown fields) is dropped, because
Anthropic rejects unknown fields.

A ``/v1/messages`` caller's request (``ModelRequest.native`` of wire format ``anthropic``) is sent
as the caller wrote it, so the prompt cache keeps hitting: its top-level fields (``thinking``,
``output_config``, ``context_management``, ``metadata``, sampling, beta fields) and its tool
definitions verbatim, its messages verbatim (``translate_native_messages``), its
``anthropic-beta`` header merged with the provider's. The loop adds only what it owns: the
route's server tools after the caller's, the tool choice it decided (``auto`` after a forced first
call, ``none`` to finalize), its own messages. ``count_tokens`` builds the same body minus what
that endpoint does not take.

Thinking on + a tool call in the current turn (after the last user message) that carries no
thinking blocks (history from another provider, an edited transcript) -> the request is sent
without ``thinking`` (the documented fallback for foreign history; omitted rather than ``{"type":
"disabled"}``, which some newer models reject). Fabricating blocks is impossible: signatures are
checked. A native request also loses its ``clear_thinking_*`` edits then (rejected without
thinking).

A Responses caller's hosted ``web_search`` becomes Anthropic's server web search tool when the
route allows it (``providers/hosted.py``); its ``server_tool_use`` and ``web_search_tool_result``
blocks come back verbatim in ``anthropic_content`` and as ``ModelResponse.hosted_calls``.

The answer side (a whole message, the stream parser, in-body errors) is ``anthropic_stream``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from gateway.canonical import MAX_TOKEN_COUNT, ModelRequest, ModelResponse, NativeRequest
from gateway.config.providers_section import ProviderConfig
from gateway.providers import urls
from gateway.providers.anthropic_errors import error_from_body, is_context_overflow, no_retry_for
from gateway.providers.anthropic_messages import (
    bad_request,
    current_turn_lacks_thinking,
    translate_messages,
    translate_native_messages,
)
from gateway.providers.anthropic_params import (
    plan_thinking,
    translate_response_format,
    translate_sampling,
    translate_tool_choice,
    translate_tools,
)
from gateway.providers.anthropic_stream import AnthropicStreamParser, response_from_message
from gateway.providers.base import (
    ErrorClass,
    ProviderError,
    UpstreamRequest,
    error_from_status,
    load_body,
    load_error_body,
    unreadable_error,
)
from gateway.providers.hosted import WEB_SEARCH, anthropic_supports, anthropic_web_search, mapped_web_search

API_VERSION = "2023-06-01"


# --- native requests ----------------------------------------------------------------------

# What the adapter writes itself; a native request's own value for these is never copied.
_ADAPTER_FIELDS = frozenset({"model", "messages", "system", "tools", "tool_choice", "stream"})
_THINKING_ON = ("enabled", "adaptive")
# Messages fields /v1/messages/count_tokens does not take (it would answer 400 "Extra inputs are not permitted").
NOT_COUNTED = frozenset({"max_tokens", "stream", "metadata", "stop_sequences", "temperature", "top_p", "top_k",
                         "service_tier", "container", "inference_geo", "user_profile_id"})


def _without_thinking(fields: dict[str, Any]) -> None:
    """Drop ``thinking`` and the ``clear_thinking_*`` edits Anthropic rejects without it (in place)."""
    del fields["thinking"]
    management = fields.get("context_management")
    if not isinstance(management, dict) or not isinstance(management.get("edits"), list):
        return
    edits = [edit for edit in management["edits"]
             if not (isinstance(edit, dict) and str(edit.get("type") or "").startswith("clear_thinking_"))]
    kept = {**management, "edits": edits} if edits else {k: v for k, v in management.items() if k != "edits"}
    if kept:
        fields["context_management"] = kept
    else:
        del fields["context_management"]


def _tool_name(tool: Any) -> Any:
    function = tool.get("function") if isinstance(tool, dict) else None
    return function.get("name") if isinstance(function, dict) else None


def native_body(request: ModelRequest, native: NativeRequest, provider: ProviderConfig, model: str) -> dict[str, Any]:
    """The caller's own Messages request for ``model``, plus what the loop adds (see the module docstring)."""
    fields = {k: v for k, v in native.fields.items() if k not in _ADAPTER_FIELDS}
    thinking = fields.get("thinking")
    thinking_on = isinstance(thinking, dict) and thinking.get("type") in _THINKING_ON
    if thinking_on and current_turn_lacks_thinking(request.messages):
        _without_thinking(fields)
        thinking_on = False
    body: dict[str, Any] = {"model": model, **fields}
    body.setdefault("max_tokens", provider.default_max_tokens)
    system, body["messages"] = translate_native_messages(request.messages)
    if system is not None:
        body["system"] = system
    # The caller's tools as written; the route's server tools (canonical, not among them) after.
    names = {tool.get("name") for tool in native.tools if isinstance(tool, dict)}
    server_tools = translate_tools([tool for tool in request.tools if _tool_name(tool) not in names])
    tools, tool_choice = translate_tool_choice(request.tool_choice, [*native.tools, *server_tools],
                                               request.params.get("parallel_tool_calls"), thinking_on)
    if tools:
        body["tools"] = tools
        if tool_choice:
            body["tool_choice"] = tool_choice
    return body


def _beta_union(values: Iterable[str]) -> str:
    betas: dict[str, None] = {}  # ordered, without duplicates
    for value in values:
        for beta in value.split(","):
            beta = beta.strip()
            if beta:
                betas[beta] = None
    return ",".join(betas)


def request_headers(provider: ProviderConfig, native: NativeRequest | None) -> dict[str, str]:
    """Auth, version and the provider's headers; a native caller's ``anthropic-beta`` joins the provider's."""
    headers = {"content-type": "application/json", "anthropic-version": API_VERSION}
    if provider.api_key:
        headers["x-api-key"] = provider.api_key
    headers.update(provider.headers)
    betas = native.headers.get("anthropic-beta") if native is not None else None
    if isinstance(betas, str) and betas.strip():
        configured = [name for name in headers if name.lower() == "anthropic-beta"]
        headers["anthropic-beta"] = _beta_union([betas, *(headers.pop(name) for name in configured)])
    return headers


# --- translated requests -------------------------------------------------------------------


def translated_body(request: ModelRequest, provider: ProviderConfig, model: str) -> dict[str, Any]:
    """A chat-shaped request as a Messages body (the policies: ``anthropic_params``, the module docstring)."""
    params = request.params
    n = params.get("n")
    if isinstance(n, int) and n > 1:
        raise bad_request("n > 1 is not supported by Anthropic (one completion per request)")
    explicit_max = params.get("max_completion_tokens") or params.get("max_tokens")
    if explicit_max is not None and (not isinstance(explicit_max, int) or isinstance(explicit_max, bool)
                                     or explicit_max < 1):
        raise bad_request("max_tokens / max_completion_tokens must be a positive integer")
    thinking, effort, max_tokens = plan_thinking(
        params.get("reasoning_effort"), model, int(explicit_max or provider.default_max_tokens),
        bool(explicit_max))
    if thinking and current_turn_lacks_thinking(request.messages):
        thinking = None  # never fabricate blocks; think again from the next user turn
    system, messages = translate_messages(request.messages)
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": messages}
    if system:
        body["system"] = system
    tools = translate_tools(request.tools)
    search = mapped_web_search(request.hosted)  # a Responses caller's web_search, Anthropic's own (hosted.py)
    if search is not None and all(tool["name"] != WEB_SEARCH for tool in tools):
        tools.append(anthropic_web_search(search))
    tools, tool_choice = translate_tool_choice(request.tool_choice, tools, params.get("parallel_tool_calls"),
                                               thinking is not None)
    if tools:
        body["tools"] = tools
        if tool_choice:
            body["tool_choice"] = tool_choice
    if thinking:
        body["thinking"] = thinking
    output_config: dict[str, Any] = {}
    if effort:
        output_config["effort"] = effort
    output_format = translate_response_format(params.get("response_format"))
    if output_format:
        output_config["format"] = output_format
    if output_config:
        body["output_config"] = output_config
    body.update(translate_sampling(params, thinking is not None))
    return body


# --- adapter ---------------------------------------------------------------------------


def _native(request: ModelRequest) -> NativeRequest | None:
    native = request.native
    return native if native is not None and native.wire_format == "anthropic" else None


class AnthropicAdapter:
    wire_format = "anthropic"
    #: hosted tools it maps (``web_search`` -> its server web search tool): providers/hosted.py
    hosted_support = staticmethod(anthropic_supports)

    def _body(self, request: ModelRequest, provider: ProviderConfig, model: str) -> dict[str, Any]:
        native = _native(request)
        return native_body(request, native, provider, model) if native else translated_body(request, provider, model)

    def build_request(self, request: ModelRequest, provider: ProviderConfig, model: str,
                      stream: bool) -> UpstreamRequest:
        body = self._body(request, provider, model)
        if stream:
            body["stream"] = True
        return UpstreamRequest(url=urls.anthropic_messages(provider.base_url),
                               headers=request_headers(provider, _native(request)), body=orjson.dumps(body))

    def build_count_tokens(self, request: ModelRequest, provider: ProviderConfig, model: str) -> UpstreamRequest:
        """``POST /v1/messages/count_tokens`` for the body ``build_request`` would send (same translation)."""
        body = {k: v for k, v in self._body(request, provider, model).items() if k not in NOT_COUNTED}
        return UpstreamRequest(url=urls.anthropic_count_tokens(provider.base_url),
                               headers=request_headers(provider, _native(request)), body=orjson.dumps(body))

    def parse_count_tokens(self, body: bytes) -> int:
        """``{"input_tokens": N}``; any other 2xx document is the upstream's fault (INVALID_RESPONSE)."""
        payload = load_body(body)
        if isinstance(payload, dict) and payload.get("type") == "error":
            raise error_from_body(payload.get("error"))
        count = payload.get("input_tokens") if isinstance(payload, dict) else None
        if type(count) is not int or not 0 <= count <= MAX_TOKEN_COUNT:
            raise ProviderError(ErrorClass.INVALID_RESPONSE, "upstream count_tokens answer has no input_tokens count")
        return count

    def parse_response(self, body: bytes) -> ModelResponse:
        return response_from_message(load_body(body))

    def new_stream_parser(self, target: str = "", model: str = "") -> AnthropicStreamParser:
        return AnthropicStreamParser(target, model)

    def parse_error(self, status: int, headers: Mapping[str, str], body: bytes) -> ProviderError:
        payload = load_error_body(body)
        error = payload.get("error") if isinstance(payload, dict) else None
        if isinstance(error, dict):
            message, kind = str(error.get("message") or ""), error.get("type")
            kind = kind if isinstance(kind, str) else None
            result = error_from_status(status, headers, message or f"upstream returned HTTP {status}", kind,
                                       no_retry_for(error))
        else:
            message, kind, result = "", None, unreadable_error(status, headers, body)
        if result.error_class is ErrorClass.BAD_REQUEST and is_context_overflow(message):
            result.error_class = ErrorClass.CONTEXT_LENGTH
        elif kind == "billing_error" or status == 402:
            result.error_class, result.no_retry = ErrorClass.RATE_LIMITED, True
        return result
