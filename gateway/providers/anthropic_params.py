"""Anthropic Messages, the request's parameters: tools and ``tool_choice``, thinking, sampling, ``response_format``.

What a chat-completions or Responses request asks for, as the Messages fields that say it (the
transcript is ``anthropic_messages``; the body is put together in ``anthropic``). A native
``/v1/messages`` request keeps its own fields: of these it only gets the route's server tools
and the loop's tool choice translated.

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
* With thinking on, temperature is only sent when it is 1 and top_k not at all; top_p is raised
  to at least 0.95 (Anthropic's limits). When both temperature and top_p are set, only
  temperature is sent: newer models reject the pair.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from gateway.canonical import ToolDef
from gateway.providers.anthropic_messages import bad_request

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


def translate_response_format(value: Any) -> dict[str, Any] | None:
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
