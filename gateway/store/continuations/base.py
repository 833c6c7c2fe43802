"""Continuations (paused tool loops), the tool execution ledger and provider artifacts.

Continuation lifecycle (the at-most-once resume of the contract)::

    save -> pending --claim--> claimed --finish--> resumed   (kept with its result until its TTL: a repeat is 409)
               ^                  |
               +----release-------+                          (upstream failed: still resumable)
    pending --cancel--> gone                                 (later get/claim: 404)

A claim carries a lease: a replica that crashes while holding a claim does not strand the
continuation, because once the lease has expired another claim may take it over.
"""

from __future__ import annotations

import logging
import secrets
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import orjson

from gateway.store.errors import StoreError

log = logging.getLogger("loopgate.store")

ContinuationStatus = Literal["pending", "claimed", "resumed", "cancelled"]
STATUSES: tuple[str, ...] = ("pending", "claimed", "resumed", "cancelled")

# Bumped when the serialised layout changes, so an old record is recognisable during a rollout.
_FORMAT_VERSION = 1


def new_continuation_id() -> str:
    """A fresh, unguessable id: 24 random bytes = 192 bits, URL-safe, recognisably prefixed."""
    return "cont_" + secrets.token_urlsafe(24)


@dataclass(slots=True)
class Continuation:
    """A paused tool loop.

    ``pending`` lists the calls the loop waits for, each ``{tool_call_id, name, reason, arguments}``
    (reason ``"client"`` or ``"approval"``). ``data`` is opaque to the store (transcript, request
    parameters, loop state) and must be JSON-serialisable. ``status`` and ``claimed_until`` are
    owned by the store: what a caller sets there before ``save_continuation`` is stored as the
    initial state, afterwards only the store's transitions change them.
    """

    id: str
    tenant: str
    model: str
    status: ContinuationStatus
    created_at: float
    expires_at: float
    pending: list[dict[str, Any]] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    claimed_until: float | None = None
    # What the tenant's listing shows of it (small, JSON): indexed at save, never part of the body.
    summary: dict[str, Any] | None = None
    # Once resumed: what the resume answered, ``{"id", "object", "body"}`` as JSON bytes (set by ``finish``).
    result: bytes | None = None
    # Never stored: the lease of the claim the way-A lookup took for this request (``find_paused`` with a lease),
    # so the resume's claim is already taken; None when it did not take one (the resume claims as usual).
    held_until: float | None = None

    @classmethod
    def new(cls, tenant: str, model: str, pending: list[dict[str, Any]], data: dict[str, Any],
            ttl_s: float, now: float | None = None) -> Continuation:
        """A pending continuation with a fresh id and timestamps consistent with ``ttl_s``."""
        now = time.time() if now is None else now
        return cls(id=new_continuation_id(), tenant=tenant, model=model, status="pending",
                   created_at=now, expires_at=now + ttl_s, pending=pending, data=data)

    @property
    def tool_call_ids(self) -> list[str]:
        """The ids of the pending calls: the keys of the resume-way-A index."""
        return [str(p["tool_call_id"]) for p in self.pending if p.get("tool_call_id")]

    def to_dict(self) -> dict[str, Any]:
        return {"v": _FORMAT_VERSION, "id": self.id, "tenant": self.tenant, "model": self.model,
                "status": self.status, "created_at": self.created_at, "expires_at": self.expires_at,
                "pending": self.pending, "data": self.data, "claimed_until": self.claimed_until}

    def to_bytes(self) -> bytes:
        """orjson bytes; raises ``TypeError`` when ``data`` is not JSON-serialisable (caught at save time)."""
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Continuation:
        status = d.get("status", "pending")
        if status not in STATUSES:
            raise ValueError(f"unknown continuation status {status!r}")
        claimed = d.get("claimed_until")
        return cls(id=str(d["id"]), tenant=str(d["tenant"]), model=str(d.get("model", "")),
                   status=cast(ContinuationStatus, status), created_at=float(d["created_at"]),
                   expires_at=float(d["expires_at"]), pending=list(d.get("pending") or []),
                   data=dict(d.get("data") or {}), claimed_until=None if claimed is None else float(claimed))

    @classmethod
    def from_bytes(cls, raw: bytes | str) -> Continuation:
        return cls.from_dict(orjson.loads(raw))


def claimable(known: Continuation | None, continuation_id: str, tenant: str) -> bool:
    """Whether a claim can answer with ``known`` (the caller's read of the record) instead of the stored body.

    A body never changes while its continuation can be claimed (its status, lease and result do; the body
    only once it is resumed, see ``finish_continuation``), so a read of the same continuation is as good as
    the claim's own: it saves sending and parsing the body twice.
    """
    return known is not None and known.id == continuation_id and known.tenant == tenant


def claimed(c: Continuation | None, until: float) -> Continuation:
    """``c`` as a claim leaves it: claimed until ``until`` (a copy: the caller's read stays as it was)."""
    assert c is not None, "a claim without the body back has the caller's read"
    # Built field by field: ``dataclasses.replace`` costs several times as much on every resume.
    return Continuation(id=c.id, tenant=c.tenant, model=c.model, status="claimed", created_at=c.created_at,
                        expires_at=c.expires_at, pending=c.pending, data=c.data, claimed_until=until,
                        summary=c.summary, result=c.result)


class ContinuationNotFound(StoreError):
    """Unknown, expired, cancelled or another tenant's continuation: the API answers 404.

    Another tenant's id is deliberately indistinguishable from an unknown one, so ids cannot be probed.
    """

    def __init__(self, continuation_id: str) -> None:
        super().__init__(f"continuation {continuation_id!r} not found")
        self.continuation_id = continuation_id


class ContinuationConflict(StoreError):
    """The continuation exists but is being resumed or was resumed already: the API answers 409."""

    def __init__(self, continuation_id: str, status: str, message: str | None = None) -> None:
        super().__init__(message or f"continuation {continuation_id!r} is {status}")
        self.continuation_id = continuation_id
        self.status = status


#: the tool-call index's value for an id pending in two or more live continuations of one tenant at once (an
#: upstream that repeats ids), followed by their ids: a way-A follow-up cannot tell which one it answers, so the
#: lookup finds none (answered statelessly, each stays pending for way B) rather than guessing (the index kept
#: the newest, and the older one's caller resumed another caller's continuation). ``+``: more than were kept.
AMBIGUOUS_TOOL_CALL = "*ambiguous*"
#: continuations named in one ambiguous index value; past it the value holds ``+`` and stays ambiguous until its TTL
MAX_HOLDERS = 16
#: the tool-call index's value, followed by the continuation's id, for an id a resumed continuation held: kept until
#: the record's TTL so that a follow-up sent again after its resume (a client retrying a request whose answer it
#: lost) finds the resumed continuation and is refused (409), never answered statelessly without the loop's hidden
#: server-side exchanges (which a model would then ask for, and a tool would run twice). A new pause of the same id
#: takes the entry over.
RESUMED_TOOL_CALL = "*resumed*"


def holders(value: str) -> list[str]:
    """The live continuations an index value names: its one id, or the ambiguous value's list (none once resumed)."""
    if value.startswith(RESUMED_TOOL_CALL):
        return []
    if value.startswith(AMBIGUOUS_TOOL_CALL):
        return value[len(AMBIGUOUS_TOOL_CALL):].split()
    return [value]


def with_holder(held: str | None, continuation_id: str) -> str:
    """The index value once ``continuation_id`` holds the id too (its pause is saved)."""
    if held is None or held == continuation_id or held.startswith(RESUMED_TOOL_CALL):
        return continuation_id
    ids = holders(held)
    if continuation_id not in ids:
        ids = ["+"] if "+" in ids or len(ids) >= MAX_HOLDERS else [*ids, continuation_id]
    return " ".join([AMBIGUOUS_TOOL_CALL, *ids])


def without_holder(held: str, continuation_id: str) -> str | None:
    """The index value once ``continuation_id`` lets the id go (resumed, cancelled); None: nobody holds it."""
    ids = [i for i in holders(held) if i != continuation_id]
    if not ids:
        return None
    if len(ids) == 1 and ids[0] != "+":
        return ids[0]
    return " ".join([AMBIGUOUS_TOOL_CALL, *ids])


def resumed_entry(continuation_id: str) -> str:
    """The index value a resumed continuation leaves on its tool-call ids (``RESUMED_TOOL_CALL``)."""
    return f"{RESUMED_TOOL_CALL} {continuation_id}"


def indexed(found: str | None) -> str | None:
    """The continuation the index names for a tool-call id (a resumed one too); None when none does or several do."""
    if found is not None and found.startswith(RESUMED_TOOL_CALL):
        return found[len(RESUMED_TOOL_CALL) + 1:] or None
    if found is not None and found.startswith(AMBIGUOUS_TOOL_CALL):
        warn_ambiguous()
        return None
    return found


def warn_ambiguous() -> None:
    """A way-A lookup met an index entry several live continuations share (``AMBIGUOUS_TOOL_CALL``)."""
    log.warning("a way-A follow-up answers a tool-call id that several paused continuations of its tenant "
                "share (an upstream repeating its ids): answered statelessly, each stays pending for way B")


class ContinuationStore(ABC):
    """Continuations, the tool ledger and artifacts: part of every ``Store``. All methods are coroutines."""

    # -- continuations ---------------------------------------------------------------------------
    @abstractmethod
    async def save_continuation(self, c: Continuation, ttl_s: int) -> None:
        """Store ``c`` and index each pending ``tool_call_id`` -> ``c.id`` for ``ttl_s`` seconds.

        Returns only when everything is written: a pause is acknowledged to the client only after
        it is stored. Overwrites a record with the same id.
        """

    @abstractmethod
    async def get_continuation(self, continuation_id: str, tenant: str) -> Continuation:
        """The continuation as stored (any live status, including ``"resumed"``).

        Raises ``ContinuationNotFound`` for unknown, expired, cancelled or other-tenant ids.
        """

    @abstractmethod
    async def claim_continuation(self, continuation_id: str, tenant: str, lease_s: float,
                                 known: Continuation | None = None) -> Continuation:
        """Atomically take the right to resume: pending (or claimed with an expired lease) -> claimed.

        Returns the claimed continuation (``claimed_until = now + lease_s``); ``known``: the caller's
        read of it (``get_continuation``), returned claimed instead of the body read again. Raises
        ``ContinuationConflict`` when another claim's lease is live or it was resumed already,
        ``ContinuationNotFound`` when unknown/expired/cancelled/another tenant's.
        """

    @abstractmethod
    async def release_continuation(self, continuation_id: str, tenant: str) -> None:
        """Claimed -> pending: a resume that failed upstream leaves the continuation resumable.

        No-op when already pending; ``ContinuationConflict`` when resumed; ``ContinuationNotFound`` as for get.
        """

    @abstractmethod
    async def finish_continuation(self, continuation_id: str, tenant: str, result: bytes | None = None,
                                  kept: Continuation | None = None) -> None:
        """Claimed -> resumed; the record stays until its TTL (a repeated resume gets 409, not 404).

        ``result`` (JSON bytes, opaque to the store) is kept with it, in the same atomic step: a
        resumed continuation read later carries it (``Continuation.result``), so whoever asked can
        fetch the answer a decider received. The tool-call index entries are removed.
        ``ContinuationConflict`` unless it is claimed.

        ``kept``: the continuation as the record is to keep it once resumed (the caller leaves out
        what only a resume reads); its pending calls name the index entries, so a store can drop them
        in the same step. A store that may have to undo the finish (Redis with ``wait_replicas``: an
        unconfirmed end is reverted to resumable) keeps the whole body.
        """

    @abstractmethod
    async def cancel_continuation(self, continuation_id: str, tenant: str) -> bool:
        """Pending (or claimed with an expired lease) -> deleted, index entries included; returns True.

        Later get/claim raise ``ContinuationNotFound``. Cancelling a live claim or a resumed one
        raises ``ContinuationConflict``; an unknown/other tenant's id ``ContinuationNotFound``.
        """

    @abstractmethod
    async def list_continuations(self, tenant: str, limit: int,
                                 before: tuple[float, str] | None = None) -> tuple[list[dict[str, Any]], bool]:
        """The tenant's live (pending or claimed) continuations, newest first, and whether more follow.

        Each entry is the ``summary`` saved with it plus ``status``. Ordered by (``expires_at``, id)
        descending (one TTL for all: creation order); ``before`` is the last entry of the previous
        page. The index is cleaned as entries expire (on every read), resume or are cancelled.
        """

    @abstractmethod
    async def find_continuation_by_tool_call(self, tenant: str, tool_call_id: str) -> str | None:
        """Resume way A: the id of the tenant's live continuation waiting for ``tool_call_id``, if any."""

    @abstractmethod
    async def find_paused(self, tenant: str, tool_call_ids: list[str],
                          lease_s: float | None = None) -> Continuation | None:
        """Resume way A in one step: the continuation the first of ``tool_call_ids`` (in order) is indexed to,
        read as ``get_continuation`` reads it; None when none of them names one (an id two live continuations
        share names none), or it is gone by the time it is read. The ids are looked up all at once.

        ``lease_s``: where the store can, the claim is taken in the same step when ``claim_continuation`` would
        take it (the continuation is pending, or its lease is over): the result (as read, before the claim) then
        has ``held_until`` set, and its resume must either use that claim or release it. Otherwise (a live claim,
        resumed, or a store that does it in two steps) ``held_until`` is None and the resume claims as usual."""

    # -- tool execution ledger -------------------------------------------------------------------
    @abstractmethod
    async def ledger_get(self, tenant: str, tool_call_id: str) -> dict[str, Any] | None:
        """The recorded execution of a tool call, so a repeated resume never runs a tool twice."""

    @abstractmethod
    async def ledger_put(self, tenant: str, tool_call_id: str, record: dict[str, Any], ttl_s: int) -> None:
        """Record (overwrite) the execution of a tool call for ``ttl_s`` seconds."""

    @abstractmethod
    async def ledger_claim(self, tenant: str, key: str, record: dict[str, Any], ttl_s: int,
                           undo_unconfirmed: bool = False) -> dict[str, Any] | None:
        """Write ``record`` under ``key`` only if nothing is there (atomically, across replicas): None when this
        call wrote it, else the record already there. Who sends a stateless MCP server's retry is decided so,
        and an approved call is started so before it runs (``loop/ledger.py``).

        A write the replicas did not confirm raises; with ``undo_unconfirmed`` it is deleted first (best
        effort: nothing was done under it, and a leftover would make a retry's outcome unknown)."""

    # -- artifacts -------------------------------------------------------------------------------
    @abstractmethod
    async def put_artifacts(self, tenant: str, items: dict[str, dict[str, Any]], ttl_s: int) -> None:
        """Keep provider artifacts (thought signatures, thinking blocks) per ``tool_call_id``.

        For clients that drop unknown fields: the gateway re-attaches them on the next request.
        """

    @abstractmethod
    async def get_artifacts(self, tenant: str, ids: list[str]) -> dict[str, dict[str, Any]]:
        """The artifacts found for ``ids`` (missing or expired ids are simply absent). One round trip."""
