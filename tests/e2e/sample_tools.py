"""Server-side tools the end-to-end gateway loads by import path."""

from __future__ import annotations

import asyncio
import threading
import time

import orjson

RUNS: list[str] = []
_lock = threading.Lock()


def get_weather(city: str) -> str:
    return f"{city}: 18C, sunny"


async def add(a: int, b: int) -> dict[str, int]:
    return {"sum": a + b}


async def slow(seconds: float = 5.0) -> str:
    await asyncio.sleep(seconds)
    return "finished"


def explode() -> str:
    raise RuntimeError("database is on fire")


async def sleepy(ms: int, stamp: bool = False) -> str:
    """``stamp``: also say when the sleep began and ended (wall clock), so a test can see calls overlap."""
    began = time.time()
    await asyncio.sleep(ms / 1000)
    return f"slept {ms} from {began:.6f} to {time.time():.6f}" if stamp else f"slept {ms}"


def delete_record(id: str) -> str:
    return f"deleted {id}"


def big(kb: int, tag: str = "row") -> str:
    """About ``kb`` KB of varied text (several times a small window once a few are in the transcript)."""
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
    lines = []
    size = 0
    i = 0
    while size < kb * 1024:
        line = f"{tag} {i}: " + " ".join(words[(i * 7 + j) % len(words)] for j in range(12)) + f" value={i * 31 % 997}"
        lines.append(line)
        size += len(line) + 1
        i += 1
    return "\n".join(lines)


FORM = {"type": "object", "properties": {
    "name": {"type": "string", "title": "Your name", "minLength": 1, "maxLength": 40},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "color": {"type": "string", "enum": ["red", "green", "blue"]},
    "subscribe": {"type": "boolean", "default": False},
    "email": {"type": "string", "format": "email"}}, "required": ["name"]}
#: the form of the MCP conformance suite's ``elicitation-defaults`` scenario: every field has a default
FORM_DEFAULTS = {"type": "object", "properties": {
    "name": {"type": "string", "default": "John Doe"},
    "age": {"type": "integer", "default": 30},
    "score": {"type": "number", "default": 95.5},
    "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
    "verified": {"type": "boolean", "default": True}}}


async def ask_user(question: str, server: str = "asker", mode: str = "form", rounds: int = 1,
                   work_s: float = 0.0) -> str:
    """A tool that asks the user (through the loop's elicitation handler, as an MCP source does) ``rounds`` times,
    then works ``work_s`` seconds; its result says what each answer was."""
    from gateway.tools.interaction import CALL_INTERACTIONS, ElicitationRequest

    interactions = CALL_INTERACTIONS.get()
    if interactions is None or interactions.elicit is None:
        return "no one to ask"
    said = []
    for round_ in range(1, rounds + 1):
        request = (ElicitationRequest(server=server, mode="url", message=f"{question} (round {round_})",
                                      url="https://auth.example.com/connect?state=abc", elicitation_id=f"e{round_}")
                   if mode == "url" else
                   ElicitationRequest(server=server, mode="form", message=f"{question} (round {round_})",
                                      requested_schema=FORM_DEFAULTS if mode == "defaults" else FORM))
        answer = await interactions.elicit(request)
        said.append(f"{answer.action} {orjson.dumps(answer.content, option=orjson.OPT_SORT_KEYS).decode()}")
    await asyncio.sleep(work_s)
    return "user said: " + "; ".join(said)


async def ask_model(prompt: str, server: str = "sampler", max_tokens: int = 5000, hint: str = "") -> str:
    """A tool that asks the client's model (through the loop's sampling handler, as an MCP source does)."""
    from gateway.tools.interaction import CALL_INTERACTIONS, SamplingRequest

    interactions = CALL_INTERACTIONS.get()
    if interactions is None or interactions.sample is None:
        return "no model to ask"
    try:
        answer = await interactions.sample(SamplingRequest(
            server=server, messages=[{"role": "user", "content": {"type": "text", "text": prompt}}],
            max_tokens=max_tokens, system_prompt="Answer briefly.",
            model_preferences={"hints": [{"name": hint}]} if hint else None))
    except Exception as exc:  # what the MCP source answers the server with
        return f"refused: {exc}"
    content = answer.content if isinstance(answer.content, dict) else answer.content[0]
    return f"{answer.model} said {content['text']!r} ({answer.stop_reason})"
