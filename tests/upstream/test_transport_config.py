"""The provider's transport settings: defaults, validation, and how they reach the client."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, parse_config
from gateway.config.model import ProviderConfig
from gateway.config.transport import PoolLimits, Timeouts
from gateway.providers.upstreams import upstream_pool

BASE = """
providers:
  p: {type: openai, base_url: "http://127.0.0.1:9/v1"%s}
models:
  m: {targets: [{provider: p, model: x}]}
"""


def provider_config(extra: str = "") -> ProviderConfig:
    return parse_config(BASE % extra, {}).providers["p"]


def test_defaults() -> None:
    p = provider_config()
    assert p.timeouts == Timeouts(connect=10.0, read=600.0, write=30.0, pool=30.0)
    assert p.limits == PoolLimits(max_connections=1000, keepalive_expiry=4.0, max_response_bytes=33554432)


def test_values_and_validation() -> None:
    p = provider_config(", write_timeout_s: 5, pool_timeout_s: 1.5, idle_timeout_s: 0, max_response_bytes: 1048576")
    assert (p.timeouts.write, p.timeouts.pool, p.limits.keepalive_expiry, p.limits.max_response_bytes) == (
        5.0, 1.5, 0.0, 1048576)
    for bad, message in ((", max_response_bytes: 0", "providers.p.max_response_bytes: must be > 0, got 0"),
                         (", max_response_bytes: 1.5", "providers.p.max_response_bytes: expected an integer"),
                         (", idle_timeout_s: -1", "providers.p.idle_timeout_s: must be >= 0, got -1.0"),
                         (", pool_timeout_s: 0", "providers.p.pool_timeout_s: must be > 0, got 0.0"),
                         (", write_timeout_s: fast", "providers.p.write_timeout_s: expected a number")):
        with pytest.raises(ConfigError) as caught:
            provider_config(bad)
        assert str(caught.value).startswith(message), str(caught.value)


def test_the_pool_builds_each_client_with_its_providers_settings() -> None:
    p = provider_config(", write_timeout_s: 5, pool_timeout_s: 1.5, idle_timeout_s: 2, max_response_bytes: 4096")
    client = upstream_pool({"p": p})._client("p")
    assert client.timeouts is p.timeouts and client.limits is p.limits
    assert (client.timeouts.write, client.timeouts.pool, client.limits.keepalive_expiry,
            client.limits.max_response_bytes) == (5.0, 1.5, 2.0, 4096)
