"""A bounded pool of ``LeanConnection``s to one server or to the master a Sentinel group names.

Set up like redis-py's connections for the same deployment (connect.py): TLS with the same context
(CA, client certificate, hostname check), ``AUTH`` with the same credentials, ``SELECT`` of the URL's
database, ``CLIENT SETINFO`` with the same library name, all in one write when a connection opens.

* **Bounded**: at most ``max_connections`` connections (the ``store`` pool setting); past that an
  operation waits up to ``pool_timeout`` for one to come back (then redis-py's ``ConnectionError``
  "No connection available."), and never past its operation's deadline (``RedisIO.guard``).
* **Nothing half-used is reused**: an operation that fails, times out or is cancelled while it holds
  a connection closes it; a connection the server closed while idle is seen closed (the event loop
  reads its end of stream) and skipped. So there is no retry: a command is written once, and a broken
  connection fails its operation (``StoreUnavailable``) rather than running a script twice.
* **Sentinel**: every new connection asks the sentinels where the master is (as redis-py's Sentinel
  pool does); connections to an address that is no longer the master are closed when they come back,
  and a ``READONLY`` reply (the master was demoted) closes every idle connection and fails the
  operation with ``ConnectionError``, so the next one connects to the new master.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import hiredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.store.redis_client.lean import MAX_REPLY_BYTES, LeanConnection, error_of, pack_command

#: where the Sentinel group says the master is
Resolve = Callable[[], Awaitable[tuple[str, int]]]
ReplyError = hiredis.ReplyError


class LeanPool:
    """Connections to ``host:port`` (or the unix socket ``path``, or wherever ``resolve`` says), ``max_connections``
    at most. ``execute`` runs one command, ``pipeline`` several in one write; both raise what redis-py raises."""

    def __init__(self, *, host: str = "localhost", port: int = 6379, path: str | None = None,
                 resolve: Resolve | None = None, username: str | None = None, password: str | None = None,
                 db: int = 0, ssl_context: ssl.SSLContext | Callable[[], ssl.SSLContext] | None = None,
                 connect_timeout: float = 2.0,
                 max_connections: int = 256, pool_timeout: float = 2.0, lib: tuple[str, str] | None = None,
                 max_reply_bytes: int = MAX_REPLY_BYTES) -> None:
        self._address: Any = path if path is not None else (host, port)
        self._path = path
        self._resolve = resolve
        self._ssl = ssl_context
        self._connect_timeout = connect_timeout
        self.max_connections = max(1, int(max_connections))
        self.pool_timeout = pool_timeout
        self._max_reply = max_reply_bytes
        self._idle: list[LeanConnection] = []
        self._size = 0  # connections open or being opened
        self._waiters: deque[asyncio.Future[LeanConnection | None]] = deque()
        self._closed = False
        hello: list[tuple[Any, ...]] = []
        if password is not None:
            hello.append(("AUTH", password) if username is None else ("AUTH", username, password))
        if db:
            hello.append(("SELECT", db))
        self._checked = len(hello)  # the replies that must be OK (CLIENT SETINFO may be unknown to the server)
        if lib is not None:
            hello += [("CLIENT", "SETINFO", "LIB-NAME", lib[0]), ("CLIENT", "SETINFO", "LIB-VER", lib[1])]
        self._hello = b"".join(pack_command(c) for c in hello)
        self._hello_count = len(hello)

    @property
    def size(self) -> int:
        """Connections open (idle or in use) or being opened."""
        return self._size

    # -- commands ---------------------------------------------------------------------------------
    async def execute(self, *args: Any) -> Any:
        """One command's reply; an error reply raised as redis-py's exception for it."""
        packed = pack_command(args)  # an argument of no RESP type fails here, before a connection is taken
        idle = self._idle
        conn = idle.pop() if idle else None
        if conn is None or conn.lost is not None:
            conn = await self._acquire(conn)
        try:
            reply = await conn.send(packed)
        except BaseException:
            self._discard(conn)
            raise
        self._give(conn)
        if type(reply) is ReplyError:
            raise self._error(reply)
        return reply

    async def pipeline(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """The replies of ``commands``, sent in one write on one connection; error replies are returned in place as
        redis-py's exceptions (not raised), but a demoted Sentinel master fails the whole pipeline."""
        packed = b"".join([pack_command(tuple(c)) for c in commands])
        idle = self._idle
        conn = idle.pop() if idle else None
        if conn is None or conn.lost is not None:
            conn = await self._acquire(conn)
        try:
            reply = await conn.send(packed, len(commands))
        except BaseException:
            self._discard(conn)
            raise
        self._give(conn)
        replies: list[Any] = reply if len(commands) != 1 else [reply]  # one command: its reply, not a list
        errors = [i for i, r in enumerate(replies) if type(r) is ReplyError]
        for i in errors:
            replies[i] = self._error(replies[i])
        return replies

    def _error(self, reply: ReplyError) -> Exception:
        error = error_of(reply)
        if self._resolve is not None and isinstance(error, ReadOnlyError):
            # The master we are connected to was demoted: every idle connection is to a replica now.
            self._drop_idle()
            return RedisConnectionError("The previous master is now a slave")
        return error

    # -- the pool ---------------------------------------------------------------------------------
    async def _acquire(self, broken: LeanConnection | None) -> LeanConnection:
        """A connection when none idle was usable (``broken``: one found lost while idle): an idle one, a new one
        while the pool is under its size, else the next one given back (waiting at most ``pool_timeout``)."""
        while broken is not None:  # lost while idle (the server closed it): forget it and look further
            self._size -= 1
            broken = self._idle.pop() if self._idle else None
            if broken is not None and broken.lost is None:
                return broken
        if self._closed:
            raise RedisConnectionError("the connection pool is closed")
        if self._size < self.max_connections:
            self._size += 1
            return await self._open()
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[LeanConnection | None] = loop.create_future()
        self._waiters.append(waiter)
        timer = loop.call_later(self.pool_timeout, _expire, waiter)
        try:
            handed = await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                given = waiter.result()  # handed over as this operation was cancelled: pass it on
                if given is None:
                    self._size -= 1
                    self._wake()
                else:
                    self._give(given)
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise
        finally:
            timer.cancel()
        if handed is None:  # a place freed up (its size already counted for us): open a connection
            return await self._open()
        return handed

    async def _open(self) -> LeanConnection:
        """A new, set-up connection; its place in the pool is counted already (given up on failure)."""
        try:
            return await self._connect()
        except BaseException:
            self._size -= 1
            self._wake()
            raise

    async def _connect(self) -> LeanConnection:
        address = self._address
        if self._resolve is not None:
            address = await self._resolve()
            if address != self._address:
                self._address = address
                self._drop_idle()  # a failover: what is idle is connected to the old master
            address = self._address  # the same object for every connection to it (``_give`` compares identity)
        if callable(self._ssl):  # built at the first connection: a missing file is an unavailable store, not a crash
            self._ssl = self._ssl()
        loop = asyncio.get_running_loop()

        def made() -> LeanConnection:
            return LeanConnection(loop, address, self._max_reply)

        try:
            async with asyncio.timeout(self._connect_timeout):
                if self._path is not None:
                    _, conn = await loop.create_unix_connection(made, self._path, ssl=self._ssl)
                else:
                    host, port = address
                    _, conn = await loop.create_connection(made, host, port, ssl=self._ssl,
                                                           server_hostname=host if self._ssl is not None else None)
        except TimeoutError:
            raise RedisTimeoutError("Timeout connecting to server") from None
        except (ssl.SSLError, ssl.CertificateError):
            raise
        except OSError as exc:
            where = self._path if self._path is not None else f"{address[0]}:{address[1]}"
            # worded as redis-py words it (what the 503's message and the logs have always said)
            text = f"Error {exc.errno} connecting to {where}. {exc.strerror}." if exc.errno is not None and \
                exc.strerror else f"Error connecting to {where}. {exc}."
            raise RedisConnectionError(text) from exc
        if self._hello_count:
            try:
                replies = await conn.send(self._hello, self._hello_count)
            except BaseException:
                conn.drop()
                raise
            replies = replies if self._hello_count > 1 else [replies]
            for reply in replies[:self._checked]:
                if type(reply) is ReplyError:
                    conn.drop()
                    raise error_of(reply)
        return conn

    def _give(self, conn: LeanConnection) -> None:
        """Back after a whole reply: to the first waiter, else idle (closed instead if it is unusable or stale)."""
        if conn.lost is not None or self._closed or conn.address is not self._address:
            self._discard(conn)
            return
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        self._idle.append(conn)

    def _discard(self, conn: LeanConnection) -> None:
        conn.drop()
        self._size -= 1
        self._wake()

    def _wake(self) -> None:
        """A place freed up: the first waiter opens a connection in it."""
        waiters = self._waiters
        while waiters and self._size < self.max_connections:
            waiter = waiters.popleft()
            if not waiter.done():
                self._size += 1
                waiter.set_result(None)
                return

    def _drop_idle(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            self._discard(conn)

    async def aclose(self) -> None:
        """Close every idle connection now, and every connection in use when it comes back."""
        self._closed = True
        self._drop_idle()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(RedisConnectionError("the connection pool is closed"))


def _expire(waiter: asyncio.Future[Any]) -> None:
    if not waiter.done():
        waiter.set_exception(RedisConnectionError("No connection available."))


def tls_context(*, ca_file: str | None, cert_file: str | None, key_file: str | None,
                check_hostname: bool) -> ssl.SSLContext:
    """The TLS context redis-py builds for the same options (connect.py ``_tls_kwargs``): certificates required."""
    context = ssl.create_default_context()
    context.check_hostname = check_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    if cert_file or key_file:
        context.load_cert_chain(certfile=cert_file, keyfile=key_file)  # type: ignore[arg-type]
    if ca_file:
        context.load_verify_locations(cafile=ca_file)
    return context
