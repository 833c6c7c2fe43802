"""The shared store: Redis, for several workers or replicas behind a load balancer.

Every key is under ``loopgate:``; the ``{...}`` part is the Redis Cluster hash tag, so every key
one Lua script or multi-key command touches lives in one slot (redis_client/keys.py). Each
domain's part (continuations, audit, health, outbox) lives in its subpackage and talks to Redis
through one ``RedisIO`` (redis_client/client.py: deployments, timeouts, durability), ``io`` here,
which the other Redis domain stores (keys, limits, usage, background, responses) share.
"""

from __future__ import annotations

from gateway.config.model import StoreSentinel, StoreTls
from gateway.store.audit.redis import RedisAudit
from gateway.store.base import Store
from gateway.store.continuations.redis import RedisContinuations
from gateway.store.health.redis import RedisHealth
from gateway.store.outbox.redis import RedisOutbox
from gateway.store.redis_client.client import RedisIO


class RedisStore(RedisContinuations, RedisAudit, RedisHealth, Store):
    """A ``redis[s][+cluster]://`` or ``unix://`` URL, plus the deployment options of ``store`` (see README)."""

    kind = "redis"

    def __init__(self, url: str, *, username: str | None = None, password: str | None = None,
                 tls: StoreTls | None = None, cluster: bool = False, sentinel: StoreSentinel | None = None,
                 wait_replicas: int = 0, wait_timeout_ms: int = 500, socket_connect_timeout: float = 2.0,
                 socket_timeout: float = 2.0, op_timeout: float = 1.0, fail_open_timeout: float = 0.1,
                 max_connections: int = 256,
                 pool_timeout: float = 2.0, audit_max: int = 10_000, health_check_interval: float = 30.0) -> None:
        io = RedisIO(url, username=username, password=password, tls=tls, cluster=cluster, sentinel=sentinel,
                     wait_replicas=wait_replicas, wait_timeout_ms=wait_timeout_ms,
                     socket_connect_timeout=socket_connect_timeout, socket_timeout=socket_timeout,
                     op_timeout=op_timeout, fail_open_timeout=fail_open_timeout, max_connections=max_connections,
                     pool_timeout=pool_timeout,
                     health_check_interval=health_check_interval)
        RedisContinuations.__init__(self, io)
        RedisAudit.__init__(self, io, audit_max)
        RedisHealth.__init__(self, io)
        self.description = io.description

    async def unavailable_reason(self) -> str | None:
        return await self.io.unavailable_reason()

    async def ping(self) -> bool:
        return await self.io.ping()

    def outbox(self, name: str) -> RedisOutbox:
        return RedisOutbox(self.io, name)  # stateless: all state is in Redis

    async def aclose(self) -> None:
        await self.io.aclose()
