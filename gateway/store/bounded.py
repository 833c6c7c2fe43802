"""The byte bound of the embedded store: an expiring map that evicts its oldest entries past a budget.

``memory://`` keeps everything in the gateway process, so anything a caller can make it store
(Responses records, background runs' events, paused loops, tool results) must have a ceiling in
bytes, or a burst of large requests takes the process down with it. Each domain gets its share of
``store.memory_max_bytes`` (``config/store_section.py``): past it, the entries written longest ago
go first, counted in ``loopgate_store_evictions_total``; the bytes held are the
``loopgate_store_memory_bytes`` gauge.

Sizes are what the entry costs to keep, measured cheaply: the length of the serialised bytes the
domain already makes (plus a fixed overhead per entry for the key and bookkeeping), never a deep
``sys.getsizeof`` walk on the request path.

Order is write order (a rewrite or a ``touch`` moves an entry to the newest end), which is also
deadline order when a domain writes with one TTL: pruning expired entries pops from the oldest
end, and an entry with a shorter TTL behind a longer one still expires exactly on read.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

from gateway.observability.metrics import STORE_EVICTIONS, STORE_MEMORY_BYTES

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: each domain's share of ``store.memory_max_bytes``: stored responses are what callers grow the most;
#: background runs hold their stream events; paused loops, the tool ledger and artifacts are small
MEMORY_SHARES: dict[str, float] = {"responses": 0.5, "background": 0.25, "continuations": 0.125,
                                   "ledger": 0.0625, "artifacts": 0.03125, "audit": 0.03125}


def share(total: int, domain: str) -> int:
    """The bytes ``domain`` may hold out of ``total``."""
    return int(total * MEMORY_SHARES[domain])


#: what an entry costs besides its value: the key, the tuple and the dict slot (an estimate, on purpose)
ENTRY_OVERHEAD = 128


class BoundedMap(Generic[K, V]):
    """key -> value with a deadline and a size; the total size stays at or under ``max_bytes``.

    Two exceptions, both the caller's to bound: one entry larger than ``max_bytes`` is kept alone,
    and entries ``evictable`` protects are never evicted (``make_room`` then says no).

    ``on_drop(key, value, size)`` is told of every entry that leaves (evicted, expired, popped or
    replaced), so a domain can keep its own accounting (a tenant's stored bytes) exact.
    """

    __slots__ = ("_items", "_pruned_at", "domain", "evictable", "max_bytes", "nbytes", "on_drop")

    def __init__(self, domain: str, max_bytes: int, on_drop: Callable[[K, V, int], None] | None = None,
                 evictable: Callable[[V], bool] | None = None) -> None:
        self.domain = domain
        self.max_bytes = max_bytes
        self.nbytes = 0
        self.on_drop = on_drop
        #: entries it says no to are never evicted (a background run still going: its owner writes to it)
        self.evictable = evictable
        self._items: OrderedDict[K, tuple[V, float, int]] = OrderedDict()
        self._pruned_at = float("-inf")

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[K]:
        return iter(self._items)

    def get(self, key: K, now: float) -> V | None:
        item = self._items.get(key)
        if item is None:
            return None
        if item[1] <= now:
            self._drop(key)
            return None
        return item[0]

    def set(self, key: K, value: V, size: int, deadline: float, now: float) -> None:
        """Store (or replace) ``key``, then evict the oldest entries while over the bound.

        An entry larger than the whole bound is still stored (alone): refusing it is the caller's
        business (its own size caps), and evicting everything else already makes room.
        """
        items = self._items
        size += ENTRY_OVERHEAD
        if key in items:
            self._drop(key)
        items[key] = (value, deadline, size)
        self.nbytes += size
        self.prune(now)
        if self.nbytes > self.max_bytes:
            self._evict(key)
        STORE_MEMORY_BYTES.set(self.nbytes, self.domain)

    def resize(self, key: K, size: int, now: float) -> None:
        """A value that grew or shrank in place (a run's event list): account for it, evict if over."""
        item = self._items.get(key)
        if item is None:
            return
        self._items[key] = (item[0], item[1], size + ENTRY_OVERHEAD)
        self.nbytes += size + ENTRY_OVERHEAD - item[2]
        if self.nbytes > self.max_bytes:
            self._evict(key)
        STORE_MEMORY_BYTES.set(self.nbytes, self.domain)

    def touch(self, key: K, deadline: float, extend_only: bool = True) -> bool:
        """Keep ``key`` until ``deadline`` (at least, with ``extend_only``) and make it the newest entry.

        False when it is gone.
        """
        item = self._items.get(key)
        if item is None:
            return False
        if deadline > item[1] or not extend_only:
            self._items[key] = (item[0], deadline, item[2])
        self._items.move_to_end(key)
        return True

    def pop(self, key: K) -> V | None:
        if key not in self._items:
            return None
        value = self._drop(key)
        STORE_MEMORY_BYTES.set(self.nbytes, self.domain)
        return value

    def prune(self, now: float) -> None:
        """Drop expired entries from the oldest end (stops at the first live one).

        At most once a second: an expired entry may be held a second longer (a read never returns
        it), and a burst of writes does not pay for a look at the oldest entry each.
        """
        if now < self._pruned_at + 1.0:
            return
        self._pruned_at = now
        items = self._items
        while items:
            key, item = next(iter(items.items()))
            if item[1] > now:
                return
            self._drop(key)

    def _evict(self, keep: K) -> None:
        self.make_room(0, keep)

    def make_room(self, extra: int, keep: K) -> bool:
        """Evict the oldest entries (never ``keep``, nor what ``evictable`` protects) until ``extra`` more bytes fit.

        False when they still do not fit (only protected entries are left): the caller refuses its write.
        """
        items = self._items
        evicted = 0
        limit = self.max_bytes - extra
        if self.evictable is None:
            while self.nbytes > limit and len(items) > 1:
                key = next(iter(items))
                if key == keep:
                    break
                self._drop(key)
                evicted += 1
        else:
            allowed = self.evictable
            for key, item in list(items.items()):
                if self.nbytes <= limit:
                    break
                if key != keep and allowed(item[0]):
                    self._drop(key)
                    evicted += 1
        if evicted:
            STORE_EVICTIONS.inc(self.domain, amount=evicted)
        return self.nbytes <= limit

    def _drop(self, key: K) -> V:
        value, _, size = self._items.pop(key)
        self.nbytes -= size
        if self.on_drop is not None:
            self.on_drop(key, value, size)
        return value
