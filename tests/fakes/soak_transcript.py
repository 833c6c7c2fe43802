"""Reading a soak request's transcript the same way in all three wire formats.

``read_transcript`` finds the loop (from the prompt) and the turn (assistant turns so far), and
pairs every tool call of every assistant turn with the tool results that answer it, by id
(OpenAI, Anthropic) or by position (Gemini). Stricter than the provider rules where they are
lenient: each call must have exactly one result, and each turn's calls must be the ones the
script asked for at that turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from tests.fakes.soak_plan import LoopPlan, parse_prompt, plan_for


@dataclass(slots=True)
class Exchange:
    name: str
    args: dict[str, Any]
    results: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Transcript:
    plan: LoopPlan | None
    turns: list[list[Exchange]]  # one list of exchanges per assistant turn
    problems: list[str]

    @property
    def turn(self) -> int:
        return len(self.turns)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text") or "") for b in content if isinstance(b, dict))
    if isinstance(content, dict):  # Gemini functionResponse.response
        output = content.get("output", content)
        return output if isinstance(output, str) else orjson.dumps(output).decode()
    return ""


def _openai(body: dict[str, Any], turns: list[list[Exchange]], problems: list[str]) -> Any:
    messages = body.get("messages") or []
    current: dict[str, Exchange] = {}
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            current = {}
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                try:
                    args = orjson.loads(function.get("arguments") or "{}")
                except orjson.JSONDecodeError:
                    args = {}
                current[call.get("id")] = Exchange(function.get("name", ""), args)
            turns.append(list(current.values()))
        elif role == "tool":
            exchange = current.get(message.get("tool_call_id"))
            if exchange is None:
                problems.append(f"messages[{index}]: tool result answers no call of the assistant turn before it")
            else:
                exchange.results.append(_text(message.get("content")))
    return messages[0].get("content") if messages else None


def _anthropic(body: dict[str, Any], turns: list[list[Exchange]], problems: list[str]) -> Any:
    messages = body.get("messages") or []
    current: dict[str, Exchange] = {}
    for index, message in enumerate(messages):
        blocks = message.get("content") if isinstance(message.get("content"), list) else []
        if message.get("role") == "assistant":
            current = {b.get("id"): Exchange(b.get("name", ""), b.get("input") or {}) for b in blocks
                       if isinstance(b, dict) and b.get("type") == "tool_use"}
            turns.append(list(current.values()))
            continue
        for block in blocks:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                exchange = current.get(block.get("tool_use_id"))
                if exchange is None:
                    problems.append(f"messages.{index}: tool_result answers no tool_use of the turn before it")
                else:
                    exchange.results.append(_text(block.get("content")))
        current = {}
    first = messages[0].get("content") if messages else None
    return _text(first)


def _gemini(body: dict[str, Any], turns: list[list[Exchange]], problems: list[str]) -> Any:
    contents = body.get("contents") or []
    current: list[Exchange] = []
    for index, content in enumerate(contents):
        parts = [p for p in content.get("parts") or () if isinstance(p, dict)]
        if content.get("role") == "model":
            current = [Exchange(p["functionCall"].get("name", ""), p["functionCall"].get("args") or {})
                       for p in parts if isinstance(p.get("functionCall"), dict)]
            turns.append(current)
            continue
        responses = [p["functionResponse"] for p in parts if isinstance(p.get("functionResponse"), dict)]
        if len(responses) > len(current):
            problems.append(f"contents[{index}]: more function responses than calls in the turn before it")
        for exchange, response in zip(current, responses, strict=False):
            if response.get("name") != exchange.name:
                problems.append(f"contents[{index}]: response for {response.get('name')!r} answers {exchange.name!r}")
            exchange.results.append(_text(response.get("response")))
        current = []
    first = contents[0].get("parts") if contents else None
    return _text(first)


_READERS = {"openai": _openai, "anthropic": _anthropic, "gemini": _gemini}


def read_transcript(wire: str, body: dict[str, Any]) -> Transcript:
    turns: list[list[Exchange]] = []
    problems: list[str] = []
    prompt = _READERS[wire](body, turns, problems)
    parsed = parse_prompt(prompt)
    plan = plan_for(*parsed) if parsed else None
    if plan is None:
        return Transcript(None, turns, [*problems, f"no soak prompt in the first message: {str(prompt)[:80]!r}"])
    for k, exchanges in enumerate(turns):
        if k >= plan.final_turn:
            problems.append(f"assistant turn {k} in history, but the script's final (text) turn is {plan.final_turn}")
            break
        names = tuple(e.name for e in exchanges)
        if names != plan.turns[k].calls:
            problems.append(f"assistant turn {k} holds calls {names}, the script asked for {plan.turns[k].calls}")
        for i, exchange in enumerate(exchanges):
            if exchange.args.get("loop") != plan.loop or exchange.args.get("turn") != k:
                problems.append(f"assistant turn {k} call {i} has arguments {exchange.args} from another turn/loop")
            if len(exchange.results) != 1:
                problems.append(f"assistant turn {k} call {i} ({exchange.name}, token {exchange.args.get('token')}) "
                                f"has {len(exchange.results)} tool results, not exactly one")
    return Transcript(plan, turns, problems)
