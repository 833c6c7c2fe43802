"""The store contract: continuations, the tool ledger, artifacts, the audit log and shared target health.

Every piece of state a gateway replica must share with the others (or must keep across a
client's round trip) goes through this one small interface, so the loop engine never knows
whether it runs embedded (``memory://``) or scaled out behind a load balancer (``redis://``).
Both implementations are tested against the same behavioural suite. Each domain's part of the
interface lives in its subpackage (continuations, audit, health, outbox); ``factory`` opens one.
"""

from __future__ import annotations

from abc import abstractmethod

from gateway.store.audit.base import AuditLog
from gateway.store.continuations.base import ContinuationStore
from gateway.store.health.base import HealthStore
from gateway.store.outbox.base import Outbox


class Store(ContinuationStore, AuditLog, HealthStore):
    """One small interface over every backend. All methods are coroutines; none blocks the event loop."""

    kind: str = ""

    # -- lifecycle -------------------------------------------------------------------------------
    @abstractmethod
    async def ping(self) -> bool:
        """True when the backend answers (``/readyz``). Never raises."""

    async def unavailable_reason(self) -> str | None:
        """Why the backend cannot be used right now (for the start-up log), or None when it answers. Never raises."""
        return None if await self.ping() else f"the {self.kind} store does not answer"

    @abstractmethod
    async def aclose(self) -> None:
        """Release connections. The store is unusable afterwards."""

    # -- notification outbox (gateway/store/outbox/) ---------------------------------------------
    @abstractmethod
    def outbox(self, name: str) -> Outbox:
        """The job queue ``name`` (webhook deliveries, expiry checks) on this backend, shared by every replica."""
