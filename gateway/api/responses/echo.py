"""The request fields a Response object repeats (its "echo"), and their values when a request leaves them out.

The Open Responses specification requires every one of them in every Response object, so a client
validating against its schema (its compliance tests, generated SDKs) accepts Loopgate's: a field the
request did not send shows its default (the penalties 0, ``top_logprobs`` 0, ``service_tier``
``default``, ``safety_identifier`` and ``prompt_cache_key`` null), and a function tool shows its
``description``, ``parameters`` and ``strict`` (null when not sent). A record stored by an earlier
version, whose echo lacks the newer fields, shows their defaults too (``responses/events.py``).
"""

from __future__ import annotations

from typing import Any

from gateway.api.chat.request import _expect

# The request fields a Response object repeats, in its order (``ResponsesRequest.echo`` has all of them).
ECHO_FIELDS = ("instructions", "tools", "tool_choice", "parallel_tool_calls", "max_output_tokens", "temperature",
               "top_p", "text", "reasoning", "truncation", "user", "store", "background", "previous_response_id",
               "max_tool_calls", "metadata", "presence_penalty", "frequency_penalty", "top_logprobs", "service_tier",
               "safety_identifier", "prompt_cache_key")
# The echo fields a request rarely sends (read only when it sends fields past a plain request's), with the
# value a Response shows when it did not (a request's echo has them only when it sent them).
ECHO_DEFAULTS: dict[str, Any] = {"presence_penalty": 0.0, "frequency_penalty": 0.0, "top_logprobs": 0,
                                 "service_tier": "default", "safety_identifier": None, "prompt_cache_key": None}
# A function tool's fields a Response shows even when the request left them out.
_FUNCTION_ECHO = ("description", "parameters", "strict")


def penalties_echo(body: dict[str, Any]) -> dict[str, Any]:
    """``presence_penalty`` and ``frequency_penalty`` as a Response shows them: the request's (numbers, checked here:
    a wrong type is the caller's 400, not the model's; they still reach the model as chat parameters), else 0.
    The other late fields are checked and echoed when sent by ``request._late_fields``."""
    echo = {}
    for name in ("presence_penalty", "frequency_penalty"):
        value = body.get(name)
        _expect(value, (int, float), name)
        echo[name] = 0.0 if value is None else value
    return echo


def tools_echo(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request's ``tools`` as a Response shows them: the very list when every tool is complete (Codex's are:
    nothing copied), else a list with the incomplete function tools filled in (``tool_echo``)."""
    for tool in tools:
        if tool.get("type") == "function" and not all(name in tool for name in _FUNCTION_ECHO):
            return [tool_echo(tool) for tool in tools]
    return tools


def tool_echo(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool as a Response shows it: a function tool with ``description``, ``parameters`` and ``strict`` (null when
    the request left them out: the gateway does not turn strict mode on by itself), any other tool as sent."""
    if tool.get("type") != "function" or all(name in tool for name in _FUNCTION_ECHO):
        return tool
    return {**tool, **{name: tool.get(name) for name in _FUNCTION_ECHO}}
