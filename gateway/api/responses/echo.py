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
from gateway.errors import bad_request

# The request fields a Response object repeats, in its order (``ResponsesRequest.echo`` has all of them).
ECHO_FIELDS = ("instructions", "tools", "tool_choice", "parallel_tool_calls", "max_output_tokens", "temperature",
               "top_p", "text", "reasoning", "truncation", "user", "store", "background", "previous_response_id",
               "max_tool_calls", "metadata", "presence_penalty", "frequency_penalty", "top_logprobs", "service_tier",
               "safety_identifier", "prompt_cache_key")
# The echo fields a request rarely sends (read only when it sends fields past a plain request's), with the
# value a Response shows when it did not.
ECHO_DEFAULTS: dict[str, Any] = {"presence_penalty": 0.0, "frequency_penalty": 0.0, "top_logprobs": 0,
                                 "service_tier": "default", "safety_identifier": None, "prompt_cache_key": None}
_TYPES: dict[str, tuple[type, ...]] = {
    "presence_penalty": (int, float), "frequency_penalty": (int, float), "top_logprobs": (int,),
    "service_tier": (str,), "safety_identifier": (str,), "prompt_cache_key": (str,)}
MAX_TOP_LOGPROBS = 20  # OpenAI's bound
# A function tool's fields a Response shows even when the request left them out.
_FUNCTION_ECHO = ("description", "parameters", "strict")
# The echo's defaults that are objects: shared, never written to (the Response object is only serialised).
TEXT_ECHO: dict[str, Any] = {"format": {"type": "text"}}
REASONING_ECHO: dict[str, Any] = {"effort": None, "summary": None}


def _plain(store: bool, background: bool) -> dict[str, Any]:
    return {"instructions": None, "tools": [], "tool_choice": "auto", "parallel_tool_calls": True,
            "max_output_tokens": None, "temperature": 1.0, "top_p": 1.0, "text": TEXT_ECHO, "reasoning": REASONING_ECHO,
            "truncation": "disabled", "user": None, "store": store, "background": background,
            "previous_response_id": None, "max_tool_calls": None, "metadata": {}}


# The echo of a plain request (model, input, and at most stream / store / background), by (store, background): one
# shared dict each, never written to, so a Response object starts from a template that already holds it
# (``responses/events.py``) instead of copying sixteen fields per request.
PLAIN_ECHOES: dict[tuple[bool, bool], dict[str, Any]] = {
    (store, background): _plain(store, background) for store in (True, False) for background in (True, False)}


def sampling_echo(body: dict[str, Any]) -> dict[str, Any]:
    """The penalties, ``top_logprobs``, ``service_tier``, ``safety_identifier`` and ``prompt_cache_key`` a Response
    shows: the request's (type-checked here: a wrong type is the caller's 400, not the model's; they still reach
    the model as chat parameters), else the defaults."""
    echo = {}
    for name, default in ECHO_DEFAULTS.items():
        value = body.get(name)
        _expect(value, _TYPES[name], name)
        echo[name] = default if value is None else value
    top = echo["top_logprobs"]
    if isinstance(top, bool) or not 0 <= top <= MAX_TOP_LOGPROBS:
        raise bad_request(f"'top_logprobs' must be an integer from 0 to {MAX_TOP_LOGPROBS}", "top_logprobs")
    return echo


def tool_echo(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool as a Response shows it: a function tool with ``description``, ``parameters`` and ``strict`` (null when
    the request left them out: the gateway does not turn strict mode on by itself), any other tool as sent."""
    if tool.get("type") != "function" or all(name in tool for name in _FUNCTION_ECHO):
        return tool
    return {**tool, **{name: tool.get(name) for name in _FUNCTION_ECHO}}
