"""The ``notifications`` section: the webhooks approval events are delivered to (gateway/notify)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlparse

from gateway.config.checks import ConfigError, closest, get, mapping, one_line, positive

NOTIFICATIONS_KEYS = {"webhooks", "retry_for_s", "backoff_base_s", "backoff_max_s", "max_queue"}
WEBHOOK_KEYS = {"url", "secret", "events", "format", "timeout_s"}

WEBHOOK_EVENTS: tuple[str, ...] = ("paused", "resumed", "decided", "expired", "headless_denied")


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    """One receiver of notifications (gateway/notify): where, how signed, which events, which body format."""

    url: str
    secret: str = field(repr=False)
    events: tuple[str, ...] = WEBHOOK_EVENTS
    format: Literal["json", "slack"] = "json"
    #: one delivery attempt (connect + send + response head) must finish within this
    timeout_s: float = 10.0


@dataclass(frozen=True, slots=True)
class NotificationsConfig:
    webhooks: tuple[WebhookConfig, ...] = ()
    #: an event not delivered this long after it happened is dropped (and counted)
    retry_for_s: float = 600.0
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    #: deliveries waiting in the store at most; past it new events are dropped (and counted)
    max_queue: int = 100_000


#: More receivers than this is a misconfiguration (every event is queued once per receiver).
MAX_WEBHOOKS = 20
_MAX_TIMEOUT_S = 120.0
_MAX_RETRY_FOR_S = 7 * 86400.0
_MAX_QUEUE = 10_000_000


def notifications_section(raw: Any, public: str | None) -> NotificationsConfig:
    section = mapping(raw, "notifications", NOTIFICATIONS_KEYS)
    hooks = get(section, "webhooks", "notifications", list, [])
    if len(hooks) > MAX_WEBHOOKS:
        raise ConfigError("notifications.webhooks", f"at most {MAX_WEBHOOKS} webhooks, got {len(hooks)}")
    webhooks = tuple(_webhook(entry, f"notifications.webhooks[{i}]", public) for i, entry in enumerate(hooks))
    seen: set[tuple[str, str]] = set()
    for i, hook in enumerate(webhooks):
        if (hook.url, hook.format) in seen:
            raise ConfigError(f"notifications.webhooks[{i}].url", "duplicates an earlier webhook (same url and format)")
        seen.add((hook.url, hook.format))

    def seconds(key: str, default: float, ceiling: float) -> float:
        value = positive(get(section, key, "notifications", float, default), f"notifications.{key}")
        if not value <= ceiling or not math.isfinite(value):
            raise ConfigError(f"notifications.{key}", f"must be at most {ceiling:g} seconds, got {value}")
        return value

    base = seconds("backoff_base_s", 1.0, 3600.0)
    most = seconds("backoff_max_s", 60.0, 3600.0)
    if most < base:
        raise ConfigError("notifications.backoff_max_s", f"must be >= backoff_base_s ({base:g}), got {most:g}")
    queue = int(positive(get(section, "max_queue", "notifications", int, 100_000), "notifications.max_queue"))
    if queue > _MAX_QUEUE:
        raise ConfigError("notifications.max_queue", f"must be at most {_MAX_QUEUE}, got {queue}")
    return NotificationsConfig(webhooks=webhooks, retry_for_s=seconds("retry_for_s", 600.0, _MAX_RETRY_FOR_S),
                               backoff_base_s=base, backoff_max_s=most, max_queue=queue)


def _webhook(raw: Any, path: str, public: str | None) -> WebhookConfig:
    section = mapping(raw, path, WEBHOOK_KEYS)
    url = get(section, "url", path, str, "")
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ConfigError(f"{path}.url", f"must be an http(s) URL, got '{url}'")
    one_line(url, f"{path}.url")
    secret = get(section, "secret", path, str, "")
    if not secret:
        raise ConfigError(f"{path}.secret", "is required (receivers verify X-Loopgate-Signature with it; "
                                            "is its environment variable set?)")
    one_line(secret, f"{path}.secret")
    events = get(section, "events", path, list, list(WEBHOOK_EVENTS))
    if not events:
        raise ConfigError(f"{path}.events", f"must name at least one of {', '.join(WEBHOOK_EVENTS)}")
    for i, event in enumerate(events):
        if event not in WEBHOOK_EVENTS:
            hint = closest(str(event), set(WEBHOOK_EVENTS))
            raise ConfigError(f"{path}.events[{i}]", f"unknown event '{event}'{hint} "
                                                     f"(one of {', '.join(WEBHOOK_EVENTS)})")
    kind = get(section, "format", path, str, "json")
    if kind not in ("json", "slack"):
        raise ConfigError(f"{path}.format", f"must be 'json' or 'slack', got '{kind}'")
    if kind == "slack" and public is None:
        raise ConfigError(f"{path}.format", "slack messages link to the approvals page: set server.public_url")
    timeout = positive(get(section, "timeout_s", path, float, 10.0), f"{path}.timeout_s")
    if not timeout <= _MAX_TIMEOUT_S:
        raise ConfigError(f"{path}.timeout_s", f"must be at most {_MAX_TIMEOUT_S:g}, got {timeout}")
    return WebhookConfig(url=url, secret=secret, events=tuple(dict.fromkeys(events)), format=kind,
                         timeout_s=timeout)
