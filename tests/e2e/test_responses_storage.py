"""What stored responses cost, through real gateway processes: chains, the memory bound, the tenant quota.

A ``previous_response_id`` chain stores each step once (memory and Redis); 1,000 stored requests of
1 MB keep a ``memory://`` gateway under ``store.memory_max_bytes``; a tenant at
``store.tenant_max_stored_bytes`` gets a 429 ``storage_quota_exceeded`` before anything runs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import redis

from tests.e2e.conftest import E2E_ROUTING_HEAVY, KEY, OTHER_KEY, Gateway, gateway_config, require_redis
from tests.fakes.upstream import FakeUpstream, Reply

REDIS_URL = os.environ["LOOPGATE_TEST_REDIS_URL"]  # the suite's own server (tests/conftest.py)
STEP = 10_000
MIB = 1024 * 1024


def _config(fakes: dict[str, FakeUpstream], store_url: str = "memory://", max_body: int = 200_000,
            **store: int) -> str:
    text = gateway_config(fakes, store_url=store_url, routing=E2E_ROUTING_HEAVY)
    extra = "".join(f", {key}: {value}" for key, value in store.items())
    assert "continuation_ttl_s: 600" in text  # the settings below must land in the store section
    text = text.replace("continuation_ttl_s: 600", f"continuation_ttl_s: 600{extra}", 1)
    return text.replace("max_body_bytes: 200000", f"max_body_bytes: {max_body}")


def _metric(gateway: Gateway, name: str, domain: str) -> float:
    text = httpx.get(f"{gateway.url}/metrics").text
    found = re.search(rf'^{name}{{domain="{domain}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def _rss(gateway: Gateway) -> int:
    assert gateway.process is not None
    with open(f"/proc/{gateway.process.pid}/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))


def _chain(gateway: Gateway, fakes: dict[str, FakeUpstream], steps: int) -> list[str]:
    """``steps`` follow-ups of ``STEP`` bytes each; returns the response ids. The last call sees them all."""
    ids: list[str] = []
    for i in range(steps):
        body: dict[str, object] = {"model": "plain", "input": f"{i:04d}" + "x" * STEP}
        if ids:
            body["previous_response_id"] = ids[-1]
        answer = gateway.post("/v1/responses", body)
        assert answer.status_code == 200, answer.text
        ids.append(answer.json()["id"])
    sent = fakes["primary"].requests[-1].body["messages"]
    assert [m["content"][:4] for m in sent if m["role"] == "user"] == [f"{i:04d}" for i in range(steps)]
    return ids


def test_a_50_step_chain_stores_about_one_transcript_in_memory(fakes: dict[str, FakeUpstream]) -> None:
    gateway = Gateway(_config(fakes)).start()
    try:
        ids = _chain(gateway, fakes, 50)
        stored = _metric(gateway, "loopgate_store_memory_bytes", "responses")
        # Each record holds its input and its part of the transcript (~2 x STEP): a copy of the
        # transcript per step would be ~25 times the sum of the additions.
        assert 50 * STEP < stored < 3 * 50 * STEP
        middle = gateway.client().responses.retrieve(ids[20])
        assert middle.id == ids[20]
        items = httpx.get(f"{gateway.url}/v1/responses/{ids[20]}/input_items",
                          headers={"Authorization": f"Bearer {KEY}"}).json()["data"]
        assert len(items) == 1 and "0020" + "x" * 10 in str(items[0]["content"])  # only its own input
    finally:
        gateway.stop()


def test_a_stored_response_keeps_its_answer_s_text_once(fakes: dict[str, FakeUpstream]) -> None:
    """Regression: the record kept the answer twice (in the Response object and as the transcript's last
    message); now once, and every read (retrieve, input items, a follow-up's transcript) is as before."""
    gateway = Gateway(_config(fakes)).start()
    try:
        answer = "A long and careful answer. " * 800  # 21,600 characters
        fakes["primary"].queue(Reply(text=answer))
        created = gateway.post("/v1/responses", {"model": "plain", "input": "Explain it all."})
        assert created.status_code == 200, created.text
        response = created.json()
        stored = _metric(gateway, "loopgate_store_memory_bytes", "responses")
        assert len(answer) < stored < len(answer) + 4096, stored  # the record's answer, its input and its framing
        headers = {"Authorization": f"Bearer {KEY}"}
        assert httpx.get(f"{gateway.url}/v1/responses/{response['id']}", headers=headers).json() == response
        items = httpx.get(f"{gateway.url}/v1/responses/{response['id']}/input_items", headers=headers).json()
        assert [item["content"] for item in items["data"]] == [[{"type": "input_text", "text": "Explain it all."}]]
        follow_up = gateway.post("/v1/responses", {"model": "plain", "input": "And briefly?",
                                                   "previous_response_id": response["id"]})
        assert follow_up.status_code == 200, follow_up.text
        sent = fakes["primary"].requests[-1].body["messages"]
        assert sent == [{"role": "user", "content": "Explain it all."}, {"role": "assistant", "content": answer},
                        {"role": "user", "content": "And briefly?"}]
    finally:
        gateway.stop()


@pytest.fixture
def redis_db() -> Iterator[redis.Redis]:
    require_redis(REDIS_URL)
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.mark.long(seconds=12)
def test_a_50_step_chain_stores_about_one_transcript_in_redis(fakes: dict[str, FakeUpstream],
                                                               redis_db: redis.Redis) -> None:
    one, two = Gateway(_config(fakes, REDIS_URL)).start(), Gateway(_config(fakes, REDIS_URL)).start()
    try:
        ids = _chain(one, fakes, 25)
        fakes["primary"].reset()
        for i in range(25, 50):  # the chain goes on on the other replica
            answer = two.post("/v1/responses", {"model": "plain", "input": f"{i:04d}" + "x" * STEP,
                                                "previous_response_id": ids[-1]})
            assert answer.status_code == 200, answer.text
            ids.append(answer.json()["id"])
        sent = fakes["primary"].requests[-1].body["messages"]
        assert len([m for m in sent if m["role"] == "user"]) == 50
        keys = list(redis_db.scan_iter(match="loopgate:{t:team-a}:resp:*"))
        stored = sum(int(redis_db.strlen(key)) for key in keys)
        assert len(keys) == 50 and 50 * STEP < stored < 3 * 50 * STEP
        counted = int(redis_db.hget("loopgate:{t:team-a}:resp_bytes", "total") or 0)
        assert counted == stored  # the tenant's count is the bytes its records hold
        # Deleting an ancestor ends the chains through it: a clear 400 naming it.
        one.client().responses.delete(ids[10])
        broken = two.post("/v1/responses", {"model": "plain", "input": "more", "previous_response_id": ids[-1]})
        assert broken.status_code == 400
        error = broken.json()["error"]
        assert error["code"] == "previous_response_not_found" and error["param"] == "previous_response_id"
        assert ids[10] in error["message"]
        left = sum(int(redis_db.strlen(key)) for key in redis_db.scan_iter(match="loopgate:{t:team-a}:resp:*"))
        assert left < stored and int(redis_db.hget("loopgate:{t:team-a}:resp_bytes", "total") or 0) == left
    finally:
        one.stop()
        two.stop()


def test_the_tenant_quota_is_a_429_before_anything_runs(fakes: dict[str, FakeUpstream]) -> None:
    gateway = Gateway(_config(fakes, tenant_max_stored_bytes=5 * STEP)).start()
    try:
        ids = []
        for _ in range(3):
            answer = gateway.post("/v1/responses", {"model": "plain", "input": "x" * STEP})
            assert answer.status_code == 200, answer.text
            ids.append(answer.json()["id"])
        calls = len(fakes["primary"].requests)
        refused = gateway.post("/v1/responses", {"model": "plain", "input": "x" * STEP})
        assert refused.status_code == 429
        error = refused.json()["error"]
        assert error["code"] == "storage_quota_exceeded" and "store.tenant_max_stored_bytes" in error["message"]
        assert len(fakes["primary"].requests) == calls  # refused before the model was called
        unstored = gateway.post("/v1/responses", {"model": "plain", "input": "hi", "store": False})
        assert unstored.status_code == 200
        other = gateway.post("/v1/responses", {"model": "plain", "input": "hi"}, key=OTHER_KEY)
        assert other.status_code == 200  # another tenant has its own quota
        for response_id in ids:  # deleting gives the bytes back
            gateway.client().responses.delete(response_id)
        assert gateway.post("/v1/responses", {"model": "plain", "input": "hi"}).status_code == 200
    finally:
        gateway.stop()


@pytest.mark.long(seconds=18)
def test_1000_stored_requests_of_1_mb_stay_under_the_memory_bound(fakes: dict[str, FakeUpstream]) -> None:
    bound = 32 * MIB  # the responses' share is half of it
    gateway = Gateway(_config(fakes, max_body=2 * MIB, memory_max_bytes=bound, tenant_max_stored_bytes=0)).start()
    payload = {"model": "plain", "input": "y" * MIB}
    with httpx.Client(timeout=150) as http:
        def send(_: int) -> int:
            answer = http.post(f"{gateway.url}/v1/responses", json=payload,
                               headers={"Authorization": f"Bearer {KEY}"})
            return answer.status_code
        try:
            with ThreadPoolExecutor(4) as pool:
                assert set(pool.map(send, range(50))) == {200}
                fakes["primary"].reset()
                before = _rss(gateway)
                for start in range(50, 1000, 50):
                    assert set(pool.map(send, range(start, start + 50))) == {200}
                    fakes["primary"].reset()  # the fake keeps what it received: not this test's subject
            held = _metric(gateway, "loopgate_store_memory_bytes", "responses")
            assert 0 < held <= bound // 2
            assert _metric(gateway, "loopgate_store_evictions_total", "responses") >= 900
            # Loosely: without the bound the process would hold ~2 GB more (input and transcript per record).
            assert _rss(gateway) - before < 256 * MIB
        finally:
            gateway.stop()
