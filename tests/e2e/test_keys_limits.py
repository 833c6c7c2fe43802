"""Managed keys, allow-lists and rate limits on two real gateway processes sharing a real Redis.

Each process is a ``loopgate serve`` subprocess; limits must hold across both (one Lua script per
request in Redis), and an admin change made through one must be in force on the other within a
second (its key snapshot polls the store's generation).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
import redis

from tests.e2e.conftest import KEY, Gateway, gateway_config, two_replicas
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply

REDIS_URL = os.environ["LOOPGATE_TEST_REDIS_URL"]  # the suite's own server (tests/conftest.py)
ADMIN = "admin-secret"
ADMIN_HEADERS = {"authorization": f"Bearer {ADMIN}"}

AUTH = f"""auth:
  admin_keys: [{{key: {ADMIN}, name: ops}}]
  keys:
    - {{key: rpm-key, tenant: rpm-t, rpm: 6}}
    - {{key: tpm-key, tenant: tpm-t, tpm: 1000}}
    - {{key: conc-key, tenant: conc-t, max_concurrent: 2}}
    - {{key: shared-1, tenant: shared}}
    - {{key: shared-2, tenant: shared}}
    - {{key: narrow-key, tenant: narrow, name: narrow, models: [plain, "primary/*"]}}
    - {{key: approver-key, tenant: team-a, name: reviewer, role: approver}}
"""
TENANTS = """
tenants:
  shared: {rpm: 4}
"""


def _config(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> str:
    text = gateway_config(fakes, store_url=REDIS_URL, tool_server=tool_server.url)
    # The shared config's keys stay (KEY, OTHER_KEY, HEADLESS_KEY); ours are added in front of them.
    text = text.replace("auth:\n  keys:\n", AUTH, 1)
    return text + TENANTS


@pytest.fixture(scope="module")
def pair(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> Iterator[tuple[Gateway, Gateway]]:
    yield from two_replicas(_config(fakes, tool_server), REDIS_URL)


def chat(gw: Gateway, key: str, model: str = "plain", stream: bool = False) -> httpx.Response:
    return gw.post("/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": "hi"}],
                                            "stream": stream}, key=key)


def admin(method: str, gw: Gateway, path: str, body: Any = None, headers: dict[str, str] | None = None
          ) -> httpx.Response:
    return httpx.request(method, f"{gw.url}{path}", json=body, headers=ADMIN_HEADERS if headers is None else headers,
                         timeout=10)


#: how long a test waits for a change made on one process to be in force on the other: propagation takes
#: one key-generation poll (0.25 s) plus a reload (docs/surfaces/keys.md), but a busy machine can be far
#: slower, so the bound is generous; tests wait on the condition, never on a fixed window
PROPAGATION_BOUND_S = 15.0


def wait_for(check: Callable[[], bool], within_s: float = PROPAGATION_BOUND_S) -> float:
    """Seconds until ``check()`` held; fails if it did not within ``within_s``."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < within_s, f"not in force within {within_s} s"
        time.sleep(0.02)
    return time.monotonic() - started


@dataclass
class Release:
    """Answers held at the fake upstream until ``after`` calls of a burst came back (the refused ones)."""

    hold: threading.Event
    after: int


async def burst(gateways: tuple[Gateway, Gateway], key: str, n: int, model: str = "plain",
                release: Release | None = None) -> list[openai.APIResponse[Any] | openai.APIStatusError]:
    """``n`` concurrent SDK calls, alternating between the two processes."""
    clients = [gw.async_client(key) for gw in gateways]
    answered = 0

    async def one(i: int) -> openai.APIResponse[Any] | openai.APIStatusError:
        nonlocal answered
        try:
            return await clients[i % 2].chat.completions.with_raw_response.create(
                model=model, messages=[{"role": "user", "content": f"hello {i}"}])
        except openai.APIStatusError as exc:
            return exc
        finally:
            answered += 1
            if release is not None and answered >= release.after:
                release.hold.set()

    try:
        return list(await asyncio.gather(*(one(i) for i in range(n))))
    finally:
        for client in clients:
            await client.close()


# -- admin API ---------------------------------------------------------------------------------

def test_admin_lifecycle_reaches_the_second_process(pair: tuple[Gateway, Gateway]) -> None:
    first, second = pair
    created = admin("POST", first, "/admin/keys", {"tenant": "apps", "name": "billing-app", "models": ["plain"]})
    assert created.status_code == 201, created.text
    body = created.json()
    secret, key_id = body["key"], body["id"]
    assert secret.startswith("lg-") and key_id.startswith("key_") and body["name"] == "billing-app"
    assert body["models"] == ["plain"] and body["role"] == "caller" and body["revoked"] is False

    # Usable at once on the process that created it, and on the other once it polled the store.
    assert chat(first, secret).status_code == 200
    wait_for(lambda: chat(second, secret).status_code == 200)
    client = second.client(secret)
    assert client.chat.completions.create(model="plain", messages=[{"role": "user", "content": "hi"}]).choices

    # Never the secret again: not in the list, not in one key's view, not in Redis.
    listed = admin("GET", second, "/admin/keys").json()
    mine = [k for k in listed["data"] if k["id"] == key_id]
    assert len(mine) == 1 and "key" not in mine[0] and secret not in admin("GET", first, "/admin/keys").text
    assert any(k["source"] == "config" and k["name"] == "narrow" for k in listed["data"])
    assert admin("GET", first, f"/admin/keys/{key_id}").json()["name"] == "billing-app"
    raw = redis.Redis.from_url(REDIS_URL)
    stored = raw.hvals("loopgate:{keys}:all")
    assert stored and all(secret.encode() not in record for record in stored)  # type: ignore[union-attr]

    # Edit on the first: the allow-list widens on the second.
    assert chat(second, secret, "agent").status_code == 403
    edited = admin("PATCH", first, f"/admin/keys/{key_id}", {"models": None, "rpm": 100})
    assert edited.status_code == 200 and edited.json()["models"] is None and edited.json()["rpm"] == 100
    wait_for(lambda: chat(second, secret, "agent").status_code == 200)

    # Revoke on the first: rejected on the second, like an unknown key.
    assert admin("DELETE", first, f"/admin/keys/{key_id}").json()["deleted"] is True
    wait_for(lambda: chat(second, secret).status_code == 401)
    rejected = chat(second, secret)
    assert rejected.json()["error"]["code"] == "invalid_api_key"
    assert chat(first, secret).status_code == 401
    assert admin("GET", second, f"/admin/keys/{key_id}").json()["revoked"] is True
    assert admin("PATCH", first, f"/admin/keys/{key_id}", {"rpm": 5}).status_code == 409


def test_expired_managed_key_is_rejected_like_an_unknown_one(pair: tuple[Gateway, Gateway]) -> None:
    first, second = pair
    def later(seconds: float) -> str:
        return (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")

    # Valid long enough to be seen working on the second process however busy the machine is; then it is
    # made to expire shortly (an edit), so the expiry itself is what the second process enforces.
    created = admin("POST", first, "/admin/keys", {"tenant": "apps", "expires_at": later(300)}).json()
    secret = created["key"]
    wait_for(lambda: chat(second, secret).status_code == 200)
    assert admin("PATCH", first, f"/admin/keys/{created['id']}", {"expires_at": later(1)}).status_code == 200
    wait_for(lambda: chat(second, secret).status_code == 401)
    assert chat(first, secret).json()["error"]["code"] == "invalid_api_key"
    assert admin("GET", first, f"/admin/keys/{created['id']}").json()["expired"] is True


def test_admin_api_refuses_other_keys_and_bad_fields(pair: tuple[Gateway, Gateway]) -> None:
    first, _ = pair
    assert admin("GET", first, "/admin/keys", headers={}).status_code == 401
    assert admin("GET", first, "/admin/keys", headers={"authorization": f"Bearer {KEY}"}).status_code == 401
    assert chat(first, ADMIN).status_code == 401  # an admin key is not a caller key
    for body, param in [({"name": "x"}, "tenant"), ({"tenant": "a", "rpm": 0}, "rpm"),
                        ({"tenant": "a", "models": ["nope"]}, "models[0]"), ({"tenant": "a", "role": "root"}, "role"),
                        ({"tenant": "a", "budget": {"limit": 5, "unit": "eur"}}, "budget.unit"),
                        ({"tenant": "a", "expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
                        ({"tenant": "a{b}", "name": "x"}, "tenant"), ({"tenant": "a", "secret": "x"}, "secret")]:
        response = admin("POST", first, "/admin/keys", body)
        assert response.status_code == 400, (body, response.text)
        assert response.json()["error"]["param"] == param, response.text
    assert admin("GET", first, "/admin/keys/key_nope").status_code == 404
    config_id = next(k["id"] for k in admin("GET", first, "/admin/keys").json()["data"] if k["name"] == "narrow")
    assert admin("DELETE", first, f"/admin/keys/{config_id}").json()["error"]["code"] == "config_key"
    assert admin("PATCH", first, "/admin/keys/key_nope", {"tenant": "b"}).json()["error"]["param"] == "tenant"


# -- roles and allow-lists ---------------------------------------------------------------------

def test_approver_key_may_not_call_models(pair: tuple[Gateway, Gateway]) -> None:
    first, _ = pair
    with pytest.raises(openai.PermissionDeniedError) as caught:
        first.client("approver-key").chat.completions.create(model="plain", messages=[{"role": "user", "content": "x"}])
    error = caught.value.body
    assert isinstance(error, dict) and error["code"] == "approver_key" and "approver" in error["message"]
    managed = admin("POST", first, "/admin/keys", {"tenant": "apps", "role": "approver"}).json()
    assert chat(first, managed["key"]).json()["error"]["code"] == "approver_key"


def test_route_allow_list_and_models_listing(pair: tuple[Gateway, Gateway]) -> None:
    first, _ = pair
    client = first.client("narrow-key")
    assert [m.id for m in client.models.list()] == ["plain"]
    assert client.chat.completions.create(model="plain", messages=[{"role": "user", "content": "x"}]).choices
    assert client.chat.completions.create(model="primary/up-model", messages=[{"role": "user", "content": "x"}])
    for model in ("agent", "secondary/up-model"):
        with pytest.raises(openai.PermissionDeniedError) as caught:
            client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}])
        assert isinstance(caught.value.body, dict) and caught.value.body["code"] == "model_not_allowed"
        assert repr(model) in caught.value.body["message"]
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert "agent" not in str(missing.value)  # the 404's list of known models is the key's own
    assert "agent" in [m.id for m in first.client(KEY).models.list()]


def test_allow_list_applies_to_continuation_resumes(pair: tuple[Gateway, Gateway],
                                                    fakes: dict[str, FakeUpstream]) -> None:
    first, second = pair
    created = admin("POST", first, "/admin/keys", {"tenant": "team-r"}).json()
    fakes["primary"].queue(Reply(tool_calls=[("delete_record", {"id": "7"})]))
    paused = chat(first, created["key"], "agent").json()
    continuation = paused["gateway"]["continuation_id"]
    admin("PATCH", first, f"/admin/keys/{created['id']}", {"models": ["plain"]})
    pending = paused["gateway"]["pending"][0]["tool_call_id"]
    wait_for(lambda: chat(second, created["key"], "agent").status_code == 403)
    response = second.post(f"/v1/continuations/{continuation}",
                           {"decisions": [{"tool_call_id": pending, "approve": False}]}, key=created["key"])
    assert response.status_code == 403 and response.json()["error"]["code"] == "model_not_allowed"
    # Refused before the claim: widened again, the same continuation resumes.
    admin("PATCH", first, f"/admin/keys/{created['id']}", {"models": ["agent"]})
    wait_for(lambda: chat(second, created["key"], "agent").status_code == 200)
    resumed = second.post(f"/v1/continuations/{continuation}",
                          {"decisions": [{"tool_call_id": pending, "approve": False}]}, key=created["key"])
    assert resumed.status_code == 200, resumed.text


# -- rate limits -------------------------------------------------------------------------------

def _limited(results: list[Any]) -> tuple[list[openai.APIResponse[Any]], list[openai.APIStatusError]]:
    ok = [r for r in results if not isinstance(r, openai.APIStatusError)]
    refused = [r for r in results if isinstance(r, openai.APIStatusError)]
    assert all(r.status_code == 429 for r in refused), [r.message for r in refused]
    return ok, refused


def test_rpm_holds_exactly_across_two_processes(pair: tuple[Gateway, Gateway]) -> None:
    ok, refused = _limited(asyncio.run(burst(pair, "rpm-key", 14)))
    assert len(ok) == 6 and len(refused) == 8
    remaining = sorted(int(r.headers["x-ratelimit-remaining-requests"]) for r in ok)
    assert remaining == [0, 1, 2, 3, 4, 5]
    assert {r.headers["x-ratelimit-limit-requests"] for r in ok} == {"6"}
    assert all(r.headers["x-ratelimit-reset-requests"].endswith("s") for r in ok)
    error = refused[0]
    body = error.body
    assert isinstance(body, dict) and body["code"] == "rate_limit_exceeded" and body["type"] == "requests"
    headers = error.response.headers
    assert headers["x-ratelimit-limit-requests"] == "6" and headers["x-ratelimit-remaining-requests"] == "0"
    assert 1 <= int(headers["retry-after"]) <= 10 and headers["x-ratelimit-reset-requests"]


def test_tenant_rpm_is_shared_by_its_keys(pair: tuple[Gateway, Gateway]) -> None:
    async def both() -> list[Any]:
        return [*await burst(pair, "shared-1", 5), *await burst(pair, "shared-2", 5)]

    ok, refused = _limited(asyncio.run(both()))
    assert len(ok) == 4 and len(refused) == 6
    assert {r.headers["x-ratelimit-limit-requests"] for r in ok} == {"4"}


def test_concurrency_limit_across_processes(pair: tuple[Gateway, Gateway], slow_primary: Callable[..., None]) -> None:
    release = Release(threading.Event(), after=5)
    slow_primary(hold=release.hold)
    ok, refused = _limited(asyncio.run(burst(pair, "conc-key", 7, release=release)))
    assert len(ok) == 2 and len(refused) == 5
    assert {r.response.headers["retry-after"] for r in refused} == {"1"}
    assert all(isinstance(r.body, dict) and r.body["code"] == "rate_limit_exceeded" for r in refused)
    # The slots were freed at the end of the two: the next ones pass.
    ok, refused = _limited(asyncio.run(burst(pair, "conc-key", 2)))
    assert len(ok) == 2 and not refused


def test_tpm_takes_the_estimate_then_the_reported_usage(pair: tuple[Gateway, Gateway],
                                                        slow_primary: Callable[..., None]) -> None:
    first, _ = pair
    # ~1.05 KB bodies: about 265 tokens each up front, so 3 of 5 fit in 1000 while all are in flight.
    release = Release(threading.Event(), after=2)  # held in flight until the two refusals are back
    slow_primary(hold=release.hold, usage=(40, 10))
    padding = "x" * 1000

    async def run() -> list[Any]:
        clients = [gw.async_client("tpm-key") for gw in pair]
        answered = 0

        async def one(i: int) -> Any:
            nonlocal answered
            try:
                return await clients[i % 2].chat.completions.with_raw_response.create(
                    model="plain", messages=[{"role": "user", "content": padding}])
            except openai.APIStatusError as exc:
                return exc
            finally:
                answered += 1
                if answered >= release.after:
                    release.hold.set()

        try:
            return list(await asyncio.gather(*(one(i) for i in range(5))))
        finally:
            for client in clients:
                await client.close()

    started = time.monotonic()
    ok, refused = _limited(asyncio.run(run()))
    assert len(ok) == 3 and len(refused) == 2
    assert isinstance(refused[0].body, dict) and refused[0].body["type"] == "tokens"
    assert refused[0].response.headers["x-ratelimit-limit-tokens"] == "1000"
    # Afterwards each took 50 tokens (the usage), not its estimate: about 850 are left plus the refill.
    slow_primary()
    after = chat(first, "tpm-key")
    left = int(after.headers["x-ratelimit-remaining-tokens"])
    refill = (time.monotonic() - started) * 1000 / 60
    estimate = len(after.request.content) // 4 + 1
    assert 1000 - 150 - estimate - 2 <= left <= min(1000, 1000 - 150 - estimate + refill + 2), left


def test_stream_carries_the_limit_headers_and_unlimited_keys_none(pair: tuple[Gateway, Gateway]) -> None:
    first, _ = pair
    created = admin("POST", first, "/admin/keys", {"tenant": "streams", "rpm": 50, "tpm": 100000}).json()
    streamed = chat(first, created["key"], stream=True)
    assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]")
    assert streamed.headers["x-ratelimit-limit-requests"] == "50"
    assert streamed.headers["x-ratelimit-remaining-requests"] == "49"
    assert streamed.headers["x-ratelimit-limit-tokens"] == "100000"
    plain = chat(first, KEY)
    assert plain.status_code == 200 and not any(h.startswith("x-ratelimit") for h in plain.headers)


def test_memory_store_limits_and_managed_keys_in_one_process(fakes: dict[str, FakeUpstream],
                                                             tool_server: ToolServer) -> None:
    text = gateway_config(fakes, tool_server=tool_server.url).replace("auth:\n  keys:\n", AUTH, 1) + TENANTS
    gw = Gateway(text).start()
    try:
        created = admin("POST", gw, "/admin/keys", {"tenant": "mem", "rpm": 3, "max_concurrent": 5})
        secret = created.json()["key"]
        statuses = [chat(gw, secret).status_code for _ in range(4)]
        assert statuses == [200, 200, 200, 429]
        assert admin("DELETE", gw, f"/admin/keys/{created.json()['id']}").status_code == 200
        assert chat(gw, secret).status_code == 401
    finally:
        gw.stop()


def test_limits_fail_open_when_the_store_is_down(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> None:
    # Nothing listens on port 1: every store call fails at once with "connection refused".
    text = gateway_config(fakes, store_url="redis://127.0.0.1:1/0", tool_server=tool_server.url)
    gw = Gateway(text.replace("auth:\n  keys:\n", AUTH, 1) + TENANTS).start()
    try:
        statuses = [chat(gw, "rpm-key").status_code for _ in range(8)]
        assert statuses == [200] * 8  # rpm 6 is not enforced without its store, by design
        assert not any(h.startswith("x-ratelimit") for h in chat(gw, "rpm-key").headers)
        assert gw.logs().count("rate limits are not enforced (failing open") == 1, "logged once per burst"
        assert 'loopgate_store_fail_open_total{domain="limits"}' in httpx.get(f"{gw.url}/metrics").text
        assert admin("GET", gw, "/admin/keys").json()["error"]["code"] == "store_unavailable"
    finally:
        gw.stop()


def test_responses_api_checks_access_and_limits(pair: tuple[Gateway, Gateway]) -> None:
    first, second = pair
    with pytest.raises(openai.PermissionDeniedError) as caught:
        first.client("narrow-key").responses.create(model="agent", input="hi")
    assert isinstance(caught.value.body, dict) and caught.value.body["code"] == "model_not_allowed"
    with pytest.raises(openai.PermissionDeniedError) as refused:
        first.client("approver-key").responses.create(model="plain", input="hi")
    assert isinstance(refused.value.body, dict) and refused.value.body["code"] == "approver_key"
    secret = admin("POST", first, "/admin/keys", {"tenant": "resp", "rpm": 2, "tpm": 100000}).json()["key"]
    raw = first.client(secret).responses.with_raw_response.create(model="plain", input="hi")
    assert raw.headers["x-ratelimit-limit-requests"] == "2" and raw.headers["x-ratelimit-remaining-requests"] == "1"
    assert raw.parse().output_text
    wait_for(lambda: chat(second, secret, "agent").status_code in (200, 429))
    with pytest.raises(openai.RateLimitError) as limited:
        for _ in range(3):
            second.client(secret).responses.create(model="plain", input="hi", stream=False)
    assert limited.value.response.headers["x-ratelimit-remaining-requests"] == "0"


def test_managed_key_tool_allow_list(pair: tuple[Gateway, Gateway], fakes: dict[str, FakeUpstream]) -> None:
    """``tools`` on a managed key: set, shown, edited; the model is offered only those server tools."""
    first, second = pair
    created = admin("POST", first, "/admin/keys", {"tenant": "team-t", "tools": ["get_weather", "add"]}).json()
    assert created["tools"] == ["add", "get_weather"]
    fakes["primary"].queue(Reply(text="ok"))
    assert chat(first, created["key"], "agent").status_code == 200
    offered = {t["function"]["name"] for t in fakes["primary"].bodies[-1]["tools"]}
    assert offered == {"get_weather", "add"}
    edited = admin("PATCH", first, f"/admin/keys/{created['id']}", {"tools": ["add"]})
    assert edited.status_code == 200 and edited.json()["tools"] == ["add"]
    fakes["primary"].queue(*[Reply(text="ok") for _ in range(20)])

    def only_add() -> bool:
        if chat(second, created["key"], "agent").status_code != 200:
            return False  # the second process has not seen the new key yet
        return {t["function"]["name"] for t in fakes["primary"].bodies[-1]["tools"]} == {"add"}

    wait_for(only_add)
    bad = admin("PATCH", first, f"/admin/keys/{created['id']}", {"tools": "add"})
    assert bad.status_code == 400 and bad.json()["error"]["param"].startswith("tools")
