"""Tool-call arguments: always a JSON string holding an object on the way out, depth-bounded on the way in.

Every adapter shares these: a model's arguments may be missing, an object instead of a string
(Ollama), malformed or cut off at ``max_tokens``; what goes upstream is always valid for the
target, and the canonical transcript keeps the original text.
"""

from __future__ import annotations

from typing import Any

import orjson

# Every JSON the gateway parses (arguments, upstream answers) is depth-bounded: see gateway/http/json_depth.py.
from gateway.http.json_depth import MAX_DEPTH as MAX_JSON_DEPTH
from gateway.http.json_depth import JSONTooDeep as JSONTooDeep
from gateway.http.json_depth import loads as load_json


def normalize_arguments(arguments: Any) -> str:
    """Tool-call arguments are always a JSON string holding an object; never ``""``/None."""
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        return arguments if arguments.strip() else "{}"
    return orjson.dumps(arguments).decode()


def arguments_object(arguments: Any) -> dict[str, Any]:
    """A call's arguments as the JSON object Anthropic and Gemini need; ValueError says what is wrong.

    Empty or missing arguments are ``{}``; anything that is not a JSON object is refused rather
    than guessed at.
    """
    if isinstance(arguments, dict):
        return arguments
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}
    try:
        value = load_json(arguments)
    except JSONTooDeep as exc:
        raise ValueError(f"are {exc.msg}") from None
    except (orjson.JSONDecodeError, TypeError):
        raise ValueError("are not valid JSON") from None
    if not isinstance(value, dict):
        raise ValueError("must be a JSON object")
    return value


def arguments_too_deep(arguments: str) -> bool:
    """Are a caller's tool-call arguments (JSON text) nested deeper than the gateway parses?

    Checked where a caller's history comes in, so the caller gets a 400 naming the call rather
    than a target failing to serialise them later. Text that is not JSON at all is not "too deep":
    history with invalid arguments is allowed (sent on as ``{}``, see ``history_arguments``).
    """
    if arguments.count("{") + arguments.count("[") <= MAX_JSON_DEPTH:
        return False
    try:
        load_json(arguments)
    except JSONTooDeep:
        return True
    except orjson.JSONDecodeError:
        return False
    return False


def history_arguments(arguments: Any) -> dict[str, Any]:
    """A history tool call's arguments as the JSON object every provider accepts: ``{}`` when invalid.

    A model sometimes emits arguments that are not a JSON object (cut off at ``max_tokens``, or
    simply malformed); the loop answered that call with an error result that quotes what it got.
    Sent back verbatim, the call makes the next request invalid: OpenAI-compatible servers reject
    a non-JSON ``function.arguments`` with a 400, Anthropic and Gemini need an object for
    ``input``/``args``. So every adapter sends ``{}`` instead, and the canonical transcript (the
    store, the client's view) keeps the original text. Not ``{"_raw": ...}``: the error result
    already shows the model its text, a made-up key in its own history invites the model to
    imitate it, and a truncated argument string is often the longest thing in the turn.
    """
    try:
        return arguments_object(arguments)
    except ValueError:
        return {}


def history_arguments_text(arguments: Any) -> str:
    """``history_arguments`` for OpenAI-format servers: the original text when it is a JSON object, else ``"{}"``.

    The original bytes stay when valid, so a provider's prompt cache sees the history it produced.
    """
    if isinstance(arguments, str):
        try:
            if isinstance(load_json(arguments), dict):
                return arguments
        except orjson.JSONDecodeError:
            pass
        return "{}"
    if isinstance(arguments, dict):
        return orjson.dumps(arguments).decode()
    return "{}"
