"""The soak: three fake providers (one per wire format), a recording tool server, the real gateway.

``run_soak`` starts everything, drives ``loops`` scripted loops (``client.LoopRun``) with bounded
concurrency, then checks what only the records can show:

* every upstream request obeyed its provider's rules, paired every tool call with exactly one
  result and followed the script (``SoakUpstream`` checks each one as it arrives);
* no server tool ran twice for one call, and every server-tool result a model was shown is the
  one that single execution returned (or, for an approved call an earlier attempt started and
  never recorded, the ledger's "outcome unknown": it is never run again);
* the gateway logged no unexpected exception.

Routes span the three formats: ``soak_a`` OpenAI -> Anthropic -> Gemini (one retry per target),
``soak_b`` Gemini -> OpenAI and ``soak_c`` Anthropic -> Gemini (no retries).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx
import openai

from gateway.loop.ledger import OUTCOME_UNKNOWN
from tests.e2e.conftest import Gateway
from tests.fakes.anthropic_rules import anthropic_request_problems
from tests.fakes.gemini_rules import gemini_request_problems
from tests.fakes.openai_rules import openai_request_problems
from tests.fakes.soak_plan import APPROVE, ECHO, FAULT_KINDS, plan_for
from tests.fakes.soak_tools import SoakToolServer
from tests.fakes.soak_upstream import SoakUpstream
from tests.soak.client import LoopRun, Session

KEY = "soak-key"
MODELS = {"oa": "gpt-soak", "an": "claude-sonnet-4-5", "ge": "gemini-3-pro-preview"}
REQUEST_TIMEOUT_S = 8.0  # routing.request_timeout_s of the soak gateway
BOUND_S = REQUEST_TIMEOUT_S + 7.0  # a request still unanswered after this is a hang


def soak_config(fakes: dict[str, SoakUpstream], tools_url: str, store_url: str, *, store_yaml: str | None = None,
                breaker_failures: int = 1_000_000_000, extra_providers: str = "", extra_models: str = "") -> str:
    """The soak gateway's config. ``store_yaml`` replaces the store section built from ``store_url``; the
    breaker is off by default (the seeded fault sequence of a loop must not depend on the other loops)."""
    providers = "\n".join(
        f"  {name}: {{type: {fake.wire}, base_url: '{fake.url}', api_key: soak-{name}, timeout_s: 1.5, "
        f"connect_timeout_s: 1}}" for name, fake in fakes.items()) + extra_providers

    def target(name: str) -> str:
        return f"{{provider: {name}, model: {MODELS[name]}}}"

    def route(name: str, targets: tuple[str, ...], retries: int) -> str:
        return (f"  {name}: {{targets: [{', '.join(target(t) for t in targets)}], tools: [{ECHO}, {APPROVE}], "
                f"retries: {retries}, max_tool_iterations: 8}}")

    args = "{type: object, properties: {loop: {type: integer}, turn: {type: integer}, token: {type: string}}}"
    return f"""
server: {{host: 127.0.0.1, port: __PORT__}}
auth: {{keys: [{{key: {KEY}, tenant: soak}}]}}
store: {store_yaml or f'{{url: "{store_url}", continuation_ttl_s: 600}}'}
routing: {{backoff_base_s: 0.01, backoff_max_s: 0.05, retry_after_cap_s: 2, breaker_failures: {breaker_failures},
          breaker_cooldown_s: 1, request_timeout_s: {REQUEST_TIMEOUT_S}}}
providers:
{providers}
tools:
  {ECHO}:
    description: Echo the token (a server tool)
    parameters: {args}
    http: {{url: "{tools_url}/echo", timeout_s: 5}}
  {APPROVE}:
    description: Delete what the token names (needs a human's approval)
    parameters: {args}
    http: {{url: "{tools_url}/delete", timeout_s: 5}}
    approval: required
models:
{route("soak_a", ("oa", "an", "ge"), 1)}
{route("soak_b", ("ge", "oa"), 0)}
{route("soak_c", ("an", "ge"), 0)}
{extra_models}"""


@dataclass(slots=True)
class SoakResult:
    seed: int
    loops: int
    concurrency: int
    elapsed_s: float
    stats: Counter[str]
    faults: Counter[str]
    failures: Counter[str]
    upstream_requests: Counter[str]  # per fake provider
    examples: dict[str, list[int]]
    tool_runs: Counter[str]
    violations: list[str] = field(default_factory=list)

    def table(self) -> str:
        """The counts as a markdown table."""
        rows = [("loops", self.loops), ("seed", self.seed), ("concurrency", self.concurrency),
                ("wall time (s)", f"{self.elapsed_s:.1f}"), ("client requests", self.stats["requests"]),
                ("upstream requests", sum(self.upstream_requests.values()))]
        rows += [(f"upstream requests: {name} ({MODELS[name]})", n)
                 for name, n in sorted(self.upstream_requests.items())]
        rows += sorted((k, v) for k, v in self.stats.items() if k not in ("requests", "loops"))
        rows += [(f"server tool executions: {k}", v) for k, v in sorted(self.tool_runs.items())]
        rows += [(f"fault injected: {kind}", self.faults[kind]) for kind in FAULT_KINDS]
        rows += [(f"client saw failure: {code} (e.g. loops {self.examples.get(code, [])})", n)
                 for code, n in sorted(self.failures.items())]
        rows.append(("invariant violations", len(self.violations)))
        width = max(len(str(k)) for k, _ in rows)
        lines = [f"| {'count'.ljust(width)} | value |", f"|{'-' * (width + 2)}|-------|"]
        lines += [f"| {str(k).ljust(width)} | {v} |" for k, v in rows]
        return "\n".join(lines)


def record_violations(fakes: dict[str, SoakUpstream], tools: SoakToolServer, seed: int) -> list[str]:
    violations = []
    for fake in fakes.values():
        for record in fake.records:
            for problem in record.problems:
                violations.append(f"seed {seed} loop {record.loop}: {fake.name} ({fake.wire}) turn {record.turn} "
                                  f"attempt {record.attempt}: {problem}")
    for path, name in (("/echo", ECHO), ("/delete", APPROVE)):
        runs = tools.executed(path)
        for token, count in runs.items():
            if count != 1:
                violations.append(f"seed {seed}: server tool {name} ran {count} times for call {token}")
        for fake in fakes.values():
            for token, (tool, result) in list(fake.results_seen.items()):
                if tool != name or result.startswith("client ") or "declined" in result:
                    continue
                if OUTCOME_UNKNOWN in result and runs.get(token, 0) <= 1:
                    # An attempt started the approved call and lost its result (its replica or store failed
                    # while the tool ran): a retry is told the outcome is unknown, and never runs it again.
                    continue
                if result != f"{path[1:]} {token}" or token not in runs:
                    violations.append(f"seed {seed}: {fake.name} was shown {result!r} as the result of {name} call "
                                      f"{token} (executions: {runs.get(token, 0)})")
    return violations


def _log_violations(gateway: Gateway, seed: int) -> list[str]:
    lines = gateway.logs().splitlines()
    bad = [i for i, line in enumerate(lines) if "Traceback" in line or "unexpected error" in line]
    return [f"seed {seed}: the gateway logged an unexpected exception:\n" + "\n".join(lines[i:i + 30])
            for i in bad[:5]]


async def _drive(gateway: Gateway, seed: int, loop_ids: list[int], concurrency: int, reserialize: bool) -> Session:
    # Idle connections are dropped well before the gateway's keep-alive timeout (uvicorn: 5 s, httpx's default
    # expiry too): a request sent on a connection the server is closing at that instant is reset before the
    # gateway ever sees it, a client-side race that would otherwise pass for a dropped request.
    limits = httpx.Limits(max_connections=concurrency * 3, max_keepalive_connections=concurrency * 3,
                          keepalive_expiry=1.0)
    sdk = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0, timeout=BOUND_S + 5,
                             http_client=httpx.AsyncClient(limits=limits, timeout=BOUND_S + 5))
    async with httpx.AsyncClient(limits=limits, timeout=BOUND_S + 5) as http:
        session = Session(sdk, http, gateway.url, KEY, BOUND_S, reserialize=reserialize)
        gate = asyncio.Semaphore(concurrency)

        async def one(loop: int) -> None:
            async with gate:
                session.stats["loops"] += 1
                await LoopRun(session, plan_for(seed, loop)).run()

        await asyncio.gather(*(one(loop) for loop in loop_ids))
    await sdk.close()
    return session


def run_soak(loops: int, seed: int, concurrency: int = 16, store_url: str = "memory://",
             only: list[int] | None = None, workers: int = 1, reserialize: bool = False) -> SoakResult:
    """Run ``loops`` loops (or just the loop ids in ``only``) and check every invariant.

    ``workers`` > 1 needs a shared store (Redis): a resume may land on another worker than its pause.
    ``reserialize``: way-A follow-ups carry the paused calls' arguments re-serialised (see ``Session``).
    """
    fakes = {
        "oa": SoakUpstream("oa", "openai", openai_request_problems),
        "an": SoakUpstream("an", "anthropic", lambda body, model: anthropic_request_problems(body)),
        "ge": SoakUpstream("ge", "gemini", gemini_request_problems),
    }
    tools = SoakToolServer()
    gateway: Gateway | None = None
    try:
        for fake in fakes.values():
            fake.start()
        tools.start()
        gateway = Gateway(soak_config(fakes, tools.url, store_url))
        gateway.start(*(("--workers", str(workers)) if workers > 1 else ()))
        started = time.monotonic()
        loop_ids = only if only is not None else list(range(loops))
        session = asyncio.run(_drive(gateway, seed, loop_ids, concurrency, reserialize))
        elapsed = time.monotonic() - started
        gateway.stop()
        faults = Counter(r.fault for fake in fakes.values() for r in fake.records if r.fault != "rejected")
        tool_runs = Counter({ECHO: sum(tools.executed("/echo").values()),
                             APPROVE: sum(tools.executed("/delete").values())})
        violations = session.violations + record_violations(fakes, tools, seed) + _log_violations(gateway, seed)
        upstream = Counter({name: len(fake.records) for name, fake in fakes.items()})
        return SoakResult(seed, session.stats["loops"], concurrency, elapsed, session.stats, faults, session.failures,
                          upstream, session.examples, tool_runs, violations)
    finally:
        if gateway is not None:
            gateway.stop()
        for server in (*fakes.values(), tools):
            if server.port:
                server.stop()
