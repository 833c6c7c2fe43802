"""Unguessable ids for what a caller can fetch by id (responses, completions, messages, items).

A per-process prefix plus a counter let anyone who saw one id enumerate its neighbours, so every
id is random (128 bits or more). ``os.urandom`` per id is a system call on the hot path; instead
the CSPRNG is read in batches of :data:`BATCH_BYTES` and sliced, under a lock because the
exporter and shipper threads may ask too (the lock is uncontended on the event loop).
"""

from __future__ import annotations

import os
import threading

BATCH_BYTES = 4096

_lock = threading.Lock()
_buffer = b""
_position = 0


def random_bytes(count: int) -> bytes:
    """``count`` bytes from the OS CSPRNG, each handed out once (``count`` ≤ :data:`BATCH_BYTES`)."""
    global _buffer, _position
    with _lock:
        start = _position
        end = start + count
        if end > len(_buffer):
            _buffer = os.urandom(BATCH_BYTES)
            start, end = 0, count
        _position = end
        return _buffer[start:end]


def random_hex(count: int) -> str:
    """``count`` random bytes as ``2 * count`` lower-case hex digits."""
    return random_bytes(count).hex()


def reseed_after_fork() -> None:
    """A forked child must not hand out the bytes its parent already holds (``--workers`` forks)."""
    global _buffer, _position
    _buffer, _position = b"", 0


os.register_at_fork(after_in_child=reseed_after_fork)
