"""A request's spans as the gateway ships them (one flat list, ``Entry``), and their rebuilding in the exporter.

The span recorder (``gateway/observability/recorder.py``) writes each request's spans as one
``Entry`` of values by position, copying only what the request path already holds; the shipper
(``gateway/observability/shipper.py``) hands it whole to the exporter process
(``gateway/observability/exporter.py``), where :func:`rebuild` turns it back into spans for the
official SDK: the names of attributes, the conventions' value rules and the ids nobody outside
has seen are made there, on that process's CPU (bench/README.md). This module is the format both
sides share; the exporter process imports it without the recorder.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

# ``gen_ai.provider.name`` values of the conventions, by provider type.
PROVIDER_NAMES = {"openai": "openai", "openai_responses": "openai", "anthropic": "anthropic", "gemini": "gcp.gemini",
                  "litellm": "litellm", "mock": "loopgate.mock"}
# SpanKind values of the OpenTelemetry API (the exporter process maps them back).
INTERNAL, SERVER, CLIENT = 0, 1, 2
_bits = random.getrandbits

#: One request's spans as shipped, a flat list:
#: ``[trace id (32 hex digits), caller's span id (0: a root), server span id, start, end, method,
#: path, route, request id, tenant, status, error.type, events, extra, children]``, times in ns
#: since the epoch, ``events`` a list of ``[name, ns, attributes]``, ``extra`` None or a dict of
#: more attributes, ``children`` the child spans (``CHAT``, ``TOOL`` and ``OPERATION`` records
#: below), every one a child of the server span. The server span is an error for a status of 500 and above (described
#: by its ``error.type``, else the status); a child's ``failure`` is its status description ("":
#: not an error). A child that ends after its request was shipped (a cancelled task)
#: comes alone as ``[trace id, server span id, [child]]``.
Entry = list[Any]
#: ``[CHAT, span id (0: the exporter makes one), start, end, failure, events, extra, provider type,
#: requested model, target label, response model, finish reason, input tokens, output tokens,
#: response id, cached input tokens, temperature, top_p, max_tokens, max_completion_tokens]``:
#: values as the gateway holds them; the exporter applies the conventions (provider type to
#: ``gen_ai.provider.name``, the finish reason as a list, request parameters only when numbers,
#: empty ids and zero cached tokens left out).
CHAT = 1
#: ``[TOOL, span id, start, end, failure, events, tool name, attributes]``
TOOL = 2
#: ``[OPERATION, span id, start, end, failure, events, span name, attributes]`` (a CLIENT span)
OPERATION = 3
_CHAT_LENGTH, _TOOL_LENGTH, _ENTRY_LENGTH, _LATE_LENGTH = 20, 8, 15, 3


def new_id(bits: int) -> int:
    """A random id that is never 0 (0 means invalid in W3C trace context)."""
    value = _bits(bits)
    while not value:
        value = _bits(bits)
    return value


#: One span rebuilt from an entry: trace id (hex), span id, parent span id (0: none), whether that
#: parent is remote (the caller's), kind, name, start, end, attributes, events, failure ("": none).
Rebuilt = tuple[str, int, int, bool, int, str, int, int, dict[str, Any], list[Any], str]


def rebuild(entry: Entry) -> Iterator[Rebuilt]:
    """The spans of one shipped entry (see ``Entry``), their attributes named as the conventions want.

    Runs in the exporter process. A span id of 0 gets a random one. ValueError for an entry of
    no known shape (a frame that is not the gateway's)."""
    if not isinstance(entry, list):
        raise ValueError(f"an entry of an unknown shape: {str(entry)[:100]}")
    if len(entry) == _LATE_LENGTH:
        trace_hex, server_id, children = entry
    elif len(entry) == _ENTRY_LENGTH:
        (trace_hex, parent, server_id, start, end, method, path, route, request_id, tenant, status, error, events,
         extra, children) = entry
        failure = (error or str(status)) if isinstance(status, int) and status >= 500 else ""
        attributes: dict[str, Any] = {"http.request.method": method, "http.route": path}
        for key, value in (("loopgate.route", route), ("loopgate.request_id", request_id),
                           ("loopgate.tenant", tenant), ("http.response.status_code", status), ("error.type", error)):
            if value is not None:
                attributes[key] = value
        if extra:
            attributes.update(extra)
        yield trace_hex, server_id, parent, True, SERVER, f"{method} {path}", start, end, attributes, events, failure
    else:
        raise ValueError(f"an entry of an unknown shape: {str(entry)[:100]}")
    if not isinstance(trace_hex, str) or not isinstance(server_id, int) or not isinstance(children, list):
        raise ValueError(f"an entry of an unknown shape: {str(entry)[:100]}")
    for child in children:
        kind = child[0] if isinstance(child, list) and child else None
        if kind == CHAT and len(child) == _CHAT_LENGTH:
            yield _chat(trace_hex, server_id, child)
        elif kind == TOOL and len(child) == _TOOL_LENGTH:
            _, span_id, start, end, failure, events, name, attributes = child
            yield (trace_hex, span_id or new_id(64), server_id, False, INTERNAL, f"execute_tool {name}", start, end,
                   attributes, events, failure)
        elif kind == OPERATION and len(child) == _TOOL_LENGTH:
            _, span_id, start, end, failure, events, name, attributes = child
            provider = attributes.get("gen_ai.provider.name") if isinstance(attributes, dict) else None
            if provider in PROVIDER_NAMES:  # the conventions' name, as on a chat span
                attributes["gen_ai.provider.name"] = PROVIDER_NAMES[provider]
            yield (trace_hex, span_id or new_id(64), server_id, False, CLIENT, str(name), start, end, attributes,
                   events, failure)
        else:
            raise ValueError(f"a span of an unknown shape: {str(child)[:100]}")


def _chat(trace_hex: str, parent: int, child: list[Any]) -> Rebuilt:
    (_, span_id, start, end, failure, events, extra, provider, model, label, response_model, finish, input_tokens,
     output_tokens, response_id, cached, temperature, top_p, max_tokens, max_completion) = child
    attributes: dict[str, Any] = {"gen_ai.operation.name": "chat",
                                  "gen_ai.provider.name": PROVIDER_NAMES.get(provider, str(provider)),
                                  "gen_ai.request.model": model, "loopgate.target": label}
    if input_tokens is not None:  # answered: the model that answered (the requested one when it did not say)
        attributes["gen_ai.response.model"] = response_model or model
    if finish is not None:
        attributes["gen_ai.response.finish_reasons"] = [str(finish)]
    if input_tokens is not None:
        attributes["gen_ai.usage.input_tokens"] = input_tokens
    if output_tokens is not None:
        attributes["gen_ai.usage.output_tokens"] = output_tokens
    if response_id:
        attributes["gen_ai.response.id"] = response_id
    if cached:
        attributes["gen_ai.usage.cache_read.input_tokens"] = cached
    # request parameters as the caller sent them: kept only when numbers (max_completion_tokens wins)
    for key, value in (("gen_ai.request.temperature", temperature), ("gen_ai.request.top_p", top_p),
                       ("gen_ai.request.max_tokens", max_tokens), ("gen_ai.request.max_tokens", max_completion)):
        if isinstance(value, int | float) and not isinstance(value, bool):
            attributes[key] = value
    if extra:
        attributes.update(extra)
    return (trace_hex, span_id or new_id(64), parent, False, CLIENT, f"chat {model}", start, end, attributes, events,
            failure)
