"""OpenAI Responses API (``POST {base_url}/responses``): OpenAI's own, and Azure OpenAI's v1 API.

The request side and the adapter. A chat-shaped request is translated: the transcript into
``input`` items (``openai_responses_input``), the tools and parameters into Responses fields
(``openai_responses_params``). The gateway keeps the conversation, so every request is stateless:
``store: false``, and (for models that reason) ``include: ["reasoning.encrypted_content"]``, so the
reasoning of one loop iteration goes back, encrypted, with the next one (``openai_output``,
gateway/canonical/types.py) and the model does not think the same thoughts again. A model that does
not reason refuses ``include``: it is sent to the reasoning families by name (o-series, ``gpt-5``,
``gpt-oss``, ``codex``), and to a name that says neither (an Azure deployment's) when the request asks
for a ``reasoning_effort`` (a refusal is learned, and the target is then asked for neither).

Azure (``azure: true``, the default for an Azure OpenAI host or with ``api_version``): the v1 API
at ``{resource}/openai/v1/responses``, the deployment named as the body's ``model``, the key sent as
``api-key``; elsewhere the key is a bearer token.

A Responses caller's hosted tools (``canonical.HostedTools``) go on verbatim: this API runs them; its
custom (freeform) tools go natively to the GPT-5 family and later (their calls and outputs as
``custom_tool_call`` items), as their function form elsewhere, and so do its ``namespace`` tools (the
caller's namespaces as it wrote them; a call comes back with its ``namespace``, read as the member's
canonical name ``{namespace}__{name}``, and goes back in the history as it came).

``POST /responses/input_tokens`` counts a request exactly (``build_count_tokens``), for the gateway's
own ``/v1/messages/count_tokens`` and ``/v1/responses/input_tokens``.

The answer side (a whole response, the stream parser, failures) is ``openai_responses_output`` and
``openai_responses_stream``; HTTP errors have the Chat Completions body, read as ``openai.py`` does.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.canonical import MAX_TOKEN_COUNT, ModelRequest, ModelResponse, custom_names
from gateway.canonical_tool_results import takes_tool_result_images, tool_messages_for
from gateway.config.providers_section import ProviderConfig
from gateway.providers import urls
from gateway.providers.base import (
    ErrorClass,
    ProviderError,
    UpstreamRequest,
    forced_choice_problem,
    load_body,
    reasoning_model,
)
from gateway.providers.hosted import runs_natively
from gateway.providers.openai import OpenAIAdapter, takes_custom_model
from gateway.providers.openai_responses_input import translate_input
from gateway.providers.openai_responses_output import response_from
from gateway.providers.openai_responses_params import (
    native_members,
    translate_params,
    translate_tool_choice,
    translate_tools,
)
from gateway.providers.openai_responses_stream import OpenAIResponsesStreamParser

#: what the gateway asks back with every answer of a model that reasons: its reasoning, encrypted
ENCRYPTED_REASONING = ("reasoning.encrypted_content",)
#: the body fields ``POST /responses/input_tokens`` takes (it refuses the others)
COUNTED = frozenset({"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "reasoning",
                     "text", "truncation"})
_CHAT = OpenAIAdapter()  # the error bodies are the same as chat completions'


# Names of OpenAI models that reason (``vendor/`` prefixes allowed): they are always asked for their reasoning.
_REASONS = re.compile(r"(?:^|/)(?:o\d|gpt-5|gpt-oss|codex)", re.IGNORECASE)


@functools.lru_cache(maxsize=4096)  # model names: a route's few, and direct ones (bounded, as urls.py's)
def _reasons(model: str) -> bool | None:
    """True: a model that reasons; False: one that does not (it refuses ``include``); None: a name that says
    neither (an Azure deployment's)."""
    if not reasoning_model(model):
        return False
    return True if _REASONS.search(model) else None


def _include(model: str, params: Mapping[str, Any]) -> bool:
    """Whether to ask for the encrypted reasoning: for a model that reasons, or that is asked to (``reasoning_effort``:
    a target that refuses it is learned, ``routing/reasoning.py``, and then sent neither)."""
    reasons = _reasons(model)
    if reasons is None:
        effort = params.get("reasoning_effort")
        return effort is not None and effort != "none"
    return reasons


def request_headers(provider: ProviderConfig) -> dict[str, str]:
    """Azure takes the key as ``api-key``; OpenAI (and Azure with a Microsoft Entra token) as a bearer token."""
    headers = {"content-type": "application/json"}
    if provider.api_key:
        if provider.azure:
            headers["api-key"] = provider.api_key
        else:
            headers["authorization"] = f"Bearer {provider.api_key}"
    headers.update(provider.headers)
    return headers


def request_url(provider: ProviderConfig) -> str:
    if provider.azure:
        return urls.azure_responses(provider.base_url, provider.api_version)
    return urls.openai_responses(provider.base_url)


def count_url(provider: ProviderConfig) -> str:
    if provider.azure:
        return urls.azure_responses(provider.base_url, provider.api_version, "/input_tokens")
    return urls.openai_input_tokens(provider.base_url)


def request_body(request: ModelRequest, provider: ProviderConfig, model: str, wire_format: str) -> dict[str, Any]:
    """The Responses body for ``request`` (see the module docstring and ``openai_responses_params``)."""
    messages = tool_messages_for(request.messages, takes_tool_result_images(wire_format, model))
    tools, hosted = request.tools, request.hosted
    custom = custom_names(tools) if tools else frozenset()
    native = bool(custom) and takes_custom_model(model)
    # A caller's namespaces go natively where custom tools do (the GPT-5 family and later).
    members = native_members(tools) if tools and takes_custom_model(model) else None
    body: dict[str, Any] = {"model": model, "input": translate_input(messages, provider.name, native, members)}
    if tools or (hosted is not None and hosted.tools):
        body["tools"] = translate_tools(tools, native, members)
        if hosted is not None:  # the caller's hosted tools, which this API runs itself: verbatim
            body["tools"] += hosted.tools
        choice = translate_tool_choice(request.tool_choice, custom if native else frozenset(), members)
        if choice is not None:
            body["tool_choice"] = choice
        parallel = request.params.get("parallel_tool_calls")
        if isinstance(parallel, bool):
            body["parallel_tool_calls"] = parallel
    translate_params(request.params, body)
    body["store"] = False
    if _include(model, request.params):
        body["include"] = list(ENCRYPTED_REASONING)
    return body


class OpenAIResponsesAdapter:
    wire_format = "openai_responses"
    #: a caller's hosted tools (``web_search``, ``file_search``, ...): this API runs every one (providers/hosted.py)
    hosted_support = staticmethod(runs_natively)

    def build_request(self, request: ModelRequest, provider: ProviderConfig, model: str,
                      stream: bool) -> UpstreamRequest:
        problem = forced_choice_problem(request)
        if problem is not None:
            raise problem
        body = request_body(request, provider, model, self.wire_format)
        if stream:
            body["stream"] = True
        return UpstreamRequest(url=request_url(provider), headers=request_headers(provider), body=orjson.dumps(body))

    def build_count_tokens(self, request: ModelRequest, provider: ProviderConfig, model: str) -> UpstreamRequest:
        """``POST /responses/input_tokens`` for the body ``build_request`` would send (the fields it takes)."""
        body = request_body(request, provider, model, self.wire_format)
        counted = {key: value for key, value in body.items() if key in COUNTED}
        return UpstreamRequest(url=count_url(provider), headers=request_headers(provider), body=orjson.dumps(counted))

    def parse_count_tokens(self, body: bytes) -> int:
        """``{"object": "response.input_tokens", "input_tokens": N}``; anything else is the upstream's fault."""
        payload = load_body(body)
        count = payload.get("input_tokens") if isinstance(payload, dict) else None
        if type(count) is not int or not 0 <= count <= MAX_TOKEN_COUNT:
            raise ProviderError(ErrorClass.INVALID_RESPONSE, "upstream input_tokens answer has no input_tokens count")
        return count

    def parse_response(self, body: bytes) -> ModelResponse:
        return response_from(load_body(body))

    def new_stream_parser(self, target: str = "", model: str = "") -> OpenAIResponsesStreamParser:
        return OpenAIResponsesStreamParser(target, model)

    def parse_error(self, status: int, headers: Mapping[str, str], body: bytes) -> ProviderError:
        return _CHAT.parse_error(status, headers, body)
