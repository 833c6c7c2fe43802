"""``loopgate serve`` as an operator runs it: a port in use, SIGTERM at any point, shared outbox work (issue 29).

A gateway that could not bind used to start everything, log ``[Errno 98]`` and never exit, ignoring
SIGTERM, while its webhook worker kept claiming jobs from the outbox the other replicas share: a
Redis call swallowed the worker's cancellation and its loop went round again.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import redis

from tests.e2e.conftest import ROOT, Gateway, require_redis
from tests.e2e.test_webhooks import config, hook, pause

REDIS_URL = os.environ["LOOPGATE_TEST_REDIS_URL"]  # the suite's own server (tests/conftest.py)
DUE = "loopgate:{outbox:deliveries}:due"
EXIT_WITHIN_S = 15.0


@pytest.fixture
def hanging_receiver() -> Iterator[str]:
    """A webhook receiver that accepts connections and never answers (each attempt waits out its timeout)."""
    server = socket.create_server(("127.0.0.1", 0), backlog=64)
    yield f"http://127.0.0.1:{server.getsockname()[1]}/hook"
    server.close()


@pytest.fixture
def outbox_with_jobs(hanging_receiver: str) -> Iterator[str]:
    """The config text of a replica whose shared outbox holds due deliveries to the hanging receiver."""
    require_redis(REDIS_URL)
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    text = config(hook(hanging_receiver, timeout_s=20), store_url=REDIS_URL)
    other = Gateway(text).start()
    try:
        for _ in range(3):
            pause(other)
    finally:
        other.stop()
    _release_claims(client)
    assert client.zcard(DUE) >= 3
    yield text
    client.flushdb()


def _release_claims(client: redis.Redis) -> None:
    """Make every queued delivery due now (the stopped replica's claims included)."""
    for member in client.zrange(DUE, 0, -1):
        client.zadd(DUE, {member: 0})


def _serve(text: str, port: int) -> tuple[subprocess.Popen[bytes], Gateway]:
    gateway = Gateway(text, port=port)
    process = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--config", str(gateway.config_path),
                                "--port", str(port)], cwd=ROOT, env=gateway.env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    return process, gateway


def _wait_exit(process: subprocess.Popen[bytes], within_s: float = EXIT_WITHIN_S) -> tuple[int, str]:
    try:
        _, err = process.communicate(timeout=within_s)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
        raise AssertionError(f"still running {within_s:g}s later:\n{err.decode(errors='replace')[-3000:]}") from None
    return process.returncode, err.decode(errors="replace")


def test_a_port_in_use_is_one_clear_line_and_a_non_zero_exit(outbox_with_jobs: str) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    queued = client.zrange(DUE, 0, -1, withscores=True)
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        process, _ = _serve(outbox_with_jobs, port)
        status, err = _wait_exit(process)
    assert status != 0
    assert err.strip().splitlines()[-1] == f"loopgate: cannot listen on 127.0.0.1:{port}: Address already in use"
    assert client.zrange(DUE, 0, -1, withscores=True) == queued  # it claimed nothing from the shared outbox


def test_sigterm_stops_a_gateway_whose_webhook_worker_is_busy(outbox_with_jobs: str) -> None:
    """Deliveries in flight to a receiver that never answers, the worker polling the outbox: SIGTERM ends it."""
    gateway = Gateway(outbox_with_jobs).start()
    process = gateway.process
    assert process is not None
    deadline = time.monotonic() + 10
    client = redis.Redis.from_url(REDIS_URL)
    while time.monotonic() < deadline and not any(score > time.time() * 1000 for _, score in
                                                  client.zrange(DUE, 0, -1, withscores=True)):
        time.sleep(0.05)  # until the worker claimed the jobs (a claim moves them to their lease's end)
    for _ in range(20):  # SIGTERM while it goes round its loop, many times over
        if process.poll() is not None:
            break
        process.send_signal(signal.SIGTERM)
        time.sleep(0.01)
    try:
        process.wait(EXIT_WITHIN_S)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError(f"SIGTERM was ignored:\n{gateway.logs()[-3000:]}") from None
