"""The gateway process against Redis deployments it cannot fully use: what still works, and the clean 503s."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.e2e.conftest import Gateway, gateway_config
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply
from tests.redis_servers import RedisProcess, start_or_skip, start_redis

USER = [{"role": "user", "content": "Look something up."}]
LOOKUP = [{"type": "function", "function": {"name": "lookup", "description": "client-side lookup",
                                            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def lone_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    """A password-protected server with no replica."""
    manager = start_redis(tmp_path_factory.mktemp("lone"), password="right-pw")
    server = start_or_skip(manager.__enter__)
    try:
        yield server
    finally:
        manager.__exit__(None, None, None)


def _store_config(fakes: dict[str, FakeUpstream], tool_server: ToolServer, url: str, extra: str) -> str:
    text = gateway_config(fakes, store_url=url, tool_server=tool_server.url)
    marker = f'store: {{url: "{url}", '
    assert marker in text
    return text.replace(marker, marker + extra)


def test_unconfirmed_pause_is_503_while_the_rest_still_works(fakes: dict[str, FakeUpstream], tool_server: ToolServer,
                                                             lone_redis: RedisProcess) -> None:
    url = f"redis://:right-pw@{lone_redis.address}/0"
    gw = Gateway(_store_config(fakes, tool_server, url, "wait_replicas: 1, wait_timeout_ms: 100, ")).start()
    try:
        assert httpx.get(f"{gw.url}/readyz").status_code == 200  # reachable; WAIT is per write
        fakes["primary"].queue(Reply(text="no store needed"))
        plain = gw.client().chat.completions.create(model="plain", messages=USER)
        assert plain.choices[0].message.content == "no store needed"
        fakes["primary"].queue(Reply(tool_calls=[("lookup", {"q": "x"})]))
        with pytest.raises(openai.APIStatusError) as caught:
            gw.client().chat.completions.create(model="agent", messages=USER, tools=LOOKUP)
        assert caught.value.status_code == 503
        assert caught.value.body["code"] == "store_unavailable"
        # Nothing half-written: the unacknowledged pause left no record behind.
        with lone_redis.client() as admin:
            assert [k for k in admin.keys("loopgate:*") if b":rec" in k or b":tc:" in k] == []
    finally:
        gw.stop()
        with lone_redis.client() as admin:
            admin.flushall()


def test_wrong_password_starts_not_ready_and_never_logs_the_password(fakes: dict[str, FakeUpstream],
                                                                      tool_server: ToolServer,
                                                                      lone_redis: RedisProcess) -> None:
    url = f"redis://{lone_redis.address}/0"
    gw = Gateway(_store_config(fakes, tool_server, url, "password: wrong-pw-7f3a, ")).start()
    try:
        ready = httpx.get(f"{gw.url}/readyz", timeout=10)
        assert ready.status_code == 503 and ready.json()["store"]["reachable"] is False
        fakes["primary"].queue(Reply(text="still served"))
        assert gw.client().chat.completions.create(model="plain", messages=USER).choices[0].message.content \
            == "still served"
        fakes["primary"].queue(Reply(tool_calls=[("lookup", {"q": "x"})]))
        with pytest.raises(openai.APIStatusError) as caught:
            gw.client().chat.completions.create(model="agent", messages=USER, tools=LOOKUP)
        assert caught.value.status_code == 503 and caught.value.body["code"] == "store_unavailable"
        logs = gw.logs()
        assert "not usable at start-up" in logs and "Traceback" not in logs
        assert "wrong-pw-7f3a" not in logs
    finally:
        gw.stop()
