"""What every store raises on purpose (each domain adds its own subclasses in its ``base``)."""

from __future__ import annotations


class StoreError(Exception):
    """Base class of everything the store raises on purpose."""


class StoreUnavailable(StoreError):
    """The backend cannot be reached (connection refused, timeout). ``__cause__`` holds the original error.

    Raised quickly (bounded socket timeouts) so a Redis outage becomes a 503, never a hung request.
    """


class ReplicationUnconfirmed(StoreUnavailable):
    """``WAIT`` confirmed fewer replicas than ``store.wait_replicas`` in time: the write is not acknowledged."""
