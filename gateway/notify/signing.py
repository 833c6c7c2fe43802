"""``X-Loopgate-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>``.

The timestamp is signed with the body, so a receiver can refuse replays older than a few
minutes; a fresh ``t`` is used for every attempt (a retry hours later still verifies).
"""

from __future__ import annotations

import hashlib
import hmac
import time

HEADER = "X-Loopgate-Signature"
EVENT_ID_HEADER = "X-Loopgate-Event-Id"
EVENT_TYPE_HEADER = "X-Loopgate-Event"


def sign(secret: str, body: bytes, t: int | None = None) -> str:
    """The signature header value for ``body`` at ``t`` (now when omitted)."""
    t = int(time.time()) if t is None else t
    digest = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={digest}"


def verify(secret: str, body: bytes, header: str, tolerance_s: float = 300.0, now: float | None = None) -> bool:
    """What a receiver does: the signature matches and ``t`` is within ``tolerance_s`` of ``now``."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        t = int(fields["t"])
    except (KeyError, ValueError):
        return False
    now = time.time() if now is None else now
    if abs(now - t) > tolerance_s:
        return False
    expected = sign(secret, body, t).split("v1=", 1)[1]
    return hmac.compare_digest(expected, fields.get("v1", ""))
