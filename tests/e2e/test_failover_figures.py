"""Failover and circuit figures agree with what happened and with each other (issue 52).

Against a real gateway and a failing fake upstream: every request the fallback answers because
the primary failed or was skipped (its circuit open) is one failover in ``/metrics`` and in the
console's overview; ``loopgate_circuit_open`` is 1 exactly while the overview says ``open``; once
the cooldown is over with no traffic, both say half-open (cooldown over, no probe yet), not open.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import HEADLESS_KEY, Gateway, gateway_config
from tests.fakes.upstream import FakeUpstream, Reply

ADMIN = "figures-admin-secret"
USER = [{"role": "user", "content": "hi"}]
TARGET = "primary:gpt-x"
COOLDOWN_S = 4  # long enough for the skipped requests on a busy machine
ROUTING = ("{backoff_base_s: 0.01, backoff_max_s: 0.05, breaker_failures: 2, "
           f"breaker_cooldown_s: {COOLDOWN_S}, request_timeout_s: 30}}")
FAILED, SKIPPED = 2, 6


@pytest.fixture
def gateway_with_console(fakes: dict[str, FakeUpstream]) -> Iterator[Gateway]:
    config = gateway_config(fakes, routing=ROUTING)
    anchor = f"    - {{key: {HEADLESS_KEY}, tenant: jobs, headless: true}}\n"
    assert anchor in config
    config = config.replace(anchor, anchor + f"  admin_keys:\n    - {{key: {ADMIN}, name: ops}}\n", 1)
    gw = Gateway(config + "\nobservability: {rollups: {resolution_s: 1, retention_s: 600}}\n").start()
    yield gw
    gw.stop()


def overview(gw: Gateway) -> dict[str, Any]:
    response = httpx.get(f"{gw.url}/admin/console/overview", headers={"authorization": f"Bearer {ADMIN}"},
                         timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def gauge(gw: Gateway, name: str) -> float:
    found = re.search(rf'^{name}{{target="{re.escape(TARGET)}"}} (\S+)$', httpx.get(f"{gw.url}/metrics").text, re.M)
    return float(found.group(1)) if found else 0.0


def failovers_in_metrics(gw: Gateway) -> dict[str, float]:
    text = httpx.get(f"{gw.url}/metrics").text
    pattern = rf'^loopgate_failovers_total{{from_target="{re.escape(TARGET)}",error_class="(\w+)"}} (\S+)$'
    return {reason: float(count) for reason, count in re.findall(pattern, text, re.M)}


def poll(condition: Callable[[], bool], what: str, bound_s: float = 20.0) -> None:
    give_up = time.monotonic() + bound_s
    while not condition():
        assert time.monotonic() < give_up, f"not within {bound_s} s: {what}"
        time.sleep(0.1)


def circuit(gw: Gateway) -> dict[str, Any]:
    return next(c for c in overview(gw)["circuits"] if c["target"] == TARGET)


def test_every_request_the_fallback_answers_is_one_failover(gateway_with_console: Gateway,
                                                             fakes: dict[str, FakeUpstream]) -> None:
    gw = gateway_with_console
    client = gw.client()
    fakes["primary"].queue(*[Reply(status=500)] * FAILED)
    answered_by_fallback = 0
    for _ in range(FAILED + SKIPPED):
        answer = client.chat.completions.create(model="chain_primary_secondary", messages=USER)
        answered_by_fallback += answer.model_extra["gateway"]["answered_by"] == ["secondary:gpt-y"]
    assert answered_by_fallback == FAILED + SKIPPED
    assert len(fakes["primary"].requests) == FAILED, "the open circuit was skipped"
    assert failovers_in_metrics(gw) == {"server_error": FAILED, "circuit_open": SKIPPED}
    # While open: the gauge, /readyz and the overview say the same.
    assert gauge(gw, "loopgate_circuit_open") == 1 and gauge(gw, "loopgate_circuit_half_open") == 0
    assert httpx.get(f"{gw.url}/readyz").json()["circuits"][TARGET] == "open"
    poll(lambda: sum(f["count"] for f in overview(gw)["failovers"]) == FAILED + SKIPPED,
         "the overview counts every failover")
    reasons = {f["reason"]: f["count"] for f in overview(gw)["failovers"]}
    assert reasons == {"server_error": FAILED, "circuit_open": SKIPPED}
    # Cooldown over, no traffic: half-open (the next request probes), in every figure, never still "open".
    poll(lambda: httpx.get(f"{gw.url}/readyz").json()["circuits"][TARGET] == "half_open", "the cooldown ends",
         bound_s=COOLDOWN_S + 20)
    assert gauge(gw, "loopgate_circuit_open") == 0 and gauge(gw, "loopgate_circuit_half_open") == 1
    state = circuit(gw)
    assert state["state"] == "half_open" and state["probing"] is False
    assert [c["target"] for c in overview(gw)["circuits"] if c["state"] == "open"] == []
    # The probe answers: closed everywhere.
    answer = client.chat.completions.create(model="chain_primary_secondary", messages=USER)
    assert answer.model_extra["gateway"]["answered_by"] == [TARGET]
    assert gauge(gw, "loopgate_circuit_open") == 0 and gauge(gw, "loopgate_circuit_half_open") == 0
    poll(lambda: circuit(gw)["state"] == "closed", "the overview shows the closed circuit")
    assert failovers_in_metrics(gw) == {"server_error": FAILED, "circuit_open": SKIPPED}
