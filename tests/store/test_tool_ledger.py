"""The tool ledger runs an approved call at most once per continuation, on every store.

Found by the Sentinel chaos run (seed 20261203: ``soak_delete`` ran twice for one call): a resume
ran the approved tool, its result's ledger write went to a Redis master that died before a replica
had it, and the retry (after the dead attempt's claim lease) found no record and ran the tool again.
The same hole opens whenever an attempt runs the tool and never records the result (cut off, its
replica killed): the call is now started in the ledger, confirmed, before it runs.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.config.model import StoreSentinel
from gateway.loop.continuations import Continuations
from gateway.loop.ledger import outcome_unknown
from gateway.store.base import Store
from gateway.store.errors import ReplicationUnconfirmed, StoreUnavailable
from gateway.store.redis import RedisStore
from gateway.tools.base import ToolContent, ToolSpec
from gateway.tools.registry import RegisteredTool, ToolRegistry
from tests.redis_servers import RedisProcess, start_or_skip, start_redis, start_sentinel_group

CALL = {"id": "call_del", "type": "function", "function": {"name": "delete_record", "arguments": '{"id": "1"}'}}


class Deletes:
    """A side-effecting tool that counts its runs; ``hold`` keeps a run in flight until set."""

    name = "records"

    def __init__(self) -> None:
        self.runs = 0
        self.started = asyncio.Event()
        self.hold: asyncio.Event | None = None

    async def list_tools(self) -> list[ToolSpec]:
        return [ToolSpec("delete_record", "Deletes a record", {"type": "object", "properties": {}},
                         source=self.name)]

    async def call(self, tool: str, arguments: dict[str, Any]) -> ToolContent:
        self.runs += 1
        self.started.set()
        if self.hold is not None:
            await self.hold.wait()
        return ToolContent(f"deleted {arguments['id']}", ())

    async def aclose(self) -> None:
        return None


async def _tool(source: Deletes) -> RegisteredTool:
    registry = ToolRegistry([source])
    await registry.refresh()
    tool = registry.get("delete_record")
    assert tool is not None
    return tool


async def test_an_attempt_cut_off_mid_run_is_never_run_again(store: Store) -> None:
    source = Deletes()
    tool = await _tool(source)
    continuations = Continuations(store, 600, 30.0)
    # The first attempt runs the tool and is cut off before its result is recorded (its client gone, its
    # replica killed, or the result's write lost with a Redis master).
    source.hold = asyncio.Event()
    first = asyncio.create_task(continuations.ledgered("acme", "cont_1")(CALL, tool))
    await asyncio.wait_for(source.started.wait(), 10)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    # The retry does not run it again (before the fix: runs == 2); the model is told the outcome is unknown.
    source.hold = None
    again = await continuations.ledgered("acme", "cont_1")(CALL, tool)
    assert source.runs == 1
    assert again.status == "error" and again.content == outcome_unknown("delete_record")
    # Another continuation's call of the same id is its own.
    other = await continuations.ledgered("acme", "cont_2")(CALL, tool)
    assert source.runs == 2 and other.status == "ok" and other.content == "deleted 1"


async def test_a_recorded_result_is_replayed(store: Store) -> None:
    source = Deletes()
    tool = await _tool(source)
    continuations = Continuations(store, 600, 30.0)
    first = await continuations.ledgered("acme", "cont_1")(CALL, tool)
    again = await continuations.ledgered("acme", "cont_1")(CALL, tool)
    assert source.runs == 1
    assert first.content == again.content == "deleted 1" and again.status == "ok"


@pytest.fixture(scope="module")
def lone_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    """A plain server with no replica: ``WAIT 1`` can never be confirmed there."""
    manager = start_redis(tmp_path_factory.mktemp("lone-ledger"))
    server = start_or_skip(manager.__enter__)
    try:
        yield server
    finally:
        manager.__exit__(None, None, None)


@pytest.mark.slow
async def test_no_approved_tool_runs_before_its_start_is_confirmed(lone_server: RedisProcess) -> None:
    """With ``wait_replicas``, a start no replica confirmed (a failover could lose it) runs nothing and is undone."""
    source = Deletes()
    tool = await _tool(source)
    url = f"redis://{lone_server.address}/0"
    durable = RedisStore(url, wait_replicas=1, wait_timeout_ms=100)
    try:
        with pytest.raises(ReplicationUnconfirmed):
            await Continuations(durable, 600, 30.0).ledgered("acme", "cont_1")(CALL, tool)
        assert source.runs == 0  # before the fix: the tool ran, then its ledger entry was not confirmed
        with lone_server.client() as admin:
            assert admin.keys("*ledger*") == []  # undone: a retry once replicas are back runs it (once)
    finally:
        with lone_server.client() as admin:
            admin.flushall()
        await durable.aclose()


@pytest.mark.slow
@pytest.mark.long(seconds=10)
async def test_a_result_lost_in_a_sentinel_failover_never_runs_the_tool_again(tmp_path: Path) -> None:
    """The chaos run's double execution, step by step: the result's write dies with the master, the retry runs
    on the promoted replica (before the fix it found no record and ran the tool a second time)."""
    manager = start_sentinel_group(tmp_path, replicas=1, sentinels=1)
    group = start_or_skip(manager.__enter__)
    sentinel = StoreSentinel(master=group.master_name, nodes=tuple(("127.0.0.1", s.port) for s in group.sentinels))
    store = RedisStore("redis://", sentinel=sentinel, wait_replicas=1, wait_timeout_ms=300)
    source = Deletes()
    source.hold = asyncio.Event()
    tool = await _tool(source)
    master, replica = group.current_master(), next(s for s in group.servers if s is not group.current_master())
    try:
        first = asyncio.create_task(Continuations(store, 600, 30.0).ledgered("acme", "cont_1")(CALL, tool))
        await asyncio.wait_for(source.started.wait(), 10)
        # While the tool runs, the replica stops hearing from the master: the result is written to the master alone.
        replica.proc.send_signal(signal.SIGSTOP)
        try:
            with master.client() as admin:
                admin.execute_command("CLIENT", "KILL", "TYPE", "replica")
            source.hold.set()
            with pytest.raises(ReplicationUnconfirmed):
                await first  # the attempt fails (503): its result unconfirmed, on the master only
            master.kill()
        finally:
            replica.proc.send_signal(signal.SIGCONT)
        group.wait_promoted()
        deadline = time.monotonic() + 20
        while True:  # the retry, once the store answers again (a failover in progress is a 503)
            try:
                again = await Continuations(store, 600, 30.0).ledgered("acme", "cont_1")(CALL, tool)
                break
            except StoreUnavailable:
                assert time.monotonic() < deadline, "the store never came back after the failover"
                await asyncio.sleep(0.2)
        assert source.runs == 1  # before the fix: 2
        assert again.status == "error" and again.content == outcome_unknown("delete_record")
    finally:
        await store.aclose()
        manager.__exit__(None, None, None)
