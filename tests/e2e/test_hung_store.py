"""A hung Redis (SIGSTOP: connections open, no answers) under a real gateway: what needs no store keeps
its latency, limits and budgets fail open within ``store.fail_open_ms``, a pause is a quick 503, and
after SIGCONT everything is exact again.

Its own redis-server (never the suite's shared one): freezing it must not disturb other tests.
"""

from __future__ import annotations

import os
import signal
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tests.e2e.conftest import E2E_FAIL_OPEN_MS, Gateway, gateway_config
from tests.fakes.upstream import FakeUpstream, Reply
from tests.redis_servers import RedisProcess, start_or_skip, start_redis

FROZEN_S = 10.0
FAIL_OPEN_MS = 100
TIMEOUT_MS = 1000
KEYS = """auth:
  keys:
    - {key: limited-key, tenant: lim, rpm: 90}
    - {key: exact-key, tenant: exact, rpm: 3}
    - {key: budget-key, tenant: bud, budget: {limit: 1000, unit: tokens, period: day}}
"""
# (1,000 tokens: 2 % of it holds no request, so every budgeted request asks the store; the test
# spends a few hundred.)
#: what a request costs beyond the store's bound, at most, on a busy machine (generous on purpose: the
#: regressions this guards against cost 3 s and more, and a loaded two-core machine adds tenths of a second)
SLACK_S = 1.0


@pytest.fixture
def frozen_redis(tmp_path: Path) -> Iterator[RedisProcess]:
    manager = start_redis(tmp_path)
    server = start_or_skip(manager.__enter__)
    try:
        yield server
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)  # never leave it stopped
        manager.__exit__(None, None, None)


def _timed(gw: Gateway, key: str, model: str = "plain") -> tuple[float, httpx.Response]:
    started = time.perf_counter()
    response = gw.post("/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": "hi"}]},
                       key=key)
    return time.perf_counter() - started, response


def _p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100)[98] if len(samples) > 1 else samples[0]


def _fail_opens(gw: Gateway, domain: str) -> float:
    for line in httpx.get(f"{gw.url}/metrics", timeout=10).text.splitlines():
        if line.startswith(f'loopgate_store_fail_open_total{{domain="{domain}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.long(seconds=20)
def test_a_frozen_redis_costs_plain_requests_nothing_and_the_rest_a_bounded_wait(
        frozen_redis: RedisProcess, fakes: dict[str, FakeUpstream]) -> None:
    url = f"redis://127.0.0.1:{frozen_redis.port}/0"
    config = gateway_config(fakes, store_url=url).replace("auth:\n  keys:\n", KEYS, 1)
    config = config.replace(f"fail_open_ms: {E2E_FAIL_OPEN_MS}",
                            f"fail_open_ms: {FAIL_OPEN_MS}, timeout_ms: {TIMEOUT_MS}")
    assert f"fail_open_ms: {FAIL_OPEN_MS}, timeout_ms" in config
    gw = Gateway(config).start()
    try:
        for key in ("test-key", "limited-key", "budget-key"):  # warm: connections, leases, readings
            assert _timed(gw, key)[1].status_code == 200
        before = [_timed(gw, "test-key")[0] for _ in range(40)]

        os.kill(frozen_redis.proc.pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        try:
            during = []
            for _ in range(40):
                elapsed, response = _timed(gw, "test-key")
                assert response.status_code == 200
                during.append(elapsed)
            limited = [_timed(gw, "limited-key") for _ in range(10)]
            budgeted = [_timed(gw, "budget-key") for _ in range(10)]
            fakes["primary"].queue(Reply(text="Deleting.", tool_calls=[("delete_record", {"id": "1"})]))
            pause_s, paused = _timed(gw, "test-key", model="agent")
            # What a plain request cost on this machine just now (its slowest, so a busy machine is allowed for).
            plain_worst = max(during)
            # Frozen for at least 10 s with requests still flowing (longer when a busy machine made the requests
            # above slower: the freeze lasts until they are all done, never a window they must fit in).
            while time.monotonic() - frozen_at < FROZEN_S:
                assert _timed(gw, "test-key")[1].status_code == 200
        finally:
            os.kill(frozen_redis.proc.pid, signal.SIGCONT)

        # Requests that need no store kept their latency (before the fix: +3 s, shared health was read inline).
        assert _p99(during) <= _p99(before) + 0.1 + SLACK_S / 4, (_p99(before), _p99(during))
        # Limited and budgeted requests failed open (200, no rate-limit headers) within the bound.
        for elapsed, response in limited + budgeted:
            assert response.status_code == 200
            assert elapsed <= plain_worst + 2 * FAIL_OPEN_MS / 1000 + SLACK_S, elapsed  # before: 3 s and 6 s
        assert not any(h.startswith("x-ratelimit") for h in limited[-1][1].headers)
        assert _fail_opens(gw, "limits") >= 10 and _fail_opens(gw, "budgets") >= 10
        # A pause is never acknowledged unwritten: a 503, within store.timeout_ms (before: 3 s and more).
        assert paused.status_code == 503 and paused.json()["error"]["code"] == "store_unavailable", paused.text
        assert pause_s <= TIMEOUT_MS / 1000 + plain_worst + SLACK_S / 2, pause_s
        logs = gw.logs()
        assert logs.count("rate limits are not enforced (failing open") == 1, "logged once per burst"

        # After SIGCONT everything is exact again: limits decide (headers, a 429 at the limit), pauses are written.
        deadline = time.monotonic() + 30
        while httpx.get(f"{gw.url}/readyz", timeout=10).status_code != 200:
            assert time.monotonic() < deadline, "the gateway never saw Redis again"
            time.sleep(0.05)
        statuses = [_timed(gw, "exact-key")[1] for _ in range(5)]
        assert [r.status_code for r in statuses] == [200, 200, 200, 429, 429]
        assert statuses[0].headers["x-ratelimit-limit-requests"] == "3"
        assert _timed(gw, "limited-key")[1].headers["x-ratelimit-limit-requests"] == "90"
        fails = _fail_opens(gw, "budgets")
        assert _timed(gw, "budget-key")[1].status_code == 200 and _fail_opens(gw, "budgets") == fails
        fakes["primary"].queue(Reply(text="Deleting.", tool_calls=[("delete_record", {"id": "2"})]))
        resumed = _timed(gw, "test-key", model="agent")[1]
        assert resumed.status_code == 200 and resumed.json()["gateway"]["status"] == "paused"
        assert "store answers again (limits)" in gw.logs()
    finally:
        gw.stop()


def test_an_admin_call_on_a_hung_store_says_what_may_have_happened(frozen_redis: RedisProcess,
                                                                   fakes: dict[str, FakeUpstream]) -> None:
    """The admin API's 503 is its own: a read changed nothing; a write may have been applied (a hung Redis runs
    the command when it wakes), so the answer says how to find out instead of "nothing was paused or resumed"."""
    url = f"redis://127.0.0.1:{frozen_redis.port}/0"
    admin = "admin-secret"
    config = gateway_config(fakes, store_url=url).replace(
        "auth:\n  keys:\n", f"auth:\n  admin_keys:\n    - {{key: {admin}, name: ops}}\n  keys:\n", 1)
    config = config.replace(f"fail_open_ms: {E2E_FAIL_OPEN_MS}", f"fail_open_ms: {E2E_FAIL_OPEN_MS}, "
                                                                 f"timeout_ms: {TIMEOUT_MS}")
    gw = Gateway(config).start()
    headers = {"authorization": f"Bearer {admin}"}
    try:
        created = httpx.post(f"{gw.url}/admin/keys", json={"tenant": "t1", "name": "before"}, headers=headers,
                             timeout=10)
        assert created.status_code == 201, created.text
        key_id = created.json()["id"]
        os.kill(frozen_redis.proc.pid, signal.SIGSTOP)
        try:
            read = httpx.get(f"{gw.url}/admin/keys/{key_id}", headers=headers, timeout=10)
            write = httpx.post(f"{gw.url}/admin/keys", json={"tenant": "t1", "name": "during"}, headers=headers,
                               timeout=10)
            edit = httpx.patch(f"{gw.url}/admin/keys/{key_id}", json={"name": "renamed"}, headers=headers,
                               timeout=10)
        finally:
            os.kill(frozen_redis.proc.pid, signal.SIGCONT)
        for response in (read, write, edit):
            assert response.status_code == 503, response.text
            error = response.json()["error"]
            assert error["code"] == "store_unavailable" and error["type"] == "service_unavailable_error"
            assert "paused or resumed" not in error["message"]
            assert "store.timeout_ms" in error["message"]
        assert "nothing was changed" in read.json()["error"]["message"]
        assert "may have been created" in write.json()["error"]["message"]
        assert "GET /admin/keys" in write.json()["error"]["message"]
        assert "may have been applied" in edit.json()["error"]["message"]
    finally:
        gw.stop()


def test_a_reservation_a_thawed_redis_runs_late_does_not_shut_the_budget(frozen_redis: RedisProcess,
                                                                         fakes: dict[str, FakeUpstream]) -> None:
    """A budget check that failed open during a freeze had already written its reservation: the thawed
    Redis runs it, for a request long gone. A new key reserves its prompt plus its answer's cap (4,096
    tokens on this route), more than its whole 1,000-token budget: before the fix that leftover shut the
    key for the whole lease (``routing.request_timeout_s`` + 60 s of 429s). The gateway gives back every
    reservation it got no answer for, and a release that could not be written goes again (ahead of the
    key's next reservation)."""
    url = f"redis://127.0.0.1:{frozen_redis.port}/0"
    keys = KEYS + "    - {key: new-key, tenant: fresh, budget: {limit: 1000, unit: tokens, period: day}}\n"
    config = gateway_config(fakes, store_url=url).replace("auth:\n  keys:\n", keys, 1)
    config = config.replace(f"fail_open_ms: {E2E_FAIL_OPEN_MS}",
                            f"fail_open_ms: {FAIL_OPEN_MS}, timeout_ms: {TIMEOUT_MS}")
    gw = Gateway(config).start()
    redis_client = redis.Redis(port=frozen_redis.port)
    try:
        # Another key's budget check and usage write leave idle connections in the pool: a check during
        # the freeze writes its script on one (the kernel takes it) before it gives up waiting.
        assert _timed(gw, "budget-key")[1].status_code == 200
        os.kill(frozen_redis.proc.pid, signal.SIGSTOP)
        try:
            during = [_timed(gw, "new-key")[1].status_code for _ in range(3)]
        finally:
            os.kill(frozen_redis.proc.pid, signal.SIGCONT)
        assert during == [200, 200, 200], "failed open"
        deadline = time.monotonic() + 30
        while httpx.get(f"{gw.url}/readyz", timeout=10).status_code != 200:
            assert time.monotonic() < deadline, "the gateway never saw Redis again"
            time.sleep(0.05)
        after = _timed(gw, "new-key")[1]
        assert after.status_code == 200, after.text  # before: 429, "requests in flight hold 4118 tokens"
        # Nothing stays reserved once the admitted request recorded its usage (released at once).
        held = [-1]
        deadline = time.monotonic() + 10
        while held != [0]:
            assert time.monotonic() < deadline, f"reservations no request holds: {held}"
            time.sleep(0.05)
            held = [int(redis_client.hget(name, "t") or 0) for name in redis_client.scan_iter("*{u:fresh}*:rh")]
    finally:
        redis_client.close()
        gw.stop()
