"""Sentinel and Cluster pools wait for a free connection like the single-node one; TLS checks the hostname."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from gateway.config.model import StoreSentinel, StoreTls
from gateway.store.errors import StoreUnavailable
from gateway.store.redis import RedisStore
from gateway.store.redis_client.client import RedisIO
from tests.redis_servers import (
    PATIENT,
    ClusterHandle,
    RedisProcess,
    TlsCerts,
    spawn_redis,
    start_or_skip,
    start_sentinel_group,
)

#: every command below holds its connection this long (a blocking pop on an empty list)
HOLD_S = 0.2
#: more commands at once than the pool has connections
CONCURRENT = 6


async def _past_the_pool(io: RedisIO, key: str) -> list[Any]:
    """``CONCURRENT`` commands that each hold a connection, at once, through a pool of 2."""
    async def one() -> Any:
        async with io.guard("test"):
            return await io.client.blpop([key], HOLD_S)
    return list(await asyncio.gather(*(one() for _ in range(CONCURRENT)), return_exceptions=True))


@pytest.mark.slow
async def test_sentinel_pool_waits_for_a_connection_past_its_size(tmp_path: Path) -> None:
    manager = start_sentinel_group(tmp_path, replicas=0, sentinels=1)
    group = start_or_skip(manager.__enter__)
    sentinel = StoreSentinel(master=group.master_name, nodes=tuple(("127.0.0.1", s.port) for s in group.sentinels))
    # Before: a plain SentinelConnectionPool raised MaxConnectionsError for the third command at once.
    io = RedisIO("redis:///0", sentinel=sentinel, max_connections=2, pool_timeout=60, op_timeout=60)
    try:
        assert await _past_the_pool(io, "loopgate:test:empty") == [None] * CONCURRENT
        pool = io.client.connection_pool
        assert len(pool._in_use_connections) + len(pool._available_connections) <= 2
    finally:
        await io.aclose()
        manager.__exit__(None, None, None)


@pytest.mark.slow
async def test_sentinel_pool_wait_is_bounded_by_pool_timeout(tmp_path: Path) -> None:
    manager = start_sentinel_group(tmp_path, replicas=0, sentinels=1)
    group = start_or_skip(manager.__enter__)
    sentinel = StoreSentinel(master=group.master_name, nodes=tuple(("127.0.0.1", s.port) for s in group.sentinels))
    io = RedisIO("redis:///0", sentinel=sentinel, max_connections=1, pool_timeout=0.05, op_timeout=60)
    try:
        async def hold() -> Any:
            async with io.guard("hold"):
                return await io.client.blpop(["loopgate:test:empty"], 1)
        holder = asyncio.ensure_future(hold())
        deadline = time.monotonic() + 30
        while not io.client.connection_pool._in_use_connections:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        with pytest.raises(StoreUnavailable, match="No connection available"):
            async with io.guard("waits"):
                await io.client.ping()
        assert await holder is None
    finally:
        await io.aclose()
        manager.__exit__(None, None, None)


async def test_cluster_commands_wait_for_a_connection_past_the_pool_size(redis_cluster: ClusterHandle) -> None:
    # Before: the node's pool raised MaxConnectionsError (a 503) for the third command at once.
    io = RedisIO(redis_cluster.url, max_connections=2, pool_timeout=60, op_timeout=60)
    try:
        assert await _past_the_pool(io, "loopgate:{test}:empty") == [None] * CONCURRENT
        assert io._gate is not None and not io._gate.waiting
    finally:
        await io.aclose()


@pytest.mark.slow
async def test_cluster_wait_is_bounded_by_pool_timeout(redis_cluster: ClusterHandle) -> None:
    io = RedisIO(redis_cluster.url, max_connections=1, pool_timeout=0.05, op_timeout=60)
    try:
        entered = asyncio.Event()

        async def hold() -> Any:
            async with io.guard("hold"):
                entered.set()
                return await io.client.blpop(["loopgate:{test}:empty"], 1)
        holder = asyncio.ensure_future(hold())
        await asyncio.wait_for(entered.wait(), 30)
        with pytest.raises(StoreUnavailable, match="no cluster connection free"):
            async with io.guard("waits"):
                await io.client.ping()
        assert await holder is None
    finally:
        await io.aclose()


# -- TLS hostname check ---------------------------------------------------------------------------

def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


@pytest.fixture
def misnamed_tls_server(tmp_path: Path, tls_certs: TlsCerts) -> Iterator[RedisProcess]:
    """A TLS server whose certificate (signed by the test CA) names another host, not 127.0.0.1."""
    ca_dir = Path(tls_certs.ca_file).parent
    (tmp_path / "other.ext").write_text("subjectAltName=DNS:redis.other.example\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=redis.other.example", "-keyout", "other.key",
             "-out", "other.csr", cwd=tmp_path)
    _openssl("x509", "-req", "-in", "other.csr", "-CA", str(ca_dir / "ca.crt"), "-CAkey", str(ca_dir / "ca.key"),
             "-CAcreateserial", "-days", "2", "-out", "other.crt", "-extfile", "other.ext", cwd=tmp_path)
    certs = TlsCerts(ca_file=tls_certs.ca_file, server_cert=str(tmp_path / "other.crt"),
                     server_key=str(tmp_path / "other.key"), client_cert=tls_certs.client_cert,
                     client_key=tls_certs.client_key)
    server = start_or_skip(spawn_redis, tmp_path, tls=certs, wait=False)
    try:
        deadline = time.monotonic() + 20
        probe = redis.Redis(port=server.port, ssl=True, ssl_ca_certs=certs.ca_file, ssl_certfile=certs.client_cert,
                            ssl_keyfile=certs.client_key, ssl_check_hostname=False, socket_timeout=2)
        while True:
            try:
                if probe.ping():
                    break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, server.log_tail()
                time.sleep(0.05)
        probe.close()
        yield server
    finally:
        server.kill()


async def test_tls_checks_the_server_hostname_by_default(misnamed_tls_server: RedisProcess,
                                                        tls_certs: TlsCerts) -> None:
    files = {"ca_file": tls_certs.ca_file, "cert_file": tls_certs.client_cert, "key_file": tls_certs.client_key}
    url = f"rediss://127.0.0.1:{misnamed_tls_server.port}/0"
    checked = RedisStore(url, tls=StoreTls(**files), **PATIENT)
    unchecked = RedisStore(url, tls=StoreTls(**files, check_hostname=False), **PATIENT)
    try:
        reason = await checked.unavailable_reason()
        assert reason is not None and "match" in reason.lower(), reason  # the certificate is for another host
        assert await unchecked.unavailable_reason() is None, "check_hostname: false accepts the CA-signed certificate"
    finally:
        await checked.aclose()
        await unchecked.aclose()
