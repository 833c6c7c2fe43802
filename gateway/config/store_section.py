"""The ``store`` section: one Redis node, TLS, ACL credentials, Sentinel, Cluster and ``wait_replicas``."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from gateway.config.checks import ConfigError, get, mapping, positive, type_name

STORE_KEYS = {"url", "continuation_ttl_s", "username", "password", "tls", "cluster", "sentinel", "wait_replicas",
              "wait_timeout_ms", "memory_max_bytes", "tenant_max_stored_bytes", "timeout_ms", "fail_open_ms",
              "claim_lease_margin_s"}
STORE_TLS_KEYS = {"ca_file", "cert_file", "key_file", "check_hostname"}
#: ``store.timeout_ms``: the deadline of every store operation that must succeed (a pause, a record)
DEFAULT_TIMEOUT_MS = 1000
#: ``store.fail_open_ms``: how long limits, budgets and usage wait for the store before failing open
DEFAULT_FAIL_OPEN_MS = 100
#: ``store.claim_lease_margin_s``: how long a resume's claim outlives the request deadline
DEFAULT_CLAIM_LEASE_MARGIN_S = 60.0
SENTINEL_KEYS = {"master", "nodes", "username", "password", "tls"}

#: what the embedded store may hold in all (split between its domains: store/bounded.py MEMORY_SHARES)
DEFAULT_MEMORY_MAX_BYTES = 256 * 1024 * 1024
#: stored Responses bytes per tenant (0: no quota); counted in the store, so shared by every replica
DEFAULT_TENANT_MAX_STORED_BYTES = 256 * 1024 * 1024
#: the floor of memory_max_bytes: below it the shares could not hold one request of the default body size
MIN_MEMORY_MAX_BYTES = 16 * 1024 * 1024

REDIS_SCHEMES: tuple[str, ...] = ("redis://", "rediss://", "unix://", "redis+cluster://", "rediss+cluster://")


@dataclass(frozen=True, slots=True)
class StoreTls:
    """Files for ``rediss://``: the CA that signed the server certificate, and a client certificate + key."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    #: the server certificate must name the host connected to (off only for certificates issued to IPs
    #: the clients do not use, e.g. behind a TCP proxy)
    check_hostname: bool = True


@dataclass(frozen=True, slots=True)
class StoreSentinel:
    """Sentinels that name the current master of ``master`` (the url's host is then ignored)."""

    master: str
    nodes: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    #: TLS to the sentinels themselves, with the files of ``store.tls``
    tls: bool = False


@dataclass(frozen=True, slots=True)
class StoreConfig:
    # repr=False: a URL may carry a password, and config objects end up in logs and tracebacks.
    url: str = field(default="memory://", repr=False)
    continuation_ttl_s: int = 86400
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: StoreTls | None = None
    cluster: bool = False
    sentinel: StoreSentinel | None = None
    #: a pause, a claim and a ledger entry are acknowledged only after WAIT confirms this many replicas
    wait_replicas: int = 0
    wait_timeout_ms: int = 500
    #: the embedded (memory://) store's byte bound: past it (per domain share) the oldest entries go
    memory_max_bytes: int = DEFAULT_MEMORY_MAX_BYTES
    #: a tenant's stored Responses bytes past which ``store: true`` requests are refused (0: no quota)
    tenant_max_stored_bytes: int = DEFAULT_TENANT_MAX_STORED_BYTES
    #: deadline of each store operation that must succeed: past it a pause is a 503, never acknowledged
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    #: limits, budgets and usage give up on the store after this long and let the request through
    fail_open_ms: int = DEFAULT_FAIL_OPEN_MS
    #: a resume's claim lasts ``routing.request_timeout_s`` plus this: a live resume never loses it, and one
    #: whose replica died frees it this long after its deadline
    claim_lease_margin_s: float = DEFAULT_CLAIM_LEASE_MARGIN_S

    @property
    def kind(self) -> str:
        return "redis" if self.sentinel is not None or self.url.startswith(REDIS_SCHEMES) else "memory"


def store_section(raw: Any) -> StoreConfig:
    section = mapping(raw, "store", STORE_KEYS)
    sentinel = _sentinel(section.get("sentinel"))
    # With sentinels the URL only carries the scheme, credentials and database: the host comes from them.
    url = get(section, "url", "store", str, "redis://" if sentinel else "memory://")
    if not url.startswith(("memory://", *REDIS_SCHEMES)):
        raise ConfigError("store.url", f"unsupported store '{_redacted(url)}' (use memory://, "
                          "redis://HOST:PORT/DB, rediss://, redis+cluster://, rediss+cluster:// or unix://)")
    ttl = get(section, "continuation_ttl_s", "store", int, 86400)
    # An empty value (an unset environment variable) means "not configured".
    username = get(section, "username", "store", str, "") or None
    password = get(section, "password", "store", str, "") or None
    cluster = get(section, "cluster", "store", bool, False) or url.startswith(("redis+cluster://", "rediss+cluster://"))
    tls = _store_tls(section.get("tls"))
    wait_replicas = get(section, "wait_replicas", "store", int, 0)
    if not 0 <= wait_replicas <= 16:
        raise ConfigError("store.wait_replicas", f"must be between 0 and 16, got {wait_replicas}")
    wait_timeout_ms = get(section, "wait_timeout_ms", "store", int, 500)
    if not 1 <= wait_timeout_ms <= 60_000:
        raise ConfigError("store.wait_timeout_ms", f"must be between 1 and 60000, got {wait_timeout_ms}")
    memory_max = get(section, "memory_max_bytes", "store", int, DEFAULT_MEMORY_MAX_BYTES)
    if not MIN_MEMORY_MAX_BYTES <= memory_max <= 1 << 40:
        raise ConfigError("store.memory_max_bytes", f"must be between {MIN_MEMORY_MAX_BYTES} (16 MiB) and "
                          f"{1 << 40} (1 TiB), got {memory_max}")
    quota = get(section, "tenant_max_stored_bytes", "store", int, DEFAULT_TENANT_MAX_STORED_BYTES)
    if not 0 <= quota <= 1 << 50:
        raise ConfigError("store.tenant_max_stored_bytes", f"must be 0 (no quota) or a byte count up to {1 << 50}, "
                          f"got {quota}")
    timeout_ms = get(section, "timeout_ms", "store", int, DEFAULT_TIMEOUT_MS)
    if not 10 <= timeout_ms <= 60_000:
        raise ConfigError("store.timeout_ms", f"must be between 10 and 60000, got {timeout_ms}")
    fail_open_ms = get(section, "fail_open_ms", "store", int, DEFAULT_FAIL_OPEN_MS)
    if not 1 <= fail_open_ms <= timeout_ms:
        raise ConfigError("store.fail_open_ms", f"must be between 1 and store.timeout_ms ({timeout_ms}), "
                          f"got {fail_open_ms}")
    margin = get(section, "claim_lease_margin_s", "store", float, DEFAULT_CLAIM_LEASE_MARGIN_S)
    if not 1.0 <= margin <= 3600.0:
        raise ConfigError("store.claim_lease_margin_s", f"must be between 1 and 3600 seconds, got {margin:g}")
    config = StoreConfig(url=url, continuation_ttl_s=int(positive(ttl, "store.continuation_ttl_s")),
                         username=username, password=password, tls=tls, cluster=cluster, sentinel=sentinel,
                         wait_replicas=wait_replicas, wait_timeout_ms=wait_timeout_ms, timeout_ms=timeout_ms,
                         fail_open_ms=fail_open_ms, memory_max_bytes=memory_max, tenant_max_stored_bytes=quota,
                         claim_lease_margin_s=margin)
    _check_store(config, section)
    return config


def _redacted(url: str) -> str:
    """``url`` with any password replaced, for error messages."""
    parts = urlparse(url)
    if parts.password is None:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)


def _check_store(config: StoreConfig, section: dict[str, Any]) -> None:
    """Combinations of store options that cannot work, reported at start-up rather than at the first request."""
    url = config.url
    if config.kind != "redis":
        for key in ("username", "password", "tls", "cluster", "sentinel"):
            if section.get(key) not in (None, False, "", {}):
                raise ConfigError(f"store.{key}", "only applies to a Redis store (store.url redis://...)")
        if config.wait_replicas:
            raise ConfigError("store.wait_replicas", "needs a Redis store with replicas (store.url redis://...)")
        return
    try:
        parts = urlparse(url)
        port, db = parts.port, parts.path.strip("/")
    except ValueError as exc:
        raise ConfigError("store.url", f"cannot parse '{_redacted(url)}': {exc}") from None
    if config.password is not None and parts.password is not None:
        raise ConfigError("store.password", "the password is also in store.url: set it in one place")
    if config.username is not None and parts.username:
        raise ConfigError("store.username", "a username is also in store.url: set it in one place")
    unix = url.startswith("unix://")
    if not unix and db and not db.isdigit():
        raise ConfigError("store.url", f"the database must be a number, got '{db}'")
    if port is not None and not 0 < port < 65536:
        raise ConfigError("store.url", f"port {port} is out of range")
    tls_url = url.startswith(("rediss://", "rediss+cluster://"))
    if config.tls is not None and not tls_url and not (config.sentinel and config.sentinel.tls):
        raise ConfigError("store.tls", "TLS files need a rediss:// (or rediss+cluster://) store.url")
    if config.cluster:
        if unix:
            raise ConfigError("store.cluster", "a Redis Cluster is reached over TCP, not a unix:// socket")
        if config.sentinel is not None:
            raise ConfigError("store.sentinel", "use either store.cluster or store.sentinel, not both")
        if db not in ("", "0"):
            raise ConfigError("store.url", f"a Redis Cluster has only database 0, got /{db}")
    if config.sentinel is not None and unix:
        raise ConfigError("store.url", "with store.sentinel use redis:// or rediss:// (the host comes from the "
                          "sentinels)")


def _store_tls(raw: Any) -> StoreTls | None:
    if raw is None:
        return None
    section = mapping(raw, "store.tls", STORE_TLS_KEYS)
    files: dict[str, str | None] = {}
    for key in ("ca_file", "cert_file", "key_file"):
        path = get(section, key, "store.tls", str, "") or None
        if path is not None and not os.path.isfile(path):
            raise ConfigError(f"store.tls.{key}", f"file not found: '{path}'")
        if path is not None and not os.access(path, os.R_OK):
            raise ConfigError(f"store.tls.{key}", f"file not readable by this user: '{path}'")
        files[key] = path
    if (files["cert_file"] is None) != (files["key_file"] is None):
        raise ConfigError("store.tls", "a client certificate needs both cert_file and key_file")
    return StoreTls(**files, check_hostname=get(section, "check_hostname", "store.tls", bool, True))


def _sentinel(raw: Any) -> StoreSentinel | None:
    if raw is None:
        return None
    section = mapping(raw, "store.sentinel", SENTINEL_KEYS)
    master = get(section, "master", "store.sentinel", str, "")
    if not master:
        raise ConfigError("store.sentinel.master", "is required: the name the sentinels monitor")
    nodes_raw = get(section, "nodes", "store.sentinel", list, [])
    if not nodes_raw:
        raise ConfigError("store.sentinel.nodes", "is required: a list of \"host:port\" sentinel addresses")
    nodes: list[tuple[str, int]] = []
    for i, node in enumerate(nodes_raw):
        path = f"store.sentinel.nodes[{i}]"
        if not isinstance(node, str):
            raise ConfigError(path, f"expected a \"host:port\" string, got {type_name(node)}")
        host, _, port_text = node.rpartition(":")
        host = host.strip("[]")
        if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ConfigError(path, f"expected \"host:port\", got '{node}'")
        nodes.append((host, int(port_text)))
    return StoreSentinel(master=master, nodes=tuple(nodes),
                         username=get(section, "username", "store.sentinel", str, "") or None,
                         password=get(section, "password", "store.sentinel", str, "") or None,
                         tls=get(section, "tls", "store.sentinel", bool, False))
