"""Time-to-live helpers shared by the domains: the TTL check, and the in-process map whose entries expire."""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def check_ttl(ttl_s: float) -> int:
    """Whole seconds, at least 1: Redis ``EX`` takes integers, and a zero TTL would delete what was just written."""
    if not ttl_s > 0:
        raise ValueError(f"ttl_s must be positive, got {ttl_s!r}")
    return max(1, math.ceil(ttl_s))


class TTLMap(Generic[K, V]):
    """A dict whose entries vanish at a deadline: lazily on read, and by pruning on every write."""

    def __init__(self) -> None:
        self._items: dict[K, tuple[V, float]] = {}
        self._heap: list[tuple[float, int, K]] = []
        self._seq = itertools.count()  # tie-breaker: keys themselves need not be orderable

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: K, now: float) -> V | None:
        item = self._items.get(key)
        if item is None:
            return None
        if item[1] <= now:
            del self._items[key]
            return None
        return item[0]

    def set(self, key: K, value: V, deadline: float, now: float) -> None:
        self._items[key] = (value, deadline)
        heapq.heappush(self._heap, (deadline, next(self._seq), key))
        self.prune(now)

    def replace(self, key: K, value: V, now: float) -> None:
        """A live entry's new value, keeping its deadline (nothing when it is gone)."""
        if self.get(key, now) is not None:
            self._items[key] = (value, self._items[key][1])

    def pop(self, key: K) -> None:
        self._items.pop(key, None)

    def prune(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, key = heapq.heappop(heap)
            item = self._items.get(key)
            if item is not None and item[1] <= now:
                del self._items[key]
        # Overwrites and deletes leave stale heap entries behind; rebuild when they dominate.
        if len(heap) > 2 * len(self._items) + 1024:
            self._heap = [(deadline, next(self._seq), key) for key, (_, deadline) in self._items.items()]
            heapq.heapify(self._heap)
