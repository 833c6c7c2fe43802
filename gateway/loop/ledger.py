"""The tool ledger: an approved call runs at most once per continuation, whatever fails around it.

A retried resume (its first attempt failed, was cut off, or died with its replica and lost its
claim to the lease) must never run an approved call again. Recording the result after the run
is not enough: an attempt can run the tool and then lose the result (its replica killed, the
client gone, or the result's write lost in a Redis failover before a replica had it), and a
retry that finds no record would run the tool a second time.

So the attempt first *starts* the call in the ledger, atomically and (with ``wait_replicas``)
confirmed by the replicas, and only then runs it; the result overwrites the start. A later
attempt finds either the result (replayed) or a start without a result: the first run's outcome
is unknown, and the model is told so instead of the tool running again. A start the replicas did
not confirm is undone before the tool runs (the resume fails with 503 and stays resumable).
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any

from gateway.canonical import ToolCall
from gateway.canonical_tool_results import bounded_parts
from gateway.errors import quoted
from gateway.loop.tool_runs import ExecuteHook
from gateway.observability import metrics
from gateway.store.base import Store
from gateway.tools.base import ToolOutcome
from gateway.tools.executor import run_tool

log = logging.getLogger("loopgate.continuations")


#: the words every "outcome unknown" result carries
OUTCOME_UNKNOWN = "Its outcome is unknown"


def outcome_unknown(name: str) -> str:
    """What the model is told about an approved call an earlier attempt started but never recorded."""
    return (f"Tool '{name}' was approved and started by an earlier attempt of this resume, and that attempt's "
            f"result was lost (it failed or was cut off while the tool ran). {OUTCOME_UNKNOWN}: it may or may "
            "not have taken effect. It was not run again, so it ran at most once; check its effect before "
            "asking for it again.")


def ledgered(store: Store, ttl_s: int, tenant: str, continuation_id: str) -> ExecuteHook:
    """Executes approved calls at most once per continuation; a replay gives a rich result back with its parts.

    Keyed by continuation and call id, not call id alone: some servers reuse ids such as
    ``call_0`` across conversations, and one conversation's record must never answer another's.
    """

    async def execute(call: ToolCall, tool: Any) -> Any:
        key = f"{continuation_id}:{call['id']}"
        # The start is unique to this attempt, so a pipeline resent after a failover recognises its own write.
        start = {"started": time.time(), "attempt": secrets.token_hex(8)}
        record = await store.ledger_claim(tenant, key, start, ttl_s, undo_unconfirmed=True)
        if record is not None:
            return _recorded(record, call, continuation_id)
        outcome = await run_tool(tool, call["function"]["arguments"])
        parts = bounded_parts(outcome.parts)
        await store.ledger_put(tenant, key, {"status": outcome.status, "content": outcome.content,
                                             "ts": time.time(), **({"parts": parts} if parts else {})}, ttl_s)
        return outcome

    return execute


def _recorded(record: dict[str, Any], call: ToolCall, continuation_id: str) -> ToolOutcome:
    """The outcome an earlier attempt left: its result, or (a start alone) an outcome unknown."""
    if record.get("status") in ("ok", "error") and isinstance(record.get("content"), str):
        metrics.CONTINUATIONS.inc("ledger_replay")
        return ToolOutcome(record["status"], record["content"], 0.0, bounded_parts(record.get("parts")))
    metrics.CONTINUATIONS.inc("ledger_outcome_unknown")
    log.warning("approved call %s of continuation %s was started by an earlier attempt and has no recorded result; "
                "not run again (outcome unknown)", quoted(call["id"]), continuation_id)
    return ToolOutcome("error", outcome_unknown(call["function"]["name"]), 0.0)
