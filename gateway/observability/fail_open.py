"""Store fail-opens: what limits, budgets, usage and shared health do when the store does not answer.

Each such domain lets the request through (or keeps its local state) rather than wait on a store
that is down or hung. Every fail-open is counted in ``loopgate_store_fail_open_total{domain}``;
the log says it once when a burst starts and once when the store answers again (with how many
requests went through meanwhile), never once per request: an outage under load must not flood
the log.
"""

from __future__ import annotations

import logging

from gateway.observability import metrics

log = logging.getLogger("loopgate.store")


class FailOpen:
    """One domain's fail-opens: counted each, logged per burst."""

    __slots__ = ("_count", "domain", "what")

    def __init__(self, domain: str, what: str) -> None:
        self.domain = domain
        #: what goes unenforced meanwhile, for the log line
        self.what = what
        self._count = 0  # fail-opens of the current burst (0: none)

    @property
    def in_burst(self) -> bool:
        return self._count > 0

    def failed(self, cause: BaseException | str) -> None:
        """The store did not answer in time: counted; the first of a burst is logged."""
        metrics.STORE_FAIL_OPEN.inc(self.domain)
        if not self._count:
            log.warning("store not answering: %s (failing open until it answers again): %s", self.what, cause)
        self._count += 1

    def answered(self) -> None:
        """The store answered: a burst in progress ends (logged once, with its size)."""
        if self._count:
            log.warning("store answers again (%s): %d operation(s) went ahead without it meanwhile", self.domain,
                        self._count)
            self._count = 0


LIMITS = FailOpen("limits", "rate limits are not enforced")
BUDGETS = FailOpen("budgets", "budgets are not enforced")
USAGE = FailOpen("usage", "usage counts are dropped")
HEALTH = FailOpen("health", "shared target health is local only")
