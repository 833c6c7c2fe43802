"""Ids a caller can fetch by are random: one id seen tells nothing about the next (issue 29)."""

from __future__ import annotations

import os

from gateway.api.chat.render import completion_id
from gateway.api.messages.render import message_id
from gateway.api.responses.ids import new_id, response_id
from gateway.random_ids import BATCH_BYTES, random_bytes


def _random_parts(ids: list[str], prefix: str) -> list[str]:
    assert all(i.startswith(prefix) for i in ids)
    return [i[len(prefix):] for i in ids]


def test_consecutive_ids_share_no_prefix_and_cannot_be_enumerated() -> None:
    for make, prefix, digits in ((completion_id, "chatcmpl-", 32), (message_id, "msg_", 32),
                                 (response_id, "resp_", 48), (lambda: new_id("msg"), "msg_", 24)):
        parts = _random_parts([make() for _ in range(300)], prefix)
        assert all(len(p) == digits and int(p, 16) >= 0 for p in parts)
        # A per-process prefix plus a counter shares its first digits between every id of a process.
        assert len({p[:8] for p in parts}) == len(parts)
        assert len({p[-8:] for p in parts}) == len(parts)


def test_batches_are_never_handed_out_twice() -> None:
    seen = [random_bytes(16) for _ in range(3 * BATCH_BYTES // 16 + 5)]
    assert len(set(seen)) == len(seen)


def test_a_forked_worker_does_not_repeat_its_parents_bytes() -> None:
    random_bytes(16)  # the parent holds a partly used batch
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, random_bytes(16))
        os._exit(0)
    os.close(write)
    child = os.read(read, 16)
    os.close(read)
    os.waitpid(pid, 0)
    assert child != random_bytes(16)
