"""Realistic transcripts for the context tests: exchanges with tool calls, results and provider artifacts."""

from __future__ import annotations

from typing import Any

from gateway.canonical import Message

SYSTEM: Message = {"role": "system", "content": "You are a travel assistant. Use the tools; answer briefly."}

WEATHER_TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for one city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
SEARCH_TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": "search_flights", "description": "Flights between two airports on a date.",
    "parameters": {"type": "object", "properties": {"from": {"type": "string"}, "to": {"type": "string"},
                                                    "date": {"type": "string"}}, "required": ["from", "to"]}}}
TOOLS = [WEATHER_TOOL, SEARCH_TOOL]


def filler(n: int, tag: str = "data") -> str:
    """About ``n`` tokens of distinct-looking text."""
    return " ".join(f"{tag}{i % 97}" for i in range(n))


def tool_round(tag: str, cities: list[str], result_tokens: int = 20, artifacts: bool = True) -> list[Message]:
    """An assistant message with one call per city (carrying artifacts of all three formats) and its results."""
    calls = []
    for position, city in enumerate(cities):
        call: dict[str, Any] = {"id": f"call_{tag}_{position}", "type": "function",
                                "function": {"name": "get_weather", "arguments": f'{{"city": "{city}"}}'}}
        if artifacts:
            call["extra_content"] = {"google": {"thought_signature": f"sig-{tag}-{position}"}}
        calls.append(call)
    assistant: Message = {"role": "assistant", "content": None, "tool_calls": calls}
    if artifacts:
        assistant["reasoning_content"] = f"I should check the weather ({tag})."
        assistant["thinking_blocks"] = [{"type": "thinking", "thinking": f"Weather first ({tag}).",
                                         "signature": f"anthropic-sig-{tag}"}]
    results = [{"role": "tool", "tool_call_id": call["id"],
                "content": f"{city}: 21C, clear. {filler(result_tokens, tag)}"} for call, city in
               zip(calls, cities, strict=True)]
    return [assistant, *results]


def exchange(tag: str, result_tokens: int = 20, cities: tuple[str, ...] = ("Paris",)) -> list[Message]:
    """A finished exchange: the user asks, the model calls tools, reads the results and answers."""
    return [
        {"role": "user", "content": f"Question {tag}: what is the weather in {', '.join(cities)}?"},
        *tool_round(tag, list(cities), result_tokens),
        {"role": "assistant", "content": f"Answer {tag}: it is 21C and clear."},
    ]


def current_turn(tag: str = "now", rounds: int = 1, result_tokens: int = 20) -> list[Message]:
    """The turn in progress: the latest user message and tool rounds not yet answered in text."""
    messages: list[Message] = [{"role": "user", "content": f"Question {tag}: plan my trip to Rome and Oslo."}]
    for index in range(rounds):
        messages.extend(tool_round(f"{tag}{index}", ["Rome", "Oslo"], result_tokens))
    return messages
