"""The shortcuts a plain Responses request takes (bench/README.md, "Responses vs chat"), each giving what the
general path gives: the shared echo and its prebuilt Response template, one draw for the response and item ids,
and the stored-bytes quota decided without a coroutine on the embedded store."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import orjson
import pytest

from gateway.api.responses.chain import check_quota
from gateway.api.responses.echo import PLAIN_ECHOES
from gateway.api.responses.events import response_ids
from gateway.api.responses.render import ResponseBuilder
from gateway.api.responses.request import parse_responses_request
from gateway.api.responses.ws_records import ConnectionRecords
from gateway.canonical import TextDelta, Usage
from gateway.errors import GatewayError
from gateway.loop.events import Finished, LoopResult
from gateway.store.responses.memory import MemoryResponseRecords


def _answer(echo: dict[str, Any]) -> bytes:
    builder = ResponseBuilder("resp_1", "m", echo, lambda name: "loopgate", created_at=1, emit=False,
                              item_base="_0123")
    builder.start()
    builder.feed(TextDelta("Hello."))
    builder.feed(Finished(LoopResult("completed", "stop", Usage(10, 2), {"status": "completed"}, [], "m")))
    builder.response["completed_at"] = 2  # the clock's: the same in both
    return orjson.dumps(builder.response)


@pytest.mark.parametrize("modes", [{}, {"stream": True}, {"store": False}, {"background": True, "store": True},
                                   {"instructions": None, "tools": None, "tool_choice": None}])
def test_a_plain_request_shares_its_echo_and_answers_byte_for_byte_as_an_unshared_one(modes: dict[str, Any]) -> None:
    request = parse_responses_request({"model": "m", "input": "x", **modes})
    assert request.echo is PLAIN_ECHOES[request.store, request.background]
    assert request.metadata == {} and request.metadata is not request.echo["metadata"]
    assert _answer(request.echo) == _answer(dict(request.echo))  # the template's copy, key order included


@pytest.mark.parametrize("body", [{"instructions": "Be brief."}, {"tools": []}, {"tool_choice": "auto"},
                                  {"temperature": 0.5}, {"metadata": {"a": "b"}}, {"store": False, "user": "u"}])
def test_a_request_with_anything_to_echo_gets_its_own_echo_and_leaves_the_shared_ones_alone(
        body: dict[str, Any]) -> None:
    before = orjson.dumps(list(PLAIN_ECHOES.values()))
    request = parse_responses_request({"model": "m", "input": "x", **body})
    assert all(request.echo is not shared for shared in PLAIN_ECHOES.values())
    assert {name: request.echo[name] for name in body} == body
    assert orjson.dumps(list(PLAIN_ECHOES.values())) == before


@pytest.mark.parametrize("body, param", [({"stream": "yes"}, "stream"), ({"store": 1}, "store"),
                                         ({"background": None, "stream": 0}, "stream"), ({"model": ""}, "model"),
                                         ({"input": 3}, "input"), ({"conversation": "c"}, "conversation")])
def test_the_fast_tests_still_refuse_what_the_checks_refuse(body: dict[str, Any], param: str) -> None:
    with pytest.raises(GatewayError) as refused:
        parse_responses_request({"model": "m", "input": "x", **body})
    assert refused.value.status == 400 and refused.value.param == param


def test_null_modes_are_their_defaults() -> None:
    request = parse_responses_request({"model": "m", "input": "x", "stream": None, "store": None, "background": None})
    assert (request.stream, request.store, request.background) == (False, True, False)


def test_one_draw_gives_a_response_id_and_an_item_base_of_the_usual_sizes() -> None:
    ids = [response_ids() for _ in range(50)]
    assert all(re.fullmatch(r"resp_[0-9a-f]{48}", rid) and re.fullmatch(r"_[0-9a-f]{20}", base) for rid, base in ids)
    assert len({rid for rid, _ in ids}) == len({base for _, base in ids}) == 50
    builder = ResponseBuilder(ids[0][0], "m", {}, lambda name: "loopgate", emit=False, item_base=ids[0][1])
    builder.feed(TextDelta("Hi."))
    assert builder.response["output"][0]["id"] == "msg" + ids[0][1] + "0000"


def test_the_quota_is_decided_at_once_on_the_embedded_store_and_awaited_behind_a_view() -> None:
    async def run() -> None:
        records = MemoryResponseRecords()
        assert check_quota(records, 0, "t") is None  # no quota
        assert check_quota(records, 10_000, "t") is None  # under it: decided, nothing to await
        await records.put("t", "resp_a", {"response": {"id": "resp_a"}, "input": ["x" * 200]}, 60)
        held = records.held_bytes("t")
        assert held == await records.stored_bytes("t") > 200
        with pytest.raises(GatewayError) as over:
            check_quota(records, held, "t")
        assert (over.value.status, over.value.code) == (429, "storage_quota_exceeded")
        view = ConnectionRecords(records, 4, 1 << 20)  # knows nothing in this process: asks its store
        pending = check_quota(view, held, "t")
        assert pending is not None
        with pytest.raises(GatewayError):
            await pending
        under = check_quota(view, held + 1, "t")
        assert under is not None and await under is None

    asyncio.run(run())
