"""OpenAI Responses, the answer: a ``response`` object -> the canonical turn; its usage; failures as errors.

The stream parser (``openai_responses_stream``) rebuilds the ``output`` items and hands the
finished response to ``response_from``, the same function a JSON answer goes through, so a streamed
turn and the same turn fetched whole are equal by construction.

* ``message`` items -> the text (``output_text`` parts; ``refusal`` parts when there is no text);
* ``function_call`` items -> tool calls (``call_id``, ``name``, ``arguments``); a call of a namespace's
  member (its ``namespace``) is named ``{namespace}__{name}``, the member's canonical name;
* ``reasoning`` items -> ``reasoning_content`` (their summary parts, else their reasoning text, joined
  by a blank line); with them, or with any item the canonical turn cannot say (OpenAI's hosted tool
  calls), the whole ``output`` is kept as ``openai_output`` to go back to this provider verbatim;
* ``status: incomplete`` -> finish reason ``length`` (``max_output_tokens``) or ``content_filter``;
  ``failed`` -> the error it carries, classified (``failure``); ``cancelled`` -> a server error;
* usage: ``input_tokens`` (cached ones included, ``input_tokens_details.cached_tokens``),
  ``output_tokens`` (reasoning included, ``output_tokens_details.reasoning_tokens``).

Bounded: an answer of more than ``MAX_OUTPUT_ITEMS`` output items is an invalid response.
"""

from __future__ import annotations

from typing import Any

from gateway.canonical import (
    FinishReason,
    HostedToolCall,
    Message,
    ModelResponse,
    ToolCallAccumulator,
    Usage,
    namespaced,
    normalize_finish_reason,
    token_count,
)
from gateway.providers.base import (
    MALFORMED,
    STR_OR_NONE,
    ErrorClass,
    ProviderError,
    invalid_response,
    reported_model,
)
from gateway.providers.hosted import MAX_HOSTED_CALLS, web_search_of
from gateway.providers.openai_stream import in_body_error

#: the most output items one answer may have (a real one has a handful: reasoning, a message, the calls)
MAX_OUTPUT_ITEMS = 4096
_INCOMPLETE: dict[str, FinishReason] = {"max_output_tokens": "length", "content_filter": "content_filter"}
_ARGUMENTS = (str, dict, type(None))
# ``response.error.code`` values (and in-stream ``error`` codes) the shared in-body rules do not classify.
_FAILURE_CODES: dict[str, ErrorClass] = {
    "server_error": ErrorClass.SERVER_ERROR,
    "rate_limit_exceeded": ErrorClass.RATE_LIMITED,
    "insufficient_quota": ErrorClass.RATE_LIMITED,
    "vector_store_timeout": ErrorClass.TIMEOUT,
    "invalid_prompt": ErrorClass.BAD_REQUEST,
    "context_length_exceeded": ErrorClass.CONTEXT_LENGTH,
}
#: codes of a bad image in the request (``invalid_image``, ``image_too_large``, ``failed_to_download_image``, ...)
_IMAGE_CODE_WORD = "image"


def failure(error: Any) -> ProviderError:
    """The ``error`` of a failed response or of an in-stream ``error`` event, as the class failover acts on."""
    if not isinstance(error, dict):
        return ProviderError(ErrorClass.SERVER_ERROR, "upstream response failed")
    code = error.get("code")
    error_class = _FAILURE_CODES.get(code) if isinstance(code, str) else None
    if error_class is None and isinstance(code, str) and _IMAGE_CODE_WORD in code:
        error_class = ErrorClass.BAD_REQUEST
    if error_class is None:
        return in_body_error(error)
    message = str(error.get("message") or code)
    return ProviderError(error_class, message, no_retry=code == "insufficient_quota")


def parse_usage(raw: Any) -> Usage:
    """Counts that are not plausible token counts (``token_count``) are treated as not reported."""
    if not isinstance(raw, dict):
        return Usage()
    inputs, outputs = raw.get("input_tokens_details"), raw.get("output_tokens_details")
    return Usage(
        prompt_tokens=token_count(raw.get("input_tokens")),
        completion_tokens=token_count(raw.get("output_tokens")),
        cached_tokens=token_count(inputs.get("cached_tokens")) if isinstance(inputs, dict) else 0,
        reasoning_tokens=token_count(outputs.get("reasoning_tokens")) if isinstance(outputs, dict) else 0,
    )


def _part_texts(parts: Any, kinds: tuple[str, ...], key: str) -> list[str]:
    """The ``key`` strings of the parts of these ``kinds``; a part of the wrong shape raises TypeError."""
    if parts is None:
        return []
    if not isinstance(parts, list):
        raise TypeError("content parts")
    texts = []
    for part in parts:
        if not isinstance(part, dict):
            raise TypeError("content part")
        if part.get("type") in kinds:
            text = part.get(key)
            if not isinstance(text, str):
                raise TypeError(key)
            texts.append(text)
    return texts


def answer_text(items: list[Any]) -> str:
    """The text of an answer's ``message`` items: the ``output_text`` parts, else the ``refusal`` parts."""
    texts: list[str] = []
    refusals: list[str] = []
    for item in items:
        if item.__class__ is not dict or item.get("type") != "message":
            continue
        parts = item.get("content")
        if parts.__class__ is not list:
            if parts is None:
                continue
            raise TypeError("content parts")
        for part in parts:
            if part.__class__ is not dict:
                raise TypeError("content part")
            kind = part.get("type")
            if kind == "output_text" or kind == "refusal":
                text = part.get("text" if kind == "output_text" else "refusal")
                if text.__class__ is not str:
                    raise TypeError(kind)
                (texts if kind == "output_text" else refusals).append(text)
    return "".join(texts) or "".join(refusals)


def reasoning_texts(item: dict[str, Any]) -> list[str]:
    """A reasoning item's non-empty summary parts, else its reasoning text parts (open models send those)."""
    texts = [text for text in _part_texts(item.get("summary"), ("summary_text",), "text") if text]
    return texts or [text for text in _part_texts(item.get("content"), ("reasoning_text",), "text") if text]


def _qualified(item: dict[str, Any], name: str | None) -> str | None:
    """A call's tool by its canonical name: a namespace's member (the item's ``namespace``) as ``namespace__name``."""
    namespace = item.get("namespace")
    if namespace is None or name is None:
        return name
    if not isinstance(namespace, str):
        raise TypeError("namespace")
    return namespaced(namespace, name)


def response_from(payload: Any) -> ModelResponse:
    """One ``response`` object (a JSON answer, or a stream rebuilt) as the canonical turn.

    A response the adapter cannot read (no output array, an item of the wrong shape) is an
    INVALID_RESPONSE, never an empty answer; a failed one raises the error it carries.
    """
    try:
        return _response(payload)
    except MALFORMED as exc:
        raise invalid_response(exc) from None


def _checked(payload: Any) -> list[Any]:
    """The output items of a finished response; its failure, or what is wrong with it, raised."""
    if not isinstance(payload, dict):
        raise ProviderError(ErrorClass.INVALID_RESPONSE, "upstream returned an unexpected JSON document")
    if payload.get("type") == "error":  # an error event as the whole body
        raise failure(payload["error"] if isinstance(payload.get("error"), dict) else payload)
    status = payload.get("status")
    if status == "failed" or (payload.get("error") and status not in ("completed", "incomplete")):
        raise failure(payload.get("error"))
    if status == "cancelled":
        raise ProviderError(ErrorClass.SERVER_ERROR, "upstream cancelled the response")
    if status in ("queued", "in_progress"):
        raise ProviderError(ErrorClass.INVALID_RESPONSE, f"upstream answered with a response still {status}")
    output = payload.get("output")
    if not isinstance(output, list):
        raise ProviderError(ErrorClass.INVALID_RESPONSE, "upstream response has no output array")
    if len(output) > MAX_OUTPUT_ITEMS:
        raise ProviderError(ErrorClass.INVALID_RESPONSE,
                            f"upstream response has more than {MAX_OUTPUT_ITEMS} output items")
    return output


def _response(payload: Any) -> ModelResponse:
    output = _checked(payload)
    calls: ToolCallAccumulator | None = None  # made for the first function call
    reasoning: list[str] = []
    native_only = False  # an item only this provider can be told (reasoning, a hosted tool call)
    hosted: list[HostedToolCall] = []
    position = 0
    for item in output:
        if not isinstance(item, dict):
            raise TypeError("output item")
        kind = item.get("type")
        if kind == "function_call":
            call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
            if (not isinstance(call_id, STR_OR_NONE) or not isinstance(name, STR_OR_NONE)
                    or not isinstance(arguments, _ARGUMENTS)):
                raise TypeError("function_call")
            if calls is None:
                calls = ToolCallAccumulator()
            calls.add(position, call_id, _qualified(item, name), arguments)
            position += 1
        elif kind == "custom_tool_call":  # a custom tool's: its input as ``{"input": ...}``, ``type: "custom"``
            call_id, name, text = item.get("call_id"), item.get("name"), item.get("input")
            if not isinstance(call_id, STR_OR_NONE) or not isinstance(name, STR_OR_NONE) or not isinstance(text, str):
                raise TypeError("custom_tool_call")
            if calls is None:
                calls = ToolCallAccumulator()
            calls.add(position, call_id, _qualified(item, name), text, custom=True)
            position += 1
        elif kind == "web_search_call":  # run by the API: replayed verbatim, and reported
            searched = web_search_of(item)
            if searched is not None and len(hosted) < MAX_HOSTED_CALLS:
                hosted.append(searched)
            native_only = True
        elif kind == "reasoning":
            reasoning += reasoning_texts(item)
            native_only = True
        elif kind != "message":
            native_only = True
    text = answer_text(output)
    response_id = payload.get("id") if isinstance(payload.get("id"), str) else ""
    message: Message = {"role": "assistant", "content": text or None}
    tool_calls = calls.result(response_id or text) if calls is not None else []
    if tool_calls:
        message["tool_calls"] = tool_calls
    if reasoning:
        message["reasoning_content"] = "\n\n".join(reasoning)
    if native_only:
        message["openai_output"] = {"items": output}
    native_finish: FinishReason | None = None
    if payload.get("status") == "incomplete":
        details = payload.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        native_finish = _INCOMPLETE.get(reason, "length") if isinstance(reason, str) else "length"
    return ModelResponse(
        message=message,
        finish_reason=normalize_finish_reason(native_finish, bool(tool_calls)),
        usage=parse_usage(payload.get("usage")),
        model=reported_model(payload.get("model")),
        id=response_id,
        hosted_calls=hosted or (),
    )
