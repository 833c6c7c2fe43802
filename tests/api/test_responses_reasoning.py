"""Stateless reasoning (``gateway/api/responses/reasoning.py``): a turn's artifacts sealed into its reasoning item,
rendered by the builder, and opened again from input items only for the tenant and kind they were sealed for."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from gateway.api.chat.request import parse_chat_request
from gateway.api.messages.blocks import canonical_messages
from gateway.api.responses.compaction import compaction_item
from gateway.api.responses.items import to_messages
from gateway.api.responses.reasoning import KIND, MAX_ENCRYPTED_CHARS, Carrier, payload_of, restore
from gateway.api.responses.render import ResponseBuilder, ResponseRecorder
from gateway.canonical import Answering, ReasoningDelta, TextDelta, Usage
from gateway.canonical.sealing import PREFIX, Sealer
from gateway.loop.events import Finished, LoopResult, ToolStarted, TurnArtifacts

SEALER = Sealer([b"r" * 32])
CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"},
        "extra_content": {"google": {"thought_signature": "gsig-1"}}}
GEMINI_TURN = {"role": "assistant", "content": None, "tool_calls": [CALL]}
CLAUDE_TURN = {"role": "assistant", "content": "Checking.", "reasoning_content": "think", "reasoning_origin": "claude",
               "thinking_blocks": [{"type": "thinking", "thinking": "think", "signature": "sig-1"}],
               "anthropic_content": [{"type": "thinking", "thinking": "think", "signature": "sig-1"},
                                     {"type": "text", "text": "Checking."}]}
DEEPSEEK_TURN = {"role": "assistant", "content": "", "reasoning_content": "r1", "reasoning_origin": "deep",
                 "tool_calls": [{"id": "call_2", "type": "function", "function": {"name": "lookup",
                                                                                  "arguments": "{}"}}]}


def sealed(message: dict[str, Any], provider: str, tenant: str = "team-a") -> str:
    return Carrier(SEALER, tenant).token(TurnArtifacts(message, provider))


def finished() -> Finished:
    return Finished(LoopResult("completed", "stop", Usage(1, 1), {"status": "completed", "answered_by": ["a"]}))


def build(events: list[Any], *, emit: bool = True, frames: bool = False) -> tuple[ResponseBuilder, list[Any]]:
    builder = ResponseBuilder("resp_1", "agent", {"metadata": {}}, lambda name: "loopgate", emit=emit, frames=frames)
    builder.carrier = Carrier(SEALER, "team-a")
    out = builder.start()
    for event in events:
        out.extend(builder.feed(event))
    return builder, out


def test_what_a_turn_carries_and_what_it_does_not() -> None:
    assert payload_of({"role": "assistant", "content": "hi"}, "p") is None
    # Reasoning text a server sent under a field no server takes back (origin ""): nothing to carry.
    assert payload_of({"role": "assistant", "content": "", "reasoning_content": "x", "reasoning_origin": ""}, "p") \
        is None
    claude = payload_of(CLAUDE_TURN, "claude")
    assert claude is not None and claude["provider"] == "claude"
    assert set(claude["message"]) == {"thinking_blocks", "anthropic_content"}  # the blocks carry the reasoning
    assert payload_of(GEMINI_TURN, "gem") == {"provider": "gem", "message": {},
                                              "calls": {"call_1": CALL["extra_content"]}}
    deep = payload_of(DEEPSEEK_TURN, "deep")
    assert deep is not None and deep["message"] == {"reasoning_content": "r1", "reasoning_origin": "deep"}


def test_a_whole_answer_seals_into_its_reasoning_item() -> None:
    turn = TurnArtifacts(CLAUDE_TURN, "claude")
    builder, out = build([[Answering("m"), ReasoningDelta("think")], turn, TextDelta("Checking."), finished()])
    reasoning, message = builder.response["output"]
    assert reasoning["type"] == "reasoning" and reasoning["summary"] == [{"type": "summary_text", "text": "think"}]
    assert reasoning["encrypted_content"].startswith(PREFIX) and message["type"] == "message"
    done = [e["item"] for e in out if e["type"] == "response.output_item.done"]
    assert done[0]["encrypted_content"] == reasoning["encrypted_content"]  # the done event carries it
    opened = SEALER.unseal("team-a", KIND, reasoning["encrypted_content"])
    assert opened["message"]["thinking_blocks"] == CLAUDE_TURN["thinking_blocks"]
    assert "warnings" not in builder.response["gateway"]


def test_a_stream_whose_text_followed_its_reasoning_gets_an_item_of_its_own() -> None:
    turn = TurnArtifacts(CLAUDE_TURN, "claude")
    builder, out = build([[Answering("m"), ReasoningDelta("think")], [TextDelta("Checking.")], turn,
                          ToolStarted("c1", "get_weather"), finished()])
    kinds = [item["type"] for item in builder.response["output"]]
    assert kinds == ["reasoning", "message", "reasoning", "mcp_call"]
    summary_item, _, carrier_item, _ = builder.response["output"]
    assert "encrypted_content" not in summary_item
    assert carrier_item["summary"] == [] and carrier_item["status"] == "completed"
    assert carrier_item["encrypted_content"].startswith(PREFIX)
    types = [e["type"] for e in out if e.get("item_id") == carrier_item["id"] or
             e.get("item", {}).get("id") == carrier_item["id"]]
    assert types == ["response.output_item.added", "response.output_item.done"]  # no summary part of nothing


def test_a_turn_without_artifacts_adds_nothing_and_a_framed_stream_carries_the_token() -> None:
    builder, _ = build([[Answering("m"), TextDelta("hi")], TurnArtifacts({"role": "assistant", "content": "hi"}, "p"),
                        finished()])
    assert [item["type"] for item in builder.response["output"]] == ["message"]
    builder, out = build([[Answering("m"), ReasoningDelta("hmm")], TurnArtifacts(GEMINI_TURN, "gem"), finished()],
                         frames=True)
    frames = b"".join(frame for frame in out if isinstance(frame, bytes))
    token = builder.response["output"][0]["encrypted_content"]
    done = [frame for frame in frames.split(b"\n\n") if b"response.output_item.done" in frame]
    assert token.encode() in done[0]


def test_a_turn_is_sealed_once_and_a_recorder_repeats_it() -> None:
    turn = TurnArtifacts(GEMINI_TURN, "gem")
    builder = ResponseBuilder("resp_1", "agent", {}, lambda name: "loopgate", emit=True)
    builder.carrier = Carrier(SEALER, "team-a")
    recorder = ResponseRecorder(builder, {})
    builder.start()
    for event in ([Answering("m"), ReasoningDelta("x")], turn, finished()):
        builder.feed(event)
        recorder.feed(event)
    assert orjson.loads(recorder.result()[2])["output"][0]["encrypted_content"] \
        == builder.response["output"][0]["encrypted_content"] == turn.sealed


def test_a_turn_too_large_to_seal_goes_without_and_is_warned() -> None:
    huge = {"role": "assistant", "content": "", "reasoning_content": "x" * MAX_ENCRYPTED_CHARS,
            "reasoning_origin": "deep"}
    builder, _ = build([[Answering("m"), ReasoningDelta("x")], TurnArtifacts(huge, "deep"), finished()])
    assert "encrypted_content" not in builder.response["output"][0]
    (warning,) = builder.response["gateway"]["warnings"]
    assert warning["type"] == "reasoning_not_sealed" and warning["count"] == 1


def reasoning_item(token: Any, summary: str = "thought") -> dict[str, Any]:
    return {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": summary}],
            "encrypted_content": token}


def gemini_items(token: Any) -> list[dict[str, Any]]:
    return [{"type": "message", "role": "user", "content": "Look it up."}, reasoning_item(token),
            {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "found"}]


def test_a_sealed_item_puts_its_artifacts_back_on_its_turn() -> None:
    converted = to_messages(gemini_items(sealed(GEMINI_TURN, "gem")))
    assert restore(SEALER, "team-a", converted.sealed) == 0
    assistant = converted.messages[1]
    assert assistant["tool_calls"][0]["extra_content"] == {"google": {"thought_signature": "gsig-1"}}
    assert assistant["reasoning_content"] == "thought"  # the summary stays


def test_deepseek_reasoning_comes_back_with_its_origin() -> None:
    items = [{"type": "message", "role": "user", "content": "Go."}, reasoning_item(sealed(DEEPSEEK_TURN, "deep"), "r"),
             {"type": "function_call", "call_id": "call_2", "name": "lookup", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "call_2", "output": "ok"}]
    converted = to_messages(items)
    restore(SEALER, "team-a", converted.sealed)
    assistant = converted.messages[1]
    assert assistant["reasoning_content"] == "r1" and assistant["reasoning_origin"] == "deep"


def test_anthropic_blocks_come_back_only_while_the_text_is_the_turns() -> None:
    token = sealed(CLAUDE_TURN, "claude")
    for text, kept in (("Checking.", True), ("Something else.", False)):
        items = [{"type": "message", "role": "user", "content": "Go."}, reasoning_item(token),
                 {"type": "message", "role": "assistant", "content": text}]
        converted = to_messages(items)
        restore(SEALER, "team-a", converted.sealed)
        assistant = converted.messages[1]
        assert ("anthropic_content" in assistant) is kept
        assert assistant["thinking_blocks"] == CLAUDE_TURN["thinking_blocks"]  # signed by Anthropic either way


def forgeries() -> dict[str, str]:
    good = sealed(GEMINI_TURN, "gem")
    body = good[len(PREFIX):]
    raw = bytearray(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    raw[-1] ^= 1
    return {
        "changed": PREFIX + base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode(),
        "truncated": good[:-7],
        "another_tenant": sealed(GEMINI_TURN, "gem", tenant="team-b"),
        "another_kind": compaction_item(SEALER, "team-a", "summary", "t")["encrypted_content"],
        "another_deployment": Sealer([b"z" * 32]).seal("team-a", KIND, payload_of(GEMINI_TURN, "gem")),
        "openai_ciphertext": "gAAAAABpZ" + "A" * 400,
        "too_long": good + "A" * MAX_ENCRYPTED_CHARS,
        "made_up": PREFIX + "AAAA",
        "not_ascii": PREFIX + "é" * 40,
        "lone_surrogate": PREFIX + "\ud800" * 40,
    }


@pytest.mark.parametrize("kind", ["changed", "truncated", "another_tenant", "another_kind", "another_deployment",
                                  "openai_ciphertext", "too_long", "made_up", "not_ascii", "lone_surrogate"])
def test_a_token_that_does_not_open_is_dropped_and_counted(kind: str) -> None:
    converted = to_messages(gemini_items(forgeries()[kind]))
    assert restore(SEALER, "team-a", converted.sealed) == 1
    assistant = converted.messages[1]
    assert "extra_content" not in assistant["tool_calls"][0] and assistant["reasoning_content"] == "thought"
    assert not any(key in assistant for key in ("thinking_blocks", "openai_output", "reasoning_origin"))


class CountingSealer(Sealer):
    """A real sealer that counts what it is asked to open."""

    opened = 0

    def unseal(self, tenant: str, kind: str, token: str) -> Any:
        CountingSealer.opened += 1
        return super().unseal(tenant, kind, token)


def test_a_token_over_the_bound_is_not_even_decoded() -> None:
    counting = CountingSealer([b"r" * 32])
    converted = to_messages(gemini_items(PREFIX + "A" * MAX_ENCRYPTED_CHARS))
    assert restore(counting, "team-a", converted.sealed) == 1 and CountingSealer.opened == 0
    converted = to_messages(gemini_items(sealed(GEMINI_TURN, "gem")))
    assert restore(counting, "team-a", converted.sealed) == 0 and CountingSealer.opened == 1


def test_items_without_a_token_cost_nothing_to_open() -> None:
    for token in (None, "", 7, {"x": 1}):
        assert to_messages(gemini_items(token)).sealed == []
    assert to_messages([{"type": "message", "role": "user", "content": "hi"}]).sealed == []


def test_a_chat_caller_cannot_name_a_provider_as_the_author_of_its_reasoning() -> None:
    body = {"model": "m", "messages": [
        {"role": "user", "content": "Go."},
        {"role": "assistant", "content": "ok", "reasoning_content": "mine", "reasoning_origin": "deep",
         "openai_output": {"provider": "resp", "items": [{"type": "reasoning", "encrypted_content": "enc:x:1"}]},
         "anthropic_content": [{"type": "text", "text": "ok"}], "thinking_blocks": [{"type": "thinking"}],
         "openai_hosted": {"provider": "resp", "items": [{"type": "web_search_call", "id": "ws_1"}]}},
        {"role": "user", "content": "More."}]}
    assistant = parse_chat_request(body).messages[1]
    assert set(assistant) == {"role", "content", "reasoning_content", "thinking_blocks"}


def test_responses_and_messages_callers_cannot_either() -> None:
    items = [{"type": "message", "role": "user", "content": "Go.", "reasoning_origin": "deep",
              "openai_output": {"provider": "resp", "items": []}},
             {"type": "message", "role": "assistant", "content": "ok", "reasoning_origin": "deep",
              "openai_output": {"provider": "resp", "items": []}, "anthropic_content": "x"},
             {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "reasoning_origin": "deep",
              "extra_content": {"google": {"thought_signature": "forged"}}},
             {"type": "function_call_output", "call_id": "c", "output": "r"}]
    for message in to_messages(items).messages:
        assert not {"reasoning_origin", "openai_output", "anthropic_content"} & set(message)
        assert all("extra_content" not in call for call in message.get("tool_calls") or ())
    messages = canonical_messages([
        {"role": "user", "content": "Go.", "openai_output": {"provider": "resp", "items": []}},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}], "reasoning_origin": "deep",
         "openai_output": {"provider": "resp", "items": []}}])
    for message in messages:
        assert not {"reasoning_origin", "openai_output"} & set(message)
    assert messages[1]["anthropic_content"] == [{"type": "text", "text": "ok"}]  # its own blocks, as it wrote them


async def test_large_sealed_tokens_are_opened_off_the_event_loop() -> None:
    """Megabytes of a caller's tokens are decoded, decrypted and parsed in a worker thread, small ones in place."""
    import threading

    from gateway.api.responses.reasoning import OFF_LOOP_SEALED_CHARS, restored

    threads: list[str] = []

    class Watching(Sealer):
        def unseal(self, tenant: str, kind: str, token: str) -> object:
            threads.append(threading.current_thread().name)
            return super().unseal(tenant, kind, token)

    sealer = Watching([b"r" * 32])
    small = sealer.seal("team-a", KIND, payload_of(GEMINI_TURN, "gem"))
    many = [small] * (OFF_LOOP_SEALED_CHARS // len(small) + 1)  # past the bound in all
    loop_thread = threading.current_thread().name
    assert await restored(sealer, "team-a", [({"role": "assistant", "content": None}, [small])]) == 0
    assert await restored(sealer, "team-a", [({"role": "assistant", "content": None}, many)]) == 0
    assert threads[0] == loop_thread and threads[1] != loop_thread
