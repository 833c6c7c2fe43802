"""Keeps this process's snapshot of managed keys in step with the store.

Every change to a managed key bumps the store's generation. A background task reads that one
number every ``interval_s`` (0.25 s) and reloads the records only when it moved, so a revoke, an
edit or a new key reaches every replica within that interval while a request for an unchanged key
never touches the store. An expiry needs no reload at all: ``authenticate`` compares
``expires_at`` with the clock.

While the store does not answer, the last snapshot stays in force (fail-static: known keys keep
working, a revoke made elsewhere waits for the store) and the outage is logged once.

The same task purges, every ``PURGE_INTERVAL_S``, the records revoked or expired longer ago than
the store's retention (``auth.key_retention_days``); a create purges too. With ``memory://`` it
only purges: nothing else can change the process's own keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from gateway.cancellation import check_cancelled, stop_tasks
from gateway.config.model import ApiKey
from gateway.governance.keys import KeyRing
from gateway.store.errors import StoreUnavailable
from gateway.store.keys.base import KeyStore, from_record

log = logging.getLogger("loopgate.keys")

POLL_INTERVAL_S = 0.25
#: ended records past the retention are purged this often (each call removes at most PURGE_BATCH)
PURGE_INTERVAL_S = 60.0


class KeySync:
    def __init__(self, store: KeyStore, ring: KeyRing, poll: bool, interval_s: float = POLL_INTERVAL_S,
                 purge_interval_s: float = PURGE_INTERVAL_S) -> None:
        self._store = store
        self._ring = ring
        self._poll_enabled = poll
        self._interval = interval_s
        self._purge_interval = purge_interval_s
        self._next_purge = 0.0
        self._generation: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    async def start(self) -> None:
        with contextlib.suppress(StoreUnavailable):  # logged by the poll; start-up must not fail on it
            await self.reload()
        self._task = asyncio.create_task(self._poll(), name="loopgate-key-sync")

    async def stop(self) -> None:
        if self._task is not None:
            await stop_tasks([self._task], "managed keys")

    async def reload(self) -> None:
        generation, records = await self._store.load()
        managed: list[tuple[bytes, ApiKey]] = []
        for record in records:
            try:
                managed.append(from_record(record))
            except (KeyError, TypeError, ValueError):
                log.error("skipping an unreadable managed key record (id %r)", str(record.get("id"))[:40])
        self._ring.replace_managed(managed, generation)
        self._generation = generation

    async def _poll(self) -> None:
        interval = self._interval if self._poll_enabled else self._purge_interval
        while True:
            check_cancelled()  # a store call may have swallowed the cancellation (gateway/cancellation.py)
            await asyncio.sleep(interval)
            try:
                now = time.monotonic()
                if now >= self._next_purge:
                    self._next_purge = now + self._purge_interval
                    if await self._store.purge(time.time()) and not self._poll_enabled:
                        await self.reload()  # memory: nobody else bumps a generation this loop would see
                if self._poll_enabled and await self._store.generation() != self._generation:
                    await self.reload()
                if self._failing:
                    log.warning("managed keys: the store answers again; the key snapshot is current")
                    self._failing = False
            except StoreUnavailable as exc:
                if not self._failing:
                    log.warning("managed keys: the store does not answer (%s); the last snapshot stays in force", exc)
                    self._failing = True
            except Exception:
                log.exception("managed keys: reloading failed; the last snapshot stays in force")
