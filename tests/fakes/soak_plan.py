"""The deterministic script of a fault-injection soak, shared by the fake providers and the driver.

Every loop's script (how many tool turns, which tools, what text) and every upstream request's
fault follow from the seed alone, so the fakes answer and the driver predicts without talking
to each other, and a failure reproduces with the same seed whatever the concurrency was:

* the plan of loop L is drawn from ``Random(f"plan:{seed}:{L}")``;
* the fault of a request is drawn from ``Random(f"fault:{seed}:{L}:{turn}:{upstream}:{attempt}")``,
  where ``attempt`` counts the requests that upstream has seen for that loop and turn (each loop
  runs sequentially and the circuit breaker is off, so the sequence is the same on every run).

The fakes learn the loop from the first user message (``prompt``) and the turn from the number
of assistant turns in the transcript they receive.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

ECHO = "soak_echo"  # server tool (HTTP): runs at once
APPROVE = "soak_delete"  # server tool (HTTP) that needs a human's approval: pauses
CLIENT = "soak_lookup"  # client tool: pauses
ROUTES = ("soak_a", "soak_b", "soak_c")
ITERATION_SEPARATOR = "\n\n"  # what the gateway puts between the texts of two model calls
_PROMPT = re.compile(r"^soak seed=(\d+) loop=(\d+)\b")
_WORDS = ("amber", "basalt", "cobalt", "delta", "ember", "fjord", "granite", "harbor", "indigo", "juniper", "kelp",
          "lumen", "mistral", "nimbus", "onyx", "prism", "quartz", "rune", "sierra", "tundra", "umbra", "vesper")
_GLYPHS = ("é", "ß", "→", "✓", "日本", "🙂", "Ω")


@dataclass(frozen=True, slots=True)
class Turn:
    text: str  # "" for a turn that only calls tools
    calls: tuple[str, ...]  # tool names, in call order; () for the final turn


@dataclass(frozen=True, slots=True)
class LoopPlan:
    seed: int
    loop: int
    route: str
    stream: bool
    turns: tuple[Turn, ...]  # the tool turns, then the final text turn
    resume_way: str  # "a": OpenAI tool messages through the SDK; "b": POST /v1/continuations/{id}
    resume_stream: bool
    approve: bool  # way B: approve the approval calls (else deny them)
    replay: bool  # after a resume completed, send it again: must be refused (409)
    race: bool  # way B: two resumes at once: at most one may be accepted

    @property
    def prompt(self) -> str:
        return f"soak seed={self.seed} loop={self.loop}: follow the script."

    @property
    def final_turn(self) -> int:
        return len(self.turns) - 1

    def expected_text(self, first: int, last: int) -> str:
        """The text one response carries when its model calls answered turns ``first..last``."""
        return ITERATION_SEPARATOR.join(t.text for t in self.turns[first:last + 1] if t.text)


def _sentence(rng: random.Random, words: int) -> str:
    picked = [rng.choice(_WORDS) for _ in range(words)]
    picked[rng.randrange(words)] += rng.choice(_GLYPHS)
    return " ".join(picked)


def plan_for(seed: int, loop: int) -> LoopPlan:
    rng = random.Random(f"plan:{seed}:{loop}")
    turns = []
    for k in range(rng.randint(1, 3)):
        calls = []
        for _ in range(rng.randint(1, 3)):
            roll = rng.random()
            calls.append(CLIENT if roll < 0.08 else APPROVE if roll < 0.15 else ECHO)
        text = f"[L{loop} t{k}] {_sentence(rng, rng.randint(2, 6))}." if rng.random() < 0.35 else ""
        turns.append(Turn(text, tuple(calls)))
    turns.append(Turn(f"Final answer of loop {loop}: {_sentence(rng, rng.randint(3, 12))}.", ()))
    return LoopPlan(seed=seed, loop=loop, route=rng.choice(ROUTES), stream=rng.random() < 0.5, turns=tuple(turns),
                    resume_way=rng.choice("ab"), resume_stream=rng.random() < 0.5, approve=rng.random() < 0.6,
                    replay=rng.random() < 0.5, race=rng.random() < 0.25)


def parse_prompt(text: object) -> tuple[int, int] | None:
    """(seed, loop) from a soak prompt; None for anything else."""
    match = _PROMPT.match(text) if isinstance(text, str) else None
    return (int(match.group(1)), int(match.group(2))) if match else None


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    status: int = 0
    retry_after: str | None = None
    delay_s: float = 0.0


# kind -> weight; "none" answers normally. Kinds that need a stream fall back to "none" otherwise.
FAULT_WEIGHTS: dict[str, int] = {
    "none": 55,
    "slow": 8,  # answered late, within the provider timeout
    "5xx": 7,
    "429": 5,  # with Retry-After 0, 1 or 30 (past the gateway's cap: moves on)
    "reset_before_head": 5,  # connection closed before any response byte
    "reset_after_head": 5,  # the head arrives, then the connection closes
    "error_event": 5,  # a 200 whose stream starts with an error event (non-stream: a 200 error body)
    "cut": 5,  # stream: closed mid-way after some deltas; non-stream: mid-body
    "invalid_json": 3,  # the body, or the stream's only event, is not JSON
    "bad_event": 2,  # stream only: one malformed event among good ones
    "stall": 2,  # stream: silent after some deltas; non-stream: silent mid-body (past the provider's timeout)
}
FAULT_KINDS = tuple(FAULT_WEIGHTS)
_STATUSES = {"openai": (500, 502, 503), "anthropic": (500, 529, 503), "gemini": (500, 503, 504)}


def fault_for(seed: int, loop: int, turn: int, upstream: str, attempt: int, wire: str, stream: bool) -> Fault:
    rng = random.Random(f"fault:{seed}:{loop}:{turn}:{upstream}:{attempt}")
    kind = rng.choices(FAULT_KINDS, weights=tuple(FAULT_WEIGHTS.values()))[0]
    if kind == "bad_event" and not stream:
        kind = "none"
    if kind == "slow":
        return Fault(kind, delay_s=rng.uniform(0.05, 0.4))
    if kind == "5xx":
        return Fault(kind, status=rng.choice(_STATUSES[wire]))
    if kind == "429":
        return Fault(kind, status=429, retry_after=rng.choice(("0", "0", "1", "30")))
    return Fault(kind)
