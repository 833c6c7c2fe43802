"""Webhook notifications about approvals: paused, resumed, decided, expired, headless_denied.

``Notifier.emit`` never waits on the network or the store: events go to a bounded in-process
buffer that a background task pushes to the store's outbox (gateway/store/outbox/). Every
replica runs a delivery worker that claims due jobs from that shared outbox, so each event is
POSTed once across all replicas, signed (signing.py), and retried with backoff for a bounded time.
"""

from gateway.notify.notifier import Notifier
from gateway.notify.signing import sign, verify

__all__ = ["Notifier", "sign", "verify"]
