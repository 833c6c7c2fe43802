"""Usage aggregates, ``GET /admin/usage`` and budgets end to end, on a real Redis.

Budgets are soft limits checked before each request and resume: a loop that crosses one finishes,
the next request (or resume) gets 429 ``insufficient_quota``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import redis

from tests.e2e.conftest import KEY, Gateway
from tests.e2e.test_usage_cost import (
    P_PRICE,
    REDIS_URL,
    USER,
    loop_with_failover,
    metric,
    mtok,
    priced_config,
    require_redis,
)
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply

ADMIN = "admin-secret"
TOKEN_KEY, USD_KEY, CAPPED_1, CAPPED_2 = "tok-key", "usd-key", "capped-key-1", "capped-key-2"
EXTRA_KEYS = f"""
    - {{key: {TOKEN_KEY}, tenant: tok-team, budget: {{limit: 1000, unit: tokens, period: day}}}}
    - {{key: {USD_KEY}, tenant: usd-team, budget: {{limit: 0.01, unit: usd, period: month}}}}
    - {{key: {CAPPED_1}, tenant: capped}}
    - {{key: {CAPPED_2}, tenant: capped}}
  admin_keys:
    - {{key: {ADMIN}, name: ops}}
"""
TENANTS = """
tenants:
  capped: {budget: {limit: 500, unit: tokens, period: total}}
"""


@pytest.fixture(scope="module")
def gateway(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> Iterator[Gateway]:
    require_redis(REDIS_URL)
    redis.Redis.from_url(REDIS_URL).flushdb()
    config = priced_config(fakes, tool_server, TENANTS)
    anchor = "    - {key: cron-key, tenant: jobs, headless: true}\n"
    assert anchor in config
    gw = Gateway(config.replace(anchor, anchor + EXTRA_KEYS.lstrip("\n"))).start()
    yield gw
    gw.stop()


def config_key_id(gateway: Gateway, tenant: str) -> str:
    """The public id of the tenant's one config key, as the gateway shows it (a keyed HMAC: not computable here)."""
    listed = httpx.get(f"{gateway.url}/admin/keys", headers={"authorization": f"Bearer {ADMIN}"}, timeout=10).json()
    (found,) = [k["id"] for k in listed["data"] if k["source"] == "config" and k["tenant"] == tenant]
    return str(found)


def usage(gateway: Gateway, auth: str = ADMIN, **params: str) -> httpx.Response:
    return httpx.get(f"{gateway.url}/admin/usage", params=params, headers={"authorization": f"Bearer {auth}"},
                     timeout=10)


def rows_once(gateway: Gateway, **params: str) -> list[dict[str, Any]]:
    response = usage(gateway, **params)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "list"
    return list(body["data"])


def rows_when(gateway: Gateway, requests: int, **params: str) -> list[dict[str, Any]]:
    """Aggregates are written after the response: wait (bounded) until ``requests`` are counted."""
    deadline = time.monotonic() + 10
    while True:
        rows = rows_once(gateway, **params)
        if sum(r["requests"] for r in rows) >= requests or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


def test_daily_rows_per_tenant_and_key(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    expected = loop_with_failover(fakes)
    gateway.client().chat.completions.create(model="priced", messages=USER)
    with pytest.raises(openai.NotFoundError):
        gateway.client().chat.completions.create(model="no-such-route", messages=USER)
    (row,) = rows_when(gateway, 2, tenant="team-a")
    assert row["date"] == time.strftime("%Y-%m-%d", time.gmtime())
    assert row["object"] == "usage.daily" and row["tenant"] == "team-a" and row["key_id"] is None
    assert (row["requests"], row["errors"], row["tool_calls"]) == (2, 1, 1)
    assert (row["prompt_tokens"], row["completion_tokens"], row["cached_tokens"]) == (3000, 150, 400)
    assert row["total_tokens"] == 3150
    assert row["cost_usd"] == pytest.approx(expected, abs=1e-9)

    key_id = config_key_id(gateway, "team-a")
    (by_key,) = rows_once(gateway, key=key_id)
    assert by_key["key_id"] == key_id and by_key["tenant"] == "team-a"
    assert by_key["requests"] == 2 and by_key["cost_usd"] == pytest.approx(expected, abs=1e-9)
    assert rows_once(gateway, key=config_key_id(gateway, "team-b")) == []
    # every known tenant when none is named; a range before today is empty
    assert "team-a" in {r["tenant"] for r in rows_once(gateway)}
    assert rows_once(gateway, tenant="team-a", **{"from": "2020-01-01", "to": "2020-01-31"}) == []


def test_usage_by_route_and_model(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    """The failover loop's tokens and cost land on the target that spent them; the request on the one that
    answered; a direct route's made-up model is ``secondary:*``; the parts add up to the tenant's row."""
    redis.Redis.from_url(REDIS_URL).flushdb()
    expected = loop_with_failover(fakes)
    gateway.client().chat.completions.create(model="priced", messages=USER)
    with pytest.raises(openai.NotFoundError):
        gateway.client().chat.completions.create(model="no-such-route", messages=USER)
    fakes["secondary"].queue(Reply(text="direct", usage=(7, 3)))
    gateway.client().chat.completions.create(model="secondary/caller-made-this-up-123", messages=USER)
    (total,) = rows_when(gateway, 3, tenant="team-a")
    rows = rows_once(gateway, tenant="team-a", group_by="route,model")
    parts = {(r["route"], r["model"]): r for r in rows}
    assert set(parts) == {("priced", "primary:p-model"), ("priced", "secondary:s-model"), ("unknown", "none"),
                          ("secondary/*", "secondary:*")}
    primary, secondary = parts[("priced", "primary:p-model")], parts[("priced", "secondary:s-model")]
    assert (primary["requests"], primary["prompt_tokens"], primary["tool_calls"]) == (0, 1000, 0)
    assert (secondary["requests"], secondary["prompt_tokens"], secondary["tool_calls"]) == (1, 2000, 1)
    assert primary["cost_usd"] + secondary["cost_usd"] == pytest.approx(expected, abs=1e-9)
    assert parts[("unknown", "none")]["errors"] == 1
    assert parts[("secondary/*", "secondary:*")]["total_tokens"] == 10
    for field in ("requests", "errors", "prompt_tokens", "completion_tokens", "tool_calls"):
        assert sum(r[field] for r in rows) == total[field]
    assert total["route"] is None and total["model"] is None  # the plain rows: one per day, as before
    assert not any("caller-made-this-up" in str(r) for r in rows)

    (on_route,) = rows_once(gateway, tenant="team-a", route="priced")
    assert (on_route["route"], on_route["model"], on_route["requests"]) == ("priced", None, 1)
    assert on_route["total_tokens"] == 3150
    by_model = rows_once(gateway, tenant="team-a", model="secondary:s-model", group_by="route")
    assert [(r["route"], r["model"], r["requests"]) for r in by_model] == [("priced", "secondary:s-model", 1)]
    key_rows = rows_once(gateway, key=config_key_id(gateway, "team-a"), group_by="model")
    assert {r["model"] for r in key_rows} == {"primary:p-model", "secondary:s-model", "none", "secondary:*"}
    assert rows_once(gateway, tenant="team-a", route="no-such-route") == []


@pytest.mark.parametrize(("params", "status", "code"), [
    ({"from": "2026-13-01"}, 400, "invalid_date"),
    ({"to": "yesterday"}, 400, "invalid_date"),
    ({"from": "2020-01-01", "to": "2026-01-01"}, 400, "range_too_large"),
    ({"from": "2026-02-01", "to": "2026-01-01"}, 400, "invalid_date"),
    ({"key": "key_unknown"}, 404, "key_not_found"),
    ({"tenant": "x" * 500}, 400, None),
    ({"group_by": "route,tenant"}, 400, "invalid_group_by"),
    ({"model": "m" * 500}, 400, None),
])
def test_bad_usage_queries(gateway: Gateway, params: dict[str, str], status: int, code: str | None) -> None:
    response = usage(gateway, **params)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


def test_usage_needs_an_admin_key(gateway: Gateway) -> None:
    assert usage(gateway, auth=KEY).status_code == 401
    assert usage(gateway, auth="nope").status_code == 401


def refused(call: Any) -> openai.RateLimitError:
    with pytest.raises(openai.RateLimitError) as caught:
        call()
    error = caught.value
    assert error.status_code == 429
    assert error.code == "insufficient_quota"
    assert error.body["type"] == "insufficient_quota"  # type: ignore[index]
    return error


def test_token_budget_soft_limit(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    client = gateway.client(TOKEN_KEY)
    # 1220 tokens over two calls: the loop crosses the 1000-token budget mid-way and still finishes
    fakes["primary"].queue(Reply(tool_calls=[("add", {"a": 1, "b": 2})], usage=(600, 10)),
                           Reply(text="3", usage=(600, 10)))
    completion = client.chat.completions.create(model="priced", messages=USER)
    assert completion.model_extra["gateway"]["status"] == "completed"
    assert completion.choices[0].message.content == "3"
    rows_when(gateway, 1, key=config_key_id(gateway, "tok-team"))
    served = len(fakes["primary"].requests)
    error = refused(lambda: client.chat.completions.create(model="priced", messages=USER))
    assert "1220 tokens" in error.message and "1000 tokens" in error.message and "today" in error.message
    refused(lambda: client.chat.completions.create(model="priced", messages=USER, stream=True))
    assert len(fakes["primary"].requests) == served  # refused before any upstream call
    # other keys are not affected
    assert gateway.client().chat.completions.create(model="plain", messages=USER).choices[0].message.content


def test_usd_budget_refuses_a_resume_which_stays_resumable(gateway: Gateway,
                                                           fakes: dict[str, FakeUpstream]) -> None:
    client = gateway.client(USD_KEY)
    fakes["primary"].queue(Reply(tool_calls=[("delete_record", {"id": "1"})], usage=(1000, 100)))
    paused = client.chat.completions.create(model="priced", messages=USER).model_extra["gateway"]
    assert paused["status"] == "paused"
    fakes["primary"].queue(Reply(text="big", usage=(5000, 10)))
    spent = client.chat.completions.create(model="priced", messages=USER).model_extra["gateway"]["usage_cost"]
    assert mtok(1000, 100, 0, P_PRICE) + spent > 0.01
    rows_when(gateway, 2, key=config_key_id(gateway, "usd-team"))

    decisions = {"decisions": [{"tool_call_id": paused["pending"][0]["tool_call_id"], "approve": True}]}
    response = gateway.post(f"/v1/continuations/{paused['continuation_id']}", decisions, key=USD_KEY)
    assert response.status_code == 429, response.text
    assert response.json()["error"]["code"] == "insufficient_quota"
    assert "USD" in response.json()["error"]["message"]
    state = httpx.get(f"{gateway.url}/v1/continuations/{paused['continuation_id']}",
                      headers={"authorization": f"Bearer {USD_KEY}"}).json()
    assert state["status"] == "pending"


def test_tenant_budget_covers_every_key_of_the_tenant(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="one", usage=(590, 20)))
    gateway.client(CAPPED_1).chat.completions.create(model="priced", messages=USER)
    rows_when(gateway, 1, tenant="capped")
    error = refused(lambda: gateway.client(CAPPED_2).chat.completions.create(model="priced", messages=USER))
    assert "tenant 'capped'" in error.message and "in total" in error.message
    # the refusals are counted as errored requests of the tenant
    (row,) = rows_when(gateway, 2, tenant="capped")
    assert (row["requests"], row["errors"], row["total_tokens"]) == (2, 1, 610)


def memory_or_down_config(fakes: dict[str, FakeUpstream], tool_server: ToolServer, store_url: str) -> str:
    config = priced_config(fakes, tool_server, TENANTS).replace(f'url: "{REDIS_URL}"', f'url: "{store_url}"')
    anchor = "    - {key: cron-key, tenant: jobs, headless: true}\n"
    return config.replace(anchor, anchor + EXTRA_KEYS.lstrip("\n"))


def test_memory_store_counts_at_once_and_enforces(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> None:
    gw = Gateway(memory_or_down_config(fakes, tool_server, "memory://")).start()
    try:
        fakes["primary"].queue(Reply(text="one", usage=(990, 20)))
        gw.client(TOKEN_KEY).chat.completions.create(model="priced", messages=USER)
        (row,) = rows_once(gw, key=config_key_id(gw, "tok-team"))
        assert (row["requests"], row["total_tokens"], row["tenant"]) == (1, 1010, "tok-team")
        refused(lambda: gw.client(TOKEN_KEY).chat.completions.create(model="priced", messages=USER))
    finally:
        gw.stop()


def test_a_store_outage_never_fails_a_request(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> None:
    from tests.ports import free_port

    gw = Gateway(memory_or_down_config(fakes, tool_server, f"redis://127.0.0.1:{free_port()}/0")).start()
    try:
        # a budgeted key: the budget read fails and the request is let through; the usage write fails after it
        completion = gw.client(TOKEN_KEY).chat.completions.create(model="plain", messages=USER)
        assert completion.choices[0].message.content
        deadline = time.monotonic() + 10
        while True:
            text = httpx.get(f"{gw.url}/metrics").text
            if ('loopgate_usage_store_failures_total{op="write"} 1' in text
                    or time.monotonic() > deadline):
                break
            time.sleep(0.05)
        assert 'loopgate_usage_store_failures_total{op="budget_check"} 1' in text
        assert 'loopgate_usage_store_failures_total{op="write"} 1' in text
        assert usage(gw).status_code == 503
    finally:
        gw.stop()


def test_unlisted_tenants_share_the_other_metric_label(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    created = httpx.post(f"{gateway.url}/admin/keys", json={"tenant": "adhoc-team", "name": "adhoc"},
                         headers={"authorization": f"Bearer {ADMIN}"}, timeout=10)
    assert created.status_code in (200, 201), created.text
    secret = created.json()["key"]
    before = httpx.get(f"{gateway.url}/metrics").text
    fakes["primary"].queue(Reply(text="hi", usage=(40, 2)))
    gateway.client(secret).chat.completions.create(model="priced", messages=USER)
    after = httpx.get(f"{gateway.url}/metrics").text
    assert "adhoc-team" not in after
    prompt = ("loopgate_tokens_total", {"tenant": "other", "route": "priced", "kind": "prompt"})
    assert metric(after, prompt[0], **prompt[1]) - metric(before, prompt[0], **prompt[1]) == 40
    # the managed key's own rows exist under its tenant
    (row,) = rows_when(gateway, 1, key=created.json()["id"])
    assert (row["tenant"], row["prompt_tokens"]) == ("adhoc-team", 40)
