"""End-to-end fixtures: fake providers over real HTTP and the gateway as a real ``loopgate serve`` process."""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
import redis

from tests.fakes.anthropic_rules import anthropic_request_problems
from tests.fakes.gemini_rules import gemini_request_problems
from tests.fakes.openai_rules import openai_request_problems
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
KEY = "test-key"
OTHER_KEY = "other-key"
HEADLESS_KEY = "cron-key"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here drives real gateway processes (and often Redis, browsers, CLIs): all are ``slow``, so
    ``pytest -m "not slow"`` (the quick edit-test loop) leaves them to CI, which runs everything."""
    here = Path(__file__).resolve().parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.slow)


def require_litellm() -> None:
    """Skip without the optional ``litellm`` (a test extra, so never under CI) without importing it here: the
    gateway process under test imports it, and importing it in the test process too costs seconds of CPU."""
    if importlib.util.find_spec("litellm") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("litellm (a test extra) is not installed; CI=true, so its tests must run")
        pytest.skip("litellm is not installed (pip install -e '.[test]')")


#: each Gateway's folder (config and log): kept until this process ends, so a test may read a stopped
#: gateway's log, then removed (a suite run starts about 150 gateways)
_GATEWAY_DIRS: list[str] = []


@atexit.register
def _remove_gateway_dirs() -> None:
    for folder in _GATEWAY_DIRS:
        shutil.rmtree(folder, ignore_errors=True)


class Gateway:
    """A ``python -m gateway serve`` subprocess on a free port."""

    def __init__(self, config_text: str, env: dict[str, str] | None = None, port: int | None = None) -> None:
        self.port = port or free_port()
        self._dir = tempfile.mkdtemp(prefix="loopgate-test-")
        _GATEWAY_DIRS.append(self._dir)
        self.config_path = Path(self._dir) / "gateway.yaml"
        self.config_path.write_text(config_text.replace("__PORT__", str(self.port)))
        self.log_path = Path(self._dir) / "gateway.log"
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *extra: str) -> Gateway:
        log = self.log_path.open("ab")
        begun = log.tell()  # a restart appends to the log: only this start's lines count
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--config", str(self.config_path), "--port", str(self.port),
             *extra], cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        # With --workers N, the first worker up answers /healthz while the others may still be importing:
        # wait for every worker's start-up line, so that connections spread over all of them.
        workers = int(extra[extra.index("--workers") + 1]) if "--workers" in extra else 1
        deadline = time.monotonic() + 60  # a bound, not a window: a busy machine took 25 s to import LiteLLM
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gateway exited early:\n{self.logs()}")
            try:
                # Every worker's start-up line, and the answer is then this process's: on a machine shared with
                # other sessions another process took the port once (picked free, bound by it first) and answered.
                if (httpx.get(f"{self.url}/healthz", timeout=0.5).status_code == 200
                        and self._log_since(begun).count(b"Application startup complete") >= workers):
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.stop()  # not left running after the test run (a CI run found one still serving, orphaned)
        raise RuntimeError(f"gateway did not start:\n{self.logs()}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def _log_since(self, offset: int) -> bytes:
        with self.log_path.open("rb") as log:
            log.seek(offset)
            return log.read()

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def client(self, key: str = KEY, **kwargs: object) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0, timeout=20, **kwargs)

    def async_client(self, key: str = KEY) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0, timeout=20)

    def post(self, path: str, json: object, key: str | None = KEY, **kwargs: object) -> httpx.Response:
        headers = {"authorization": f"Bearer {key}"} if key else {}
        headers.update(kwargs.pop("headers", {}) or {})  # type: ignore[arg-type]
        return httpx.post(f"{self.url}{path}", json=json, headers=headers, timeout=20, **kwargs)  # type: ignore[arg-type]


TOOLS_YAML = """
tools:
  get_weather:
    description: Current weather for a city
    parameters: {type: object, properties: {city: {type: string}}, required: [city]}
    python: "tests.e2e.sample_tools:get_weather"
  add:
    description: Add two integers
    parameters: {type: object, properties: {a: {type: integer}, b: {type: integer}}, required: [a, b]}
    python: "tests.e2e.sample_tools:add"
  slow:
    description: Takes a while
    parameters: {type: object, properties: {seconds: {type: number}}}
    python: "tests.e2e.sample_tools:slow"
    timeout_s: 0.3
  explode:
    description: Always fails
    python: "tests.e2e.sample_tools:explode"
  sleepy:
    description: Sleeps for ms milliseconds
    parameters: {type: object, properties: {ms: {type: integer}, stamp: {type: boolean}}, required: [ms]}
    python: "tests.e2e.sample_tools:sleepy"
  big:
    description: Returns a large text result
    parameters: {type: object, properties: {kb: {type: integer}, tag: {type: string}}, required: [kb]}
    python: "tests.e2e.sample_tools:big"
  delete_record:
    description: Delete a record
    parameters: {type: object, properties: {id: {type: string}}, required: [id]}
    python: "tests.e2e.sample_tools:delete_record"
    approval: required
"""


#: store.fail_open_ms of the e2e gateways: limits and budgets give up on Redis after 100 ms by default,
#: which a starved event loop on a busy test machine can pass with Redis answering; these tests are
#: about what the store decides (tests/e2e/test_hung_store.py sets the default back, to test failing open)
E2E_FAIL_OPEN_MS = 1000


#: routing of the e2e gateways: quick backoffs, no breaker, a request deadline of 30 s
E2E_ROUTING = ("{backoff_base_s: 0.01, backoff_max_s: 0.05, breaker_failures: 1000, breaker_cooldown_s: 1, "
               "request_timeout_s: 30}")
#: the same with a request deadline of 120 s, for the tests that push megabytes through a gateway: their
#: subject is not the deadline, and a machine busy with other jobs made a 30 s one a 504
E2E_ROUTING_HEAVY = E2E_ROUTING.replace("request_timeout_s: 30", "request_timeout_s: 120")


def gateway_config(fakes: dict[str, FakeUpstream], store_url: str = "memory://", routing: str = "",
                   extra_models: str = "", tool_server: str = "http://127.0.0.1:9", ttl_s: int = 600) -> str:
    providers = "\n".join(
        f"  {name}: {{type: {fake.wire}, base_url: '{fake.url}', api_key: upstream-{name}, timeout_s: 1.5, "
        f"connect_timeout_s: 1}}" for name, fake in fakes.items())
    routing = routing or E2E_ROUTING
    return f"""
server: {{host: 127.0.0.1, port: __PORT__, max_body_bytes: 200000}}
auth:
  keys:
    - {{key: {KEY}, tenant: team-a}}
    - {{key: {OTHER_KEY}, tenant: team-b}}
    - {{key: {HEADLESS_KEY}, tenant: jobs, headless: true}}
store: {{url: "{store_url}", continuation_ttl_s: {ttl_s}, fail_open_ms: {E2E_FAIL_OPEN_MS}}}
routing: {routing}
providers:
{providers}
{TOOLS_YAML}
  delete_remote:
    description: Delete a remote record (needs approval)
    parameters: {{type: object, properties: {{id: {{type: string}}}}, required: [id]}}
    http: {{url: "{tool_server}/delete", timeout_s: 5}}
    approval: required
models:
  plain: {{targets: [{{provider: primary, model: up-model}}]}}
  agent:
    targets: [{{provider: primary, model: up-model}}]
    tools: [get_weather, add, slow, explode, sleepy, delete_record, delete_remote]
    max_tool_iterations: 6
  failover: {{targets: [{{provider: primary, model: m1}}, {{provider: secondary, model: m2}}], retries: 1}}
  agent_failover:
    targets: [{{provider: primary, model: m1}}, {{provider: secondary, model: m2}}]
    tools: [get_weather, add]
{cross_provider_routes()}
  summarizer: {{targets: [{{provider: secondary, model: sum-model}}]}}
  ctx_compress:
    targets: [{{provider: primary, model: ctx-model}}]
    tools: [get_weather, big]
    context_window: 4000
    max_tool_iterations: 25
    context: {{threshold: 0.8, compress_with: summarizer, max_tool_result_tokens: 400}}
  ctx_prune:
    targets: [{{provider: primary, model: ctx-model}}]
    tools: [get_weather, big]
    context_window: 4000
    context: {{threshold: 0.8, max_tool_result_tokens: 500}}
  ctx_small_fallback:
    targets: [{{provider: primary, model: gpt-4.1}}, {{provider: secondary, model: gpt-4}}]
    tools: [big]
{extra_models}
"""


def with_keys(config: str, *keys: str, admin: str | None = None) -> str:
    """``config`` (``gateway_config``'s text) with more caller keys (each a YAML flow mapping) and, given
    ``admin``, an admin key named ``ops``: the keys a module's own tests sign in or decide with."""
    assert config.count("auth:\n  keys:\n") == 1
    admin_keys = f"  admin_keys:\n    - {{key: {admin}, name: ops}}\n" if admin else ""
    listed = "".join(f"    - {key}\n" for key in keys)
    return config.replace("auth:\n  keys:\n", f"auth:\n{admin_keys}  keys:\n{listed}", 1)


PROVIDER_MODELS = {"primary": "gpt-x", "claude": "claude-sonnet-4-5", "gemini": "gemini-3-pro-preview"}


def cross_provider_routes() -> str:
    """``solo_<p>`` (one target) and ``chain_<a>_<b>`` (a then b) with server tools, for every provider pair."""
    lines = []
    for name, model in PROVIDER_MODELS.items():
        lines.append(f"  solo_{name}: {{targets: [{{provider: {name}, model: {model}}}], tools: [get_weather, add]}}")
        for other, other_model in PROVIDER_MODELS.items():
            lines.append(f"  chain_{name}_{other}: {{targets: [{{provider: {name}, model: {model}}}, "
                         f"{{provider: {other}, model: {other_model}}}], tools: [get_weather, add]}}")
    lines.append("  chain_primary_secondary: {targets: [{provider: primary, model: gpt-x}, "
                 "{provider: secondary, model: gpt-y}], tools: [get_weather, add]}")
    # Claude Code asks for 32,000+ output tokens: its routes say their window (the fakes' model names are unknown).
    for name, model in PROVIDER_MODELS.items():
        lines.append(f"  cc_{name}: {{targets: [{{provider: {name}, model: {model}}}], tools: [get_weather, add], "
                     "context_window: 400000}")
    lines.append("  cc_failover: {targets: [{provider: claude, model: claude-sonnet-4-5}, {provider: primary, "
                 "model: gpt-x}], tools: [get_weather, add], context_window: 400000}")
    return "\n".join(lines)


@pytest.fixture(scope="session")
def fakes() -> Iterator[dict[str, FakeUpstream]]:
    started = {
        "primary": FakeUpstream("openai", openai_request_problems).start(),
        "secondary": FakeUpstream("openai", openai_request_problems).start(),
        "claude": FakeUpstream("anthropic", lambda body, model: anthropic_request_problems(body)).start(),
        "gemini": FakeUpstream("gemini", gemini_request_problems).start(),
    }
    yield started
    for fake in started.values():
        fake.stop()


def serving(started: dict[str, FakeUpstream]) -> Iterator[dict[str, FakeUpstream]]:
    """A module's own fakes, stopped after it: ``yield from serving({...})`` in its ``fakes`` fixture."""
    yield started
    for fake in started.values():
        fake.stop()


@pytest.fixture(autouse=True)
def _reset_fakes(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fresh scripts per test, and afterwards: every request any fake received obeyed its provider's rules, and
    carried none of the bytes its module names in ``FORBIDDEN_UPSTREAM`` (``(bytes, what they are)``: a
    canonical-only key, a sealed token)."""
    fakes = request.getfixturevalue("fakes") if "fakes" in request.fixturenames else {}
    forbidden: tuple[bytes, str] | None = getattr(request.module, "FORBIDDEN_UPSTREAM", None)
    for fake in fakes.values():
        fake.reset()
    yield
    for name, fake in fakes.items():
        for recorded in fake.requests:
            assert not recorded.problems, f"{name} received an invalid request: {recorded.problems}"
            if forbidden is not None:
                assert forbidden[0] not in orjson.dumps(recorded.body), f"{name} received {forbidden[1]}"


@pytest.fixture(scope="session")
def tool_server() -> Iterator[ToolServer]:
    server = ToolServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def gateway(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> Iterator[Gateway]:
    gw = Gateway(gateway_config(fakes, tool_server=tool_server.url)).start()
    yield gw
    gw.stop()


#: the routes of ``litellm_gateway``: a chat route with a server tool and an embeddings route, both on ``tail``
LITELLM_ROUTES = """  tail:
    targets: [{provider: tail, model: openai/tail-model}]
    tools: [get_weather]
  tail_embed:
    kind: embeddings
    targets: [{provider: tail, model: openai/emb-small, dimensions: 8}]
"""


@pytest.fixture(scope="session")
def litellm_gateway(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> Iterator[Gateway]:
    """One gateway with a ``type: litellm`` provider (``tail``, LiteLLM's OpenAI route to the secondary fake) for
    every LiteLLM test of a worker: importing LiteLLM costs a gateway about 7 s of CPU at start-up."""
    require_litellm()
    config = gateway_config(fakes, tool_server=tool_server.url, extra_models=LITELLM_ROUTES)
    tail = f"  tail: {{type: litellm, base_url: '{fakes['secondary'].url}', api_key: tail-key}}\n"
    gw = Gateway(config.replace("providers:\n", "providers:\n" + tail, 1)).start()
    yield gw
    gw.stop()


def require_redis(url: str) -> None:
    """Skip when Redis at ``url`` is unreachable; under ``CI=true`` fail instead (a Redis test never skips there)."""
    try:
        redis.Redis.from_url(url, socket_connect_timeout=10, socket_timeout=10).ping()  # generous: a busy machine
    except redis.RedisError as exc:
        if os.environ.get("CI", "").strip().lower() == "true":
            pytest.fail(f"Redis at {url} unreachable under CI=true: {exc}")
        pytest.skip(f"Redis at {url} unreachable: {exc}")


def gateway_on_redis(config: str, redis_url: str) -> Iterator[Gateway]:
    """A gateway of ``config`` on the suite's Redis at ``redis_url`` (flushed first), stopped at the end: the body
    of a module's gateway fixture (``yield from gateway_on_redis(...)``), as ``two_replicas`` is for two."""
    require_redis(redis_url)
    redis.Redis.from_url(redis_url).flushdb()
    gateway = Gateway(config).start()
    try:
        yield gateway
    finally:
        gateway.stop()


def two_replicas(config: str, redis_url: str, flush_after: bool = False) -> Iterator[tuple[Gateway, Gateway]]:
    """Two gateways of ``config`` on the suite's Redis at ``redis_url`` (flushed first), stopped at the end:
    the body of every module's two-replica fixture (``yield from two_replicas(...)``)."""
    require_redis(redis_url)
    redis.Redis.from_url(redis_url).flushdb()
    first, second = Gateway(config).start(), Gateway(config).start()
    try:
        yield first, second
    finally:
        first.stop()
        second.stop()
        if flush_after:
            redis.Redis.from_url(redis_url).flushdb()


@pytest.fixture
def slow_primary(fakes: dict[str, FakeUpstream]) -> Iterator[Callable[..., None]]:
    """Set the primary fake's answer for one test (a delay, a usage, a ``hold`` the test releases)."""
    saved = fakes["primary"].default
    holds: list[threading.Event] = []

    def set_default(**fields: Any) -> None:
        fakes["primary"].default = Reply(text="ok", **fields)
        if fields.get("hold") is not None:
            holds.append(fields["hold"])

    yield set_default
    fakes["primary"].default = saved
    for hold in holds:  # a test that failed half-way leaves no answer held for the next one
        hold.set()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium driven by Playwright, one per module that asks for it (each test opens its own context)."""
    from tests.e2e.browser import chromium  # not above: without Playwright only the browser tests skip
    yield from chromium()
