"""Anthropic Messages API (``POST /v1/messages``): request building and the adapter.

A chat-completions or Responses request is translated (the transcript in ``anthropic_messages``).
What Anthropic cannot honour (``n > 1``, ``json_object``) fails as a 400 here rather than quietly
answering something else; what it does not know (seed, penalties, logprobs, stream_options,
unknown fields) is dropped, because Anthropic rejects unknown fields.

A ``/v1/messages`` caller's request (``ModelRequest.native`` of wire format ``anthropic``) is sent
as the caller wrote it, so the prompt cache keeps hitting: its top-level fields (``thinking``,
``output_config``, ``context_management``, ``metadata``, sampling, beta fields) and its tool
definitions verbatim, its messages verbatim (``translate_native_messages``), its
``anthropic-beta`` header merged with the provider's. The loop adds only what it owns: the
route's server tools after the caller's, the tool choice it decided (``auto`` after a forced first
call, ``none`` to finalize), its own messages. ``count_tokens`` builds the same body minus what
that endpoint does not take.

Policies the reference leaves to the gateway:

* ``reasoning_effort`` -> thinking. Models that only take adaptive thinking (Claude 4.6 and
  later by name, Fable, Mythos) get ``{"type": "adaptive"}`` + ``output_config.effort``. Other
  models get manual thinking with a budget of minimal/low 1024, medium 2048, high 8192, xhigh
  16000 tokens. ``max_tokens`` includes thinking, so with a client-set maximum the budget is
  capped at half of it (thinking stays off when that half is under Anthropic's 1024 minimum);
  without one, ``max_tokens`` is raised to twice the budget so the answer keeps as much room as
  the thinking. ``none`` or no effort: no thinking.
* Forced tool choice (``required``, a named function) with thinking on is downgraded to
  ``auto``: thinking is what the client asked for explicitly and survives; Anthropic rejects
  ``any``/``tool`` with manual thinking and some models with adaptive thinking too.
* Thinking on + a tool call in the current turn (after the last user message) that carries no
  thinking blocks (history from another provider, an edited transcript) -> the request is sent
  without ``thinking`` (the documented fallback for foreign history; omitted rather than ``{"type": "disabled"}``,
  which some newer models reject). Fabricating blocks is impossible: signatures are checked. A
  native request also loses its ``clear_thinking_*`` edits then (rejected without thinking).
* With thinking on, temperature is only sent when it is 1 and top_k not at all; top_p is raised
  to at least 0.95 (Anthropic's limits). When both temperature and top_p are set, only
  temperature is sent: newer models reject the pair.
"""

# Long by design: one module per wire format: the request building for Anthropic's Messages API,
# chat-shaped and native, and the adapter (the transcript and the stream parser are apart).

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from gateway.canonical import MAX_TOKEN_COUNT, ModelRequest, ModelResponse, NativeRequest, ToolDef
from gateway.config.providers_section import ProviderConfig
from gateway.providers import urls
from gateway.providers.anthropic_messages import (
    bad_request,
    current_turn_lacks_thinking,
    sanitize_tool_id,
    translate_messages,
    translate_native_messages,
)
from gateway.providers.anthropic_stream import (
    AnthropicStreamParser,
    error_from_body,
    is_context_overflow,
    no_retry_for,
    response_from_message,
)
from gateway.providers.base import (
    ErrorClass,
    ProviderError,
    UpstreamRequest,
    error_from_status,
    load_body,
    load_error_body,
    unreadable_error,
)

__all__ = ["AnthropicAdapter", "sanitize_tool_id", "translate_messages", "uses_adaptive_thinking"]

API_VERSION = "2023-06-01"
MIN_THINKING_BUDGET = 1024
EFFORT_BUDGET = {"minimal": 1024, "low": 1024, "medium": 2048, "high": 8192, "xhigh": 16000}
ADAPTIVE_EFFORT = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "high"}

# "claude-opus-4-7", "claude-sonnet-5", "anthropic.claude-opus-4-7-v1"; not the date in "claude-sonnet-4-20250514".
_CLAUDE_VERSION = re.compile(r"claude-(?:opus|sonnet|haiku)-(\d+)(?:-(\d{1,2})(?!\d))?")
_ADAPTIVE_ONLY_FAMILY = re.compile(r"claude-(?:fable|mythos)")


def uses_adaptive_thinking(model: str) -> bool:
    match = _CLAUDE_VERSION.search(model)
    if match:
        return (int(match.group(1)), int(match.group(2) or 0)) >= (4, 6)
    return bool(_ADAPTIVE_ONLY_FAMILY.search(model))


# --- tools, thinking, sampling ---------------------------------------------------------------


def _input_schema(parameters: Any) -> dict[str, Any]:
    """Anthropic wants an object schema, without ``$schema`` and without top-level combinators."""
    schema = {k: v for k, v in parameters.items() if k != "$schema"} if isinstance(parameters, dict) else {}
    properties = dict(schema.get("properties") or {})
    for combinator in ("anyOf", "oneOf", "allOf"):
        branches = schema.pop(combinator, None)
        # Rejected at the top level; keep the branches' properties so the model still sees them.
        for branch in branches if isinstance(branches, list) else ():
            if isinstance(branch, dict) and isinstance(branch.get("properties"), dict):
                for name, spec in branch["properties"].items():
                    properties.setdefault(name, spec)
    schema["type"] = "object"
    schema["properties"] = properties
    return schema


def translate_tools(tools: Sequence[ToolDef]) -> list[dict[str, Any]]:
    native_tools = []
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or tool.get("type", "function") != "function":
            raise bad_request(f"tools[{index}]: only function tools can be sent to Anthropic")
        if not function.get("name"):
            raise bad_request(f"tools[{index}]: function has no name")
        native: dict[str, Any] = {"name": function["name"]}
        if function.get("description"):
            native["description"] = function["description"]
        native["input_schema"] = _input_schema(function.get("parameters"))
        if isinstance(function.get("strict"), bool):
            native["strict"] = function["strict"]
        native_tools.append(native)
    return native_tools


def _choice_name(entry: Any) -> Any:
    if not isinstance(entry, dict):
        return None
    function = entry.get("function")
    return function.get("name") if isinstance(function, dict) else entry.get("name")


def translate_tool_choice(choice: Any, tools: list[dict[str, Any]], parallel: Any,
                          thinking: bool) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """OpenAI tool_choice -> (tools actually offered, Anthropic tool_choice)."""
    native: dict[str, Any] | None
    if choice is None:
        native = None
    elif choice in ("auto", "none"):
        native = {"type": choice}
    elif choice == "required":
        native = {"type": "any"}
    elif isinstance(choice, dict) and choice.get("type") == "function" and _choice_name(choice):
        native = {"type": "tool", "name": _choice_name(choice)}
    elif isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        spec: dict[str, Any] = choice["allowed_tools"] if isinstance(choice.get("allowed_tools"), dict) else choice
        allowed = {_choice_name(entry) for entry in spec.get("tools") or ()}
        tools = [tool for tool in tools if tool.get("name") in allowed]
        native = {"type": "any" if spec.get("mode") == "required" else "auto"}
    else:
        raise bad_request(f"tool_choice {orjson.dumps(choice).decode()} is not supported")
    if thinking and native and native["type"] in ("any", "tool"):
        native = {"type": "auto"}  # forced tool use is rejected with thinking (see module docstring)
    if parallel is False and (native is None or native["type"] != "none"):
        native = {**(native or {"type": "auto"}), "disable_parallel_tool_use": True}
    return tools, native


def plan_thinking(effort: Any, model: str, max_tokens: int,
                  explicit_max: bool) -> tuple[dict[str, Any] | None, str | None, int]:
    """reasoning_effort -> (thinking config, output_config.effort, max_tokens); see the module docstring."""
    if effort is None or effort == "none":
        return None, None, max_tokens
    if not isinstance(effort, str) or effort not in EFFORT_BUDGET:
        raise bad_request(f"reasoning_effort '{effort}' is not one of none, {', '.join(EFFORT_BUDGET)}")
    if uses_adaptive_thinking(model):
        return {"type": "adaptive"}, ADAPTIVE_EFFORT[effort], max_tokens
    budget = EFFORT_BUDGET[effort]
    if explicit_max:
        budget = min(budget, max_tokens // 2)
        if budget < MIN_THINKING_BUDGET:
            return None, None, max_tokens
    else:
        max_tokens = max(max_tokens, 2 * budget)
    return {"type": "enabled", "budget_tokens": budget}, None, max_tokens


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def translate_sampling(params: Mapping[str, Any], thinking: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    temperature = _number(params.get("temperature"))
    if temperature is not None:
        temperature = min(1.0, max(0.0, temperature))  # OpenAI allows 0..2, Anthropic 0..1
        if not thinking or temperature == 1.0:
            out["temperature"] = temperature
    top_p = _number(params.get("top_p"))
    if top_p is not None and "temperature" not in out:
        out["top_p"] = min(1.0, max(0.95, top_p) if thinking else max(0.0, top_p))
    if isinstance(params.get("top_k"), int) and not thinking:
        out["top_k"] = params["top_k"]
    stop = params.get("stop")
    stops = [stop] if isinstance(stop, str) else stop if isinstance(stop, list) else []
    # Anthropic rejects empty and whitespace-only stop sequences.
    sequences = [s for s in stops if isinstance(s, str) and s.strip()]
    if sequences:
        out["stop_sequences"] = sequences
    user = params.get("user") or params.get("safety_identifier")
    if isinstance(user, str) and user:
        out["metadata"] = {"user_id": user}
    return out


def _response_format(value: Any) -> dict[str, Any] | None:
    kind = value.get("type") if isinstance(value, dict) else value
    if kind in (None, "text"):
        return None
    if kind == "json_schema":
        spec = value.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise bad_request("response_format json_schema needs json_schema.schema")
        return {"type": "json_schema", "schema": schema}
    if kind == "json_object":
        raise bad_request("response_format json_object cannot be honoured by Anthropic (there is no free-form "
                   "JSON mode); send response_format json_schema with a schema instead")
    raise bad_request(f"response_format type '{kind}' is not supported by Anthropic")


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


# --- adapter ---------------------------------------------------------------------------


def translated_body(request: ModelRequest, provider: ProviderConfig, model: str) -> dict[str, Any]:
    """A chat-shaped request as a Messages body (see the module docstring for the policies)."""
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
    tools, tool_choice = translate_tool_choice(request.tool_choice, translate_tools(request.tools),
                                               params.get("parallel_tool_calls"), thinking is not None)
    if tools:
        body["tools"] = tools
        if tool_choice:
            body["tool_choice"] = tool_choice
    if thinking:
        body["thinking"] = thinking
    output_config: dict[str, Any] = {}
    if effort:
        output_config["effort"] = effort
    output_format = _response_format(params.get("response_format"))
    if output_format:
        output_config["format"] = output_format
    if output_config:
        body["output_config"] = output_config
    body.update(translate_sampling(params, thinking is not None))
    return body


def _native(request: ModelRequest) -> NativeRequest | None:
    native = request.native
    return native if native is not None and native.wire_format == "anthropic" else None


class AnthropicAdapter:
    wire_format = "anthropic"

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
