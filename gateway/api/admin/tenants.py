"""The tenants there are, and the config's keys: what the admin API, the inbox and the console list by.

A tenant exists when the config names it (``tenants``, or a key of its ``auth.keys``) or a
managed key belongs to it; the managed keys are read from the key store on each call, so a key
created on another replica a moment ago counts.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.config.model import ApiKey
from gateway.store.keys.base import KeyStore, tenant_of


class Tenants:
    __slots__ = ("_configured", "config_keys", "key_store")

    def __init__(self, config_keys: tuple[ApiKey, ...], configured: Iterable[str], key_store: KeyStore) -> None:
        #: ``auth.keys`` (read-only through the admin API: they change with the config file)
        self.config_keys = config_keys
        self.key_store = key_store
        self._configured = frozenset(configured) | {key.tenant for key in config_keys}

    async def known(self) -> list[str]:
        """Every tenant, sorted: the config's and the managed keys'."""
        _, records = await self.key_store.load()
        return sorted(self._configured | {tenant for record in records if (tenant := tenant_of(record)) is not None})

    def config_key(self, key_id: str) -> ApiKey | None:
        """The config key with this id, if any."""
        for key in self.config_keys:
            if key.id == key_id:
                return key
        return None

    async def of_key(self, key_id: str) -> str | None:
        """The tenant of a config or managed key; None when there is no such key (a deleted one's is gone)."""
        config_key = self.config_key(key_id)
        if config_key is not None:
            return config_key.tenant
        record = await self.key_store.get(key_id)
        return None if record is None else tenant_of(record)
