"""Tool-call arguments the mock provider invents from a tool's JSON Schema: deterministic and valid.

The rule for every (sub)schema, first match wins:

1. ``default``, else ``const``, else the first ``enum`` value, else the first ``examples`` value;
2. ``$ref`` to a local definition (``#/$defs/X``, ``#/definitions/X``) is followed;
   ``anyOf``/``oneOf`` take their first option that is not ``null``; ``allOf`` is merged;
3. by ``type`` (a list of types: its first that is not ``null``; no type: ``object`` when there
   are ``properties``, ``array`` when there are ``items``, else ``string``):
   - ``string``: a value for its ``format`` (date-time, date, time, email, uri/url, uuid, ipv4,
     ipv6, hostname), else ``"sample-<property name>"``, padded or cut to ``minLength``/``maxLength``;
   - ``integer``: 1, ``number``: 1.5, moved inside ``minimum``/``maximum`` (and the exclusive
     bounds) and onto ``multipleOf``;
   - ``boolean``: false (a flag the schema does not ask for stays off: ``dangerouslyDisableSandbox``,
     ``run_in_background``); ``null``: null;
   - ``array``: ``max(1, minItems)`` items (at most ``maxItems``, never more than 8), from
     ``items`` or ``prefixItems``; the n-th item varies (``-n`` suffix, ``+n``, the n-th enum value)
     so ``uniqueItems`` holds;
   - ``object``: every property in ``properties`` (at most 64), plus any ``required`` name that
     has no schema (as a string).

Nesting deeper than 8 levels (or a ``$ref`` cycle) ends in ``null``. ``pattern`` is not honoured.
"""

from __future__ import annotations

import math
from typing import Any

MAX_DEPTH = 8
MAX_ITEMS = 8
MAX_PROPERTIES = 64

_FORMATS = {
    "date-time": "2026-01-01T12:00:00Z",
    "date": "2026-01-01",
    "time": "12:00:00",
    "email": "user@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "hostname": "example.com",
}


def sample_arguments(schema: Any) -> dict[str, Any]:
    """Arguments for a tool whose ``parameters`` is ``schema``: always a JSON object."""
    value = _sample(schema, schema, "value", 0, 0)
    return value if isinstance(value, dict) else {}


def _sample(schema: Any, root: Any, name: str, depth: int, variant: int) -> Any:
    if depth > MAX_DEPTH:
        return None
    if not isinstance(schema, dict):
        return _string({}, name, variant)  # ``true`` / a missing schema: anything goes
    for key in ("default", "const"):
        if key in schema:
            return schema[key]
    for key in ("enum", "examples"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return options[variant % len(options)] if key == "enum" else options[0]
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return _sample(_resolve(root, ref), root, name, depth + 1, variant)
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            chosen = next((option for option in options if not _is_null(option)), options[0])
            return _sample(chosen, root, name, depth + 1, variant)
    parts = schema.get("allOf")
    if isinstance(parts, list) and parts:
        return _sample(_merge(schema, parts), root, name, depth + 1, variant)
    kind = _type(schema)
    if kind == "object":
        return _object(schema, root, depth)
    if kind == "array":
        return _array(schema, root, name, depth)
    if kind == "integer":
        return _number(schema, 1 + variant, integer=True)
    if kind == "number":
        return _number(schema, 1.5 + variant, integer=False)
    if kind == "boolean":
        return variant % 2 == 1  # false; an array's second item true (``uniqueItems``)
    if kind == "null":
        return None
    return _string(schema, name, variant)


def _is_null(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "null"


def _resolve(root: Any, ref: str) -> Any:
    """A local JSON pointer (``#/$defs/Name``); anything else (a remote ref) is an unconstrained value."""
    if not ref.startswith("#"):
        return {}
    node = root
    for raw in ref[1:].split("/")[1:]:
        key = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return {}
    return node


def _merge(schema: dict[str, Any], parts: list[Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
    properties: dict[str, Any] = dict(merged.get("properties") or {})
    required: list[Any] = list(merged.get("required") or [])
    for part in parts:
        if not isinstance(part, dict):
            continue
        for key, value in part.items():
            if key == "properties" and isinstance(value, dict):
                properties.update(value)
            elif key == "required" and isinstance(value, list):
                required += value
            else:
                merged.setdefault(key, value)
    if properties:
        merged["properties"] = properties
    if required:
        merged["required"] = required
    return merged


def _type(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if isinstance(kind, str):
        return kind
    if "properties" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema:
        return "array"
    return "string"


def _object(schema: dict[str, Any], root: Any, depth: int) -> dict[str, Any]:
    result: dict[str, Any] = {}
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for key, sub in list(properties.items())[:MAX_PROPERTIES]:
            result[key] = _sample(sub, root, str(key), depth + 1, 0)
    required = schema.get("required")
    if isinstance(required, list):
        for key in required[:MAX_PROPERTIES]:
            if isinstance(key, str) and key not in result:
                result[key] = _string({}, key, 0)
    return result


def _array(schema: dict[str, Any], root: Any, name: str, depth: int) -> list[Any]:
    low = _count(schema.get("minItems"), 0)
    high = _count(schema.get("maxItems"), MAX_ITEMS)
    count = min(max(1, low), high, MAX_ITEMS)
    prefix = schema.get("prefixItems")
    items = schema.get("items")
    if isinstance(items, list):  # draft 4 tuple form
        prefix, items = items, schema.get("additionalItems")
    prefix = prefix if isinstance(prefix, list) else []
    if prefix:
        count = max(count, min(len(prefix), high, MAX_ITEMS))
    result = []
    for index in range(count):
        sub = prefix[index] if index < len(prefix) else items
        result.append(_sample(sub if sub is not None else {}, root, name, depth + 1, index))
    return result


def _count(value: Any, default: int) -> int:
    return value if type(value) is int and value >= 0 else default


def _bound(schema: dict[str, Any], key: str, exclusive_key: str) -> tuple[float | None, bool]:
    """A numeric bound and whether it is exclusive (draft 6+ numbers or draft 4 booleans)."""
    exclusive = schema.get(exclusive_key)
    number = _finite(exclusive)
    if number is not None:
        return number, True
    return _finite(schema.get(key)), exclusive is True


def _finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite JSON number (not a boolean), else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _number(schema: dict[str, Any], preferred: float, integer: bool) -> int | float:
    low, low_open = _bound(schema, "minimum", "exclusiveMinimum")
    high, high_open = _bound(schema, "maximum", "exclusiveMaximum")
    step = _finite(schema.get("multipleOf"))
    if step is None or step <= 0:
        step = 1.0 if integer else None

    def inside(value: float) -> bool:
        return ((low is None or value > low or (not low_open and value == low))
                and (high is None or value < high or (not high_open and value == high)))

    value = preferred
    if not inside(value):
        nudge = step or 1.0
        candidates = []
        if low is not None:
            candidates.append(low + nudge if low_open else low)
        if high is not None:
            candidates.append(high - nudge if high_open else high)
        middle = (low + high) / 2 if low is not None and high is not None else None
        value = next((c for c in candidates if inside(c)), middle if middle is not None else candidates[0])
    if step is not None:
        value = next((c for c in (math.ceil(value / step) * step, math.floor(value / step) * step) if inside(c)),
                     value)
    if integer:
        return next((c for c in (round(value), math.ceil(value), math.floor(value)) if inside(c)), round(value))
    return round(value, 6)


def _string(schema: dict[str, Any], name: str, variant: int) -> str:
    text = _FORMATS.get(str(schema.get("format")), "") or f"sample-{name}"
    if variant and str(schema.get("format")) not in _FORMATS:
        text = f"{text}-{variant}"
    shortest = _count(schema.get("minLength"), 0)
    longest = _count(schema.get("maxLength"), 1 << 20)
    if len(text) < shortest:
        text += "x" * (min(shortest, 4096) - len(text))
    return text[:longest]
