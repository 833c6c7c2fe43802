"""Unguessable ids for what a caller can fetch by id (responses, completions, messages, items).

A per-process prefix plus a counter let anyone who saw one id enumerate its neighbours, so every
id is random (96 bits or more). ``os.urandom`` per id is a system call on the hot path (about
twice the cost, measured); instead the CSPRNG is read :data:`BATCH_BYTES` at a time, hex-encoded
once, and sliced, under a lock (uncontended on the event loop; the exporter threads may ask too).
"""

from __future__ import annotations

import os
import threading

BATCH_BYTES = 4096

_lock = threading.Lock()
_hex = ""
_position = 0


def random_hex(count: int) -> str:
    """``count`` bytes from the OS CSPRNG as ``2 * count`` lower-case hex digits, each handed out once."""
    global _hex, _position
    digits = 2 * count
    with _lock:
        start = _position
        end = start + digits
        if end > len(_hex):
            _hex = os.urandom(max(BATCH_BYTES, count)).hex()
            start, end = 0, digits
        _position = end
        return _hex[start:end]


def random_bytes(count: int) -> bytes:
    """``count`` random bytes (from the same batches)."""
    return bytes.fromhex(random_hex(count))


def reseed_after_fork() -> None:
    """A forked child must not hand out the digits its parent already holds (``--workers`` forks)."""
    global _hex, _position
    _hex, _position = "", 0


os.register_at_fork(after_in_child=reseed_after_fork)
