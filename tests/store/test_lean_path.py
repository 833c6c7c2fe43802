"""The lean command path (``redis_client/lean.py``, ``lean_pool.py``) on real servers: replies split across reads,
connections killed or cancelled mid-command, NOSCRIPT, the reply bound, the pool's size, the setup of a connection
(AUTH, SELECT) and a Sentinel failover."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import hiredis
import pytest

from gateway.config.model import StoreSentinel
from gateway.store.errors import StoreUnavailable
from gateway.store.redis_client.client import RedisIO
from gateway.store.redis_client.lean_pool import LeanPool
from tests.redis_servers import (
    HOST,
    PATIENT,
    RedisProcess,
    start_or_skip,
    start_redis,
    start_sentinel_group,
)

LUA = "return {'ok', redis.call('GET', KEYS[1])}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    manager = start_redis(tmp_path_factory.mktemp("lean"))
    process = start_or_skip(manager.__enter__)
    try:
        yield process
    finally:
        manager.__exit__(None, None, None)


@pytest.fixture
async def io(server: RedisProcess) -> AsyncIterator[RedisIO]:
    with server.client() as admin:
        admin.flushall()
    store_io = RedisIO(f"redis://{server.address}/0", **PATIENT)
    assert store_io.lean is not None, "one server: the lean path is on"
    try:
        yield store_io
    finally:
        await store_io.aclose()


async def _until(check: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Wait on a condition while the event loop runs (the command it waits for is sent by a task of this loop)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def _blocked(server: RedisProcess, client_id: int) -> bool:
    with server.client() as admin:
        return any(c["id"] == str(client_id) and c["cmd"] == "blpop" for c in admin.client_list())


def _lean(io: RedisIO) -> LeanPool:
    assert io.lean is not None
    return io.lean


async def test_replies_of_every_kind_come_back_as_redis_sends_them(io: RedisIO) -> None:
    async with io.guard("test"):
        assert await io.command("SET", "loopgate:k", b"v" * 10) == b"OK"
        assert await io.command("MGET", "loopgate:k", "loopgate:none") == [b"v" * 10, None]
        assert await io.command("INCRBY", "loopgate:n", 5) == 5
        script = io.register(LUA)
        assert (await io.script(script, ["loopgate:k"], [], False))[0] == [b"ok", b"v" * 10]


async def test_pipelines_of_one_and_of_many_commands_answer_in_order(io: RedisIO) -> None:
    async with io.guard("test"):
        assert await io.pipeline("loopgate:p", [("SET", "loopgate:p", "1")]) == [b"OK"]
        assert await io.pipeline("loopgate:p", [("INCR", "loopgate:p"), ("GET", "loopgate:p"), ("PING",)]) == [
            2, b"2", b"PONG"]
        replies = await _lean(io).pipeline([("INCR", "loopgate:p"), ("HGET", "loopgate:p", "f"), ("GET", "loopgate:p")])
    assert replies[0] == 3 and replies[2] == b"3" and "WRONGTYPE" in str(replies[1])  # an error in place
    with pytest.raises(Exception, match="WRONGTYPE"):
        async with io.guard("test"):
            await io.pipeline("loopgate:p", [("HGET", "loopgate:p", "f")])


async def test_a_reply_larger_than_a_socket_read_is_reassembled(io: RedisIO) -> None:
    big = bytes(range(256)) * 8192  # 2 MiB: many reads of the socket
    async with io.guard("test"):
        await io.command("SET", "loopgate:big", big)
        assert await io.command("GET", "loopgate:big") == big
        assert await io.command("PING") == b"PONG"  # the same connection, in step with its replies


class _SplittingServer:
    """A minimal RESP server that answers every reply one byte per write, and ``HALF`` with half a reply."""

    def __init__(self) -> None:
        self.port = 0
        self.connections = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, HOST, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        parser = hiredis.Reader()
        try:
            while data := await reader.read(65536):
                parser.feed(data)
                while (command := parser.gets()) is not False:
                    name = command[0].upper()
                    if name == b"HALF":  # the head of a reply, then the connection ends
                        writer.write(b"$10\r\nhalf")
                        await writer.drain()
                        writer.close()
                        return
                    reply = b"+OK\r\n" if name == b"CLIENT" else b"$%d\r\n%s\r\n" % (len(command[-1]), command[-1])
                    for i in range(len(reply)):
                        writer.write(reply[i:i + 1])
                        await writer.drain()
                        await asyncio.sleep(0)
        finally:
            writer.close()

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()


async def test_a_reply_split_byte_by_byte_and_a_half_read_reply_never_feed_the_next_command() -> None:
    fake = _SplittingServer()
    await fake.start()
    io = RedisIO(f"redis://{HOST}:{fake.port}/0", **PATIENT)
    try:
        async with io.guard("test"):
            assert await io.command("ECHO", b"split across many reads") == b"split across many reads"
        with pytest.raises(StoreUnavailable, match="closed"):
            async with io.guard("test"):
                await io.command("HALF")
        assert _lean(io).size == 0  # the connection with half a reply in it is gone
        async with io.guard("test"):
            assert await io.command("ECHO", b"next") == b"next"  # its own reply, on a new connection
        assert fake.connections == 2
    finally:
        await io.aclose()
        await fake.stop()


async def _client_id(io: RedisIO) -> int:
    async with io.guard("test"):
        return int(await io.command("CLIENT", "ID"))


async def test_a_connection_killed_mid_command_is_discarded_and_the_next_command_works(
        io: RedisIO, server: RedisProcess) -> None:
    victim = await _client_id(io)  # the pool's one idle connection, which the blocking pop below takes

    async def blocked() -> Any:
        async with io.guard("test"):
            return await io.command("BLPOP", "loopgate:empty", 30)

    task = asyncio.ensure_future(blocked())
    await _until(lambda: _blocked(server, victim), "the pop to block")
    with server.client() as admin:
        assert admin.execute_command("CLIENT", "KILL", "ID", victim) == 1
    with pytest.raises(StoreUnavailable, match="redis unavailable during test"):
        await task
    assert _lean(io).size == 0
    assert await _client_id(io) != victim
    async with io.guard("test"):
        assert await io.command("PING") == b"PONG"


async def test_a_cancelled_command_closes_its_connection_and_leaves_no_reply_behind(
        io: RedisIO, server: RedisProcess) -> None:
    victim = await _client_id(io)

    async def blocked() -> Any:
        async with io.guard("test"):
            return await io.command("BLPOP", "loopgate:list", 30)

    task = asyncio.ensure_future(blocked())
    await _until(lambda: _blocked(server, victim), "the pop to block")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _lean(io).size == 0
    with server.client() as admin:
        await _until(lambda: all(c["id"] != str(victim) for c in admin.client_list()), "the connection to close")
        admin.rpush("loopgate:list", "kept")  # nobody pops it: the cancelled pop's connection is gone
    async with io.guard("test"):
        assert await io.command("LRANGE", "loopgate:list", 0, -1) == [b"kept"]


async def test_the_deadline_closes_the_connection_of_a_command_that_outlives_it(server: RedisProcess) -> None:
    io = RedisIO(f"redis://{server.address}/0", op_timeout=0.2)
    try:
        with pytest.raises(StoreUnavailable, match=r"no answer within 0\.2s"):
            async with io.guard("slow"):
                await io.command("BLPOP", "loopgate:empty", 5)
        assert _lean(io).size == 0
        async with io.guard("test"):
            assert await io.command("PING") == b"PONG"
    finally:
        await io.aclose()


async def test_a_flushed_script_cache_is_loaded_again(server: RedisProcess) -> None:
    io = RedisIO(f"redis://{server.address}/0", **PATIENT)  # one registered script: SCRIPT LOAD a pipeline of one
    script = io.register(LUA)
    async with io.guard("test"):
        await io.command("SET", "loopgate:k", "v")
        assert (await io.script(script, ["loopgate:k"], [], False))[0] == [b"ok", b"v"]
    with server.client() as admin:
        admin.script_flush()
    try:
        async with io.guard("test"):
            assert (await io.script(script, ["loopgate:k"], [], False))[0] == [b"ok", b"v"]
    finally:
        await io.aclose()


async def test_a_flushed_script_cache_is_loaded_again_before_a_wait(server: RedisProcess) -> None:
    io = RedisIO(f"redis://{server.address}/0", wait_replicas=1, wait_timeout_ms=10, **PATIENT)
    script = io.register(LUA)
    try:
        with server.client() as admin:
            admin.set("loopgate:k", "v")
            admin.script_flush()
        async with io.guard("test", durable=True):
            reply, acked = await io.script(script, ["loopgate:k"], [], True)
        assert reply == [b"ok", b"v"] and acked == 0  # no replica here: WAIT answers 0 on the same connection
    finally:
        await io.aclose()


async def test_a_reply_over_the_bound_closes_the_connection(server: RedisProcess) -> None:
    io = RedisIO(f"redis://{server.address}/0", **PATIENT)
    lean = _lean(io)
    lean._max_reply = 64 * 1024  # the default (MAX_REPLY_BYTES) is 64 MiB: the same check at a testable size
    try:
        async with io.guard("test"):
            await io.command("SET", "loopgate:huge", b"x" * (1024 * 1024))
        with pytest.raises(StoreUnavailable, match="a reply over 65536 bytes"):
            async with io.guard("test"):
                await io.command("GET", "loopgate:huge")
        assert lean.size == 0
        async with io.guard("test"):
            assert await io.command("STRLEN", "loopgate:huge") == 1024 * 1024
    finally:
        await io.aclose()


async def test_the_pool_stays_within_its_size_and_its_wait_is_bounded(server: RedisProcess) -> None:
    io = RedisIO(f"redis://{server.address}/0", max_connections=2, pool_timeout=30, op_timeout=30)
    try:
        async def hold(seconds: float) -> Any:
            async with io.guard("hold"):
                return await io.command("BLPOP", "loopgate:empty", seconds)

        assert await asyncio.gather(*(hold(0.2) for _ in range(6))) == [None] * 6
        assert _lean(io).size <= 2
        _lean(io).pool_timeout = 0.05
        holders = [asyncio.ensure_future(hold(1)) for _ in range(2)]
        await _until(lambda: _lean(io).size == 2 and not _lean(io)._idle, "both connections to be taken")
        with pytest.raises(StoreUnavailable, match="No connection available"):
            async with io.guard("waits"):
                await io.command("PING")
        assert await asyncio.gather(*holders) == [None, None]
    finally:
        await io.aclose()


async def test_a_connection_is_set_up_with_the_database_and_the_credentials(server: RedisProcess) -> None:
    with server.client() as admin:
        admin.acl_setuser("lean-user", enabled=True, passwords=["+lean-pw"], keys=["loopgate:*"], commands=["+@all"])
    io = RedisIO(f"redis://{server.address}/3", username="lean-user", password="lean-pw", **PATIENT)
    wrong = RedisIO(f"redis://lean-user:not-it@{server.address}/3", **PATIENT)
    try:
        async with io.guard("test"):
            await io.command("SET", "loopgate:in-db-3", "yes")
            assert await io.command("ACL", "WHOAMI") == b"lean-user"
        with server.client(db=3) as db3:
            assert db3.get("loopgate:in-db-3") == b"yes"
        with pytest.raises(StoreUnavailable) as caught:
            async with wrong.guard("test"):
                await wrong.command("GET", "loopgate:in-db-3")
        assert "not-it" not in str(caught.value) and "password" in str(caught.value).lower()
        assert _lean(wrong).size == 0
    finally:
        await io.aclose()
        await wrong.aclose()
        with server.client() as admin:
            admin.acl_deluser("lean-user")
            admin.flushall()


@pytest.mark.slow
@pytest.mark.long(seconds=10)
async def test_after_a_sentinel_failover_the_lean_path_connects_to_the_new_master(tmp_path: Path) -> None:
    manager = start_sentinel_group(tmp_path, replicas=1, sentinels=1)
    group = start_or_skip(manager.__enter__)
    sentinel = StoreSentinel(master=group.master_name, nodes=tuple((HOST, s.port) for s in group.sentinels))
    io = RedisIO("redis:///0", sentinel=sentinel, **PATIENT)
    try:
        async with io.guard("test"):
            await io.command("SET", "loopgate:before", "1")
        old = group.kill_master()
        new = group.wait_promoted()
        assert new.port != old.port

        async def write() -> bool:
            try:
                async with io.guard("test"):
                    return await io.command("SET", "loopgate:after", "2") == b"OK"
            except StoreUnavailable:
                return False  # the killed master's connections fail once, then the sentinels name the new one

        for _ in range(200):
            if await write():
                break
            await asyncio.sleep(0.1)
        with new.client() as promoted:
            assert promoted.get("loopgate:after") == b"2"
        assert all(c.address == (HOST, new.port) for c in _lean(io)._idle)
    finally:
        await io.aclose()
        manager.__exit__(None, None, None)
