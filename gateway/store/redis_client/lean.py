"""One Redis connection as an asyncio protocol: commands packed by hiredis, replies parsed by ``hiredis.Reader``.

The store's hot operations (a pause, a way-A lookup, a claim, the end of a resume) go through this
rather than redis-py's ``Redis.execute_command``: a round trip through redis-py's client and blocking pool
costs ~320-360k instructions, one through this ~100k (bench/README.md, "A lean command path").
What redis-py's layers did that still matters is done here, and nothing else:

* **one reply per command, never a stale one**: a connection carries one operation at a time. A
  connection that broke, timed out or was cancelled mid-command (its reply maybe half read) is closed
  and never reused, so no half-read reply can feed the next command.
* **bounded replies**: a reply that buffers more than ``max_reply_bytes`` unparsed closes the connection
  (``ConnectionError``); nothing the store writes comes close (continuation bodies are bounded by the
  request body limit).
* **errors as redis-py raises them**: an error reply becomes redis-py's exception class for it
  (``NoScriptError``, ``ReadOnlyError``, ``AuthenticationError``, ...), so ``RedisIO``'s translation to
  ``StoreUnavailable`` reads them exactly as before; a lost connection is redis-py's ``ConnectionError``.

The deadline is not here: every operation runs under ``RedisIO.guard`` (one ``asyncio.timeout`` over the
whole operation), whose cancellation this module turns into a closed connection.
"""

from __future__ import annotations

import asyncio
from typing import Any

import hiredis
from redis._parsers import BaseParser as _Parser  # the error table redis-py's own connections use
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

pack_command = hiredis.pack_command

#: what one reply may buffer, unparsed, before the connection is dropped (the largest value the store
#: writes is a continuation body, bounded by the request body limit; this is far above it)
MAX_REPLY_BYTES = 64 * 1024 * 1024


def error_of(reply: hiredis.ReplyError) -> ResponseError:
    """An error reply as the exception redis-py raises for it (its class chosen by the error code)."""
    error: ResponseError = _Parser.parse_error(str(reply))  # type: ignore[no-untyped-call]
    return error


class LeanConnection(asyncio.Protocol):
    """One connection to one server; ``send`` hands back a future of the replies it expects.

    Owned by one operation at a time (``LeanPool``): ``send`` while a reply is awaited is a bug.
    """

    __slots__ = ("_got", "_loop", "_max", "_reader", "_waiter", "_want", "address", "lost", "transport")

    def __init__(self, loop: asyncio.AbstractEventLoop, address: Any, max_reply_bytes: int = MAX_REPLY_BYTES) -> None:
        self._loop = loop
        self._reader = hiredis.Reader()
        self._waiter: asyncio.Future[Any] | None = None
        self._want = 0
        self._got: list[Any] = []
        self._max = max_reply_bytes
        self.transport: asyncio.Transport | None = None
        #: why the connection is unusable (set once it is lost or dropped); None while it is healthy
        self.lost: BaseException | None = None
        #: where it is connected (a Sentinel pool drops connections to a master that is no longer one)
        self.address = address

    # -- asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        reader.feed(data)
        waiter = self._waiter
        if waiter is None:  # nothing asked: a server that talks unprompted is not one we can follow
            self.drop(RedisConnectionError("unexpected data from the server"))
            return
        try:
            reply = reader.gets()
            while reply is not False:
                if self._want == 1:
                    self._waiter = None
                    if not waiter.done():
                        waiter.set_result(reply)
                    return
                self._got.append(reply)
                if len(self._got) == self._want:
                    self._waiter = None
                    if not waiter.done():
                        waiter.set_result(self._got)
                    return
                reply = reader.gets()
        except hiredis.ProtocolError as exc:
            self.drop(RedisConnectionError(f"protocol error: {exc}"))
            return
        if reader.len() > self._max:
            self.drop(RedisConnectionError(f"a reply over {self._max} bytes"))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.lost is None:
            self.lost = RedisConnectionError(f"Connection lost: {exc}" if exc else "Connection closed by server.")
        self._fail(self.lost)

    # -- use --------------------------------------------------------------------------------------
    def send(self, packed: bytes, want: int = 1) -> asyncio.Future[Any]:
        """Write ``packed`` (``want`` commands); the future's result is the reply (``want`` == 1) or the list of
        replies, error replies among them as ``hiredis.ReplyError`` values. Raises if the connection is lost."""
        transport = self.transport
        if self.lost is not None or transport is None or transport.is_closing():
            raise self.lost or RedisConnectionError("Connection closed.")
        waiter = self._loop.create_future()
        self._waiter = waiter
        self._want = want
        if want != 1:
            self._got = []
        transport.write(packed)
        return waiter

    def drop(self, why: BaseException | None = None) -> None:
        """Close it for good (whatever was in flight fails with ``why``): it is never used again."""
        if self.lost is None:
            self.lost = why or RedisConnectionError("Connection dropped.")
        if self.transport is not None:
            self.transport.abort()  # no flush: what is unsent is moot, and a half-read reply is discarded
        self._fail(self.lost)

    def _fail(self, why: BaseException) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(why)
            waiter.exception()  # retrieved: its operation may have been cancelled already

    @property
    def usable(self) -> bool:
        return self.lost is None and self.transport is not None and not self.transport.is_closing()
