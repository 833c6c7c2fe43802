"""A provider's config as the transport sees it: the plain values of ``upstream.pool.Upstream``.

The one place that reads both a ``ProviderConfig`` and the transport's types, so that neither
config nor the transport imports the other (docs/architecture.md, "Packages").
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.config.providers_section import ProviderConfig
from gateway.upstream.pool import Upstream, UpstreamPool


def upstream_of(provider: ProviderConfig) -> Upstream:
    """The transport values of one provider: its timers, bounds, scheme and the headers it sets."""
    return Upstream(timeouts=provider.timeouts, limits=provider.limits, https=provider.base_url.startswith("https:"),
                    header_names=frozenset(name.lower() for name in provider.headers))


def upstream_pool(providers: Mapping[str, ProviderConfig]) -> UpstreamPool:
    """The pool for these providers, each known by its ``name`` (the name the router posts to)."""
    return UpstreamPool({provider.name: upstream_of(provider) for provider in providers.values()})
