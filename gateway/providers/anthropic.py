"""Anthropic Messages API (``POST /v1/messages``): request translation and the adapter.

The canonical transcript is OpenAI-shaped, so almost everything is re-expressed: system and
developer messages move to the top-level ``system``; tool calls become ``tool_use`` blocks; each
run of ``tool`` messages becomes ONE user message of ``tool_result`` blocks (any user text that
follows goes after them, as Anthropic requires); thinking blocks an earlier Anthropic turn produced
are replayed verbatim in front of the calls they belong to (also when this request does not think:
the API drops them itself, and keeping them keeps the turn intact). Foreign artifacts
(``reasoning_content``, ``extra_content``) never reach the wire because only known fields are
copied. What Anthropic cannot honour (``n > 1``, ``json_object``) fails as a 400 here rather
than quietly answering something else; what it does not know (seed, penalties, logprobs,
stream_options, unknown fields) is dropped, because Anthropic rejects unknown fields.

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
  which some newer models reject). Fabricating blocks is impossible: signatures are checked.
* With thinking on, temperature is only sent when it is 1 and top_k not at all; top_p is raised
  to at least 0.95 (Anthropic's limits). When both temperature and top_p are set, only
  temperature is sent: newer models reject the pair.
* Tool-call ids: a valid id (``^[a-zA-Z0-9_-]+$``) is kept; any other has each invalid character
  replaced by ``_`` and ``_`` + 8 hex digits of blake2b(original) appended, so two ids differing
  only in invalid characters stay distinct. The same function rewrites ``tool_use.id`` and
  ``tool_result.tool_use_id``, so pairs keep matching; responses carry Anthropic's own ids.
"""

# Long by design: one module per wire format: the whole request and response translation for
# Anthropic's Messages API (its stream parser is apart).

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from gateway.canonical import Message, ModelRequest, ModelResponse, ToolDef, history_arguments, text_of
from gateway.config.providers_section import ProviderConfig
from gateway.providers import urls
from gateway.providers.anthropic_stream import (
    THINKING_TYPES,
    AnthropicStreamParser,
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

API_VERSION = "2023-06-01"
MIN_THINKING_BUDGET = 1024
EFFORT_BUDGET = {"minimal": 1024, "low": 1024, "medium": 2048, "high": 8192, "xhigh": 16000}
ADAPTIVE_EFFORT = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "high"}

_VALID_ID = re.compile(r"[a-zA-Z0-9_-]+")
_INVALID_ID_CHAR = re.compile(r"[^a-zA-Z0-9_-]")
# "claude-opus-4-7", "claude-sonnet-5", "anthropic.claude-opus-4-7-v1"; not the date in "claude-sonnet-4-20250514".
_CLAUDE_VERSION = re.compile(r"claude-(?:opus|sonnet|haiku)-(\d+)(?:-(\d{1,2})(?!\d))?")
_ADAPTIVE_ONLY_FAMILY = re.compile(r"claude-(?:fable|mythos)")


def _bad(message: str) -> ProviderError:
    return ProviderError(ErrorClass.BAD_REQUEST, message, status=400)


def sanitize_tool_id(tool_id: str) -> str:
    """Deterministic, collision-resistant rewrite of an id to Anthropic's ``^[a-zA-Z0-9_-]+$``."""
    if _VALID_ID.fullmatch(tool_id):
        return tool_id
    digest = hashlib.blake2b(tool_id.encode(), digest_size=4).hexdigest()
    return f"{_INVALID_ID_CHAR.sub('_', tool_id)}_{digest}"


def uses_adaptive_thinking(model: str) -> bool:
    match = _CLAUDE_VERSION.search(model)
    if match:
        return (int(match.group(1)), int(match.group(2) or 0)) >= (4, 6)
    return bool(_ADAPTIVE_ONLY_FAMILY.search(model))


# --- messages ---------------------------------------------------------------------------


def _text_block(part: Mapping[str, Any], text: str) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": text}
    if isinstance(part.get("cache_control"), dict):
        block["cache_control"] = part["cache_control"]
    return block


def _data_url(url: str) -> tuple[str, str] | None:
    """``data:<media type>;base64,<payload>`` -> (media type, payload)."""
    header, comma, payload = url[5:].partition(",")
    media_type, *options = header.split(";")
    if not comma or "base64" not in options or not media_type:
        return None
    return media_type, payload


def _image(part: Mapping[str, Any], where: str) -> dict[str, Any]:
    image_url = part.get("image_url")
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    if not isinstance(url, str):
        raise _bad(f"{where}: image_url has no url")
    if url.startswith("data:"):
        parsed = _data_url(url)
        if parsed is None:
            raise _bad(f"{where}: only base64 data: URLs can be sent to Anthropic as images")
        source: dict[str, Any] = {"type": "base64", "media_type": parsed[0], "data": parsed[1]}
    elif url.startswith(("https://", "http://")):
        source = {"type": "url", "url": url}
    else:
        raise _bad(f"{where}: image URL must be a data: or http(s) URL")
    block: dict[str, Any] = {"type": "image", "source": source}
    if isinstance(part.get("cache_control"), dict):
        block["cache_control"] = part["cache_control"]
    return block


def _document(part: Mapping[str, Any], where: str) -> dict[str, Any]:
    file = part.get("file")
    data = file.get("file_data") if isinstance(file, dict) else None
    parsed = _data_url(data) if isinstance(data, str) and data.startswith("data:") else None
    if parsed is None or parsed[0] != "application/pdf":
        raise _bad(f"{where}: only inline PDF files (file_data as a base64 data: URL) can be sent to Anthropic")
    return {"type": "document", "source": {"type": "base64", "media_type": parsed[0], "data": parsed[1]}}


def _content_blocks(content: Any, where: str) -> list[dict[str, Any]]:
    """User / tool / system content -> blocks. Blank text is dropped: Anthropic rejects it."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    if not isinstance(content, list):
        raise _bad(f"{where}: content must be a string or a list of parts")
    blocks: list[dict[str, Any]] = []
    for index, part in enumerate(content):
        if isinstance(part, str):
            part = {"type": "text", "text": part}
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("text", "input_text"):
            text = str(part.get("text") or "")
            if text.strip():
                blocks.append(_text_block(part, text))
        elif kind == "image_url":
            blocks.append(_image(part, f"{where}.content[{index}]"))
        elif kind == "file":
            blocks.append(_document(part, f"{where}.content[{index}]"))
        else:
            raise _bad(f"{where}.content[{index}]: content part type '{kind}' is not supported by Anthropic")
    return blocks


def _thinking_blocks(message: Message) -> list[dict[str, Any]]:
    blocks = message.get("thinking_blocks")
    if not isinstance(blocks, list):
        return []
    return [block for block in blocks if isinstance(block, dict) and block.get("type") in THINKING_TYPES]


def _tool_use(call: Any, where: str) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not function.get("name") or not call.get("id"):
        raise _bad(f"{where}: a tool call needs an id and a function name")
    return {"type": "tool_use", "id": sanitize_tool_id(str(call["id"])), "name": function["name"],
            "input": history_arguments(function.get("arguments"))}


def _assistant_blocks(message: Message, where: str) -> list[dict[str, Any]]:
    """Thinking blocks first (verbatim), then text, then tool_use: the order Anthropic produced."""
    thinking = _thinking_blocks(message)
    blocks: list[dict[str, Any]] = []
    text = text_of(message.get("content")) or str(message.get("refusal") or "")
    if text.strip():
        blocks.append({"type": "text", "text": text})
    for index, call in enumerate(message.get("tool_calls") or ()):
        blocks.append(_tool_use(call, f"{where}.tool_calls[{index}]"))
    return thinking + blocks if blocks else []  # nothing to say: skip the message


def _tool_result(message: Message, where: str) -> dict[str, Any]:
    tool_call_id = message.get("tool_call_id")
    if not tool_call_id:
        raise _bad(f"{where}: tool message without tool_call_id")
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": sanitize_tool_id(str(tool_call_id))}
    content = message.get("content")
    if isinstance(content, str):
        if content.strip():
            block["content"] = content
    elif content:
        parts = _content_blocks(content, where)
        if parts:
            block["content"] = parts
    return block


def translate_messages(messages: Sequence[Message]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Canonical transcript -> (top-level system blocks, Anthropic messages)."""
    system: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    for position, message in enumerate(messages):
        where = f"messages[{position}]"
        role = message.get("role")
        if role in ("system", "developer"):
            system.extend(_content_blocks(message.get("content"), where))
            continue
        if role == "assistant":
            blocks = _assistant_blocks(message, where)
            if blocks:
                out.append({"role": "assistant", "content": blocks})
            continue
        if role == "tool":
            blocks = [_tool_result(message, where)]
        elif role == "user":
            blocks = _content_blocks(message.get("content"), where)
        else:
            raise _bad(f"{where}: role '{role}' cannot be sent to Anthropic")
        # Consecutive tool results and the user text after them form ONE user message, results first.
        if out and out[-1]["role"] == "user":
            out[-1]["content"].extend(blocks)
        elif blocks:
            out.append({"role": "user", "content": blocks})
    for native in out:
        content = native["content"]
        if native["role"] == "user" and len(content) == 1 and content[0].keys() == {"type", "text"}:
            native["content"] = content[0]["text"]
    return system, out


def _current_turn_lacks_thinking(messages: Sequence[Message]) -> bool:
    """A tool call since the last user message came back without its thinking blocks."""
    for message in reversed(messages):
        role = message.get("role")
        if role == "user":
            return False
        if role == "assistant" and message.get("tool_calls") and not _thinking_blocks(message):
            return True
    return False


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
            raise _bad(f"tools[{index}]: only function tools can be sent to Anthropic")
        if not function.get("name"):
            raise _bad(f"tools[{index}]: function has no name")
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
        tools = [tool for tool in tools if tool["name"] in allowed]
        native = {"type": "any" if spec.get("mode") == "required" else "auto"}
    else:
        raise _bad(f"tool_choice {orjson.dumps(choice).decode()} is not supported")
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
        raise _bad(f"reasoning_effort '{effort}' is not one of none, {', '.join(EFFORT_BUDGET)}")
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
            raise _bad("response_format json_schema needs json_schema.schema")
        return {"type": "json_schema", "schema": schema}
    if kind == "json_object":
        raise _bad("response_format json_object cannot be honoured by Anthropic (there is no free-form "
                   "JSON mode); send response_format json_schema with a schema instead")
    raise _bad(f"response_format type '{kind}' is not supported by Anthropic")


# --- adapter ---------------------------------------------------------------------------


class AnthropicAdapter:
    wire_format = "anthropic"

    def build_request(self, request: ModelRequest, provider: ProviderConfig, model: str,
                      stream: bool) -> UpstreamRequest:
        params = request.params
        n = params.get("n")
        if isinstance(n, int) and n > 1:
            raise _bad("n > 1 is not supported by Anthropic (one completion per request)")
        explicit_max = params.get("max_completion_tokens") or params.get("max_tokens")
        if explicit_max is not None and (not isinstance(explicit_max, int) or isinstance(explicit_max, bool)
                                         or explicit_max < 1):
            raise _bad("max_tokens / max_completion_tokens must be a positive integer")
        thinking, effort, max_tokens = plan_thinking(
            params.get("reasoning_effort"), model, int(explicit_max or provider.default_max_tokens),
            bool(explicit_max))
        if thinking and _current_turn_lacks_thinking(request.messages):
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
        if stream:
            body["stream"] = True
        headers = {"content-type": "application/json", "anthropic-version": API_VERSION}
        if provider.api_key:
            headers["x-api-key"] = provider.api_key
        headers.update(provider.headers)
        return UpstreamRequest(url=urls.anthropic_messages(provider.base_url), headers=headers, body=orjson.dumps(body))

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
