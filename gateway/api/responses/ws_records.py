"""The stored responses as one WebSocket connection sees them: the store, and what the connection keeps itself.

OpenAI's WebSocket mode continues a ``store: false`` response with ``previous_response_id`` on the
connection that made it (and nowhere else): the state lives in the connection's memory.
:class:`ConnectionRecords` is that memory in front of the store. Every read of the Responses run
(``prepare.prepare_response``: the response continued or answered, the chain a follow-up joins)
goes through it, so a turn of a connection resolves its own unstored responses exactly as the HTTP
surface resolves stored ones, and nothing else changes:

* ``keep`` (what ``ResponseRun.save`` hands a ``store: false`` response to): the whole conversation
  it ends (never ``ancestors``: it never depends on a record that could be dropped before it) with
  its answer, serialised once, among the newest ``websocket.kept_responses`` within
  ``websocket.kept_bytes``; not its Response object or input items (nothing reads them back). The
  oldest go first; a record larger than the bound alone is not kept (continuing it is then
  ``previous_response_not_found``, as for an expired one). A turn thus costs one encode of the
  conversation and the next one decode, where an HTTP client without a store sends, and the
  gateway parses, the whole conversation every turn.
* ``get``/``get_many``: the connection's records first, then the store.
* ``put`` (a ``store: true`` response): to the store; one continuing a kept response is made whole
  first, so the stored chain never names a response only this connection had.

Nothing kept outlives the connection, and another connection (or an HTTP request) never sees it.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

import orjson

from gateway.store.responses.base import TRANSCRIPT_HEAD, ChainBroken, ResponseRecords, conversation_part

log = logging.getLogger("loopgate.api")


class ConnectionRecords(ResponseRecords):
    """The store behind one connection's own ``store: false`` responses; see the module docstring."""

    keeps_unstored = True

    def __init__(self, shared: ResponseRecords, max_kept: int, max_bytes: int) -> None:
        self._shared = shared
        self._max_kept = max_kept
        self._max_bytes = max_bytes
        #: (tenant, response id) -> the record's JSON, oldest first
        self._kept: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        self._bytes = 0

    @property
    def kept_bytes(self) -> int:
        """What the kept records take (their JSON)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._kept)

    async def keep(self, tenant: str, response_id: str, record: dict[str, Any], answer: str | None) -> None:
        """Keep a ``store: false`` response of this connection: only what continuing it reads (its conversation,
        the answer included, as one ``transcript``; a pause's continuation), not its Response object or input.
        ``answer``: its final text (None: it generated nothing, ``generate: false``)."""
        if not self._max_kept:
            return
        head = record.get(TRANSCRIPT_HEAD)
        if head is not None and answer is not None:
            head = [*head, {"role": "assistant", "content": answer}]
        raw = orjson.dumps({"transcript": head, "continuation_id": record.get("continuation_id"),
                            "instructions_first": record.get("instructions_first")})
        key = (tenant, response_id)
        self._drop(key)
        if len(raw) > self._max_bytes:
            log.info("a WebSocket connection's response %s is not kept: %d bytes, over websocket.kept_bytes",
                     response_id, len(raw))
            return
        kept = self._kept
        while kept and (len(kept) >= self._max_kept or self._bytes + len(raw) > self._max_bytes):
            self._drop(next(iter(kept)))
        kept[key] = raw
        self._bytes += len(raw)

    def forget(self, response_id: str) -> None:
        """Drop what the connection keeps of ``response_id`` (a continuation of it failed)."""
        for key in [key for key in self._kept if key[1] == response_id]:
            self._drop(key)

    def _drop(self, key: tuple[str, str]) -> None:
        raw = self._kept.pop(key, None)
        if raw is not None:
            self._bytes -= len(raw)

    async def _whole(self, tenant: str, record: dict[str, Any]) -> dict[str, Any]:
        """``record`` with the conversation it continues joined into its own (no ``ancestors`` left)."""
        ancestors: list[str] | None = record.get("ancestors")
        if not ancestors or record.get(TRANSCRIPT_HEAD) is None:
            return record
        earlier: list[Any] = []
        for ancestor, found in zip(ancestors, await self.get_many(tenant, ancestors), strict=True):
            part = None if found is None else conversation_part(found)
            if part is None:
                raise ChainBroken(ancestor)
            earlier.extend(part)
        whole = {name: value for name, value in record.items() if name != "ancestors"}
        whole[TRANSCRIPT_HEAD] = [*earlier, *record[TRANSCRIPT_HEAD]]
        return whole

    async def put(self, tenant: str, response_id: str, record: dict[str, Any], ttl_s: float) -> None:
        ancestors = record.get("ancestors")
        if ancestors and any((tenant, ancestor) in self._kept for ancestor in ancestors):
            record = await self._whole(tenant, record)
        await self._shared.put(tenant, response_id, record, ttl_s)

    async def get(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        raw = self._kept.get((tenant, response_id))
        if raw is not None:
            record: dict[str, Any] = orjson.loads(raw)
            return record
        return await self._shared.get(tenant, response_id)

    async def get_many(self, tenant: str, response_ids: list[str]) -> list[dict[str, Any] | None]:
        found: list[dict[str, Any] | None] = []
        missing: list[str] = []
        for response_id in response_ids:
            raw = self._kept.get((tenant, response_id))
            found.append(None if raw is None else orjson.loads(raw))
            if raw is None:
                missing.append(response_id)
        if missing:
            stored = iter(await self._shared.get_many(tenant, missing))
            found = [next(stored) if record is None else record for record in found]
        return found

    async def delete(self, tenant: str, response_id: str) -> bool:
        kept = (tenant, response_id) in self._kept
        self._drop((tenant, response_id))
        return await self._shared.delete(tenant, response_id) or kept

    async def stored_bytes(self, tenant: str) -> int:
        return await self._shared.stored_bytes(tenant)
