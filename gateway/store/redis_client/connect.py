"""Building the Redis client for a deployment: one server, a Sentinel-managed master, or a Cluster.

The store itself speaks to whatever this returns; only two things differ by deployment and are
answered here: which client to send commands to, and (Cluster only) a plain client for the node
that owns a key, so a write and its ``WAIT`` run on one connection to that node.

Credentials come from the URL (``redis://user:pass@host``) or from ``username``/``password``
(never both: the config loader rejects that). They never appear in ``describe()`` or error text.
"""

from __future__ import annotations

import asyncio
import contextvars
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from urllib.parse import unquote, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import BlockingConnectionPool
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import ExponentialBackoff

from gateway.config.model import StoreSentinel, StoreTls
from gateway.store.redis_client.lean_pool import LeanPool, tls_context

DEFAULT_PORT = 6379

# What every connection reports in CLIENT SETINFO, made once: without it, redis-py 7 builds one per
# new connection and reads its package metadata through importlib, a costly step (bench/README.md).
# Older redis-py reads its version once, at import, and has no ``driver_info`` parameter.
try:
    from redis.driver_info import DriverInfo
except ImportError:  # redis-py < 7
    _DRIVER_KWARGS: dict[str, Any] = {}
    from redis import __version__ as _redis_version
    _LIB = ("redis-py", _redis_version)
else:
    _DRIVER_KWARGS = {"driver_info": DriverInfo()}
    _LIB = (_DRIVER_KWARGS["driver_info"].formatted_name, _DRIVER_KWARGS["driver_info"].lib_version)


@dataclass(frozen=True, slots=True)
class RedisUrl:
    """The parts of a store URL the client needs (``+cluster`` stripped into ``cluster``)."""

    scheme: str  # redis | rediss | unix
    cluster: bool
    host: str
    port: int
    db: int
    username: str | None
    password: str | None = field(repr=False)

    @property
    def tls(self) -> bool:
        return self.scheme == "rediss"


def parse_url(url: str) -> RedisUrl:
    """Parse ``redis[s][+cluster]://[user[:password]@]host[:port][/db]`` or ``unix://path``; ``ValueError`` if bad."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    cluster = scheme.endswith("+cluster")
    base = scheme.removesuffix("+cluster")
    if base not in ("redis", "rediss", "unix") or (cluster and base == "unix"):
        raise ValueError(f"unsupported scheme {scheme!r}")
    db_text = parts.path.strip("/") if base != "unix" else ""
    if db_text and not db_text.isdigit():
        raise ValueError(f"the database must be a number, got {db_text!r}")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError as exc:
        raise ValueError("the port must be a number") from exc
    return RedisUrl(scheme=base, cluster=cluster, host=parts.hostname or "localhost", port=port,
                    db=int(db_text or 0), username=unquote(parts.username) if parts.username else None,
                    password=unquote(parts.password) if parts.password is not None else None)


def _tls_kwargs(tls: StoreTls | None) -> dict[str, Any]:
    """The TLS options, the hostname check explicit: redis-py before 6.0 defaults it off."""
    files = tls or StoreTls()
    return {"ssl_cert_reqs": "required", "ssl_ca_certs": files.ca_file, "ssl_certfile": files.cert_file,
            "ssl_keyfile": files.key_file, "ssl_check_hostname": files.check_hostname}


class BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """The Sentinel master's pool, blocking like the single-node one: past ``max_connections`` a command
    waits up to ``timeout`` for a free connection instead of failing at once with ``MaxConnectionsError``.

    ``SentinelConnectionPool`` only adds where to connect (the master the sentinels name); the
    waiting comes from ``BlockingConnectionPool``, next in the method order.
    """


#: set while the current task holds a permit of a ``ClusterGate`` (so a nested operation takes none)
_HOLDING: contextvars.ContextVar[bool] = contextvars.ContextVar("loopgate_cluster_permit", default=False)


class ClusterGate:
    """Bounded waiting for a Cluster client, whose per-node pools cannot block.

    redis-py's ``ClusterNode`` hands out connections from a fixed-size list and raises
    ``MaxConnectionsError`` when it is used up; it has no blocking variant. Each store operation
    uses at most one connection per node at a time, so letting at most ``max_connections``
    operations run at once keeps every node's pool within its size; the others wait here up to
    ``timeout`` seconds (then ``ConnectionError``, as the single-node pool's wait ends). A nested
    operation of a task that already holds a permit runs on it.
    """

    def __init__(self, max_connections: int, timeout: float) -> None:
        self.max_connections = max_connections
        self.timeout = timeout
        self._permits = asyncio.Semaphore(max_connections)

    @property
    def waiting(self) -> bool:
        """Whether every permit is taken (a new operation would wait)."""
        return self._permits.locked()

    @asynccontextmanager
    async def permit(self) -> AsyncIterator[None]:
        if _HOLDING.get():
            yield
            return
        try:
            async with asyncio.timeout(self.timeout):
                await self._permits.acquire()
        except TimeoutError:
            raise aioredis.ConnectionError(
                f"no cluster connection free within {self.timeout}s ({self.max_connections} in use)") from None
        token = _HOLDING.set(True)
        try:
            yield
        finally:
            _HOLDING.reset(token)
            self._permits.release()


@dataclass(slots=True)
class RedisClients:
    """The client the store sends commands to, and how to reach the node owning a key (Cluster)."""

    client: aioredis.Redis | RedisCluster
    cluster: bool
    description: str
    # Cluster only: the connection options of a plain client for one node (TLS, credentials, timeouts).
    node_kwargs: dict[str, Any] = field(default_factory=dict, repr=False)
    #: Cluster only: the bounded wait for a connection (redis-py's cluster pools do not block)
    gate: ClusterGate | None = None
    #: one server or Sentinel: the lean command path of the hot operations (lean_pool.py); None on a Cluster
    lean: LeanPool | None = None
    _nodes: dict[tuple[str, int], aioredis.Redis] = field(default_factory=dict, repr=False)

    async def owner(self, key: str) -> aioredis.Redis:
        """A plain client for the master that owns ``key`` (the client itself unless clustered).

        One pipeline on it runs on one connection, so a ``WAIT`` after a write counts that write.
        """
        if not self.cluster:
            return self.client  # type: ignore[return-value]  # a Redis when not clustered
        cluster: RedisCluster = self.client  # type: ignore[assignment]
        await cluster.initialize()  # no-op once the slot map is known
        node = cluster.get_node_from_key(key)
        if node is None:
            raise aioredis.ConnectionError(f"no cluster node serves the slot of {key!r}")
        address = (node.host, int(node.port))
        found = self._nodes.get(address)
        if found is None:
            kwargs = dict(self.node_kwargs)
            pool = BlockingConnectionPool(host=node.host, port=int(node.port),
                                          max_connections=kwargs.pop("max_connections"),
                                          timeout=kwargs.pop("pool_timeout"), **kwargs)
            found = aioredis.Redis.from_pool(pool)
            self._nodes[address] = found
        return found

    async def refresh(self) -> None:
        """Re-read the slot map after a node answered MOVED or went away (a failover)."""
        if self.cluster:
            cluster: RedisCluster = self.client  # type: ignore[assignment]
            await cluster.nodes_manager.initialize()

    async def aclose(self) -> None:
        if self.lean is not None:
            await self.lean.aclose()
        for node in self._nodes.values():
            await node.aclose()
        self._nodes.clear()
        await self.client.aclose()


def connect(url: str, *, username: str | None = None, password: str | None = None, tls: StoreTls | None = None,
            cluster: bool = False, sentinel: StoreSentinel | None = None, socket_connect_timeout: float = 2.0,
            socket_timeout: float = 2.0, max_connections: int = 256, pool_timeout: float = 2.0,
            health_check_interval: float = 30.0) -> RedisClients:
    """The clients for ``url`` and the deployment options; nothing connects until the first command."""
    common: dict[str, Any] = {
        **_DRIVER_KWARGS,
        "socket_connect_timeout": socket_connect_timeout,
        "socket_timeout": socket_timeout,
        "health_check_interval": health_check_interval,
    }
    parsed = parse_url(url)
    user = username if username is not None else parsed.username
    secret = password if password is not None else parsed.password
    if user is not None:
        common["username"] = user
    if secret is not None:
        common["password"] = secret
    # One quick retry covers a pooled connection the server closed; an outage still fails fast.
    retry = Retry(ExponentialBackoff(cap=0.2, base=0.02), 1)

    if sentinel is not None:
        master_kwargs = dict(common, db=parsed.db, retry=retry, max_connections=max_connections)
        if parsed.tls:
            master_kwargs.update(ssl=True, **_tls_kwargs(tls))
        # The same quick retry as the data connections (redis-py's default backs off for seconds).
        sentinel_kwargs: dict[str, Any] = {**_DRIVER_KWARGS, "socket_connect_timeout": socket_connect_timeout,
                                           "socket_timeout": socket_timeout, "retry": retry}
        if sentinel.username is not None:
            sentinel_kwargs["username"] = sentinel.username
        if sentinel.password is not None:
            sentinel_kwargs["password"] = sentinel.password
        if sentinel.tls:
            sentinel_kwargs.update(ssl=True, **_tls_kwargs(tls))
        manager = Sentinel(list(sentinel.nodes), sentinel_kwargs=sentinel_kwargs, **master_kwargs)
        client = manager.master_for(sentinel.master, connection_pool_class=BlockingSentinelPool, timeout=pool_timeout)
        nodes = ", ".join(f"{h}:{p}" for h, p in sentinel.nodes)
        lean = LeanPool(resolve=partial(manager.discover_master, sentinel.master), username=user, password=secret,
                        db=parsed.db, ssl_context=_tls_context(tls) if parsed.tls else None,
                        connect_timeout=socket_connect_timeout, max_connections=max_connections,
                        pool_timeout=pool_timeout, lib=_LIB)
        return RedisClients(client=client, cluster=False, lean=lean,
                            description=f"sentinel master {sentinel.master!r} via {nodes}")

    if cluster or parsed.cluster:
        if parsed.db:
            raise ValueError("a Redis Cluster has only database 0")
        node_kwargs = dict(common, retry=retry, max_connections=max_connections, pool_timeout=pool_timeout)
        cluster_kwargs = dict(common, max_connections=max_connections)
        if parsed.tls:
            node_kwargs.update(connection_class=aioredis.SSLConnection, **_tls_kwargs(tls))
            cluster_kwargs.update(ssl=True, **_tls_kwargs(tls))
        client = RedisCluster(host=parsed.host, port=parsed.port, **cluster_kwargs)
        return RedisClients(client=client, cluster=True, node_kwargs=node_kwargs,
                            gate=ClusterGate(max_connections, pool_timeout),
                            description=f"cluster via {parsed.scheme}://{parsed.host}:{parsed.port}")

    # One server (or a unix socket): a blocking pool, so load waits for a connection rather than failing.
    # URL credentials are parsed by redis-py itself; only the separately configured ones are passed.
    extra = {k: v for k, v in common.items() if k not in ("username", "password")}
    if username is not None:
        extra["username"] = username
    if password is not None:
        extra["password"] = password
    if parsed.tls:
        extra.update(_tls_kwargs(tls))
    pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=max_connections, timeout=pool_timeout,
                                                    retry=retry, **extra)
    where = "unix socket" if parsed.scheme == "unix" else f"{parsed.scheme}://{parsed.host}:{parsed.port}/{parsed.db}"
    return RedisClients(client=aioredis.Redis.from_pool(pool), cluster=False, description=where,
                        lean=_lean_pool(url, parsed, user, secret, tls, socket_connect_timeout, max_connections,
                                        pool_timeout))


def _tls_context(tls: StoreTls | None) -> Callable[[], ssl.SSLContext]:
    """The lean pool's TLS context, built at its first connection (a missing file fails it, as in redis-py)."""
    files = tls or StoreTls()
    return partial(tls_context, ca_file=files.ca_file, cert_file=files.cert_file, key_file=files.key_file,
                   check_hostname=files.check_hostname)


def _lean_pool(url: str, parsed: RedisUrl, username: str | None, password: str | None, tls: StoreTls | None,
               connect_timeout: float, max_connections: int, pool_timeout: float) -> LeanPool | None:
    """The lean path's pool for one server, set up as redis-py sets up its connections for ``url``; None when the
    URL carries options in its query string (redis-py reads them; the hot operations then go through redis-py)."""
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        return None
    return LeanPool(host=parsed.host, port=parsed.port, path=parts.path if parsed.scheme == "unix" else None,
                    username=username, password=password, db=parsed.db,
                    ssl_context=_tls_context(tls) if parsed.tls else None, connect_timeout=connect_timeout,
                    max_connections=max_connections, pool_timeout=pool_timeout, lib=_LIB)
