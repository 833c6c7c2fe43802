"""A Redis day row's breakdown by route and model: its field names and how a row's hash reads back.

The breakdown lives in the day row's own hash (gateway/store/usage/redis.py), one field per counter:
``<route>|<model>|<field>``, with ``%`` and ``|`` in a name escaped (``%25``, ``%7C``) so the three
parts always split apart again. Plain fields (``r``, ``p``, ...) are the row's totals; what they
hold beyond the breakdown's fields (a row from before it) reads as route and model ``unknown``.
"""

from __future__ import annotations

from typing import Any

from gateway.store.usage.base import FIELDS, Breakdown, with_remainder

_INDEX = {field: index for index, field in enumerate(FIELDS)}


def _name(part: str) -> str:
    return part.replace("%", "%25").replace("|", "%7C")


def _unname(part: str) -> str:
    return "%".join(piece.replace("%7C", "|") for piece in part.split("%25"))


def dim_fields(route: str, model: str) -> tuple[str, ...]:
    """The breakdown's hash fields of (route, model), in ``FIELDS`` order."""
    head = f"{_name(route)}|{_name(model)}|"
    return tuple(head + field for field in FIELDS)


def parse_breakdown(reply: dict[Any, Any]) -> Breakdown:
    """A day row's hash as its breakdown (the totals' remainder under ``UNKNOWN``)."""
    total = [0] * len(FIELDS)
    parts: Breakdown = {}
    for raw_field, raw_value in reply.items():
        field = raw_field.decode() if isinstance(raw_field, bytes) else str(raw_field)
        value = int(raw_value)
        route, sep, rest = field.partition("|")
        if not sep:
            index = _INDEX.get(field)
            if index is not None:
                total[index] = value
            continue
        model, sep, name = rest.partition("|")
        index = _INDEX.get(name)
        if not sep or index is None:
            continue
        dim = (_unname(route), _unname(model))
        row = parts.get(dim)
        if row is None:
            row = parts[dim] = [0] * len(FIELDS)
        row[index] = value
    return with_remainder(total, parts) if any(total) else parts
