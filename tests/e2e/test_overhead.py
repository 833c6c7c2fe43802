"""The gateway overhead (``loopgate_gateway_overhead_seconds``): a request's time less its waiting on upstreams.

An upstream that takes 0.4 s makes a request last at least that long; the overhead recorded for it
leaves that wait out, streamed (to the end of the stream) or not.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.conftest import Gateway, gateway_config
from tests.fakes.upstream import FakeUpstream, Reply

UPSTREAM_S = 0.4
USER = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def gateway(fakes: dict[str, FakeUpstream]) -> Iterator[Gateway]:
    gw = Gateway(gateway_config(fakes)).start()
    yield gw
    gw.stop()


def histogram(gateway: Gateway, name: str, label: str) -> tuple[float, float]:
    """(count, sum) of one histogram series in /metrics."""
    count = total = 0.0
    for line in httpx.get(f"{gateway.url}/metrics", timeout=10).text.splitlines():
        if line.startswith(f"{name}_count{{{label}}} "):
            count = float(line.rsplit(" ", 1)[1])
        elif line.startswith(f"{name}_sum{{{label}}} "):
            total = float(line.rsplit(" ", 1)[1])
    return count, total


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_time_is_left_out_of_the_overhead(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                   stream: bool) -> None:
    before_count, before_sum = histogram(gateway, "loopgate_gateway_overhead_seconds", 'route="plain"')
    _, before_latency = histogram(gateway, "loopgate_request_duration_seconds", 'path="/v1/chat/completions"')
    fakes["primary"].queue(Reply(text="slow answer", delay_s=UPSTREAM_S))
    if stream:
        chunks = list(gateway.client().chat.completions.create(model="plain", messages=USER, stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "slow answer"
    else:
        answer = gateway.client().chat.completions.create(model="plain", messages=USER)
        assert answer.choices[0].message.content == "slow answer"
    count, total = before_count, before_sum
    for _ in range(200):  # a stream's request is counted as its connection closes: wait for it (bounded)
        count, total = histogram(gateway, "loopgate_gateway_overhead_seconds", 'route="plain"')
        if count > before_count:
            break
    assert count == before_count + 1
    _, latency = histogram(gateway, "loopgate_request_duration_seconds", 'path="/v1/chat/completions"')
    assert latency - before_latency >= UPSTREAM_S  # the request itself waited on the upstream...
    overhead = total - before_sum
    assert 0 <= overhead < UPSTREAM_S  # ...which its overhead leaves out
