"""Validating a Messages API body and saying it twice: canonically for every target, verbatim for Anthropic.

What has a counterpart in the canonical (OpenAI-shaped) request is mapped, so an OpenAI-format or
Gemini target answers the same request: ``max_tokens`` (as ``max_completion_tokens``),
``temperature``, ``top_p``, ``stop_sequences`` (``stop``), ``tool_choice`` (``auto``/``any``/
``tool``/``none``, ``disable_parallel_tool_use`` as ``parallel_tool_calls: false``), thinking and
effort (``reasoning_effort``), structured output (``response_format`` json_schema). The rest
(``top_k``, which a Gemini target reads from the native fields as ``topK``, ``metadata``,
``service_tier``, ``context_management``, typed tools, unknown and beta fields) has none there
and is dropped for those targets without an error. An Anthropic target gets every field
as the caller sent it (``NativeRequest``). Types are checked for what the gateway reads;
the rest is Anthropic's to judge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.api.loop.stream_options import stream_rescue_option
from gateway.api.messages.blocks import canonical_messages, kind_of, system_message
from gateway.canonical import Message, NativeRequest, ToolDef
from gateway.errors import bad_request, quoted
from gateway.loop.pairing import pairing_problem

#: the beta under which server tool executions are shown as ``mcp_tool_use`` / ``mcp_tool_result`` blocks
MCP_CLIENT_BETA = "mcp-client-2025-11-20"
# Fields the gateway places itself; every other top-level field is the Anthropic target's, verbatim.
_OWN_FIELDS = frozenset({"model", "messages", "system", "tools", "tool_choice", "stream", "gateway"})
_CHOICES = frozenset({"auto", "any", "tool", "none"})
_EFFORTS = {"low": "low", "medium": "medium", "high": "high", "max": "high", "xhigh": "high"}
# Limits on what a caller may list: Anthropic's own are lower, so a bound here never refuses a valid request.
MAX_TOOLS = 2000
MAX_STOP_SEQUENCES = 64
MAX_BETAS = 64


@dataclass(slots=True)
class MessagesRequest:
    model: str
    messages: list[Message]
    #: the caller's custom tools, canonical (typed tools are in ``native.tools`` only)
    tools: list[ToolDef]
    #: every tool name the caller declared (custom and typed): the caller's, never a server tool's
    tool_names: list[str]
    tool_choice: Any
    params: dict[str, Any]
    native: NativeRequest
    stream: bool
    show_server_tools: bool
    max_tool_iterations: int | None
    headless: bool
    #: ``gateway.stream_rescue``: overrides the route's ``stream_rescue`` (None: the route's)
    stream_rescue: bool | None = None


def _number(body: dict[str, Any], name: str) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad_request(f"{name}: must be a number, not {kind_of(value)}", name)
    return float(value)


def _betas(header: str) -> list[str]:
    return [beta.strip() for beta in header.split(",")[:MAX_BETAS] if beta.strip()]


def _tools(value: Any) -> tuple[list[ToolDef], list[str], list[dict[str, Any]]]:
    """(canonical custom tools, every declared name, the definitions verbatim)."""
    if value is None:
        return [], [], []
    if not isinstance(value, list):
        raise bad_request(f"tools: must be an array, not {kind_of(value)}", "tools")
    if len(value) > MAX_TOOLS:
        raise bad_request(f"tools: at most {MAX_TOOLS} tools", "tools")
    canonical: list[ToolDef] = []
    names: list[str] = []
    for index, tool in enumerate(value):
        where = f"tools.{index}"
        if not isinstance(tool, dict):
            raise bad_request(f"{where}: must be an object, not {kind_of(tool)}", where)
        name, kind = tool.get("name"), tool.get("type")
        if not isinstance(name, str) or not name:
            raise bad_request(f"{where}.name: a tool needs a non-empty string 'name'", f"{where}.name")
        if kind is not None and not isinstance(kind, str):
            raise bad_request(f"{where}.type: must be a string", f"{where}.type")
        names.append(name)
        if kind not in (None, "custom"):
            continue  # a typed tool (web_search_*, bash_*, ...): Anthropic's to define, nothing to map
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise bad_request(f"{where}.input_schema: a custom tool needs an object 'input_schema', not "
                              f"{kind_of(schema)}", f"{where}.input_schema")
        function: dict[str, Any] = {"name": name, "parameters": schema}
        description = tool.get("description")
        if description is not None:
            if not isinstance(description, str):
                raise bad_request(f"{where}.description: must be a string", f"{where}.description")
            function["description"] = description
        if isinstance(tool.get("strict"), bool):
            function["strict"] = tool["strict"]
        canonical.append({"type": "function", "function": function})
    return canonical, names, value


def _tool_choice(value: Any, params: dict[str, Any]) -> Any:
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") not in _CHOICES:
        raise bad_request("tool_choice: must be an object whose 'type' is auto, any, tool or none", "tool_choice")
    disable = value.get("disable_parallel_tool_use")
    if disable is not None and not isinstance(disable, bool):
        raise bad_request("tool_choice.disable_parallel_tool_use: must be a boolean",
                          "tool_choice.disable_parallel_tool_use")
    if disable:
        params["parallel_tool_calls"] = False
    kind = value["type"]
    if kind == "tool":
        name = value.get("name")
        if not isinstance(name, str) or not name:
            raise bad_request("tool_choice.name: a 'tool' choice needs the tool's name", "tool_choice.name")
        return {"type": "function", "function": {"name": name}}
    return {"auto": "auto", "any": "required", "none": "none"}[kind]


def _effort(body: dict[str, Any]) -> str | None:
    """``thinking`` and ``output_config.effort`` as one ``reasoning_effort`` for the other formats."""
    thinking = body.get("thinking")
    if thinking is not None and not isinstance(thinking, dict):
        raise bad_request(f"thinking: must be an object, not {kind_of(thinking)}", "thinking")
    config = body.get("output_config")
    if config is not None and not isinstance(config, dict):
        raise bad_request(f"output_config: must be an object, not {kind_of(config)}", "output_config")
    effort = (config or {}).get("effort")
    if effort is not None and not isinstance(effort, str):
        raise bad_request("output_config.effort: must be a string", "output_config.effort")
    kind = (thinking or {}).get("type")
    if kind == "disabled":
        return None
    if kind == "enabled":
        budget = thinking.get("budget_tokens") if thinking else None
        if isinstance(budget, bool) or not isinstance(budget, int):
            raise bad_request("thinking.budget_tokens: must be an integer", "thinking.budget_tokens")
        if effort is None:
            return "low" if budget < 4096 else "medium" if budget < 16384 else "high"
    if effort is not None:
        return _EFFORTS.get(effort.lower(), "medium")
    return "medium" if kind == "adaptive" else None


def _response_format(body: dict[str, Any]) -> dict[str, Any] | None:
    config = body.get("output_config")
    output = config.get("format") if isinstance(config, dict) else None
    if output is None:
        output = body.get("output_format")  # the earlier beta spelling
    if output is None:
        return None
    if not isinstance(output, dict) or output.get("type") != "json_schema" or not isinstance(output.get("schema"),
                                                                                               dict):
        raise bad_request("output_config.format: must be {'type': 'json_schema', 'schema': {...}}",
                          "output_config.format")
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": output["schema"]}}


def _params(body: dict[str, Any]) -> dict[str, Any]:
    """The canonical parameters: the fields with an OpenAI counterpart (and only those: OpenAI-format
    servers reject fields they do not know)."""
    params: dict[str, Any] = {"max_completion_tokens": body["max_tokens"]}
    for name in ("temperature", "top_p"):
        value = _number(body, name)
        if value is not None:
            params[name] = value
    if body.get("top_k") is not None and (isinstance(body["top_k"], bool) or not isinstance(body["top_k"], int)):
        raise bad_request("top_k: must be an integer", "top_k")
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise bad_request("stop_sequences: must be an array of strings", "stop_sequences")
        if len(stops) > MAX_STOP_SEQUENCES:
            raise bad_request(f"stop_sequences: at most {MAX_STOP_SEQUENCES}", "stop_sequences")
        if stops:
            params["stop"] = stops
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise bad_request(f"metadata: must be an object, not {kind_of(metadata)}", "metadata")
    effort = _effort(body)
    if effort is not None:
        params["reasoning_effort"] = effort
    response_format = _response_format(body)
    if response_format is not None:
        params["response_format"] = response_format
    return params


def _options(body: dict[str, Any]) -> tuple[int | None, bool, bool | None]:
    """The ``gateway`` extension, as on chat completions: ``max_tool_iterations``, ``headless``, ``stream_rescue``."""
    options = body.get("gateway")
    if options is None:
        return None, False, None
    if not isinstance(options, dict):
        raise bad_request(f"gateway: must be an object, not {kind_of(options)}", "gateway")
    limit = options.get("max_tool_iterations")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise bad_request("gateway.max_tool_iterations: must be a non-negative integer", "gateway.max_tool_iterations")
    headless = options.get("headless", False)
    if not isinstance(headless, bool):
        raise bad_request("gateway.headless: must be a boolean", "gateway.headless")
    return limit, headless, stream_rescue_option(options)


def parse_messages_request(body: Any, beta_header: str = "") -> MessagesRequest:
    if not isinstance(body, dict):
        raise bad_request(f"the request body must be a JSON object, not {kind_of(body)}")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("model: a non-empty string is required" if model is None
                          else f"model: must be a non-empty string, not {kind_of(model)}", "model")
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        raise bad_request("max_tokens: Field required", "max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise bad_request(f"max_tokens: must be a positive integer, not {quoted(max_tokens)}", "max_tokens")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise bad_request(f"stream: must be a boolean, not {kind_of(stream)}", "stream")
    messages = canonical_messages(body.get("messages"))
    system = system_message(body.get("system"))
    if system is not None:
        messages.insert(0, system)
    problem = pairing_problem(messages)
    if problem is not None:
        raise bad_request("messages: every tool_use block must be answered by a tool_result block in the next user "
                          f"message, and every tool_result must answer one ({problem})", "messages")
    tools, names, native_tools = _tools(body.get("tools"))
    params = _params(body)
    tool_choice = _tool_choice(body.get("tool_choice"), params)
    limit, headless, rescue = _options(body)
    betas = _betas(beta_header)
    fields = {name: value for name, value in body.items() if name not in _OWN_FIELDS}
    headers = {"anthropic-beta": ",".join(betas)} if betas else {}
    return MessagesRequest(
        model=model, messages=messages, tools=tools, tool_names=names, tool_choice=tool_choice, params=params,
        native=NativeRequest("anthropic", fields, native_tools, headers), stream=stream,
        show_server_tools=MCP_CLIENT_BETA in betas, max_tool_iterations=limit, headless=headless,
        stream_rescue=rescue)
