"""``x-request-id``: the caller's value when it is safe to echo and log, else one the gateway makes.

A caller's value is kept when it is 1 to 128 characters of ``A-Z a-z 0-9 . _ : @ / + = -``
(anything else could forge log fields or headers). Generated ids are unique, not secret: a
random per-process prefix and a counter.
"""

from __future__ import annotations

import itertools
import re
import secrets
from collections.abc import Iterable

REQUEST_ID_HEADER = b"x-request-id"
MAX_REQUEST_ID = 128
_SAFE_ID = re.compile(rb"[A-Za-z0-9._:@/+=-]{1,%d}" % MAX_REQUEST_ID)
_ID_PREFIX = f"req_{secrets.token_hex(6)}".encode()
_ID_COUNTER = itertools.count(1)



def request_id(raw: bytes | None) -> bytes:
    """The caller's ``x-request-id`` when it is safe to echo and log, else a new one (ASCII bytes)."""
    if raw is not None and _SAFE_ID.fullmatch(raw):
        return raw
    return b"%s%08x" % (_ID_PREFIX, next(_ID_COUNTER))


def scope_request_id(headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    for name, value in headers:
        if name == REQUEST_ID_HEADER:
            return request_id(value)
    return request_id(None)
