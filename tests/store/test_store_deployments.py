"""Redis deployments on real local servers: ACL and TLS failures, WAIT durability, Cluster slots, Sentinel failover.

The contract itself runs against TLS+ACL and a Cluster in test_store_contract.py (see conftest);
this file covers what only a deployment can show.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from redis.crc import key_slot

from gateway.api.request.errors import to_gateway_error
from gateway.config.model import StoreSentinel, StoreTls
from gateway.store.continuations.base import Continuation, ContinuationConflict, ContinuationNotFound, resumed_entry
from gateway.store.errors import ReplicationUnconfirmed, StoreUnavailable
from gateway.store.redis import RedisStore
from gateway.store.redis_client.keys import record_key, tenant_key
from tests.redis_servers import (
    PATIENT,
    ClusterHandle,
    RedisProcess,
    TlsCerts,
    start_cluster,
    start_or_skip,
    start_redis,
    start_sentinel_group,
)
from tests.store.conftest import ACL_PASSWORD, ACL_USER, client_tls

T = TypeVar("T")


def _cont(tenant: str = "acme", ids: tuple[str, ...] = ("call_1", "call_2")) -> Continuation:
    pending = [{"tool_call_id": tc, "name": "t", "reason": "client", "arguments": "{}"} for tc in ids]
    return Continuation.new(tenant, "smart", pending, {"messages": [{"role": "user", "content": "hi"}]}, 60)


async def _eventually(op: Callable[[], Awaitable[T]], timeout_s: float) -> T:
    """``op()`` retried through ``StoreUnavailable`` (a failover in progress) until it succeeds."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await op()
        except StoreUnavailable:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


@pytest.fixture(scope="module")
def lone_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    """A plain server with no replica: ``WAIT 1`` can never be confirmed there."""
    manager = start_redis(tmp_path_factory.mktemp("lone"))
    server = start_or_skip(manager.__enter__)
    try:
        yield server
    finally:
        manager.__exit__(None, None, None)


# -- ACL and TLS ----------------------------------------------------------------------------------

async def test_wrong_password_is_a_clean_store_unavailable(tls_acl_server: RedisProcess, tls_certs: TlsCerts) -> None:
    store = RedisStore(f"rediss://{ACL_USER}:not-the-password@{tls_acl_server.address}/0", tls=client_tls(tls_certs),
                       **PATIENT)  # a TLS handshake on a busy machine can take longer than the default 1 s
    try:
        assert await store.ping() is False
        reason = await store.unavailable_reason()
        assert reason is not None and "not-the-password" not in reason
        assert "password" in reason.lower() or "auth" in reason.lower(), reason
        with pytest.raises(StoreUnavailable) as caught:
            await store.save_continuation(_cont(), 60)
        assert "not-the-password" not in str(caught.value)
        error = to_gateway_error(caught.value)
        assert error.status == 503 and error.code == "store_unavailable"
    finally:
        await store.aclose()


async def test_credentials_from_options_instead_of_the_url(tls_acl_server: RedisProcess, tls_certs: TlsCerts) -> None:
    store = RedisStore(f"rediss://{tls_acl_server.address}/0", username=ACL_USER, password=ACL_PASSWORD,
                       tls=client_tls(tls_certs), **PATIENT)
    try:
        assert await store.unavailable_reason() is None
        c = _cont()
        await store.save_continuation(c, 60)
        assert (await store.get_continuation(c.id, "acme")).id == c.id
    finally:
        with tls_acl_server.client() as admin:
            admin.flushall()
        await store.aclose()


async def test_tls_without_a_client_certificate_is_refused_cleanly(tls_acl_server: RedisProcess,
                                                                   tls_certs: TlsCerts) -> None:
    # The server requires client certificates (tls-auth-clients yes): the CA alone is not enough.
    store = RedisStore(f"rediss://{ACL_USER}:{ACL_PASSWORD}@{tls_acl_server.address}/0",
                       tls=StoreTls(ca_file=tls_certs.ca_file), **PATIENT)
    try:
        assert await store.unavailable_reason() is not None
        with pytest.raises(StoreUnavailable):
            await store.ledger_get("acme", "call_1")
    finally:
        await store.aclose()


async def test_plain_connection_to_a_tls_port_is_store_unavailable(tls_acl_server: RedisProcess) -> None:
    store = RedisStore(f"redis://{ACL_USER}:{ACL_PASSWORD}@{tls_acl_server.address}/0", socket_timeout=0.5,
                       op_timeout=1.5)
    try:
        with pytest.raises(StoreUnavailable):
            await store.get_continuation("cont_x", "acme")
    finally:
        await store.aclose()


# -- wait_replicas --------------------------------------------------------------------------------

@pytest.mark.slow
async def test_unconfirmed_writes_are_503_and_leave_nothing_half_written(lone_server: RedisProcess) -> None:
    url = f"redis://{lone_server.address}/0"
    durable = RedisStore(url, wait_replicas=1, wait_timeout_ms=100)
    plain = RedisStore(url, **PATIENT)
    try:
        # A pause nobody confirmed is not stored: no record, no index entry (the client gets a 503, no id).
        c = _cont()
        with pytest.raises(ReplicationUnconfirmed) as caught:
            await durable.save_continuation(c, 60)
        assert "1 replica" in str(caught.value)
        assert to_gateway_error(caught.value).status == 503
        with lone_server.client() as admin:
            assert admin.keys("*") == []
        with pytest.raises(ContinuationNotFound):
            await plain.get_continuation(c.id, "acme")
        # An unconfirmed claim is released: the continuation stays resumable.
        await plain.save_continuation(c, 60)
        with pytest.raises(ReplicationUnconfirmed):
            await durable.claim_continuation(c.id, "acme", 30)
        assert (await plain.get_continuation(c.id, "acme")).status == "pending"
        assert (await plain.claim_continuation(c.id, "acme", 30)).status == "claimed"
        # An unconfirmed end of a resume is undone: a failover could otherwise bring the claim back and let
        # the continuation be resumed twice; the client is told the resume failed, and it stays resumable.
        with pytest.raises(ReplicationUnconfirmed):
            await durable.finish_continuation(c.id, "acme")
        assert (await plain.get_continuation(c.id, "acme")).status == "pending"
        assert await plain.find_continuation_by_tool_call("acme", c.tool_call_ids[0]) == c.id
        assert (await plain.claim_continuation(c.id, "acme", 30)).status == "claimed"
        await plain.finish_continuation(c.id, "acme")
        with pytest.raises(ContinuationConflict):
            await plain.claim_continuation(c.id, "acme", 30)
        # An unconfirmed ledger entry is kept (the tool ran; the entry can only prevent a second run).
        with pytest.raises(ReplicationUnconfirmed):
            await durable.ledger_put("acme", "call_1", {"status": "ok", "content": "done"}, 60)
        assert await plain.ledger_get("acme", "call_1") == {"status": "ok", "content": "done"}
        # Reads and non-durable writes need no replica.
        assert await durable.ledger_get("acme", "call_1") is not None
        await durable.append_audit({"tenant": "acme", "event": "x"})
    finally:
        with lone_server.client() as admin:
            admin.flushall()
        await durable.aclose()
        await plain.aclose()


# -- Cluster ----------------------------------------------------------------------------------------

async def test_cluster_pause_across_two_nodes_is_on_their_replicas(redis_cluster: ClusterHandle) -> None:
    # A generous op deadline: a connection to a node of a six-process cluster on a saturated machine may take
    # longer than the default second (seen: "no answer within 1.0s" under load); what is checked is WAIT.
    store = RedisStore(redis_cluster.url, wait_replicas=1, wait_timeout_ms=2000, op_timeout=10.0)
    try:
        # A continuation whose record lives on another master than its tenant's index.
        index_owner = redis_cluster.master_of(tenant_key("acme", "tc", "call_1"))
        c = _cont()
        while redis_cluster.master_of(record_key(c.id)).port == index_owner.port:
            c = _cont()
        assert key_slot(record_key(c.id).encode()) != key_slot(tenant_key("acme", "tc", "call_1").encode())
        await store.save_continuation(c, 60)
        # WAIT 1 ran on each owning node: both replicas hold their part the moment save returns.
        for key in (record_key(c.id), tenant_key("acme", "tc", "call_1"), tenant_key("acme", "tc", "call_2")):
            replica = _replica_of(redis_cluster, redis_cluster.master_of(key))
            with replica.client() as c_replica:
                c_replica.execute_command("READONLY")
                assert c_replica.exists(key) == 1, key
        assert await store.find_continuation_by_tool_call("acme", "call_2") == c.id
        await store.claim_continuation(c.id, "acme", 30)
        await store.finish_continuation(c.id, "acme")
        assert await store.io.command("GET", tenant_key("acme", "tc", "call_1")) == resumed_entry(c.id).encode()
    finally:
        await store.aclose()
        for node in redis_cluster.masters():
            with node.client() as admin:
                admin.flushall()


def _replica_of(cluster: ClusterHandle, master: RedisProcess) -> RedisProcess:
    for node in cluster.nodes:
        if node.alive and node is not master:
            with node.client() as c:
                info = c.info("replication")
                if info.get("role") == "slave" and int(info.get("master_port", 0)) == master.port:
                    return node
    raise AssertionError(f"no replica of {master.address}")


# -- Sentinel ---------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.long(seconds=10)
async def test_sentinel_failover_keeps_acknowledged_writes(tmp_path: Path) -> None:
    manager = start_sentinel_group(tmp_path, replicas=2, sentinels=1, password="data-pw")
    group = start_or_skip(manager.__enter__)
    sentinel = StoreSentinel(master=group.master_name, nodes=tuple(("127.0.0.1", s.port) for s in group.sentinels))
    options: dict[str, Any] = {"password": "data-pw", "sentinel": sentinel, "wait_replicas": 1,
                               "wait_timeout_ms": 1000}
    store = RedisStore("redis://", **options)
    try:
        paused, claimed = _cont(ids=("call_p",)), _cont(ids=("call_c",))
        await store.save_continuation(paused, 60)
        await store.save_continuation(claimed, 60)
        await store.claim_continuation(claimed.id, "acme", 300)
        await store.ledger_put("acme", "call_c", {"status": "ok", "content": "ran once"}, 60)
        old = group.kill_master()
        new = group.wait_promoted()
        assert new.port != old.port
        # Everything acknowledged before the kill is on the promoted replica.
        got = await _eventually(lambda: store.get_continuation(paused.id, "acme"), 20)
        assert got.status == "pending" and got.data == paused.data
        assert (await store.get_continuation(claimed.id, "acme")).status == "claimed"
        assert await store.ledger_get("acme", "call_c") == {"status": "ok", "content": "ran once"}
        assert await store.find_continuation_by_tool_call("acme", "call_p") == paused.id
        # Durable writes work again once the remaining replica follows the new master.
        after = _cont(ids=("call_after",))
        await _eventually(lambda: store.save_continuation(after, 60), 20)
        assert (await store.claim_continuation(after.id, "acme", 30)).status == "claimed"
    finally:
        await store.aclose()
        manager.__exit__(None, None, None)


@pytest.mark.slow
async def test_sentinel_over_tls_with_passwords(tmp_path: Path, tls_certs: TlsCerts) -> None:
    manager = start_sentinel_group(tmp_path, replicas=1, sentinels=1, tls=tls_certs, password="data-pw",
                                   sentinel_password="sentinel-pw")
    group = start_or_skip(manager.__enter__)
    nodes = tuple(("127.0.0.1", s.port) for s in group.sentinels)
    tls = client_tls(tls_certs)
    good = RedisStore("rediss://:data-pw@/0", tls=tls, wait_replicas=1, wait_timeout_ms=2000, **PATIENT,
                      sentinel=StoreSentinel(master=group.master_name, nodes=nodes, password="sentinel-pw", tls=True))
    wrong = RedisStore("rediss://:data-pw@/0", tls=tls, **PATIENT,
                       sentinel=StoreSentinel(master=group.master_name, nodes=nodes, password="nope", tls=True))
    try:
        c = _cont()
        await good.save_continuation(c, 60)
        assert (await good.claim_continuation(c.id, "acme", 30)).status == "claimed"
        assert "sentinel master" in good.description
        # A sentinel that refuses us means no master can be found: a clean 503, not a traceback.
        reason = await wrong.unavailable_reason()
        assert reason is not None and "nope" not in reason and len(reason) < 400
        assert "No master found for 'loopgate'" in reason and "AuthenticationError" in reason, reason
        with pytest.raises(StoreUnavailable):
            await wrong.get_continuation(c.id, "acme")
    finally:
        await good.aclose()
        await wrong.aclose()
        manager.__exit__(None, None, None)


@pytest.mark.slow
@pytest.mark.long(seconds=13)
async def test_cluster_failover_keeps_acknowledged_writes(tmp_path: Path) -> None:
    # Its own cluster: killing a master must not disturb the shared one the contract suite uses.
    manager = start_cluster(tmp_path, n_masters=3, replicas=1)
    cluster = start_or_skip(manager.__enter__)
    # 3 s per operation (store.timeout_ms defaults to 1 s): right after the failover the claim's WAIT
    # (2 s) and the release of the unconfirmed claim through the cluster client, which is still
    # re-reading its slot map, take about 4 s; the test is about what is confirmed, not about time.
    store = RedisStore(cluster.url, wait_replicas=1, wait_timeout_ms=2000, op_timeout=3.0)
    try:
        c = _cont(ids=("call_x",))
        await store.save_continuation(c, 60)
        await store.ledger_put("acme", "call_x", {"status": "ok", "content": "ran once"}, 60)
        victim = cluster.master_of(record_key(c.id))
        cluster.kill(victim)
        promoted = cluster.wait_owner(record_key(c.id))
        assert promoted.port != victim.port
        # The store follows the new slot map (a refused connection or MOVED re-reads it) and finds the pause.
        got = await _eventually(lambda: store.get_continuation(c.id, "acme"), 20)
        assert got.status == "pending" and got.data == c.data
        assert await store.ledger_get("acme", "call_x") == {"status": "ok", "content": "ran once"}
        # The promoted master has no replica left: a waited claim is refused (and released), not left unprotected.
        with pytest.raises(ReplicationUnconfirmed):
            await store.claim_continuation(c.id, "acme", 30)
        assert (await store.get_continuation(c.id, "acme")).status == "pending"
        # Without waiting, the same pipeline path (one connection to the slot's new owner) works.
        relaxed = RedisStore(cluster.url)
        try:
            assert (await _eventually(lambda: relaxed.claim_continuation(c.id, "acme", 30), 20)).status == "claimed"
            await relaxed.finish_continuation(c.id, "acme")
            assert await relaxed.io.command("GET", tenant_key("acme", "tc", "call_x")) == resumed_entry(c.id).encode()
        finally:
            await relaxed.aclose()
    finally:
        await store.aclose()
        manager.__exit__(None, None, None)


@pytest.mark.slow
async def test_cluster_over_tls_with_a_password(tmp_path: Path, tls_certs: TlsCerts) -> None:
    manager = start_cluster(tmp_path, n_masters=3, replicas=0, tls=tls_certs, password="cluster-pw")
    cluster = start_or_skip(manager.__enter__)
    assert cluster.url.startswith("rediss+cluster://:cluster-pw@")
    store = RedisStore(cluster.url, tls=client_tls(tls_certs), **PATIENT)
    try:
        c = _cont()
        await store.save_continuation(c, 60)  # a pipeline per owning node: plain node clients, over TLS too
        await store.put_artifacts("acme", {"call_1": {"sig": "s"}}, 60)
        assert await store.get_artifacts("acme", ["call_1", "call_2"]) == {"call_1": {"sig": "s"}}
        assert (await store.claim_continuation(c.id, "acme", 30)).status == "claimed"
        await store.finish_continuation(c.id, "acme")
        assert await store.io.command("GET", tenant_key("acme", "tc", "call_1")) == resumed_entry(c.id).encode()
    finally:
        await store.aclose()
        manager.__exit__(None, None, None)
