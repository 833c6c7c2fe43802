"""``RedisIO``: the one object every Redis domain store talks to Redis through.

It owns the connection (one server, Sentinel or Cluster: connect.py) and offers, as public methods,
what each domain needs beyond plain commands:

* ``command(*args)`` / ``script(...)``: on one server and behind Sentinel these go through the lean command
  path (``lean``: lean_pool.py, about a fifth of redis-py's cost per round trip); on a Cluster through
  redis-py's cluster client. ``client`` is redis-py's client, for what needs its reply callbacks.
* ``guard(op)``: outages fail fast. Bounded connect/read timeouts, a single retry in redis-py (for a
  pooled connection the server dropped; the lean path writes a command once and never reuses a connection
  that broke) and a deadline over each whole operation (deadlines.py; ``store.timeout_ms``;
  ``guard(op, fail_open=True)``: ``store.fail_open_ms``, for what fails open: limits, budgets,
  usage), so a hung server (connections open, no answers) costs a bounded wait; every connection,
  timeout, failover (CLUSTERDOWN, TRYAGAIN, READONLY, MASTERDOWN), authentication or permission
  error surfaces as ``StoreUnavailable`` with a message that never contains a credential.
* ``register(lua)``: a script called by its SHA, reloaded after a flush or a failover.
* ``run(key, build, durable)``: commands as one pipeline on the node owning ``key``.
* ``script(script, keys, args, durable)``: one script call, confirmed by ``WAIT`` when durable.
* ``confirmed(acked)`` / ``unconfirmed(op, acked)``: durability (``wait_replicas`` > 0): a write
  followed by ``WAIT N timeout`` in the same pipeline (hence on the same connection to the node
  that owns the key) is acknowledged only when N replicas confirmed it, so a failover cannot lose
  what a client was told. A shortfall is ``ReplicationUnconfirmed`` (a ``StoreUnavailable``: a 503).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import (
    AskError,
    AuthenticationWrongNumberOfArgsError,
    ClusterDownError,
    MovedError,
    NoPermissionError,
    NoScriptError,
    ReadOnlyError,
    RedisClusterException,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.config.model import StoreSentinel, StoreTls
from gateway.store.errors import ReplicationUnconfirmed, StoreUnavailable
from gateway.store.redis_client.connect import ClusterGate, connect
from gateway.store.redis_client.deadlines import DONE, EXPIRED, DeadlineQueue, Deadlines
from gateway.store.redis_client.lean_pool import LeanPool

# Redis errors that mean "not available right now" (an outage, a failover in progress, a
# misconfigured credential): a 503 for this request, never a 500 with a traceback.
UNAVAILABLE: tuple[type[BaseException], ...] = (
    RedisConnectionError, RedisTimeoutError, OSError, ClusterDownError, TryAgainError, ReadOnlyError,
    RedisClusterException, NoPermissionError, AuthenticationWrongNumberOfArgsError, MovedError, AskError,
)

#: queues commands on a pipeline (redis-py's pipelines are untyped)
Build = Callable[[Any], None]
Script = AsyncScript


def describe(exc: BaseException) -> str:
    """A short, credential-free cause for logs and errors.

    redis-py's "no master found" text embeds the whole client repr (secrets redacted, but a
    kilobyte long); keep its head and the per-sentinel errors at its end.
    """
    text = str(exc)
    head, sep, rest = text.partition(" : <")
    if sep:
        text = f"{head} ({rest.rpartition(' - ')[2]})" if " - " in rest else head
    return text[:300]


def unavailable(op: str, deadline: float, exc: BaseException) -> StoreUnavailable:
    cause = describe(exc) or f"no answer within {deadline}s"  # our deadline has no message
    return StoreUnavailable(f"redis unavailable during {op}: {cause}")


class Guard:
    """``RedisIO.guard`` without a Cluster gate, as a plain object rather than a generator.

    Every Redis round trip of the request path enters one, so it skips what
    ``asynccontextmanager`` adds (a generator, its wrapper, two extra frames per side), and its
    deadline is an entry in a queue of deadlines of the same length with one timer for all of them
    (deadlines.py) rather than a timer of its own (``asyncio.timeout``), with the same cancellation rules.
    """

    __slots__ = ("_cancelling", "_entry", "_queue", "deadline", "op")

    def __init__(self, op: str, deadline: float, queue: DeadlineQueue) -> None:
        self.op = op
        self.deadline = deadline
        self._queue = queue

    async def __aenter__(self) -> None:
        task = asyncio.current_task()
        assert task is not None, "a store operation runs in a task"
        self._cancelling = task.cancelling()
        self._entry = self._queue.start(task)

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        entry = self._entry
        if entry[2] == EXPIRED:
            # The deadline cancelled the task: a timeout, unless someone else asked for a cancellation too
            # (then it propagates as one), as asyncio.timeout decides.
            if entry[1].uncancel() <= self._cancelling and kind is asyncio.CancelledError:
                raise unavailable(self.op, self.deadline, TimeoutError()) from exc
        else:
            entry[2] = DONE
        if exc is not None and isinstance(exc, UNAVAILABLE):
            raise unavailable(self.op, self.deadline, exc) from exc
        return False


def evalsha(pipe: Any, script: Script, keys: list[str], args: list[Any]) -> None:
    """Queue a registered script by its SHA on ``pipe`` (``RedisIO.run`` loads it on NOSCRIPT)."""
    pipe.evalsha(script.sha, len(keys), *keys, *args)


class RedisIO:
    """A ``redis[s][+cluster]://`` or ``unix://`` URL plus the deployment options of ``store`` (see README)."""

    def __init__(self, url: str, *, username: str | None = None, password: str | None = None,
                 tls: StoreTls | None = None, cluster: bool = False, sentinel: StoreSentinel | None = None,
                 wait_replicas: int = 0, wait_timeout_ms: int = 500, socket_connect_timeout: float = 2.0,
                 socket_timeout: float = 2.0, op_timeout: float = 1.0, fail_open_timeout: float = 0.1,
                 max_connections: int = 256, pool_timeout: float = 2.0, health_check_interval: float = 30.0) -> None:
        wait_s = wait_timeout_ms / 1000 if wait_replicas > 0 else 0.0
        self._conn = connect(url, username=username, password=password, tls=tls, cluster=cluster, sentinel=sentinel,
                             socket_connect_timeout=socket_connect_timeout,
                             # A WAIT holds the connection for up to its timeout: the read must outlast it.
                             socket_timeout=max(socket_timeout, wait_s + 1.0) if wait_s else socket_timeout,
                             max_connections=max_connections, pool_timeout=pool_timeout,
                             health_check_interval=health_check_interval)
        #: the client plain commands go to (a cluster client follows slot moves itself)
        self.client: aioredis.Redis | RedisCluster = self._conn.client
        self.cluster = self._conn.cluster
        self.description = self._conn.description
        # A deadline for each whole operation: redis-py retries at the command and the connect level,
        # so against a hung server the socket timeouts alone would add up to several times their value.
        self.op_timeout = op_timeout
        #: the deadline of what fails open (limits, budgets, usage): never longer than ``op_timeout``
        self.fail_open_timeout = min(fail_open_timeout, op_timeout)
        self._durable_timeout = op_timeout + wait_s
        self._gate = self._conn.gate
        #: the lean command path (lean_pool.py) where one server holds every key (one server, Sentinel); None on a
        #: Cluster, whose client follows slot moves itself
        self.lean = self._conn.lean
        self.wait_replicas = max(0, int(wait_replicas))
        self.wait_timeout_ms = max(1, int(wait_timeout_ms))
        self._scripts: dict[str, Script] = {}
        self._deadlines = Deadlines()

    def register(self, lua: str) -> Script:
        """``lua`` as a script called by its SHA (each call is an EVALSHA, with a SCRIPT LOAD after a flush)."""
        script = self.client.register_script(lua)
        return self._scripts.setdefault(script.sha, script)

    def guard(self, op: str, durable: bool = False, fail_open: bool = False) -> AbstractAsyncContextManager[None]:
        """Turn "Redis is not there" into ``StoreUnavailable``; other Redis errors are bugs and propagate.

        ``fail_open``: the caller lets the request through without the store, so it waits only
        ``fail_open_timeout``. On a Cluster the operation first waits (within the same deadline)
        for a connection permit (connect.py ``ClusterGate``).
        """
        deadline = self.fail_open_timeout if fail_open else self._durable_timeout if durable else self.op_timeout
        if self._gate is None:
            return Guard(op, deadline, self._deadlines.queue(deadline))
        return self._gated(op, deadline, self._gate)

    @staticmethod
    @asynccontextmanager
    async def _gated(op: str, deadline: float, gate: ClusterGate) -> AsyncIterator[None]:
        try:
            async with asyncio.timeout(deadline):
                async with gate.permit():
                    yield
        except UNAVAILABLE as exc:  # builtin TimeoutError is an OSError
            raise unavailable(op, deadline, exc) from exc

    async def pipeline(self, key: str, commands: list[tuple[Any, ...]]) -> list[Any]:
        """``commands`` (raw, as for ``command``) as one pipeline on the node owning ``key``: on the lean path
        where there is one, else through ``run``. Every command runs; the first error reply is then raised."""
        lean = self.lean
        if lean is None:
            def build(pipe: Any) -> None:
                for command in commands:
                    pipe.execute_command(*command)

            return (await self.run(key, build, False))[0]
        replies = await lean.pipeline(commands)
        failed = next((r for r in replies if isinstance(r, Exception)), None)
        if failed is not None:
            raise failed
        return replies

    async def run(self, key: str, build: Build, durable: bool) -> tuple[list[Any], int | None]:
        """Run ``build``'s commands as one pipeline on the node owning ``key``; with durability, then ``WAIT``.

        Returns the replies and the number of replicas ``WAIT`` confirmed (None without durability).
        One pipeline is one connection, which is what ``WAIT`` counts. Scripts go in as plain
        EVALSHA: on NOSCRIPT every registered script is loaded and the pipeline sent again (nothing
        in it ran). On a Cluster, a MOVED/ASK or a lost node re-reads the slot map and retries
        once on the new owner; the pipeline is not a transaction, so nothing runs twice.
        """
        wait = durable and self.wait_replicas > 0
        client = await self._conn.owner(key)
        loaded = moved = False
        while True:
            try:
                async with client.pipeline(transaction=False) as pipe:
                    build(pipe)
                    if wait:
                        pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
                    replies = await pipe.execute()
            except NoScriptError:
                if loaded:
                    raise
                loaded = True
                for script in self._scripts.values():
                    await client.script_load(script.script)
                continue
            except (MovedError, AskError, RedisConnectionError, ReadOnlyError):
                if not self.cluster or moved:
                    raise
                moved = True
                with contextlib.suppress(Exception):
                    await self._conn.refresh()
                moved_to = await self._conn.owner(key)
                if moved_to is client:
                    raise
                client = moved_to
                continue
            if wait:
                return list(replies[:-1]), int(replies[-1])
            return list(replies), None

    async def command(self, *args: Any) -> Any:
        """One command's raw reply (bytes, ints, lists; redis-py's reply callbacks are not applied), on the lean
        path where there is one. Under a ``guard``, as every operation."""
        lean = self.lean
        if lean is not None:
            return await lean.execute(*args)
        return await self.client.execute_command(*args)

    async def script(self, script: Script, keys: list[str], args: list[Any], durable: bool) -> tuple[Any, int | None]:
        """One script call; waited for through ``run`` only when durability is on (else one plain EVALSHA)."""
        lean = self.lean
        if lean is not None:
            return await self._lean_script(lean, script, keys, args, durable and self.wait_replicas > 0)
        if not (durable and self.wait_replicas > 0):
            # EVALSHA on the client itself: redis-py's Script.__call__ adds two imports and copies per call
            try:
                return await self.client.evalsha(script.sha, len(keys), *keys, *args), None
            except NoScriptError:  # a flush or a failover emptied the script cache
                await self.client.script_load(script.script)
                return await self.client.evalsha(script.sha, len(keys), *keys, *args), None

        def call(pipe: Any) -> None:
            evalsha(pipe, script, keys, args)

        replies, acked = await self.run(keys[0], call, True)
        return replies[0], acked

    async def _lean_script(self, lean: LeanPool, script: Script, keys: list[str], args: list[Any],
                           wait: bool) -> tuple[Any, int | None]:
        """``script`` as one EVALSHA on the lean path, followed by ``WAIT`` on the same connection when ``wait``;
        on NOSCRIPT (a flush or a failover emptied the script cache) every registered script is loaded and the
        call sent again (it did not run)."""
        call = ("EVALSHA", script.sha, len(keys), *keys, *args)
        for loaded in (False, True):
            try:
                if not wait:
                    return await lean.execute(*call), None
                reply, acked = await lean.pipeline([call, ("WAIT", self.wait_replicas, self.wait_timeout_ms)])
                for error in (reply, acked):
                    if isinstance(error, Exception):
                        raise error
                return reply, int(acked)
            except NoScriptError:
                if loaded:
                    raise
                loads = [("SCRIPT", "LOAD", known.script) for known in self._scripts.values()]
                failed = next((r for r in await lean.pipeline(loads) if isinstance(r, Exception)), None)
                if failed is not None:
                    raise failed from None
        raise AssertionError("unreachable")  # pragma: no cover

    def confirmed(self, acked: int | None) -> bool:
        """The write was confirmed by enough replicas (None: durability is off, nothing to confirm)."""
        return acked is None or acked >= self.wait_replicas

    def unconfirmed(self, op: str, acked: int | None) -> ReplicationUnconfirmed:
        """The error for a write of ``op`` that ``WAIT`` did not confirm."""
        return ReplicationUnconfirmed(
            f"redis did not confirm {op} on {self.wait_replicas} replica(s) within {self.wait_timeout_ms} ms "
            f"({acked or 0} confirmed); it was not acknowledged")

    async def unavailable_reason(self) -> str | None:
        """Why Redis cannot be used right now, or None when it answers. Never raises."""
        try:
            async with self.guard("ping"):
                await self.client.ping()
        except StoreUnavailable as exc:
            return str(exc)
        except Exception as exc:  # an unexpected reply is as unready as no reply; never raise from a probe
            return f"{type(exc).__name__}: {exc}"
        return None

    async def ping(self) -> bool:
        """True when Redis answers. Never raises."""
        try:
            async with self.guard("ping"):
                return bool(await self.client.ping())
        except Exception:
            return False

    async def aclose(self) -> None:
        await self._conn.aclose()
