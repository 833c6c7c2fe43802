"""The ``store`` config section: URL forms, TLS files, credentials, Sentinel, Cluster and wait_replicas."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from redis.asyncio.cluster import RedisCluster

from gateway.config import ConfigError, parse_config
from gateway.config.model import StoreConfig, StoreSentinel, StoreTls
from gateway.config.store_section import DEFAULT_CLAIM_LEASE_MARGIN_S
from gateway.loop.continuations import Continuations
from gateway.redact import Redactor
from gateway.store.continuations.base import Continuation
from gateway.store.factory import open_configured_store
from gateway.store.memory import MemoryStore
from gateway.store.redis import RedisStore
from gateway.store.redis_client.connect import connect, parse_url
from tests.store.conftest import REDIS_URL, require_redis


def store_of(section: str, env: dict[str, str] | None = None) -> StoreConfig:
    return parse_config(f"store: {section}", env or {}).store


def problem(section: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        store_of(section)
    return caught.value


def test_defaults_and_url_forms() -> None:
    assert store_of("{}") == StoreConfig()
    for url in ("redis://h:6379/2", "rediss://h:6380/0", "unix:///run/redis.sock", "redis+cluster://h:7000",
                "rediss+cluster://u:p@h:7000"):
        config = store_of(f"{{url: '{url}'}}")
        assert config.kind == "redis" and config.wait_replicas == 0 and config.wait_timeout_ms == 500
        assert config.cluster == ("+cluster" in url)
    assert store_of("{url: 'redis://h', cluster: true}").cluster is True


def test_tls_files(tmp_path: Path) -> None:
    for name in ("ca.crt", "client.crt", "client.key"):
        (tmp_path / name).write_text("x")
    config = store_of(f"{{url: 'rediss://h:6380', tls: {{ca_file: '{tmp_path}/ca.crt', "
                      f"cert_file: '{tmp_path}/client.crt', key_file: '{tmp_path}/client.key'}}}}")
    assert config.tls == StoreTls(f"{tmp_path}/ca.crt", f"{tmp_path}/client.crt", f"{tmp_path}/client.key")
    assert problem(f"{{url: 'redis://h', tls: {{ca_file: '{tmp_path}/ca.crt'}}}}").path == "store.tls"
    assert problem("{url: 'rediss://h', tls: {ca_file: '/nonexistent/ca.crt'}}").path == "store.tls.ca_file"
    assert "both" in problem(f"{{url: 'rediss://h', tls: {{cert_file: '{tmp_path}/client.crt'}}}}").problem
    assert problem("{url: 'rediss://h', tls: {ca: x}}").path == "store.tls.ca"


def test_credentials_in_one_place_and_never_in_repr() -> None:
    config = store_of("{url: 'redis://h', username: app, password: '${PW}'}", {"PW": "hunter2"})
    assert (config.username, config.password) == ("app", "hunter2")
    assert "hunter2" not in repr(config)
    assert "hunter2" not in repr(store_of("{url: 'redis://app:hunter2@h/0'}"))
    # An unset environment variable leaves the option unset.
    assert store_of("{url: 'redis://h', password: '${PW:-}'}").password is None
    error = problem("{url: 'redis://app:hunter2@h/0', password: other}")
    assert error.path == "store.password" and "hunter2" not in str(error)
    assert problem("{url: 'redis://app@h/0', username: other}").path == "store.username"
    assert "hunter2" not in str(problem("{url: 'postgres://u:hunter2@h/0'}"))


def test_store_passwords_are_redacted_from_logs() -> None:
    config = parse_config("store: {url: 'redis://u:url%40secret1@h/0', sentinel: {master: m, nodes: ['s:1'], "
                          "password: sentinel-secret}}", {})
    scrubbed = Redactor.from_config(config).scrub("a url%40secret1 b url@secret1 c sentinel-secret d")
    assert scrubbed == "a [redacted] b [redacted] c [redacted] d"
    other = parse_config("store: {url: 'rediss://h', password: store-secret}", {})
    assert Redactor.from_config(other).scrub("x store-secret") == "x [redacted]"


def test_sentinel_section() -> None:
    config = store_of("{url: 'rediss://:pw@ignored/3', sentinel: {master: mymaster, nodes: ['s1:26379', "
                      "'10.0.0.2:26380'], password: spw, tls: true}}")
    assert config.sentinel == StoreSentinel(master="mymaster", nodes=(("s1", 26379), ("10.0.0.2", 26380)),
                                            password="spw", tls=True)
    assert config.kind == "redis"
    # Without a url the sentinels are enough.
    assert store_of("{sentinel: {master: m, nodes: ['s:26379']}}").url == "redis://"
    assert problem("{sentinel: {nodes: ['s:26379']}}").path == "store.sentinel.master"
    assert problem("{sentinel: {master: m}}").path == "store.sentinel.nodes"
    assert problem("{sentinel: {master: m, nodes: ['s']}}").path == "store.sentinel.nodes[0]"
    assert problem("{sentinel: {master: m, nodes: [26379]}}").path == "store.sentinel.nodes[0]"
    assert problem("{cluster: true, url: 'redis://h', sentinel: {master: m, nodes: ['s:1']}}").path == \
        "store.sentinel"
    assert problem("{url: 'unix:///x.sock', sentinel: {master: m, nodes: ['s:1']}}").path == "store.url"


def test_cluster_and_wait_limits() -> None:
    assert "database 0" in problem("{url: 'redis+cluster://h:7000/3'}").problem
    assert problem("{url: 'unix:///x.sock', cluster: true}").path == "store.cluster"
    assert store_of("{url: 'redis://h', wait_replicas: 2, wait_timeout_ms: 250}").wait_replicas == 2
    assert problem("{url: 'redis://h', wait_replicas: -1}").path == "store.wait_replicas"
    assert problem("{url: 'redis://h', wait_timeout_ms: 0}").path == "store.wait_timeout_ms"
    assert problem("{url: 'redis://h', wait_timeout_ms: 600000}").path == "store.wait_timeout_ms"
    # Redis-only options on the embedded store are a mistake worth reporting.
    assert problem("{url: 'memory://', wait_replicas: 1}").path == "store.wait_replicas"
    assert problem("{url: 'memory://', cluster: true}").path == "store.cluster"


def test_parse_url() -> None:
    parsed = parse_url("rediss+cluster://us%40er:p%3Ass@node-1:7001")
    assert (parsed.scheme, parsed.cluster, parsed.host, parsed.port, parsed.db) == ("rediss", True, "node-1", 7001, 0)
    assert (parsed.username, parsed.password) == ("us@er", "p:ss") and parsed.tls
    assert "p:ss" not in repr(parsed)
    assert parse_url("redis://h/4").db == 4
    assert parse_url("redis://:pw@/2").password == "pw"  # the Sentinel form: no host
    assert store_of("{url: 'redis://:pw@/2', sentinel: {master: m, nodes: ['s:1']}}").url == "redis://:pw@/2"
    with pytest.raises(ValueError):
        parse_url("http://h")
    with pytest.raises(ValueError):
        parse_url("redis://h/x")


async def test_open_configured_store_picks_the_deployment() -> None:
    assert isinstance(open_configured_store(store_of("{}")), MemoryStore)
    cluster = open_configured_store(store_of("{url: 'redis+cluster://127.0.0.1:7000'}"))
    sentinel = open_configured_store(store_of("{sentinel: {master: m, nodes: ['127.0.0.1:26379']}}"))
    try:
        # constructing never connects
        assert isinstance(cluster, RedisStore) and isinstance(cluster.io.client, RedisCluster)
        assert isinstance(sentinel, RedisStore) and "sentinel master 'm'" in sentinel.description
    finally:
        await cluster.aclose()
        await sentinel.aclose()


async def test_new_connections_do_not_read_package_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    """redis-py 7 reads its version from package metadata for every new connection unless told once."""
    await require_redis()
    import redis.utils

    calls: list[int] = []
    real = redis.utils.get_lib_version
    monkeypatch.setattr(redis.utils, "get_lib_version", lambda: calls.append(1) or real())
    clients = connect(REDIS_URL)
    pool = clients.client.connection_pool
    try:
        held = [await pool.get_connection() for _ in range(4)]  # four distinct, new connections
        assert len({id(c) for c in held}) == 4
        for conn in held:
            await conn.send_command("PING")
            assert await conn.read_response() in (b"PONG", "PONG")
            await pool.release(conn)
    finally:
        await clients.client.aclose()
    assert calls == []


async def test_store_timeouts_and_the_tls_hostname_check_reach_the_client(tmp_path: Path) -> None:
    config = store_of("{url: 'redis://h:6379/0'}")
    assert (config.timeout_ms, config.fail_open_ms) == (1000, 100)
    config = store_of("{url: 'redis://h:6379/0', timeout_ms: 400, fail_open_ms: 50}")
    store = open_configured_store(config)
    try:
        assert isinstance(store, RedisStore)
        assert (store.io.op_timeout, store.io.fail_open_timeout) == (0.4, 0.05)
    finally:
        await store.aclose()
    assert problem("{url: 'redis://h', timeout_ms: 5}").path == "store.timeout_ms"
    assert problem("{url: 'redis://h', timeout_ms: 500, fail_open_ms: 600}").path == "store.fail_open_ms"
    assert problem("{url: 'redis://h', fail_open_ms: 0}").path == "store.fail_open_ms"
    (tmp_path / "ca.crt").write_text("x")
    assert store_of(f"{{url: 'rediss://h', tls: {{ca_file: '{tmp_path}/ca.crt'}}}}").tls.check_hostname is True  # type: ignore[union-attr]
    off = store_of(f"{{url: 'rediss://h', tls: {{ca_file: '{tmp_path}/ca.crt', check_hostname: false}}}}")
    assert off.tls == StoreTls(f"{tmp_path}/ca.crt", check_hostname=False)
    # The check is passed explicitly (redis-py before 6.0 defaults it off), on every deployment's connections.
    single = connect("rediss://h:6380/0", tls=off.tls)
    cluster = connect("rediss+cluster://h:7000", tls=off.tls)
    try:
        assert single.client.connection_pool.connection_kwargs["ssl_check_hostname"] is False
        assert connect("rediss://h:6380/0").client.connection_pool.connection_kwargs["ssl_check_hostname"] is True
        assert cluster.node_kwargs["ssl_check_hostname"] is False
    finally:
        await single.aclose()
        await cluster.aclose()


async def test_the_claim_lease_margin_is_configured_and_bounds_a_resumes_claim() -> None:
    """``store.claim_lease_margin_s``: 60 s by default, what a resume's claim outlives the request deadline by."""
    assert store_of("{url: 'memory://'}").claim_lease_margin_s == DEFAULT_CLAIM_LEASE_MARGIN_S == 60.0
    assert store_of("{claim_lease_margin_s: 5}").claim_lease_margin_s == 5.0
    for hostile in ("0.5", "0", "-1", "3601", "1.0e9", "'soon'", "true"):
        assert problem(f"{{claim_lease_margin_s: {hostile}}}").path == "store.claim_lease_margin_s"
    store = MemoryStore()
    paused = Continuation.new("acme", "smart", [{"tool_call_id": "call_1", "name": "t", "reason": "client",
                                                 "arguments": "{}"}], {"messages": []}, 600)
    await store.save_continuation(paused, 600)
    before = time.time()
    claimed = await Continuations(store, 600, 8.0, claim_lease_margin_s=5.0).claim(paused, "acme")
    assert claimed.claimed_until is not None and before + 13 <= claimed.claimed_until <= time.time() + 13
    assert Continuations(store, 600, 8.0).lease_s == 68.0  # the default margin
