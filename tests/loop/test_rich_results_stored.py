"""Rich tool results (images) as a paused turn and the tool ledger store them: kept within the image bounds,
given back whole, and records written before parts were stored still read as text.

The end-to-end proof (an image returned in the same turn as a call paused for approval reaches an
Anthropic upstream after the approval) is ``tests/e2e/test_rich_results_paused.py``; here the ledger's
replay of a rich result, which a retried resume reaches.
"""

from __future__ import annotations

import base64
from typing import Any

from gateway.canonical_tool_results import MAX_IMAGE_BYTES, MAX_IMAGES, bounded_parts, image_part
from gateway.loop.continuations import Continuations
from gateway.loop.pairing import ToolResult, result_of, stored_result
from gateway.store.memory import MemoryStore
from gateway.tools.base import ToolContent, ToolSpec
from gateway.tools.registry import ToolRegistry

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 64).decode()
PARTS = [{"type": "text", "text": "a chart:"}, image_part("image/png", PNG)]


def test_a_stored_result_keeps_its_parts_and_an_old_record_reads_as_text() -> None:
    message = {"role": "tool", "tool_call_id": "call_1", "content": PARTS}
    record = stored_result(ToolResult("ok", "a chart:\n[image: image/png, 72 B]", 3.5, message))
    assert record == ["ok", "a chart:\n[image: image/png, 72 B]", 3.5, PARTS]
    back = result_of("call_1", record)
    assert back.message == message and back.content.startswith("a chart:")
    old = result_of("call_1", ["ok", "plain", 1.0])
    assert old == ToolResult("ok", "plain", 1.0, None)
    assert stored_result(ToolResult("ok", "plain", 1.0)) == ["ok", "plain", 1.0]


def test_stored_parts_keep_the_image_bounds() -> None:
    big = "A" * ((MAX_IMAGE_BYTES + 3) * 4 // 3)
    parts = [image_part("image/png", big), image_part("image/bmp", PNG), {"type": "audio", "text": "x"}]
    parts += [image_part("image/png", PNG)] * (MAX_IMAGES + 2)
    kept = bounded_parts(parts)
    assert kept is not None
    assert kept[0]["type"] == "text" and kept[0]["text"].startswith("[image: image/png, 4.0 MB")
    assert kept[1] == {"type": "text", "text": "[image: image/bmp, 72 B]"}
    assert kept[2] == {"type": "text", "text": "x"}
    assert sum(p["type"] == "image_url" for p in kept) == MAX_IMAGES
    assert bounded_parts("text") is None and bounded_parts([]) is None


class Charts:
    """A source whose one tool returns an image, counting its runs."""

    name = "charts"

    def __init__(self) -> None:
        self.runs = 0

    async def list_tools(self) -> list[ToolSpec]:
        return [ToolSpec("chart", "A chart", {"type": "object", "properties": {}}, source=self.name)]

    async def call(self, tool: str, arguments: dict[str, Any]) -> ToolContent:
        self.runs += 1
        return ToolContent("a chart:\n[image: image/png, 72 B]", tuple(PARTS))

    async def aclose(self) -> None:
        return None


async def test_a_ledger_replay_gives_back_the_parts() -> None:
    source = Charts()
    registry = ToolRegistry([source])
    await registry.refresh()
    tool = registry.get("chart")
    continuations = Continuations(MemoryStore(), 600, 30.0)
    call = {"id": "call_1", "type": "function", "function": {"name": "chart", "arguments": "{}"}}
    first = await continuations.ledgered("team-a", "cont_1")(call, tool)
    again = await continuations.ledgered("team-a", "cont_1")(call, tool)
    assert source.runs == 1
    assert first.parts == PARTS and again.parts == PARTS and again.content == first.content
