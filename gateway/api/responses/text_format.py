"""A Responses request's ``text.format`` as the Chat Completions ``response_format`` the engine sends.

Split from ``responses/request.py`` (which reads every other field) so that module stays short; the
400s name the field the same way (``text.format...``).
"""

from __future__ import annotations

from typing import Any

from gateway.api.chat.request import _expect, type_name
from gateway.errors import bad_request, quoted


def text_format(fmt: Any) -> dict[str, Any] | None:
    """``text.format`` as chat's ``response_format`` (None for plain text)."""
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise bad_request(f"'text.format' must be an object, not {type_name(fmt)}", "text.format")
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        name, schema = fmt.get("name"), fmt.get("schema")
        if not isinstance(name, str) or not name:
            raise bad_request("'text.format.name' must be a non-empty string", "text.format.name")
        if not isinstance(schema, dict):
            raise bad_request("'text.format.schema' must be an object (a JSON Schema)", "text.format.schema")
        _expect(fmt.get("strict"), (bool,), "text.format.strict")
        _expect(fmt.get("description"), (str,), "text.format.description")
        spec = {k: fmt[k] for k in ("name", "schema", "strict", "description") if fmt.get(k) is not None}
        return {"type": "json_schema", "json_schema": spec}
    raise bad_request(f"'text.format.type' must be 'text', 'json_object' or 'json_schema', not {quoted(kind)}",
                      "text.format.type")
