"""Shared state: continuations, the tool ledger, artifacts, the audit log, target health, managed
keys, rate limits, usage, background runs, Responses records and the notification outbox.

One subpackage per domain, each with ``base`` (its interface and types), ``memory`` and
``redis``; ``redis_client`` is the Redis layer they share (``RedisIO``); ``factory`` alone picks
a backend (``open_configured_store`` and the ``open_*`` of each domain beside it).
"""
