"""A resume's result: the body its surface answers, recorded beside the renderer and stored with the finish.

A decision made in the inbox (or by any key of the tenant) answers the decider; the key that asked
reads the same body later from the continuation (``GET /v1/continuations/{id}``). The loop layer
knows no surface: each renderer puts a :class:`ResultRecorder` of its own shape into the resume's
:class:`ResultSlot`, and ``Continuations.run_resumed`` feeds it and stores what it made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import orjson

from gateway.loop.events import LoopEvent


class ResultRecorder(Protocol):
    """Builds, from the resumed loop's events, the body its surface answers (the one a decider receives)."""

    def feed(self, event: LoopEvent) -> None: ...

    def result(self) -> tuple[str, str, bytes]:
        """``(id, object, body)`` once the loop's ``Finished`` event was fed: the body as JSON bytes."""
        ...


@dataclass(slots=True)
class ResultSlot:
    """Where the surface that renders a resume puts its recorder, before the first event is pulled.

    The continuation is finished (and its result stored with it, atomically) when the loop's
    ``Finished`` event arrives, before the renderer sees that event: so the result is built beside
    the renderer, from the same events, with the same id.
    """

    recorder: ResultRecorder | None = None


def result_record(recorder: ResultRecorder | None) -> tuple[str | None, bytes | None]:
    """The stored form of a recorder's result, ``{"id", "object", "body"}``, and its id (None, None without one)."""
    if recorder is None:
        return None, None
    result_id, kind, body = recorder.result()
    return result_id, orjson.dumps({"id": result_id, "object": kind, "body": orjson.Fragment(body)})
