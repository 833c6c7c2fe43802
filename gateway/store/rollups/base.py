"""Rollups: each replica's traffic per short interval, kept for a bounded time, read by the console.

Every replica writes one small record per interval (``observability.rollups.resolution_s``, 10 s by
default): what its counters added during that interval (requests, errors, latency buckets, tokens,
failovers, per route). The console's overview sums the records of every replica, so its charts
show the whole deployment whichever replica answers. Beside the series, each replica keeps a
*status* record (its view of every circuit) that is replaced on each write and expires when the
replica stops writing, so a replica that is gone drops out of the picture.

Records are opaque JSON bytes here: the store keeps and trims them, the recorder
(``gateway/observability/rollups.py``) decides what they hold.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

#: default interval between records, seconds
DEFAULT_RESOLUTION_S = 10.0
#: default retention of the series, seconds (an hour)
DEFAULT_RETENTION_S = 3600.0
#: a replica whose status is older than this many intervals is no longer shown
STATUS_INTERVALS = 3
#: the most records one read returns (an hour at 1 s resolution for 50 replicas is 180,000; a
#: read of the console's hour at the default resolution is 360 per replica)
MAX_READ = 20_000


class RollupStore(ABC):
    """Per-replica interval records with a bounded retention, and each replica's latest status."""

    def __init__(self, retention_s: float, status_ttl_s: float) -> None:
        self.retention_s = retention_s
        self.status_ttl_s = status_ttl_s

    @abstractmethod
    async def write(self, replica: str, at: float, record: bytes, status: bytes) -> None:
        """Append ``record`` (the interval ending at ``at``) and replace ``replica``'s status.

        Records older than the retention are dropped here (each write trims), so nothing grows
        without bound even when no one reads.
        """

    @abstractmethod
    async def read(self, since: float) -> list[bytes]:
        """Every replica's records from ``since`` on, oldest first (at most ``MAX_READ``)."""

    @abstractmethod
    async def statuses(self) -> dict[str, bytes]:
        """The latest status of every replica that wrote within ``status_ttl_s``."""
