"""``loopgate serve --workers 2``: one scrape of ``/metrics`` returns the sum over both workers."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import orjson

from tests.e2e.conftest import KEY, Gateway, gateway_config
from tests.fakes.upstream import FakeUpstream, Reply

REQUESTS = 60


def _value(text: str, line_prefix: str) -> float:
    found = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_prefix)]
    return sum(found)


def test_one_scrape_sums_both_workers(fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(*[Reply(text="hi", usage=(3, 1)) for _ in range(REQUESTS)])
    routing = ("{backoff_base_s: 0.01, backoff_max_s: 0.05, breaker_failures: 1, breaker_cooldown_s: 600, "
               "request_timeout_s: 30}")
    config = gateway_config(fakes, routing=routing) + "\nlogging: {format: json, access: true}\n"
    gw = Gateway(config).start("--workers", "2")
    try:
        def one(_: int) -> int:
            # A new connection per request: the kernel hands connections to both workers.
            return httpx.post(f"{gw.url}/v1/chat/completions", json={"model": "plain", "messages": [
                {"role": "user", "content": "hi"}]}, headers={"authorization": f"Bearer {KEY}"}, timeout=20).status_code

        with ThreadPoolExecutor(8) as pool:
            assert list(pool.map(one, range(REQUESTS))) == [200] * REQUESTS
        # Access lines wait up to 20 ms to go out together (AccessLog.FLUSH_S): poll for all of them, reading
        # complete lines only (one may be half written).
        deadline = time.monotonic() + 15
        while True:
            text = gw.logs()
            records = [orjson.loads(line) for line in text[:text.rfind("\n") + 1].splitlines() if line.strip()]
            access = [r for r in records if r.get("message") == "access" and r["path"] == "/v1/chat/completions"]
            if len(access) >= REQUESTS:
                break
            assert time.monotonic() < deadline, f"{len(access)} of {REQUESTS} access records written"
            time.sleep(0.05)
        served = {r["pid"] for r in access}
        assert len(served) == 2, f"both workers must serve some requests for this test to mean anything: {served}"
        # One worker opens primary:m1's circuit (one failure is enough here); the scrape reports it open.
        fakes["primary"].queue(Reply(status=500, error_body={"error": {"message": "down", "type": "server_error"}}))
        fakes["secondary"].queue(Reply(text="from m2"))
        assert gw.post("/v1/chat/completions", {"model": "failover", "messages": [
            {"role": "user", "content": "hi"}]}).status_code == 200
        # Every worker's snapshot is at most a second old on an idle machine: wait for the circuit to show in a
        # scrape (a generous bound, not a fixed sleep), then check that any worker's scrape agrees.
        def settled(text: str) -> bool:
            circuits = [line for line in text.splitlines() if line.startswith("loopgate_circuit_open{")]
            return (_value(text, 'loopgate_request_duration_seconds_count{path="/v1/chat/completions"}')
                    == REQUESTS + 1
                    and _value(text, 'loopgate_requests_total{path="/v1/chat/completions",model="plain",'
                                     'status="200"}') == REQUESTS
                    and _value(text, 'loopgate_upstream_attempts_total{target="primary:up-model",outcome="ok"}')
                    == REQUESTS
                    # Circuit state is reported once per target (the maximum over workers), not once per worker.
                    and bool(circuits) and len(circuits) == len(set(c.rsplit(" ", 1)[0] for c in circuits))
                    and re.search(r'loopgate_circuit_open\{target="primary:m1"\} 1\n', text) is not None)

        # Each worker sums its own live counts with the others' published snapshots (each at most a second
        # old on an idle machine), so a scrape answered by either worker settles within a bound: wait (a
        # generous bound, not a fixed sleep) until several scrapes in a row, on new connections that the
        # kernel spreads over both workers, all show the summed figures.
        deadline = time.monotonic() + 20
        in_a_row = 0
        while in_a_row < 6:
            text = httpx.get(f"{gw.url}/metrics", timeout=10).text
            in_a_row = in_a_row + 1 if settled(text) else 0
            assert time.monotonic() < deadline, f"the summed scrape never settled; last scrape:\n{text[-3000:]}"
            if not in_a_row:
                time.sleep(0.1)
    finally:
        gw.stop()
