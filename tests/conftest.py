"""Settings every test process shares.

Trace exporters started by the tests run at ``nice`` +10, not in the idle scheduling class that is
their default: on a CI machine whose CPUs other jobs keep busy, an idle-class exporter may not run
for many seconds, and these tests wait for its spans. The default class itself is checked by
``tests/e2e/test_trace_export.py::test_the_exporter_runs_below_the_gateways_cpu_priority``.

The Redis the tests use is one this test run starts itself, on a free port, with nothing kept on
disk, and stops at exit — never a developer's own (nothing touches the default port, 6379). Under
pytest-xdist each worker process starts its own. ``LOOPGATE_TEST_REDIS_URL`` names another
(db 15 of it is flushed between tests; under xdist, worker N uses db 15 - N). Without
``redis-server`` the Redis tests skip, or fail under ``CI=true``, as they do for any Redis they
cannot reach.
The pytest-xdist controller runs no test, so it starts no server: only the processes that run tests do.

Long tests (``@pytest.mark.long(seconds=N)``, N as measured alone) are put at the head of the xdist
workers' first shares of the run (``--dist worksteal`` hands each worker one contiguous share and
later steals only from the tails), spread over the workers longest first, so that none starts late
and ends the run alone while the other workers are idle.

Every HTTP client the tests make shares one default TLS context: ``httpx.get`` and ``httpx.post``
each build a client, and so does every ``openai`` and ``anthropic`` SDK client (on ``httpx2``);
building its context loads certifi's CA bundle, about 30 ms of CPU, and the suite built thousands of
them (a gateway's start-up poll alone built ten), nearly all to talk plain HTTP on 127.0.0.1. A
context asked for with anything but the defaults is built as before.
"""

from __future__ import annotations

import atexit
import compileall
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from urllib.parse import urlsplit, urlunsplit

import httpx._transports.default as httpx_transports
import httpx2._transports.default as httpx2_transports
import pytest

from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("LOOPGATE_TRACE_EXPORTER_NICE", "10")


def _share_default_tls_context(transports: ModuleType) -> None:
    build = transports.create_ssl_context  # fails loudly if an upgrade moves it
    shared: list[ssl.SSLContext] = []

    def create_ssl_context(verify: ssl.SSLContext | str | bool = True, cert: object = None,
                           trust_env: bool = True) -> ssl.SSLContext:
        if verify is not True or cert is not None or not trust_env:
            return build(verify=verify, cert=cert, trust_env=trust_env)  # type: ignore[no-any-return]
        if not shared:
            shared.append(build())
        return shared[0]

    transports.create_ssl_context = create_ssl_context  # type: ignore[attr-defined]


# httpx for the tests' own calls; httpx2 under the openai and anthropic SDKs
_share_default_tls_context(httpx_transports)
_share_default_tls_context(httpx2_transports)

#: how long a freshly started server may take to answer PING
REDIS_START_S = 20.0


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _start_test_redis(port: int) -> None:
    """Start the private redis-server of this process on ``port`` (stopped at exit) and wait until it answers."""
    binary = shutil.which("redis-server")
    assert binary is not None
    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                "no", "--protected-mode", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop() -> None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()

    atexit.register(stop)
    deadline = time.monotonic() + REDIS_START_S
    while not _answers(port) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)


#: the pid of the test process that started the server named by LOOPGATE_TEST_REDIS_URL
_OWNER = "LOOPGATE_TEST_REDIS_OWNER"


def _per_worker_db(url: str, worker: str) -> str:
    """A given server shared by pytest-xdist workers: each worker gets its own db (15, 14, ...), as tests flush it."""
    index = int(worker.removeprefix("gw") or 0)
    if index > 15:
        raise RuntimeError("LOOPGATE_TEST_REDIS_URL has 16 databases, not enough for this many xdist workers: "
                           "leave it unset (each worker then starts its own server)")
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{15 - index}"))


#: the port of this process's own server, named in LOOPGATE_TEST_REDIS_URL but not started yet
_to_start: list[int] = []


def use_test_redis(start: bool = True) -> None:
    """Point ``LOOPGATE_TEST_REDIS_URL`` at this process's own server, or at its db of a named one.

    A URL inherited from another test process (the xdist controller, whose environment its workers
    copy) is not this process's: it gets a server of its own, so no two test processes ever flush each
    other's data. The URL is set at once (test modules read it at import); the server starts with
    ``start`` (``pytest_configure`` below, in every process that runs tests, before any test runs).
    """
    inherited = os.environ.get(_OWNER) not in (None, str(os.getpid()))
    if not os.environ.get("LOOPGATE_TEST_REDIS_URL") or inherited:
        if shutil.which("redis-server") is None:
            os.environ["LOOPGATE_TEST_REDIS_URL"] = "redis://127.0.0.1:1/15"  # nothing answers there
        else:
            _to_start.append(free_port())
            os.environ["LOOPGATE_TEST_REDIS_URL"] = f"redis://127.0.0.1:{_to_start[-1]}/15"
        os.environ[_OWNER] = str(os.getpid())
    elif os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get(_OWNER) is None:  # named from outside
        os.environ["LOOPGATE_TEST_REDIS_URL"] = _per_worker_db(os.environ["LOOPGATE_TEST_REDIS_URL"],
                                                               os.environ["PYTEST_XDIST_WORKER"])
    while start and _to_start:
        _start_test_redis(_to_start.pop())


use_test_redis(start=False)


def _xdist_controller(config: pytest.Config) -> bool:
    """This process only hands tests to xdist workers (``-n N`` with N > 0; ``-n auto`` too) and runs none."""
    return not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", None))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if not _xdist_controller(config):
        use_test_redis(start=True)
        warm_bytecode_share(config)
        cache_children_bytecode()


def cache_children_bytecode() -> None:
    """Let the Python processes a test starts keep their compiled modules, in a folder of the suite's.

    Where ``PYTHONDONTWRITEBYTECODE`` is set nothing writes the project's ``__pycache__``, and each of
    the ~200 gateways the suite starts compiled all of ``gateway/`` again: 0.9 s of CPU a start, 0.5 s
    with its bytecode kept. The tree stays as clean as the variable asks; the test processes
    themselves (started before this runs) keep to it: a folder of their own would be one for all
    their imports, so a cold one meant compiling every installed package they import, not only
    ``gateway/`` and ``tests/`` (CI, in a clone of its own, unsets the variable instead: .ci/run).
    """
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) and not os.environ.get("PYTHONPYCACHEPREFIX"):
        os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(),
                                                         f"loopgate-tests-bytecode-{os.getuid()}")


def warm_bytecode_share(config: pytest.Config) -> None:
    """Compile this xdist worker's share of the project's modules before it collects them.

    Every worker imports every test module, so on a cold cache each one assertion-rewrote and compiled
    all of them and ``gateway/`` (the same work N times over, in parallel: a third of a worker's
    collection CPU). Here worker K of N compiles every Nth file from the Kth, as pytest's import hook
    would (test modules and conftests rewritten), then collects: the others are cached by then,
    compiled by the other workers. Only where bytecode is written (not under
    ``PYTHONDONTWRITEBYTECODE``). It saves time only: a file compiled twice in a race, or a pytest
    whose private rewriting API moved (the warm-up is then skipped), costs time, not correctness.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(getattr(config, "workerinput", {}).get("workercount", 0))
    if sys.dont_write_bytecode or not worker.startswith("gw") or count < 2:
        return
    files = sorted(path for folder in ("gateway", "tests") for path in (ROOT / folder).rglob("*.py")
                   if "node_modules" not in path.parts)
    share = files[int(worker.removeprefix("gw")) % count::count]
    rewrite_asserts = config.getoption("assertmode", "rewrite") == "rewrite"
    try:
        for path in share:
            if rewrite_asserts and path.is_relative_to(ROOT / "tests") and (
                    path.name.startswith("test_") or path.name == "conftest.py"):
                _rewrite_into_cache(config, path)
            else:
                compileall.compile_file(path, quiet=2)  # skips a file whose bytecode is up to date
    except (AttributeError, ImportError, TypeError, OSError, SyntaxError):
        return  # pytest's internals moved, a read-only cache, a broken file: collection reports its own errors


def _rewrite_into_cache(config: pytest.Config, path: Path) -> None:
    """What pytest's assertion-rewriting import hook writes for a test module it imports."""
    from _pytest.assertion import rewrite  # private: warm_bytecode_share skips the warm-up if it moves

    state = config.stash[rewrite.assertstate_key]
    cache_dir = rewrite.get_cache_dir(path)
    pyc = cache_dir / (path.name[:-3] + rewrite.PYC_TAIL)
    if rewrite._read_pyc(path, pyc, state.trace) is None:
        source_key, code = rewrite._rewrite_test(path, config)
        if rewrite.try_makedirs(cache_dir):
            rewrite._write_pyc(state, code, source_key, pyc)


def _share_sizes(count: int, workers: int) -> list[int]:
    """The contiguous shares ``--dist worksteal`` first hands its workers (xdist's WorkStealingScheduling)."""
    sizes, remaining = [], count
    for index in range(workers):
        sizes.append(remaining // (workers - index))
        remaining -= sizes[-1]
    return sizes


def _long_units(items: list[pytest.Item]) -> list[tuple[float, list[pytest.Item]]]:
    """The long tests with their seconds, longest first; a module marked long as a whole is one unit (its
    tests share module fixtures), a test marked long on its own is one unit."""
    units: dict[str, list[pytest.Item]] = {}
    seconds: dict[str, float] = {}
    for item in items:
        marker = item.get_closest_marker("long")
        if marker is None:
            continue
        module_marks = getattr(getattr(item, "module", None), "pytestmark", [])
        whole_module = any(mark.name == "long" for mark in (module_marks if isinstance(module_marks, list)
                                                               else [module_marks]))
        key = item.nodeid.split("::", 1)[0] if whole_module else item.nodeid
        units.setdefault(key, []).append(item)
        seconds[key] = float(marker.kwargs.get("seconds", marker.args[0] if marker.args else 10))
    return sorted(((seconds[key], unit) for key, unit in units.items()), key=lambda pair: -pair[0])


@pytest.hookimpl(trylast=True)  # after the deselection (-m, -k) and pytest's own fixture-scope ordering
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the long tests at the heads of the workers' first shares, longest first, each unit to the share
    with the least long work so far.

    Every worker computes the same order (xdist requires identical collections) from the worker count
    it is told. The other tests keep their order, so the tests of a module still share its fixtures.
    """
    units = _long_units(items)
    if not units:
        return
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    heads: list[list[pytest.Item]] = [[] for _ in range(workers)]
    loads = [0.0] * workers
    for seconds, unit in units:
        share = loads.index(min(loads))
        heads[share] += unit
        loads[share] += seconds
    moved = {id(item) for _, unit in units for item in unit}
    rest = iter([item for item in items if id(item) not in moved])
    ordered: list[pytest.Item] = []
    for head, size in zip(heads, _share_sizes(len(items), workers), strict=True):
        ordered += head
        ordered += [item for _, item in zip(range(max(0, size - len(head))), rest, strict=False)]
    ordered += list(rest)
    items[:] = ordered
