"""Stored responses in a real Redis shared by two gateway processes: any replica retrieves, continues, deletes."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import openai
import pytest
import redis

from tests.e2e.conftest import OTHER_KEY, Gateway, gateway_config, require_redis
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply

REDIS_URL = os.environ["LOOPGATE_TEST_REDIS_URL"]  # the suite's own server (tests/conftest.py)
IN_CI = os.environ.get("CI", "").lower() == "true"
LOOKUP = [{"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}]


@pytest.fixture(scope="module")
def pair(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> Iterator[tuple[Gateway, Gateway]]:
    require_redis(REDIS_URL)
    redis.Redis.from_url(REDIS_URL).flushdb()
    config = gateway_config(fakes, store_url=REDIS_URL, tool_server=tool_server.url)
    first, second = Gateway(config).start(), Gateway(config).start()
    yield first, second
    first.stop()
    second.stop()


def test_paused_on_one_process_answered_on_the_other(pair: tuple[Gateway, Gateway],
                                                     fakes: dict[str, FakeUpstream]) -> None:
    one, two = pair
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Bern"})]),
                           Reply(tool_calls=[("lookup", {})]))
    paused = one.client().responses.create(model="agent", input="Bern and lookup", tools=LOOKUP)
    assert paused.output[-1].type == "function_call"
    fetched = two.client().responses.retrieve(paused.id)
    assert [i.type for i in fetched.output] == ["mcp_call", "function_call"]
    with pytest.raises(openai.NotFoundError):
        two.client(OTHER_KEY).responses.retrieve(paused.id)

    fakes["primary"].queue(Reply(text="Bern is sunny; found it."))
    answer = [{"type": "function_call_output", "call_id": paused.output[-1].call_id, "output": "found"}]
    done = two.client().responses.create(model="agent", previous_response_id=paused.id, input=answer, tools=LOOKUP)
    assert done.output_text == "Bern is sunny; found it."
    with pytest.raises(openai.ConflictError):
        one.client().responses.create(model="agent", previous_response_id=paused.id, input=answer, tools=LOOKUP)

    fakes["primary"].queue(Reply(text="Bye."))
    chained = one.client().responses.create(model="agent", previous_response_id=done.id, input="bye", tools=LOOKUP)
    sent = fakes["primary"].requests[-1].body["messages"]
    assert chained.output_text == "Bye." and [m["role"] for m in sent] == [
        "user", "assistant", "tool", "assistant", "tool", "assistant", "user"]

    two.client().responses.delete(done.id)
    with pytest.raises(openai.NotFoundError):
        one.client().responses.retrieve(done.id)
    with pytest.raises(openai.BadRequestError) as gone:
        one.client().responses.create(model="agent", previous_response_id=done.id, input="again")
    assert gone.value.code == "previous_response_not_found"


def test_expired_previous_response_is_not_found(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> None:
    require_redis(REDIS_URL)
    gw = Gateway(gateway_config(fakes, store_url=REDIS_URL, tool_server=tool_server.url, ttl_s=1)).start()
    try:
        fakes["primary"].queue(Reply(text="hi"))
        first = gw.client().responses.create(model="plain", input="hello")
        time.sleep(1.3)
        with pytest.raises(openai.BadRequestError) as expired:
            gw.client().responses.create(model="plain", input="again", previous_response_id=first.id)
        assert expired.value.code == "previous_response_not_found"
    finally:
        gw.stop()
