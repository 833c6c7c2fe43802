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
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import time
from urllib.parse import urlsplit, urlunsplit

os.environ.setdefault("LOOPGATE_TRACE_EXPORTER_NICE", "10")

#: how long a freshly started server may take to answer PING
REDIS_START_S = 20.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _start_test_redis() -> str:
    """A private redis-server for this run (its URL), or an address nothing answers at when there is none."""
    binary = shutil.which("redis-server")
    if binary is None:
        return "redis://127.0.0.1:1/15"
    port = _free_port()
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
    return f"redis://127.0.0.1:{port}/15"


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


# A URL inherited from another test process (the pytest-xdist controller, whose environment its workers
# copy) is not this process's: each worker starts its own server, so workers never flush each other's data.
_inherited = os.environ.get(_OWNER) not in (None, str(os.getpid()))
if not os.environ.get("LOOPGATE_TEST_REDIS_URL") or _inherited:
    os.environ["LOOPGATE_TEST_REDIS_URL"] = _start_test_redis()
    os.environ[_OWNER] = str(os.getpid())
elif os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["LOOPGATE_TEST_REDIS_URL"] = _per_worker_db(os.environ["LOOPGATE_TEST_REDIS_URL"],
                                                           os.environ["PYTEST_XDIST_WORKER"])
