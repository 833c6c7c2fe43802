"""Parsing an OpenAI ``POST /v1/embeddings`` body, and the route's bounds checked against it.

``input`` is a string, a list of strings, one token array (a list of integers) or a list of token
arrays, as OpenAI takes it; an empty input is refused (OpenAI refuses it too). Every count the
caller controls is bounded: the number of inputs, each input's tokens and the request's total
(``max_inputs``, ``max_input_tokens``, ``max_total_tokens`` of the route, OpenAI's limits by
default), each refused with a 400 naming the limit. Fields other than the ones below are ignored,
as OpenAI-compatible servers differ in the extras they take: none is forwarded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.config.embeddings_section import MAX_DIMENSIONS
from gateway.config.models_section import EmbeddingBounds
from gateway.errors import bad_request, quoted

ENCODING_FORMATS = ("float", "base64")
#: ``user`` is an end-user id for the provider's abuse monitoring: a label, never a document
MAX_USER_CHARS = 256
#: the largest token id any tokenizer in use has (o200k's vocabulary is ~200k); larger is not a token
MAX_TOKEN_ID = 1 << 31


@dataclass(frozen=True, slots=True)
class ParsedEmbeddings:
    model: str
    inputs: list[str] | list[list[int]]
    encoding_format: str
    dimensions: int | None
    user: str | None


def parse_embeddings_request(body: Any) -> ParsedEmbeddings:
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' is required: an embeddings route or PROVIDER/MODEL", "model")
    if "input" not in body:
        raise bad_request("'input' is required: a string, a list of strings or a list of token arrays", "input")
    inputs = _inputs(body["input"])
    encoding_format = body.get("encoding_format")
    if encoding_format is None:
        encoding_format = "float"
    if encoding_format not in ENCODING_FORMATS:
        raise bad_request(f"'encoding_format' must be 'float' or 'base64', got {quoted(encoding_format)}",
                          "encoding_format")
    dimensions = body.get("dimensions")
    if dimensions is not None and (type(dimensions) is not int or not 0 < dimensions <= MAX_DIMENSIONS):
        raise bad_request(f"'dimensions' must be an integer in [1, {MAX_DIMENSIONS}], got {quoted(dimensions)}",
                          "dimensions")
    user = body.get("user")
    if user is not None and (not isinstance(user, str) or len(user) > MAX_USER_CHARS):
        raise bad_request(f"'user' must be a string of at most {MAX_USER_CHARS} characters", "user")
    return ParsedEmbeddings(model, inputs, encoding_format, dimensions, user)


def _inputs(value: Any) -> list[str] | list[list[int]]:
    if isinstance(value, str):
        if not value:
            raise bad_request("'input' must not be empty", "input")
        return [value]
    if not isinstance(value, list) or not value:
        raise bad_request("'input' must be a non-empty string, list of strings or list of token arrays", "input")
    first = value[0]
    if isinstance(first, str):
        for index, item in enumerate(value):
            if not isinstance(item, str) or not item:
                raise bad_request(f"input[{index}] must be a non-empty string (the inputs of one request are all "
                                  "strings or all token arrays)", f"input[{index}]")
        return value
    if type(first) is int:  # one token array
        _tokens(value, "input")
        return [value]
    for index, item in enumerate(value):
        if not isinstance(item, list) or not item:
            raise bad_request(f"input[{index}] must be a non-empty token array (the inputs of one request are all "
                              "strings or all token arrays)", f"input[{index}]")
        _tokens(item, f"input[{index}]")
    return value


def _tokens(array: list[Any], where: str) -> None:
    for token in array:
        if type(token) is not int or not 0 <= token < MAX_TOKEN_ID:
            raise bad_request(f"{where} must hold token ids (non-negative integers), got {quoted(token)}", where)


def check_inputs(inputs: list[str] | list[list[int]], bounds: EmbeddingBounds, model: str) -> None:
    """A 400 naming ``max_inputs`` when there are too many inputs (checked before any is counted)."""
    if len(inputs) > bounds.max_inputs:
        raise bad_request(f"'input' has {len(inputs)} items; model {quoted(model)} takes at most "
                          f"{bounds.max_inputs} per request (max_inputs)", "input", "too_many_inputs")


def check_tokens(counts: list[int], bounds: EmbeddingBounds, model: str) -> int:
    """The total input tokens; a 400 naming the bound an input or the request is over."""
    total = 0
    for index, count in enumerate(counts):
        if count > bounds.max_input_tokens:
            raise bad_request(f"input[{index}] has {count} tokens; model {quoted(model)} takes at most "
                              f"{bounds.max_input_tokens} per input (max_input_tokens)", f"input[{index}]",
                              "input_too_long")
        total += count
    if total > bounds.max_total_tokens:
        raise bad_request(f"'input' has {total} tokens in all; model {quoted(model)} takes at most "
                          f"{bounds.max_total_tokens} per request (max_total_tokens)", "input", "too_many_tokens")
    return total
