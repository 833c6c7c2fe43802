"""Webhook config validation, the signature scheme and the payload builders (delivery: tests/e2e/test_webhooks.py)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from gateway.config import ConfigError, parse_config
from gateway.notify import sign, verify
from gateway.notify.events import MAX_CALLS, build
from gateway.notify.slack import slack_payload

ROOT = Path(__file__).resolve().parents[2]

BASE = """
server: {{port: 8080{server}}}
providers:
  mock: {{type: mock}}
models:
  demo: {{targets: [{{provider: mock, model: m}}]}}
notifications:
{notifications}
"""


def parse(notifications: str, server: str = "") -> object:
    return parse_config(BASE.format(notifications=notifications, server=server), env={"HOOK_SECRET": "s3cret"})


def test_a_valid_section_and_its_defaults() -> None:
    config = parse("""
  webhooks:
    - {url: "https://hooks.example.com/a", secret: "${HOOK_SECRET}"}
    - {url: "https://hooks.slack.com/services/T/B/X", secret: x, events: [paused, expired], format: slack,
       timeout_s: 3}
""", server=", public_url: 'https://gw.example.com/'")
    first, slack = config.notifications.webhooks  # type: ignore[attr-defined]
    assert first.events == ("paused", "resumed", "decided", "expired", "headless_denied") and first.format == "json"
    assert first.secret == "s3cret" and "s3cret" not in repr(first)
    assert slack.events == ("paused", "expired") and slack.timeout_s == 3.0
    assert config.server.public_url == "https://gw.example.com"  # type: ignore[attr-defined]
    assert config.notifications.retry_for_s == 600.0  # type: ignore[attr-defined]


@pytest.mark.parametrize(("section", "server", "path", "words"), [
    ("  webhooks: [{url: 'ftp://x/y', secret: s}]", "", "notifications.webhooks[0].url", "http(s)"),
    ("  webhooks: [{url: 'https://x/y'}]", "", "notifications.webhooks[0].secret", "required"),
    ("  webhooks: [{url: 'https://x/y', secret: ''}]", "", "notifications.webhooks[0].secret", "required"),
    ("  webhooks: [{url: 'https://x/y', secret: s, events: [pasued]}]", "", "notifications.webhooks[0].events[0]",
     "did you mean 'paused'"),
    ("  webhooks: [{url: 'https://x/y', secret: s, events: []}]", "", "notifications.webhooks[0].events",
     "at least one"),
    ("  webhooks: [{url: 'https://x/y', secret: s, format: teams}]", "", "notifications.webhooks[0].format",
     "'json' or 'slack'"),
    ("  webhooks: [{url: 'https://x/y', secret: s, format: slack}]", "", "notifications.webhooks[0].format",
     "server.public_url"),
    ("  webhooks: [{url: 'https://x/y', secret: s, timeout_s: 0}]", "", "notifications.webhooks[0].timeout_s", "> 0"),
    ("  webhooks: [{url: 'https://x/y', secret: s, timeout_s: 1000}]", "", "notifications.webhooks[0].timeout_s",
     "at most"),
    ("  webhooks: [{url: 'https://x/y', secret: s, retries: 3}]", "", "notifications.webhooks[0].retries",
     "unknown key"),
    ("  webhooks:\n    - {url: 'https://x/y', secret: s}\n    - {url: 'https://x/y', secret: t}", "",
     "notifications.webhooks[1].url", "duplicates"),
    ("  webhooks: [" + ", ".join(f"{{url: 'https://x/{i}', secret: s}}" for i in range(21)) + "]", "",
     "notifications.webhooks", "at most 20"),
    ("  retry_for_s: -1", "", "notifications.retry_for_s", "> 0"),
    ("  backoff_base_s: 10\n  backoff_max_s: 5", "", "notifications.backoff_max_s", ">= backoff_base_s"),
    ("  max_queue: 0", "", "notifications.max_queue", "> 0"),
    ("  webhook: []", "", "notifications.webhook", "did you mean 'webhooks'"),
    ("  webhooks: []", ", public_url: 'gw.example.com'", "server.public_url", "http(s) URL"),
])
def test_mistakes_name_their_key(section: str, server: str, path: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(section, server)
    assert caught.value.path == path, caught.value
    assert words in caught.value.problem


def test_check_config_reports_a_bad_webhook(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(BASE.format(server="", notifications="  webhooks: [{url: 'https://x/y'}]"))
    done = subprocess.run([sys.executable, "-m", "gateway", "check-config", "--config", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "notifications.webhooks[0].secret" in done.stdout + done.stderr


def test_signature_is_hmac_of_timestamp_dot_body() -> None:
    body = b'{"id":"evt_1"}'
    header = sign("k", body, t=1_700_000_000)
    expected = hmac.new(b"k", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert header == f"t=1700000000,v1={expected}"
    assert verify("k", body, header, now=1_700_000_100)
    assert not verify("k", body, header, now=1_700_001_000)  # older than the tolerance: a replay
    assert not verify("k", body + b"x", header, now=1_700_000_000)
    assert not verify("other", body, header, now=1_700_000_000)
    assert not verify("k", body, "v1=" + expected, now=1_700_000_000)  # no timestamp


def test_events_bound_what_callers_control() -> None:
    calls = [{"tool_call_id": f"c{i}", "name": "n" * 1000, "arguments": '{"ssn": "123"}'} for i in range(40)]
    event = build("paused", "t", continuation_id="cont_x", route="r", calls=calls, reason="x" * 5000)
    assert len(event["tool_calls"]) == MAX_CALLS and event["tool_calls_omitted"] == 40 - MAX_CALLS
    assert len(event["tool_calls"][0]["name"]) <= 201 and len(event["reason"]) <= 501
    assert b"ssn" not in orjson.dumps(event)
    assert event["tool_calls"][0]["arguments_sha256"] == hashlib.sha256(b'{"ssn": "123"}').hexdigest()


def test_slack_escapes_caller_text() -> None:
    event = build("headless_denied", "team <a>", calls=[{"tool_call_id": "c", "name": "<@U123>", "arguments": ""}],
                  reason="a & b")
    payload = slack_payload(event, "https://gw")
    assert "<@U123>" not in orjson.dumps(payload).decode() and "&lt;@U123&gt;" in payload["text"]
    assert "team &lt;a&gt;" in payload["text"] and "a &amp; b" in payload["text"]
    assert payload["blocks"][-1]["elements"][0]["url"] == "https://gw/ui/approvals"


async def test_a_store_outage_drops_and_counts_never_raises() -> None:
    """emit() with the Redis store unreachable: the request path returns at once; the flusher counts the loss."""
    from gateway.config.model import NotificationsConfig, WebhookConfig
    from gateway.notify import Notifier
    from gateway.observability import metrics
    from gateway.store.continuations.base import Continuation
    from gateway.store.redis import RedisStore
    from tests.ports import free_port

    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.5, op_timeout=1.0)
    hooks = (WebhookConfig(url="http://127.0.0.1:9/hook", secret="s"),)
    notifier = Notifier(NotificationsConfig(webhooks=hooks), None, store)
    before = metrics.WEBHOOK_EVENTS.get("paused", "dropped_store_error")
    await notifier.start()
    try:
        paused = Continuation.new("t", "agent", [{"tool_call_id": "c", "name": "x", "arguments": "{}"}], {}, 60)
        notifier.paused(paused)  # synchronous: nothing to await, nothing raised
        for _ in range(100):
            if metrics.WEBHOOK_EVENTS.get("paused", "dropped_store_error") > before:
                break
            await asyncio.sleep(0.05)
        assert metrics.WEBHOOK_EVENTS.get("paused", "dropped_store_error") == before + 1
    finally:
        await notifier.stop()
        await store.aclose()
