"""Google Gemini API (generativelanguage v1beta): ``generateContent`` / ``streamGenerateContent``.

The request body: the transcript as ``systemInstruction`` and ``contents`` (``gemini_contents``,
where the thought signatures and function-call ids go back), the tools and ``toolConfig``, and
``generationConfig``; the answer side (a whole body, the stream parser) is ``gemini_stream``.

Thinking policy for ``reasoning_effort``: Gemini 3+ models (version read from the model name) get
``thinkingLevel`` with the effort passed through (``none`` -> ``minimal``, since Gemini 3 cannot
switch thinking off; ``xhigh`` -> ``high``); a level a model does not support comes back as the
upstream's 400. Older or unrecognised names get ``thinkingBudget`` with the budgets Google's own
OpenAI-compatible endpoint uses (none 0, minimal/low 1024, medium 8192, high 24576): a budget is
what 2.5 understands and Gemini 3 still accepts. Thought summaries (``includeThoughts``) are
requested only when the client asks with ``include_reasoning: true``, the common gateway flag.

A Responses caller's hosted ``web_search`` becomes Google Search grounding (``googleSearch``) when
the route allows it and the model can pair it with the request's functions (``providers/hosted.py``);
what it searched comes back from ``groundingMetadata`` as ``ModelResponse.hosted_calls``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.canonical import MAX_TOKEN_COUNT, ModelRequest, ModelResponse
from gateway.canonical_tool_results import takes_tool_result_images, tool_messages_for
from gateway.config.providers_section import ProviderConfig
from gateway.providers import urls
from gateway.providers.base import (
    MALFORMED,
    ErrorClass,
    ProviderError,
    UpstreamRequest,
    delay_seconds,
    error_from_status,
    forced_choice_problem,
    invalid_response,
    load_error_body,
    unreadable_error,
)
from gateway.providers.gemini_contents import build_contents
from gateway.providers.gemini_stream import (
    GeminiStreamParser,
    GeminiTurn,
    api_key_invalid,
    error_details,
    load_payload,
)
from gateway.providers.hosted import gemini_supports, mapped_web_search

_BUDGETS = {"none": 0, "minimal": 1024, "low": 1024, "medium": 8192, "high": 24576, "xhigh": 24576}
_LEVELS = {"none": "minimal", "minimal": "minimal", "low": "low", "medium": "medium", "high": "high",
           "xhigh": "high"}
_VERSION = re.compile(r"gemini-(\d+)")

# Keywords whose value is a schema, a map of schemas, or a list of schemas (for the cleaner's walk).
_SUB_SCHEMA = ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else",
               "unevaluatedProperties", "unevaluatedItems")
_SCHEMA_MAP = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_SCHEMA_LIST = ("anyOf", "oneOf", "allOf", "prefixItems")

_SIMPLE_GENERATION = (("temperature", "temperature"), ("top_p", "topP"), ("top_k", "topK"), ("seed", "seed"),
                      ("n", "candidateCount"), ("presence_penalty", "presencePenalty"),
                      ("frequency_penalty", "frequencyPenalty"))


def clean_schema(schema: Any) -> Any:
    """JSON Schema for ``parametersJsonSchema`` / ``responseJsonSchema``.

    Gemini rejects ``$schema`` and any sibling of ``$ref`` other than ``$``-keywords; everything
    else it either supports or ignores. Only schema positions are walked, so a property that
    happens to be named ``$schema`` survives.
    """
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        return {k: v for k, v in schema.items() if k.startswith("$") and k != "$schema"}
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$schema":
            continue
        if key in _SUB_SCHEMA:
            value = clean_schema(value)
        elif key in _SCHEMA_MAP and isinstance(value, dict):
            value = {name: clean_schema(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LIST and isinstance(value, list):
            value = [clean_schema(sub) for sub in value]
        out[key] = value
    return out


def _takes_arguments(parameters: Any) -> bool:
    if not isinstance(parameters, dict) or not parameters:
        return False
    if parameters.get("properties"):
        return True
    return any(key in parameters for key in ("anyOf", "oneOf", "allOf", "$ref", "patternProperties"))


def _declarations(tools: list[dict[str, Any]], allowed: set[str] | None) -> list[dict[str, Any]]:
    declarations = []
    for tool in tools:
        function = tool.get("function") if tool.get("type", "function") == "function" else None
        if not isinstance(function, dict) or not function.get("name"):
            continue  # custom / built-in tool types have no Gemini equivalent here
        if allowed is not None and function["name"] not in allowed:
            continue
        declaration: dict[str, Any] = {"name": function["name"]}
        if function.get("description"):
            declaration["description"] = function["description"]
        if _takes_arguments(function.get("parameters")):  # no-arg functions: omit the schema
            declaration["parametersJsonSchema"] = clean_schema(function["parameters"])
        declarations.append(declaration)  # "strict" is dropped: Gemini has no such switch
    return declarations


def _tool_config(choice: Any) -> tuple[dict[str, Any] | None, set[str] | None]:
    """(functionCallingConfig, names to keep among the declarations)."""
    if choice in ("auto", "none", "required"):
        return {"mode": {"auto": "AUTO", "none": "NONE", "required": "ANY"}[choice]}, None
    if not isinstance(choice, dict):
        return None, None
    if choice.get("type") == "function":
        name = (choice.get("function") or {}).get("name")
        return ({"mode": "ANY", "allowedFunctionNames": [name]}, None) if name else (None, None)
    if choice.get("type") == "allowed_tools":
        spec = choice.get("allowed_tools") or {}
        listed = [(t.get("function") or {}).get("name") for t in spec.get("tools") or () if isinstance(t, dict)]
        names: list[str] = [n for n in listed if isinstance(n, str) and n]
        if spec.get("mode") == "required":
            return {"mode": "ANY", "allowedFunctionNames": names}, None
        # Names are honoured only in ANY mode, so "auto" over a subset filters the declarations.
        return {"mode": "AUTO"}, set(names)
    return None, None


def _thinking_config(params: Mapping[str, Any], model: str) -> dict[str, Any] | None:
    config: dict[str, Any] = {}
    effort = params.get("reasoning_effort")
    if isinstance(effort, str) and effort.lower() in _BUDGETS:
        effort = effort.lower()
        version = _VERSION.search(model)
        if version and int(version.group(1)) >= 3:
            config["thinkingLevel"] = _LEVELS[effort]
        else:
            config["thinkingBudget"] = _BUDGETS[effort]
    if params.get("include_reasoning") is True and effort != "none":
        config["includeThoughts"] = True
    return config or None


def _generation_config(params: Mapping[str, Any], model: str) -> dict[str, Any]:
    config: dict[str, Any] = {}
    limit = params.get("max_completion_tokens")
    if limit is None:
        limit = params.get("max_tokens")
    if limit is not None:
        config["maxOutputTokens"] = limit
    for source, target in _SIMPLE_GENERATION:
        if params.get(source) is not None:
            config[target] = params[source]
    stop = params.get("stop")
    if isinstance(stop, str):
        config["stopSequences"] = [stop]
    elif isinstance(stop, list):
        config["stopSequences"] = stop
    response_format = params.get("response_format")
    if isinstance(response_format, dict):
        kind = response_format.get("type")
        if kind in ("json_object", "json_schema"):
            config["responseMimeType"] = "application/json"
        schema = (response_format.get("json_schema") or {}).get("schema") if kind == "json_schema" else None
        if isinstance(schema, dict):
            config["responseJsonSchema"] = clean_schema(schema)
    thinking = _thinking_config(params, model)
    if thinking:
        config["thinkingConfig"] = thinking
    return config


def _native_top_k(request: ModelRequest) -> int | None:
    """A ``/v1/messages`` caller's ``top_k``: Gemini's ``topK``.

    It is not a canonical param (OpenAI-format servers answer 400 to it), so it rides only on the
    caller's native request, read here because Gemini has the counterpart.
    """
    native = request.native
    if native is None or native.wire_format != "anthropic":
        return None
    value = native.fields.get("top_k")
    return value if type(value) is int else None


def _add_tools(body: dict[str, Any], request: ModelRequest, model: str) -> None:
    """``tools`` and ``toolConfig``: the function declarations, and Google Search for a mapped ``web_search``."""
    tools: list[dict[str, Any]] = []
    config: dict[str, Any] = {}
    if request.tools:
        calling, allowed = _tool_config(request.tool_choice)
        declarations = _declarations(request.tools, allowed)
        if declarations:
            tools.append({"functionDeclarations": declarations})
            if calling is not None:
                config["functionCallingConfig"] = calling
    search = mapped_web_search(request.hosted)
    if search is not None and gemini_supports(str(search.get("type")), model, bool(tools)) is not None:
        tools.append({"googleSearch": {}})
        if len(tools) > 1:  # beside functions (Gemini 3+): the search's own parts come back, to be circulated
            config["includeServerSideToolInvocations"] = True
    if tools:
        body["tools"] = tools
    if config:
        body["toolConfig"] = config


class GeminiAdapter:
    wire_format = "gemini"
    #: hosted tools it maps (``web_search`` -> Google Search grounding): providers/hosted.py
    hosted_support = staticmethod(gemini_supports)

    def build_request(self, request: ModelRequest, provider: ProviderConfig, model: str,
                      stream: bool) -> UpstreamRequest:
        problem = forced_choice_problem(request)
        if problem is not None:
            raise problem
        url = urls.gemini_generate(provider.base_url, model, stream)
        return UpstreamRequest(url=url, headers=_headers(provider),
                               body=orjson.dumps(self._body(request, model.removeprefix("models/"))))

    def build_count_tokens(self, request: ModelRequest, provider: ProviderConfig, model: str) -> UpstreamRequest:
        """``:countTokens`` of the ``generateContent`` body ``build_request`` would send (same translation; its
        ``generationConfig`` left out: it changes no input token)."""
        body = self._body(request, model.removeprefix("models/"))
        body.pop("generationConfig", None)
        body["model"] = urls.gemini_resource(model)
        return UpstreamRequest(url=urls.gemini_count_tokens(provider.base_url, model), headers=_headers(provider),
                               body=orjson.dumps({"generateContentRequest": body}))

    def parse_count_tokens(self, body: bytes) -> int:
        """``{"totalTokens": N}``; any other 2xx document is the upstream's fault (INVALID_RESPONSE)."""
        payload = load_payload(body, "a body")
        count = payload.get("totalTokens") if isinstance(payload, dict) else None
        if type(count) is not int or not 0 <= count <= MAX_TOKEN_COUNT:
            raise ProviderError(ErrorClass.INVALID_RESPONSE, "upstream countTokens answer has no totalTokens count")
        return count

    def _body(self, request: ModelRequest, model: str) -> dict[str, Any]:
        images = takes_tool_result_images(self.wire_format, model)
        system, contents = build_contents(tool_messages_for(request.messages, images))
        body: dict[str, Any] = {}
        if system:
            body["systemInstruction"] = {"parts": system}
        body["contents"] = contents
        _add_tools(body, request, model)
        generation = _generation_config(request.params, model)
        top_k = _native_top_k(request)
        if top_k is not None and "topK" not in generation:
            generation["topK"] = top_k
        if generation:
            body["generationConfig"] = generation
        return body

    def parse_response(self, body: bytes) -> ModelResponse:
        payload = load_payload(body, "a body")
        if payload is None:
            raise ProviderError(ErrorClass.INVALID_RESPONSE, "upstream returned an unexpected JSON document")
        turn = GeminiTurn()
        try:
            turn.add(payload)
        except MALFORMED as exc:
            raise invalid_response(exc) from None
        # No candidate 0 and no block reason: nothing was answered (never an empty 200). A blocked
        # prompt (promptFeedback.blockReason) is an answer: empty, finish_reason content_filter.
        if not turn.readable:
            raise ProviderError(ErrorClass.INVALID_RESPONSE, "upstream response has no candidates")
        return turn.result()

    def new_stream_parser(self, target: str = "", model: str = "") -> GeminiStreamParser:
        return GeminiStreamParser(target, model)

    def parse_error(self, status: int, headers: Mapping[str, str], body: bytes) -> ProviderError:
        payload = load_error_body(body)
        error = payload.get("error") if isinstance(payload, dict) else None
        if not isinstance(error, dict):
            return unreadable_error(status, headers, body)
        message = str(error.get("message") or f"upstream returned HTTP {status}")
        details = error_details(error)
        # Daily quotas do not clear within any retry window: fail over instead of retrying.
        per_day = any("PerDay" in str(v.get("quotaId") or "") for d in details
                      for v in _list(d.get("violations")) if isinstance(v, dict))
        result = error_from_status(status, headers, message, error.get("status"), no_retry=per_day)
        if result.error_class is ErrorClass.BAD_REQUEST and api_key_invalid(error):
            result.error_class = ErrorClass.AUTH
        if result.retry_after is None:
            result.retry_after = _retry_delay(details)
        return result


def _headers(provider: ProviderConfig) -> dict[str, str]:
    headers = {"content-type": "application/json"}
    if provider.api_key:
        headers["x-goog-api-key"] = provider.api_key
    headers.update(provider.headers)
    return headers


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _retry_delay(details: list[dict[str, Any]]) -> float | None:
    """``google.rpc.RetryInfo.retryDelay`` is a protobuf Duration in JSON: ``"37s"``, ``"0.5s"``.

    Like ``Retry-After``: not a finite, non-negative number -> None; over a day -> capped.
    """
    for detail in details:
        if str(detail.get("@type") or "").endswith("google.rpc.RetryInfo"):
            delay = detail.get("retryDelay")
            if isinstance(delay, str) and delay.endswith("s"):
                return delay_seconds(delay[:-1])
            if isinstance(delay, dict):  # the proto-JSON object form some relays emit
                seconds, nanos = delay_seconds(delay.get("seconds") or 0), delay_seconds(delay.get("nanos") or 0, 1e9)
                return None if seconds is None or nanos is None else delay_seconds(seconds + nanos)
    return None
