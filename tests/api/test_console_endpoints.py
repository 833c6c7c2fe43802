"""The console's admin endpoints in process (``memory://``): the overview from this process's rollups, 404 when off."""

from __future__ import annotations

import time

import httpx

from gateway.api.app import create_app
from gateway.config import parse_config
from gateway.observability import metrics

CONFIG = """
providers:
  openai: {type: openai, api_key: k, base_url: "http://127.0.0.1:9"}
models:
  smart: {targets: [{provider: openai, model: gpt-4.1}, {provider: openai, model: gpt-4.1-mini}]}
auth:
  keys: [{key: caller-1, tenant: t1}]
  admin_keys: [{key: admin-secret-1, name: ops}]
"""
ADMIN = {"authorization": "Bearer admin-secret-1"}


async def test_the_overview_sums_what_the_writer_recorded() -> None:
    app = create_app(parse_config(CONFIG, env={}))
    async with app.app.router.lifespan_context(app.app):
        feed = app.state.runtime.console
        assert feed is not None and feed.config.resolution_s == 10.0
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            metrics.REQUESTS.inc("/v1/chat/completions", "smart", "200", amount=30)
            metrics.REQUESTS.inc("/v1/chat/completions", "smart", "502", amount=10)
            await feed.tick(time.time())  # what the background task does at each interval boundary
            answer = await client.get("/admin/console/overview", params={"minutes": 5}, headers=ADMIN)
            assert answer.status_code == 200, answer.text
            body = answer.json()
            smart = body["series"]["routes"]["smart"]
            assert round(sum(smart["requests_per_s"]) * body["resolution_s"]) == 40
            assert max(smart["error_rate"]) == 0.25
            assert {c["target"] for c in body["circuits"]} == {"openai:gpt-4.1", "openai:gpt-4.1-mini"}
            assert body["replicas"] == [feed.replica] and body["paused"] == {"total": 0, "by_tenant": {},
                                                                              "capped": False}
            refused = await client.get("/admin/console/overview", headers={"authorization": "Bearer caller-1"})
            assert refused.status_code == 401


async def test_with_rollups_off_the_overview_says_so() -> None:
    app = create_app(parse_config(CONFIG + "observability: {rollups: {enabled: false}}\n", env={}))
    async with app.app.router.lifespan_context(app.app):
        assert app.state.runtime.console is None
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            answer = await client.get("/admin/console/overview", headers=ADMIN)
            assert answer.status_code == 404 and answer.json()["error"]["code"] == "rollups_disabled"


async def test_the_overview_shows_added_latency_per_route() -> None:
    """The gateway overhead histogram (``loopgate_gateway_overhead_seconds``) reaches the overview as p50/p99
    per route, per interval and over the window; /metrics exports it with the route label."""
    app = create_app(parse_config(CONFIG, env={}))
    async with app.app.router.lifespan_context(app.app):
        feed = app.state.runtime.console
        assert feed is not None
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            for _ in range(99):
                metrics.OVERHEAD.observe(0.0004, "smart")  # in the (0.25 ms, 0.5 ms] bucket
            metrics.OVERHEAD.observe(0.2, "smart")  # one slow request: (0.1 s, 0.25 s]
            await feed.tick(time.time())
            body = (await client.get("/admin/console/overview", params={"minutes": 5}, headers=ADMIN)).json()
            smart = body["series"]["routes"]["smart"]
            p50 = [v for v in smart["overhead_ms"]["p50"] if v is not None]
            p99 = [v for v in smart["overhead_ms"]["p99"] if v is not None]
            assert len(p50) == 1 and 0.25 < p50[0] <= 0.5
            assert len(p99) == 1 and 0.25 < p99[0] <= 0.5  # the 99th of 100 is still a fast one
            assert smart["overhead_window_ms"]["p50"] == p50[0]
            exported = (await client.get("/metrics")).text
            assert 'loopgate_gateway_overhead_seconds_bucket{route="smart",le="0.0005"}' in exported
