"""Validating a ``POST /v1/responses`` body and translating it to what the loop engine speaks.

The engine only knows the canonical (chat-shaped) transcript, chat-shaped tool definitions and
chat parameter names, so everything Responses-specific is translated here, once, at the edge:
``tools`` become chat-shaped function tools (``responses/tools.py``: function, namespace, custom
and hosted tools), ``text.format`` becomes ``response_format``, ``reasoning.effort`` becomes
``reasoning_effort``, ``max_output_tokens`` becomes ``max_completion_tokens``. Input items are
only checked for shape here; turning them into messages is ``responses/items.py``' job (it needs
the stored state).

The fields of late 2026 are accepted: those with a Chat Completions counterpart
(``prompt_cache_key``, ``safety_identifier``, ``service_tier``, ``prompt_cache_retention``,
``parallel_tool_calls``) go on as chat parameters (adapters of other formats drop what they do not
know); ``include`` is read by the renderer (``web_search_call.action.sources``); ``top_logprobs``,
``truncation``, ``reasoning.summary``, ``client_metadata``, ``context_management`` and
``stream_options`` are accepted and not sent; a request that sends one the Response object
carries (``top_logprobs``, ``prompt_cache_key``, ``prompt_cache_retention``, ``safety_identifier``,
``service_tier``) has it in its ``echo`` (a plain request's echo is ``ECHO_FIELDS`` only).
``conversation`` and stored ``prompt`` templates are refused with a 400 naming the parameter.
Every count and size a caller controls is bounded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.api.chat.request import _expect, type_name
from gateway.api.loop.stream_options import stream_rescue_option
from gateway.api.responses.echo import PLAIN_ECHOES, REASONING_ECHO, TEXT_ECHO, sampling_echo
from gateway.api.responses.text_format import text_format
from gateway.api.responses.tools import CallerTools, parse_tools, tool_choice
from gateway.canonical import ToolDef
from gateway.errors import GatewayError, bad_request, quoted

# Bounds on caller-controlled counts (the body itself is bounded by server.max_body_bytes).
MAX_INPUT_ITEMS = 4096
MAX_METADATA_KEYS = 16  # OpenAI's limits: 16 pairs, keys up to 64 chars, values up to 512
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512
MAX_ID_CHARS = 100  # ids the gateway issues are far shorter
MAX_TOKENS_VALUE = 2**31
MAX_INCLUDE = 32  # ``include`` entries (OpenAI documents fewer than ten)
MAX_KEY_CHARS = 1024  # ``prompt_cache_key``, ``safety_identifier``, ``service_tier``, ``prompt_cache_retention``
MAX_TOP_LOGPROBS = 20

# Input item types understood (shape-checked in responses/items.py); the hosted tools' calls are read and left
# out of the transcript (``items.HOSTED_ITEM_TYPES``).
INPUT_ITEM_TYPES = frozenset({"message", "reasoning", "function_call", "function_call_output", "mcp_call",
                              "mcp_approval_request", "mcp_approval_response", "compaction", "compaction_summary",
                              "compaction_trigger", "custom_tool_call", "custom_tool_call_output", "web_search_call",
                              "file_search_call", "image_generation_call", "code_interpreter_call", "computer_call",
                              "computer_call_output", "local_shell_call", "local_shell_call_output", "shell_call",
                              "shell_call_output", "apply_patch_call", "apply_patch_call_output", "mcp_list_tools",
                              "tool_search_call", "tool_search_output"})
# Accepted and never sent upstream: meaningless for a gateway that renders its own stream and keeps its own
# state, or with no Chat Completions counterpart (read here, repeated by the Response where it carries them).
_IGNORED_FIELDS = frozenset({"include", "stream_options", "client_metadata", "context_management", "top_logprobs"})
# Read here and passed on as chat parameters when set (strings; OpenAI's Chat Completions takes each).
_CHAT_STRINGS = ("prompt_cache_key", "safety_identifier", "service_tier", "prompt_cache_retention")
# Fields this module owns; everything else is passed upstream as a chat parameter.
_OWN_FIELDS = frozenset({
    "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "max_output_tokens",
    "temperature", "top_p", "text", "reasoning", "metadata", "store", "previous_response_id", "max_tool_calls",
    "stream", "background", "truncation", "user", "gateway", "conversation", "prompt", *_CHAT_STRINGS,
}) | _IGNORED_FIELDS
_NUMBER = (int, float)
# The fields of a plain request (``parse_responses_request``'s shortcut): none of them is a chat parameter.
_PLAIN_FIELDS = frozenset({"model", "input", "instructions", "tools", "tool_choice", "stream", "store", "background"})
_NO_HOSTED: list[dict[str, Any]] = []  # shared, never written to
_NO_PARAMS: list[str] = []


@dataclass(slots=True)
class ResponsesRequest:
    """A validated Responses request.

    ``input`` keeps the caller's items (a string input is one user message item); ``tools`` and
    ``tool_choice`` are already chat-shaped for the engine, ``params`` are the chat parameters
    sent on every model call; ``echo`` holds the request fields a Response object repeats.
    ``background`` is parsed and carried, not acted upon here. ``names``: the caller's namespaced
    and custom tools by the name the model sees (None: plain functions only); ``hosted``: its
    hosted tools, verbatim; ``include``: what it asked the output to include.
    """

    model: str
    input: list[dict[str, Any]]
    instructions: str | None
    tools: list[ToolDef]
    tool_choice: Any
    params: dict[str, Any]
    stream: bool
    store: bool
    background: bool
    previous_response_id: str | None
    max_tool_calls: int | None
    max_tool_iterations: int | None
    headless: bool
    metadata: dict[str, str]
    echo: dict[str, Any] = field(default_factory=dict)
    #: ``gateway.stream_rescue``: overrides the route's ``stream_rescue`` (None: the route's)
    stream_rescue: bool | None = None
    names: CallerTools | None = None
    hosted: list[dict[str, Any]] = field(default_factory=list)
    #: the caller's path of each of ``tools`` (``tools[2].tools[0]``), for a 400 naming one
    tool_params: list[str] = field(default_factory=list)
    include: tuple[str, ...] = ()


def parse_responses_request(body: Any) -> ResponsesRequest:
    """The request ``body`` stands for; a 400 naming the first bad field, in the order the API documents them.

    Each group of fields is its own check; the fields a plain request does not send (most send
    none of them) are read by :func:`_options` only when the body has one.
    """
    # Each check is called only when its fast test fails (a call costs more than the test): same checks, same order.
    if body.__class__ is not dict or "conversation" in body or "prompt" in body:
        _refuse_unsupported(body)
    model = body.get("model")
    model = model if model.__class__ is str and model else _model(model)
    given = body.get("input")
    items = [{"type": "message", "role": "user", "content": given}] if given.__class__ is str else _input(given)
    # An absent field costs no call (each costs this request about as much as its checks).
    instructions = body.get("instructions")
    if instructions is not None:
        _expect(instructions, (str,), "instructions")
    tools_given = body.get("tools")
    parsed = None if tools_given is None else parse_tools(tools_given)
    choice = body.get("tool_choice")
    chosen = None if choice is None else tool_choice(choice, parsed.names if parsed is not None else None)
    stream, store, background = body.get("stream", False), body.get("store", True), body.get("background", False)
    if stream.__class__ is not bool or store.__class__ is not bool or background.__class__ is not bool:
        stream, store, background = _modes(body)
    # The echo of a plain request: ``_options`` writes over the fields it has (same keys, same order) and adds
    # ``ECHO_DEFAULTS``' (a Response object starts from a template holding their defaults: responses/events.py).
    # Its default values are shared, never written to; so is a whole echo of modes only (``PLAIN_ECHOES``).
    metadata: dict[str, str] = {}
    plain = body.keys() <= _PLAIN_FIELDS
    shared = plain and instructions is None and parsed is None and choice is None
    echo = PLAIN_ECHOES[store, background] if shared else {
        "instructions": instructions, "tools": parsed.echo if parsed is not None else [],
        "tool_choice": choice or "auto", "parallel_tool_calls": True, "max_output_tokens": None, "temperature": 1.0,
        "top_p": 1.0, "text": TEXT_ECHO, "reasoning": REASONING_ECHO, "truncation": "disabled", "user": None,
        "store": store, "background": background, "previous_response_id": None, "max_tool_calls": None,
        "metadata": metadata,
    }
    # Positional (the field order): fifteen keywords cost this call more than all its checks.
    if parsed is None:
        request = ResponsesRequest(model, items, instructions, [], chosen, {}, stream, store, background, None, None,
                                   None, False, metadata, echo, None, None, _NO_HOSTED, _NO_PARAMS)
    else:
        request = ResponsesRequest(model, items, instructions, parsed.tools, chosen, {}, stream, store, background,
                                   None, None, None, False, metadata, echo, None, parsed.names, parsed.hosted,
                                   parsed.params)
    if not plain:
        _options(body, request)
    return request


def _refuse_unsupported(body: Any) -> None:
    """A body that is not an object, and the features this gateway refuses rather than drops."""
    if not isinstance(body, dict):
        raise bad_request(f"the request body must be a JSON object, not {type_name(body)}")
    if body.get("conversation") is not None:
        raise bad_request("'conversation' is not supported by this gateway; chain responses with "
                          "'previous_response_id' instead", "conversation")
    if body.get("prompt") is not None:
        raise bad_request("stored prompt templates ('prompt') are not supported by this gateway; send "
                          "'instructions' and 'input'", "prompt")


def _model(model: Any) -> str:
    if model is None:
        raise bad_request("you must provide a model parameter", "model")
    if not isinstance(model, str) or not model:
        raise bad_request(f"'model' must be a non-empty string, not {type_name(model)}", "model")
    return model


def _options(body: dict[str, Any], request: ResponsesRequest) -> None:
    """The fields past a plain request's, checked in order, written over ``request``'s defaults."""
    parallel = body.get("parallel_tool_calls")
    _expect(parallel, (bool,), "parallel_tool_calls")
    previous = _previous_response_id(body.get("previous_response_id"))
    max_tool_calls = _count(body.get("max_tool_calls"), "max_tool_calls", 0)
    max_output = _count(body.get("max_output_tokens"), "max_output_tokens", 1)
    user, truncation = _sampling(body)
    metadata = _metadata(body.get("metadata"))
    params = _params(body, max_output)
    text = _text(body.get("text"), params)
    reasoning = _reasoning(body.get("reasoning"), params)
    request.max_tool_iterations, request.headless, request.stream_rescue = _gateway_options(body.get("gateway"))
    request.include = _include(body.get("include"))
    late = _late_fields(body, params)
    request.echo.update({
        "parallel_tool_calls": True if parallel is None else parallel, "max_output_tokens": max_output,
        "temperature": body.get("temperature", 1.0), "top_p": body.get("top_p", 1.0), "text": text,
        "reasoning": reasoning, "truncation": truncation or "disabled", "user": user,
        "previous_response_id": previous, "max_tool_calls": max_tool_calls, "metadata": metadata,
        **sampling_echo(body), **late,
    })
    request.params = params
    request.previous_response_id = previous
    request.max_tool_calls = max_tool_calls
    request.metadata = metadata


def _previous_response_id(previous: Any) -> str | None:
    _expect(previous, (str,), "previous_response_id")
    if isinstance(previous, str) and not 0 < len(previous) <= MAX_ID_CHARS:
        raise bad_request(f"'previous_response_id' must be 1 to {MAX_ID_CHARS} characters", "previous_response_id")
    return previous


def _sampling(body: dict[str, Any]) -> tuple[str | None, str | None]:
    """``temperature``, ``top_p``, ``user`` and ``truncation`` checked; the last two returned (the echo's)."""
    for name in ("temperature", "top_p"):
        _expect(body.get(name), _NUMBER, name)
    user = body.get("user")
    _expect(user, (str,), "user")
    truncation = body.get("truncation")
    if truncation is not None and truncation not in ("auto", "disabled"):
        raise bad_request("'truncation' must be 'auto' or 'disabled'", "truncation")
    return user, truncation


def _include(value: Any) -> tuple[str, ...]:
    """``include``: strings (what they name is the renderer's to honour; an unknown one asks for nothing)."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_INCLUDE or not all(isinstance(v, str) for v in value):
        raise bad_request(f"'include' must be an array of at most {MAX_INCLUDE} strings", "include")
    return tuple(value)


def _late_fields(body: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """The fields of late 2026 checked; those with a chat counterpart into ``params``; their echo."""
    echo: dict[str, Any] = {}
    for name in _CHAT_STRINGS:
        value = body.get(name)
        if value is not None:
            if not isinstance(value, str) or len(value) > MAX_KEY_CHARS:
                raise bad_request(f"'{name}' must be a string of at most {MAX_KEY_CHARS} characters", name)
            params[name] = echo[name] = value
    top = body.get("top_logprobs")
    if top is not None:
        if top.__class__ is not int or not 0 <= top <= MAX_TOP_LOGPROBS:
            raise bad_request(f"'top_logprobs' must be an integer from 0 to {MAX_TOP_LOGPROBS}", "top_logprobs")
        echo["top_logprobs"] = top
    _expect(body.get("client_metadata"), (dict,), "client_metadata")
    return echo


def _params(body: dict[str, Any], max_output: int | None) -> dict[str, Any]:
    """The chat parameters sent on every model call: what this module does not own, passed as it is, and
    the sampling fields (``max_output_tokens`` as ``max_completion_tokens``)."""
    params: dict[str, Any] = {k: v for k, v in body.items() if k not in _OWN_FIELDS and v is not None}
    for name in ("temperature", "top_p", "user", "parallel_tool_calls"):
        if body.get(name) is not None:
            params[name] = body[name]
    if max_output is not None:
        params["max_completion_tokens"] = max_output
    return params


def _text(text: Any, params: dict[str, Any]) -> dict[str, Any]:
    """``text``: its format as ``response_format``, its verbosity as ``verbosity`` (into ``params``); its echo."""
    _expect(text, (dict,), "text")
    response_format = text_format((text or {}).get("format"))
    if response_format is not None:
        params["response_format"] = response_format
    if isinstance(text, dict) and text.get("verbosity") is not None:
        _expect(text["verbosity"], (str,), "text.verbosity")
        params["verbosity"] = text["verbosity"]
    return {"format": (text or {}).get("format") or {"type": "text"}}


def _reasoning(reasoning: Any, params: dict[str, Any]) -> dict[str, Any]:
    """``reasoning``: its effort as ``reasoning_effort`` (into ``params``); its echo."""
    _expect(reasoning, (dict,), "reasoning")
    if isinstance(reasoning, dict):
        _expect(reasoning.get("effort"), (str,), "reasoning.effort")
        _expect(reasoning.get("summary"), (str,), "reasoning.summary")
        if reasoning.get("effort") is not None:
            params["reasoning_effort"] = reasoning["effort"]
    return {"effort": (reasoning or {}).get("effort"), "summary": (reasoning or {}).get("summary")}


def _gateway_options(value: Any) -> tuple[int | None, bool, bool | None]:
    """``gateway``, Loopgate's own options: ``max_tool_iterations``, ``headless``, ``stream_rescue``."""
    _expect(value, (dict,), "gateway")
    options = value or {}
    max_iterations = _count(options.get("max_tool_iterations"), "gateway.max_tool_iterations", 0)
    headless = options.get("headless", False)
    if not isinstance(headless, bool):
        raise bad_request("'gateway.headless' must be a boolean", "gateway.headless")
    return max_iterations, headless, stream_rescue_option(options)


def _modes(body: dict[str, Any]) -> tuple[bool, bool, bool]:
    """``stream``, ``store`` and ``background``: how the response runs (absent: answered whole, stored, at once)."""
    stream = body.get("stream")
    if stream is None:
        stream = False
    elif stream.__class__ is not bool:
        raise bad_request(f"'stream' must be a boolean, not {type_name(stream)}", "stream")
    store = body.get("store")
    if store is None:
        store = True
    elif store.__class__ is not bool:
        raise bad_request(f"'store' must be a boolean, not {type_name(store)}", "store")
    background = body.get("background")
    if background is None:
        background = False
    elif background.__class__ is not bool:
        raise bad_request(f"'background' must be a boolean, not {type_name(background)}", "background")
    return stream, store, background


def _count(value: Any, param: str, minimum: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_TOKENS_VALUE:
        raise bad_request(f"'{param}' must be an integer from {minimum} to {MAX_TOKENS_VALUE}", param)
    return value


def _input(value: Any) -> list[dict[str, Any]]:
    """Items, checked (a string input is made one message item by the caller)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise bad_request(f"'input' must be a string or an array of items, not {type_name(value)}", "input")
    if len(value) > MAX_INPUT_ITEMS:
        raise bad_request(f"'input' has {len(value)} items; at most {MAX_INPUT_ITEMS} are allowed", "input")
    items = []
    for index, item in enumerate(value):
        param = f"input[{index}]"
        if not isinstance(item, dict):
            raise bad_request(f"'{param}' must be an object, not {type_name(item)}", param)
        kind = item.get("type")
        if kind is None and "role" in item:
            item = {**item, "type": "message"}  # EasyInputMessage: a role and content, no type
        elif kind not in INPUT_ITEM_TYPES:
            raise bad_request(f"input item type {quoted(kind)} is not supported; supported: "
                              f"{', '.join(sorted(INPUT_ITEM_TYPES))}", f"{param}.type")
        items.append(item)
    return items


def _metadata(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad_request(f"'metadata' must be an object, not {type_name(value)}", "metadata")
    if len(value) > MAX_METADATA_KEYS:
        raise bad_request(f"'metadata' has {len(value)} keys; at most {MAX_METADATA_KEYS} are allowed", "metadata")
    for key, item in value.items():
        if len(key) > MAX_METADATA_KEY_CHARS:
            raise bad_request(f"'metadata' keys are at most {MAX_METADATA_KEY_CHARS} characters", "metadata")
        if not isinstance(item, str) or len(item) > MAX_METADATA_VALUE_CHARS:
            raise bad_request(f"'metadata' values must be strings of at most {MAX_METADATA_VALUE_CHARS} characters",
                              f"metadata.{key[:MAX_METADATA_KEY_CHARS]}")
    return value


def path_response_id(path_params: Mapping[str, Any]) -> str:
    """The ``{id}`` of a ``/v1/responses/{id}...`` path; one longer than any issued id is a 404 at once."""
    response_id: str = path_params["id"]
    if len(response_id) > MAX_ID_CHARS:
        raise response_not_found(response_id)
    return response_id


def response_not_found(response_id: str) -> GatewayError:
    """The 404 for an unknown, expired, deleted or other tenant's response id (every endpoint the same)."""
    shown = response_id if len(response_id) <= MAX_ID_CHARS else response_id[:MAX_ID_CHARS] + "…"
    return GatewayError(404, f"No response found with id {quoted(shown)}.", "invalid_request_error", None,
                        "response_not_found")
