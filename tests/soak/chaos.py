"""Replicas under faults: the soak's tool loops on three gateway processes sharing a replicated Redis.

``run_chaos`` starts a Redis topology (``chaos_redis``: a Cluster of three masters and three
replicas, or a Sentinel group), three separate ``python -m gateway serve`` processes sharing it
(``store.wait_replicas``), the soak's fault-injecting fake providers and recording tool server.
It drives the soak's scripted loops; every request goes to a random live gateway and every
resume to a gateway other than the one that paused. Meanwhile it SIGKILLs a gateway while it
serves a resume (and restarts it on the same port), and SIGKILLs a Redis master (its replica is
promoted by the cluster or the sentinels), and restarts it once the failover is done: it rejoins as a
replica. Until then the promoted master has no replica to confirm ``WAIT 1``, so writes to it are 503s.

What counts as a clean failure (anything else is a violation):
* an OpenAI-shaped 429/502/503/504 (e.g. 503 ``store_unavailable`` during a failover), as in the soak;
* a dropped connection or a stream cut before ``[DONE]`` only from a gateway that was SIGKILLed while
  the request was in flight (or was down when it was sent): the client retries it on another gateway;
* a 409 on a resume retried after such a kill or a 503 when the killed gateway held the claim: the claim's lease (the
  request timeout + ``store.claim_lease_margin_s``, ``LEASE_MARGIN_S`` here) must expire, then the retry must be
  accepted; or, if the
  killed gateway had finished the resume before it died (``GET`` says ``resumed``), the loop ends
  there ("answer lost with a killed gateway"): the resume was accepted once, its answer died with it.

Checked after the run: every continuation the client was told about (a 200 ``paused``) still exists
(``GET /v1/continuations/{id}``, TTL 600 s) with a status that agrees with what the client saw
(``resumed`` when a resume was accepted, else still resumable) — lost = 0, Redis failover included;
no server tool ran twice for one call and every result a model saw is that one execution's, or the
ledger's "outcome unknown" for an approved call whose result an attempt lost (the soak's record
checks); no resume was accepted twice (replays and races get 409); no gateway logged an unexpected
exception; and the circuit breaker is shared: a target opened by failures on one gateway
is open on the others after a single request each (``/readyz``), below their own threshold.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai

from tests.e2e.conftest import Gateway
from tests.fakes.anthropic_rules import anthropic_request_problems
from tests.fakes.gemini_rules import gemini_request_problems
from tests.fakes.openai_rules import openai_request_problems
from tests.fakes.soak_plan import APPROVE, ECHO, plan_for
from tests.fakes.soak_tools import SoakToolServer
from tests.fakes.soak_upstream import SoakUpstream
from tests.ports import free_port
from tests.soak.chaos_redis import TOPOLOGIES, Topology
from tests.soak.client import Answer, LoopRun, Session, content_of
from tests.soak.harness import BOUND_S, KEY, REQUEST_TIMEOUT_S, _log_violations, record_violations, soak_config

GATEWAYS = 3
BREAKER_FAILURES = 20  # consecutive failures that open a circuit (shared across the gateways)
#: how long another replica may take to see a circuit opened elsewhere (its refresher reads every second)
SHARED_CIRCUIT_WAIT_S = 15.0
#: ``store.claim_lease_margin_s`` of these gateways (the default is 60 s, which a resume waited for). Above the
#: hang bound: a live resume that ran past its lease is reported as a hang (``BOUND_S``) before it could lose its claim
LEASE_MARGIN_S = 10.0
assert REQUEST_TIMEOUT_S + LEASE_MARGIN_S > BOUND_S
LEASE_S = REQUEST_TIMEOUT_S + LEASE_MARGIN_S  # a killed gateway's claim frees itself after this
DEAD_ROUTE = "chaos_dead"
# What a SIGKILLed gateway does to a request in flight, as the soak client reports it.
_TRANSPORT_PROBLEMS = ("the gateway dropped", "the stream ended without [DONE]")
#: every way a loop may end without a violation; each loop adds one to exactly one of these counts
LOOP_ENDINGS = (
    "loops completed",
    "loops failed cleanly",
    "loops ended: resume finished by a killed gateway (answer lost with it)",
    "loops ended: answer read from the continuation after a failed attempt",
)


@dataclass(slots=True)
class Replica:
    """One gateway process and the client connections to its current incarnation."""

    index: int
    gateway: Gateway
    sdk: openai.AsyncOpenAI
    http: httpx.AsyncClient
    generation: int = 0  # incremented by each SIGKILL
    alive: bool = True
    resumes_in_flight: int = 0


@dataclass(slots=True)
class Chaos:
    """The shared state of one run: replicas, counts and what the client was told."""

    replicas: list[Replica]
    rng: random.Random
    stats: Counter[str] = field(default_factory=Counter)
    acknowledged: dict[str, str] = field(default_factory=dict)  # continuation id -> "paused" | "resumed" | "ended"
    acknowledged_at: dict[str, float] = field(default_factory=dict)
    done_loops: int = 0
    redis_killed_at: float = float("inf")
    retired: list[httpx.AsyncClient | openai.AsyncOpenAI] = field(default_factory=list)

    def pick(self, avoid: Replica | None) -> Replica:
        live = [r for r in self.replicas if r.alive] or self.replicas
        others = [r for r in live if r is not avoid]
        return self.rng.choice(others or live)

    async def kill_gateway(self, replica: Replica) -> None:
        """SIGKILL a gateway, then restart it on its port with fresh client connections."""
        assert replica.gateway.process is not None
        replica.alive = False
        replica.generation += 1
        self.stats["gateway processes SIGKILLed"] += 1
        self.stats[f"resumes in flight on the killed gateway (kill {self.stats['gateway processes SIGKILLed']})"] \
            = replica.resumes_in_flight
        replica.gateway.process.send_signal(signal.SIGKILL)
        await asyncio.to_thread(replica.gateway.process.wait, 10)
        await asyncio.sleep(1.0)
        self.retired += [replica.sdk, replica.http]
        replica.sdk, replica.http = _clients(replica.gateway.url)
        await asyncio.to_thread(replica.gateway.start)
        replica.alive = True
        self.stats["gateway processes restarted"] += 1


def _clients(url: str) -> tuple[openai.AsyncOpenAI, httpx.AsyncClient]:
    # Short keep-alive (see harness._drive); one pool per incarnation, so no request reuses a dead socket.
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64, keepalive_expiry=1.0)
    sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=BOUND_S + 5,
                             http_client=httpx.AsyncClient(limits=limits, timeout=BOUND_S + 5))
    return sdk, httpx.AsyncClient(limits=limits, timeout=BOUND_S + 5)


class ChaosLoopRun(LoopRun):
    """A soak loop whose requests spread over the replicas, resumes always to another one."""

    def __init__(self, session: Session, chaos: Chaos, loop: int, seed: int) -> None:
        super().__init__(session, plan_for(seed, loop))
        self.chaos = chaos
        self.replica = chaos.replicas[0]
        self.paused_on: Replica | None = None
        self.continuation_id: str | None = None  # the continuation being resumed
        self.failed_at: float | None = None  # when an attempt of this resume last failed
        self.killed_in_resume = False  # an attempt of this resume died with its gateway
        self.waited_lease = False

    def _sdk(self) -> openai.AsyncOpenAI:
        return self.replica.sdk

    def _http(self) -> httpx.AsyncClient:
        return self.replica.http

    def _url(self) -> str:
        return self.replica.gateway.url

    async def _bounded(self, request: Any) -> Answer:
        resuming = self.continuation_id is not None
        replica = self.replica = self.chaos.pick(self.paused_on if resuming else None)
        generation, was_alive = replica.generation, replica.alive
        if resuming:
            replica.resumes_in_flight += 1
            if self.paused_on is not None and replica is not self.paused_on:
                self.chaos.stats["resume requests sent to another replica"] += 1
        try:
            answer = await super()._bounded(request)
        finally:
            if resuming:
                replica.resumes_in_flight -= 1
        if answer.kind == "failed" and (replica.generation != generation or not was_alive):
            # Killed under this request (or down when it was sent): a transport failure is the kill's, not a bug.
            answer.problems = [p for p in answer.problems if not any(t in p for t in _TRANSPORT_PROBLEMS)]
            if answer.failure in ("connection", "stream dropped"):
                answer.failure = "connection lost: gateway SIGKILLed"
                self.killed_in_resume = self.killed_in_resume or resuming
        if answer.kind == "failed" and resuming:
            self.failed_at = time.monotonic()
        if answer.kind == "paused":
            self.paused_on = replica
        return answer

    def _check_answer(self, answer: Answer, first: int) -> int:
        if self.continuation_id is not None:
            self.chaos.acknowledged[self.continuation_id] = "resumed"
        return super()._check_answer(answer, first)

    def _resumption(self, answer: Answer) -> Any:
        self.continuation_id = answer.extension.get("continuation_id") or ""
        self.chaos.acknowledged[self.continuation_id] = "paused"
        self.chaos.acknowledged_at[self.continuation_id] = time.monotonic()
        self.failed_at, self.killed_in_resume, self.waited_lease = None, False, False
        return super()._resumption(answer)

    async def _on_conflict(self, continuation_id: str, expected: str = "") -> str:
        if self.failed_at is None:
            return "violation"
        status = await self._status(continuation_id)
        if status == "claimed" and not self.waited_lease:
            # A failed attempt still holds the claim (its gateway died, or could not release it during a
            # store failover): the lease frees it, then the resume must be accepted.
            self.waited_lease = True
            self.chaos.stats["resumes that waited for a dead claim's lease"] += 1
            await asyncio.sleep(max(0.0, self.failed_at + LEASE_S + 1.0 - time.monotonic()))
            return "retry"
        if status == "resumed" and self.killed_in_resume:
            self.chaos.acknowledged[continuation_id] = "ended"
            self.s.stats[LOOP_ENDINGS[2]] += 1
            return "ended"
        if status == "resumed":
            # The attempt's answer did not reach the client (e.g. the store's reply to the finish came too late
            # during a failover, after the finish was written): the continuation keeps that answer, and the
            # asker reads it there (issue 29: the asker can always get the final answer). Not lost.
            result = await self._result(continuation_id)
            content = content_of(result)
            if content and expected.startswith(content):
                self.chaos.acknowledged[continuation_id] = "resumed"
                self.s.stats[LOOP_ENDINGS[3]] += 1
                return "ended"
        self.violation(f"resume of {continuation_id} refused with 409 after a failed attempt; status {status}")
        return "violation"

    async def _replay(self, continuation_id: str, decisions: list[dict[str, Any]]) -> None:
        """A completed resume sent again must be refused; a replay that failed cleanly (its gateway killed, a
        503 during a failover) proves nothing either way and is sent again, to another live gateway."""
        self.s.stats["replayed resumes"] += 1
        again = Answer("failed")
        for attempt in range(1, self.s.retries + 2):
            again = await self._bounded(lambda: self._resume_b(continuation_id, decisions, False))
            if again.kind != "failed" or again.problems:
                break
            self.chaos.stats["replays sent again after a clean failure"] += 1
            await asyncio.sleep(self.s.retry_pause_s * attempt)
        if again.kind != "conflict":
            self.violation(f"resuming {continuation_id} again after it completed gave {again.kind} {again.failure} "
                           f"{again.problems}")

    async def _result(self, continuation_id: str) -> dict[str, Any] | None:
        """The result a resumed continuation keeps (``GET /v1/continuations/{id}``), or None."""
        replica = self.chaos.pick(None)
        try:
            response = await replica.http.get(f"{replica.gateway.url}/v1/continuations/{continuation_id}",
                                              headers={"authorization": f"Bearer {KEY}"})
        except httpx.HTTPError:
            return None
        result = response.json().get("result") if response.status_code == 200 else None
        return result if isinstance(result, dict) else None

    async def _status(self, continuation_id: str) -> str:
        replica = self.chaos.pick(None)
        try:
            response = await replica.http.get(f"{replica.gateway.url}/v1/continuations/{continuation_id}",
                                              headers={"authorization": f"Bearer {KEY}"})
        except httpx.HTTPError as exc:
            return f"unreachable ({exc!r})"
        if response.status_code != 200:
            return f"HTTP {response.status_code}"
        return str(response.json().get("status"))


@dataclass(slots=True)
class ChaosResult:
    store: str
    seed: int
    loops: int
    elapsed_s: float
    stats: Counter[str]
    failures: Counter[str]
    tool_runs: Counter[str]
    violations: list[str]

    def table(self) -> str:
        rows: list[tuple[str, object]] = [("store", self.store), ("loops", self.loops), ("seed", self.seed),
                                          ("gateway processes", GATEWAYS), ("wall time (s)", f"{self.elapsed_s:.1f}")]
        rows += sorted(self.stats.items())
        rows += [(f"server tool executions: {k}", v) for k, v in sorted(self.tool_runs.items())]
        rows += [(f"client saw failure: {code}", n) for code, n in sorted(self.failures.items())]
        rows.append(("invariant violations", len(self.violations)))
        width = max(len(str(k)) for k, _ in rows)
        lines = [f"| {'count'.ljust(width)} | value |", f"|{'-' * (width + 2)}|-------|"]
        lines += [f"| {str(k).ljust(width)} | {v} |" for k, v in rows]
        return "\n".join(lines)


async def _faults(chaos: Chaos, topology: Topology, loops: int, gateway_kills: int, kill_redis: bool,
                  replica_lag_s: float) -> None:
    """SIGKILL gateways mid-resume (spread over the first half of the run), then a Redis master."""
    for k in range(gateway_kills):
        while chaos.done_loops < loops * (0.1 + 0.3 * k / max(1, gateway_kills)):
            await asyncio.sleep(0.05)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(r.resumes_in_flight for r in chaos.replicas if r.alive):
            await asyncio.sleep(0.005)
        busiest = max((r for r in chaos.replicas if r.alive), key=lambda r: r.resumes_in_flight)
        await chaos.kill_gateway(busiest)
    if kill_redis:
        while chaos.done_loops < loops * 0.5:
            await asyncio.sleep(0.05)
        await asyncio.to_thread(topology.kill_master, replica_lag_s)
        chaos.stats["Redis masters SIGKILLed"] += 1
        chaos.redis_killed_at = time.monotonic()
        if await asyncio.to_thread(topology.wait_failover):
            chaos.stats["Redis failovers (replica promoted)"] += 1
            chaos.stats["Redis failover time (s, rounded)"] = round(time.monotonic() - chaos.redis_killed_at)
        # Until the killed master is back as a replica, the promoted one has none: WAIT 1 cannot be met and
        # every write to it is a 503 (by design). Operators restart it; so does the run.
        if await asyncio.to_thread(topology.restore):
            chaos.stats["killed Redis master restarted, rejoined as a replica"] += 1
            chaos.stats["Redis master kill to replica rejoined (s, rounded)"] = round(
                time.monotonic() - chaos.redis_killed_at)


async def _drive(chaos: Chaos, topology: Topology, seed: int, loops: int, concurrency: int, gateway_kills: int,
                 kill_redis: bool, replica_lag_s: float) -> Session:
    first = chaos.replicas[0]
    session = Session(first.sdk, first.http, first.gateway.url, KEY, BOUND_S, retries=8, retry_pause_s=0.5)
    gate = asyncio.Semaphore(concurrency)

    async def one(loop: int) -> None:
        async with gate:
            session.stats["loops"] += 1
            await ChaosLoopRun(session, chaos, loop, seed).run()
            chaos.done_loops += 1

    faults = asyncio.create_task(_faults(chaos, topology, loops, gateway_kills, kill_redis, replica_lag_s))
    await asyncio.gather(*(one(loop) for loop in range(loops)))
    await faults
    return session


async def _lost_continuations(chaos: Chaos) -> list[str]:
    """Every continuation the client was told about still exists, in the state the client saw."""
    violations = []
    chaos.stats["continuations acknowledged (200 paused)"] = len(chaos.acknowledged)
    lost = 0
    for continuation_id, seen in chaos.acknowledged.items():
        replica = chaos.pick(None)
        response = await replica.http.get(f"{replica.gateway.url}/v1/continuations/{continuation_id}",
                                          headers={"authorization": f"Bearer {KEY}"})
        status = response.json().get("status") if response.status_code == 200 else f"HTTP {response.status_code}"
        chaos.stats[f"continuations found at the end: {status}"] += 1
        if response.status_code == 404:
            lost += 1
        allowed = {"resumed": ("resumed",), "ended": ("resumed",), "paused": ("pending", "claimed", "resumed")}[seen]
        if status not in allowed:
            why = ""
            if seen != "paused" and status in ("claimed", "pending"):
                why = (" (the write that ended the resume was lost in the failover: once the claim's lease expires "
                       "the continuation can be resumed a second time)")
            violations.append(f"continuation {continuation_id} (client saw: {seen}) is {status} at the end{why}")
    chaos.stats["acknowledged continuations lost"] = lost
    chaos.stats["continuations acknowledged before the Redis master was killed"] = sum(
        at < chaos.redis_killed_at for at in chaos.acknowledged_at.values())
    return violations


async def _shared_circuit(chaos: Chaos) -> list[str]:
    """Open the dead target's circuit through gateway 0; gateways 1 and 2 must see it open too.

    Shared circuit state reaches the other replicas through their background refresher (every
    second, never on the request path), so each is polled for it with a generous bound.
    """
    violations = []
    first = chaos.replicas[0]
    body = {"model": DEAD_ROUTE, "messages": [{"role": "user", "content": "hello"}]}
    headers = {"authorization": f"Bearer {KEY}"}
    for _ in range(BREAKER_FAILURES + 2):
        await first.http.post(f"{first.gateway.url}/v1/chat/completions", json=body, headers=headers)
    for replica in chaos.replicas:
        if replica is not first:
            response = await replica.http.post(f"{replica.gateway.url}/v1/chat/completions", json=body,
                                               headers=headers)
            if response.status_code < 400:
                violations.append(f"the dead route answered {response.status_code} on gateway {replica.index}")
        deadline = time.monotonic() + SHARED_CIRCUIT_WAIT_S
        while True:
            ready = (await replica.http.get(f"{replica.gateway.url}/readyz")).json()
            states = {target: state for target, state in (ready.get("circuits") or {}).items() if "dead" in target}
            if "open" in states.values() or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        if "open" in states.values():
            chaos.stats["gateways seeing the dead target's circuit open"] += 1
        else:
            violations.append(f"gateway {replica.index} does not see the dead target's circuit open: {ready}")
    chaos.stats["circuit opened by failures through gateway 0 only"] = 1 if not violations else 0
    return violations


def run_chaos(loops: int, seed: int, store: str = "cluster", concurrency: int = 12, gateway_kills: int = 1,
              kill_redis: bool = True, wait_replicas: int | None = 1, replica_lag_s: float = 1.0) -> ChaosResult:
    """Run ``loops`` soak loops across three gateways on the ``store`` topology under kills; check everything.

    ``replica_lag_s``: the killed master's replicas are frozen that long before it dies (see ``kill_master``).
    """
    topology = TOPOLOGIES[store]()
    fakes = {
        "oa": SoakUpstream("oa", "openai", openai_request_problems),
        "an": SoakUpstream("an", "anthropic", lambda body, model: anthropic_request_problems(body)),
        "ge": SoakUpstream("ge", "gemini", gemini_request_problems),
    }
    tools = SoakToolServer()
    gateways: list[Gateway] = []
    try:
        topology.start()
        for fake in fakes.values():
            fake.start()
        tools.start()
        dead = f"\n  dead: {{type: openai, base_url: 'http://127.0.0.1:{free_port()}/v1', api_key: x, timeout_s: 1}}"
        route = f"  {DEAD_ROUTE}: {{targets: [{{provider: dead, model: gone}}], retries: 0}}\n"
        config = soak_config(fakes, tools.url, "", store_yaml=topology.store_yaml(wait_replicas, LEASE_MARGIN_S),
                             breaker_failures=BREAKER_FAILURES, extra_providers=dead, extra_models=route)
        gateways = [Gateway(config) for _ in range(GATEWAYS)]
        for gateway in gateways:
            gateway.start()
        replicas = [Replica(i, g, *_clients(g.url)) for i, g in enumerate(gateways)]
        chaos = Chaos(replicas, random.Random(f"chaos:{seed}"))
        started = time.monotonic()

        async def scenario() -> Session:
            session = await _drive(chaos, topology, seed, loops, concurrency, gateway_kills,
                                   kill_redis and store != "replica", replica_lag_s)
            session.violations += await _lost_continuations(chaos)
            session.violations += await _shared_circuit(chaos)
            for client in [*chaos.retired, *(c for r in chaos.replicas for c in (r.sdk, r.http))]:
                await (client.close() if isinstance(client, openai.AsyncOpenAI) else client.aclose())
            return session

        session = asyncio.run(scenario())
        elapsed = time.monotonic() - started
        for gateway in gateways:
            gateway.stop()
        violations = session.violations + record_violations(fakes, tools, seed)
        for gateway in gateways:
            violations += _log_violations(gateway, seed)
        tool_runs = Counter({ECHO: sum(tools.executed("/echo").values()),
                             APPROVE: sum(tools.executed("/delete").values())})
        stats = Counter(session.stats)
        stats.update(chaos.stats)  # keeps zero counts (``+`` would drop "lost: 0")
        stats["upstream requests"] = sum(len(f.records) for f in fakes.values())
        return ChaosResult(store, seed, session.stats["loops"], elapsed, stats, session.failures, tool_runs,
                           violations)
    finally:
        for gateway in gateways:
            gateway.stop()
        for server in (*fakes.values(), tools):
            if server.port:
                server.stop()
        topology.stop()
