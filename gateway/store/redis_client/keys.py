"""Key naming shared by every Redis domain store.

Every key is under ``loopgate:``; the ``{...}`` part is the Redis Cluster hash tag, so every key
one Lua script or multi-key command touches lives in one slot. Braces and ``%`` inside tenants,
ids and targets are percent-encoded so a value can never change which part of a key is the hash tag.
"""

from __future__ import annotations

import functools

PREFIX = "loopgate:"
#: the characters ``esc`` encodes
_SPECIAL = frozenset("%{}")


def esc(value: str) -> str:
    """Keep ``{``/``}`` out of key parts: they would move the hash tag."""
    if _SPECIAL.isdisjoint(value):  # the usual case (ids, tenants): one scan instead of three replaces
        return value
    return value.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


#: a continuation's record key around its escaped id (a script that finds the id in an index builds the key)
RECORD_HEAD, RECORD_TAIL = f"{PREFIX}{{", "}:rec"


def record_key(continuation_id: str) -> str:
    """``loopgate:{<continuation id>}:rec``: a continuation's record (its own slot)."""
    return f"{RECORD_HEAD}{esc(continuation_id)}{RECORD_TAIL}"


@functools.lru_cache(maxsize=4096)
def _tenant_prefix(tenant: str) -> str:
    """``loopgate:{t:<tenant>}:``, made once per tenant (a pause and its resume name ~7 of its keys)."""
    return f"{PREFIX}{{t:{esc(tenant)}}}:"


def tenant_key(tenant: str, kind: str, sub: str | None = None) -> str:
    """``loopgate:{t:<tenant>}:<kind>[:<sub>]``: the tenant's keys share one slot."""
    base = _tenant_prefix(tenant) + kind
    return base if sub is None else f"{base}:{esc(sub)}"


def num(value: float) -> str:
    """A float as a string that round-trips exactly (Lua numbers returned to Redis become integers)."""
    return repr(float(value))
