"""JSON Schemas from outside the gateway, compiled so that checking a value never leaves the process.

An MCP server's ``inputSchema``, an elicitation's ``requestedSchema`` and a config's tool ``parameters``
are written by someone else. Given no registry, ``jsonschema`` resolves a ``$ref`` to an http(s) URL by
*fetching* it (``urlopen``, blocking the event loop): a server's schema could make the gateway GET any
address its network reaches (SSRF) and then check arguments against whatever came back. Every
validator of such a schema is built here, on :data:`LOCAL_ONLY`: a ``referencing`` registry whose
``retrieve`` refuses every URI, so ``#/...`` references resolve inside the schema (and the bundled
meta-schemas), and anything else is unresolvable: never fetched.

A tool whose schema names a non-local reference is left out of the listing with a warning
(:func:`schema_problem`), so the model is never offered a tool it cannot call; the registry's
refusal is the second line (a reference that only turns out non-local when resolved fails the
call with an error result, still without a request). The same check bounds what one schema may
cost: its serialised size and its nesting.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import Draft202012Validator, validator_for
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource

#: one tool's parameter schema, serialised, and its nesting (JSON levels); a tool past either is left out
MAX_TOOL_SCHEMA_BYTES = 64 * 1024
MAX_TOOL_SCHEMA_DEPTH = 32
#: keywords whose values are data, not schemas: a ``{"$ref": ...}`` inside them is never resolved
_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples", "example"})
_REFERENCE_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")


def _refuse(uri: str) -> Resource[Any]:
    """The registry's ``retrieve``: nothing outside the schema is ever fetched."""
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]


#: resolves ``#/...`` references in the schema itself and the bundled meta-schemas; nothing else
LOCAL_ONLY: Registry[Any] = Registry(retrieve=_refuse)  # type: ignore[call-arg]


def remote_reference(schema: Any, limit: int = MAX_TOOL_SCHEMA_DEPTH) -> str | None:
    """The first reference in ``schema`` that is not local (``#...``), or None; walks ``limit`` levels."""
    if limit < 0:
        return None
    if isinstance(schema, dict):
        for keyword in _REFERENCE_KEYWORDS:
            value = schema.get(keyword)
            if isinstance(value, str) and not value.startswith("#"):
                return value
        children: Iterable[Any] = [v for k, v in schema.items() if k not in _DATA_KEYWORDS]
    elif isinstance(schema, list):
        children = schema
    else:
        return None
    for child in children:
        found = remote_reference(child, limit - 1)
        if found is not None:
            return found
    return None


def depth(value: Any, limit: int) -> int:
    """Nesting of a JSON value, counted up to ``limit + 1`` (so a deep value costs little)."""
    if limit < 0 or not isinstance(value, dict | list):
        return 0
    children = value.values() if isinstance(value, dict) else value
    return 1 + max((depth(child, limit - 1) for child in children), default=0)


def schema_problem(schema: Any) -> str | None:
    """Why a tool's parameter schema is refused (too deep, too large, a non-local reference), or None."""
    if depth(schema, MAX_TOOL_SCHEMA_DEPTH) > MAX_TOOL_SCHEMA_DEPTH:
        return f"its input schema is nested deeper than {MAX_TOOL_SCHEMA_DEPTH} levels"
    if len(orjson.dumps(schema)) > MAX_TOOL_SCHEMA_BYTES:
        return f"its input schema is larger than {MAX_TOOL_SCHEMA_BYTES} bytes"
    remote = remote_reference(schema)
    if remote is not None:
        shown = remote if len(remote) <= 200 else remote[:200] + "…"
        return f"its input schema refers to {shown!r}; only local references ('#/...') are followed"
    return None


def compile_schema(schema: dict[str, Any], what: str) -> Validator:
    """The validator class the schema's ``$schema`` asks for (2020-12 by default), checked once, on
    :data:`LOCAL_ONLY`. Raises ValueError naming ``what`` for a schema that is not valid JSON Schema."""
    cls = validator_for(schema, default=Draft202012Validator)  # an unknown ``$schema``: 2020-12, never fetched
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"{what}: invalid JSON Schema: {exc.message}") from None
    return cls(schema, registry=LOCAL_ONLY)
