"""Real Redis deployments on local ports, for tests: a single server (optionally TLS and ACL), a
Sentinel group and a Cluster, each started from ``redis-server`` and torn down with its processes.

Reusable outside tests/store (the chaos test imports it)::

    with start_cluster(tmp_path, n_masters=3, replicas=1) as cluster:
        url = cluster.url                        # redis+cluster://127.0.0.1:PORT
        cluster.kill(cluster.master_of(b"key"))  # SIGKILL; the replica is promoted

    with start_sentinel_group(tmp_path, replicas=1, sentinels=3) as group:
        group.sentinel_nodes                     # ["127.0.0.1:PORT", ...]
        group.kill_master(); group.wait_promoted()

Everything is synchronous (process management) so it works from sync and async fixtures alike.
A server that cannot start raises ``RedisServerError``; ``start_or_skip`` turns that into a skip
locally and a failure under ``CI=true`` (CI must never pass by silently not testing).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.ports import free_port

REDIS_SERVER = os.environ.get("LOOPGATE_TEST_REDIS_SERVER") or shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_CLI = os.environ.get("LOOPGATE_TEST_REDIS_CLI") or shutil.which("redis-cli") or "/usr/bin/redis-cli"
IN_CI = os.environ.get("CI", "").strip().lower() == "true"
HOST = "127.0.0.1"
START_TIMEOUT_S = 10.0
#: ``RedisStore`` deadlines for tests about what the store decides, not about its deadlines: the defaults
#: (1 s for an operation, 0.1 s before limits and budgets fail open) can pass on a saturated machine with
#: Redis answering (seen: "no answer within 0.1s" in a lease test under load).
PATIENT: dict[str, float] = {"op_timeout": 10.0, "fail_open_timeout": 5.0}


class RedisServerError(RuntimeError):
    """A test server could not be started (binary missing, port taken, TLS not compiled in, ...)."""


def start_or_skip(factory: Any, *args: Any, **kwargs: Any) -> Any:
    """``factory(*args, **kwargs)``, skipping the test locally (failing under CI) when a server cannot start."""
    try:
        return factory(*args, **kwargs)
    except RedisServerError as exc:
        if IN_CI:
            pytest.fail(f"{exc}; CI=true, so Redis deployment tests must run, not skip")
        pytest.skip(str(exc))


# -- TLS -------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TlsCerts:
    """A throwaway CA and a server and a client certificate it signed (the server one for 127.0.0.1/localhost)."""

    ca_file: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RedisServerError(f"openssl {args[0]} failed: {done.stderr.strip()[:300]}")


def make_tls_certs(directory: Path | str) -> TlsCerts:
    """Generate a CA, a server certificate (SAN 127.0.0.1, localhost) and a client certificate in ``directory``."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    if shutil.which("openssl") is None:
        raise RedisServerError("openssl not found: cannot generate test certificates")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=loopgate-test-ca",
             "-keyout", "ca.key", "-out", "ca.crt", cwd=d)
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, subject in (("server", "/CN=localhost"), ("client", "/CN=loopgate-client")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", f"{name}.key",
                 "-out", f"{name}.csr", cwd=d)
        extra = ["-extfile", "server.ext"] if name == "server" else []
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "2", "-out", f"{name}.crt", *extra, cwd=d)
    return TlsCerts(ca_file=str(d / "ca.crt"), server_cert=str(d / "server.crt"), server_key=str(d / "server.key"),
                    client_cert=str(d / "client.crt"), client_key=str(d / "client.key"))


# -- one server ------------------------------------------------------------------------------------

@dataclass(slots=True)
class RedisProcess:
    port: int
    proc: subprocess.Popen[bytes]
    workdir: Path
    tls: TlsCerts | None = None
    password: str | None = None
    sentinel: bool = False

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def client(self, **kwargs: Any) -> redis.Redis:
        """A sync admin client (as ``default`` user with the admin password, TLS with the client cert)."""
        options: dict[str, Any] = {"host": HOST, "port": self.port, "socket_timeout": 3, "socket_connect_timeout": 2,
                                   "password": self.password}
        if self.tls is not None:
            options.update(ssl=True, ssl_ca_certs=self.tls.ca_file, ssl_certfile=self.tls.client_cert,
                           ssl_keyfile=self.tls.client_key)
        options.update(kwargs)
        return redis.Redis(**options)

    def kill(self) -> None:
        """SIGKILL: a crash, no shutdown save."""
        if self.alive:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def log_tail(self) -> str:
        try:
            return (self.workdir / "redis.log").read_text(errors="replace")[-1500:]
        except OSError:
            return ""


def _wait_ready(server: RedisProcess, timeout_s: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        if not server.alive:
            raise RedisServerError(f"redis-server on port {server.port} exited: {server.log_tail()}")
        try:
            with server.client() as c:
                if c.ping():
                    return
        except redis.RedisError as exc:
            last = exc
        time.sleep(0.05)
    server.kill()
    raise RedisServerError(f"redis-server on port {server.port} not ready in {timeout_s}s ({last}): "
                           f"{server.log_tail()}")


def spawn_redis(workdir: Path | str, *, port: int | None = None, tls: TlsCerts | None = None,
                password: str | None = None, conf_lines: tuple[str, ...] = (), sentinel: bool = False,
                wait: bool = True) -> RedisProcess:
    """Start one ``redis-server`` (no persistence, its own directory). Callers must ``kill()`` it.

    With ``tls`` the server listens only on a TLS port and requires client certificates; with
    ``password`` the ``default`` user needs it. ``conf_lines`` are written to its config file.
    """
    if not os.path.exists(REDIS_SERVER):
        raise RedisServerError(f"redis-server not found at {REDIS_SERVER}")
    if port is None:
        # A random free port can be taken by another process before the server binds it: try a few.
        for attempt in range(3):
            try:
                return spawn_redis(workdir, port=free_port(with_bus=True), tls=tls, password=password,
                                   conf_lines=conf_lines, sentinel=sentinel, wait=wait)
            except RedisServerError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")
    d = Path(workdir) / f"{'sentinel' if sentinel else 'redis'}-{port}"
    d.mkdir(parents=True, exist_ok=True)
    lines = [f"bind {HOST}", f"dir {d}", f"logfile {d / 'redis.log'}", "save \"\"", "appendonly no",
             "protected-mode no"]
    if tls is None:
        lines.append(f"port {port}")
    else:
        lines += ["port 0", f"tls-port {port}", f"tls-cert-file {tls.server_cert}", f"tls-key-file {tls.server_key}",
                  f"tls-ca-cert-file {tls.ca_file}", "tls-auth-clients yes", "tls-replication yes"]
        if not sentinel:
            lines.append("tls-cluster yes")
    if password is not None:
        lines += [f"requirepass {password}", f"masterauth {password}"] if not sentinel else [
            f"requirepass {password}"]
    lines += list(conf_lines)
    conf = d / ("sentinel.conf" if sentinel else "redis.conf")
    conf.write_text("\n".join(lines) + "\n")
    args = [REDIS_SERVER, str(conf)] + (["--sentinel"] if sentinel else [])
    try:
        proc = subprocess.Popen(args, cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError as exc:
        raise RedisServerError(f"cannot run {REDIS_SERVER}: {exc}") from exc
    server = RedisProcess(port=port, proc=proc, workdir=d, tls=tls, password=password, sentinel=sentinel)
    if wait:
        _wait_ready(server)
    return server


@contextmanager
def start_redis(workdir: Path | str, **kwargs: Any) -> Iterator[RedisProcess]:
    """``spawn_redis`` as a context manager: the process is killed on exit."""
    server = spawn_redis(workdir, **kwargs)
    try:
        yield server
    finally:
        server.kill()


def wait_until(check: Any, timeout_s: float, what: str, interval_s: float = 0.1) -> Any:
    """Poll ``check()`` until it returns a truthy value (errors count as "not yet"); raise after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except (redis.RedisError, OSError) as exc:
            last = exc
        time.sleep(interval_s)
    raise RedisServerError(f"timed out after {timeout_s}s waiting for {what} (last error: {last})")


# -- Cluster ---------------------------------------------------------------------------------------

@dataclass(slots=True)
class ClusterHandle:
    nodes: list[RedisProcess]
    tls: TlsCerts | None = None
    password: str | None = None

    @property
    def url(self) -> str:
        """A ``redis+cluster://`` (or ``rediss+cluster://``) URL of the first live node."""
        node = next(n for n in self.nodes if n.alive)
        scheme = "rediss+cluster" if self.tls else "redis+cluster"
        auth = f":{self.password}@" if self.password else ""
        return f"{scheme}://{auth}{node.address}"

    def node_by_port(self, port: int) -> RedisProcess:
        return next(n for n in self.nodes if n.port == port)

    def masters(self) -> list[RedisProcess]:
        """The live nodes that currently serve slots as masters."""
        out: list[RedisProcess] = []
        for node in self.nodes:
            if not node.alive:
                continue
            with node.client() as c:
                if c.info("replication").get("role") == "master" and _serves_slots(c):
                    out.append(node)
        return out

    def master_of(self, key: bytes | str) -> RedisProcess:
        """The node that owns ``key``'s slot right now."""
        raw = key.encode() if isinstance(key, str) else key
        node = next(n for n in self.nodes if n.alive)
        with node.client() as c:
            slot = int(c.execute_command("CLUSTER", "KEYSLOT", raw))
            for start, end, master, *_ in c.execute_command("CLUSTER", "SLOTS"):
                if int(start) <= slot <= int(end):
                    return self.node_by_port(int(master[1]))
        raise RedisServerError(f"no node serves slot {slot}")

    def kill(self, node: RedisProcess) -> None:
        node.kill()

    def wait_owner(self, key: bytes | str, timeout_s: float = 20.0) -> RedisProcess:
        """Until ``key``'s slot is served by a live master (after a kill: its promoted replica) and the state is ok."""
        def owner() -> RedisProcess | None:
            node = self.master_of(key)
            if not node.alive:
                return None
            with node.client() as c:
                return node if c.info("replication").get("role") == "master" else None

        found = wait_until(owner, timeout_s, f"a live master for {key!r}")
        self.wait_healthy(timeout_s)
        return found

    def wait_healthy(self, timeout_s: float = 20.0) -> None:
        """Until every live node reports ``cluster_state:ok`` and every slot has a live master."""
        def ok() -> bool:
            for node in self.nodes:
                if node.alive:
                    with node.client() as c:
                        if c.execute_command("CLUSTER", "INFO").decode().find("cluster_state:ok") < 0:
                            return False
            return True

        wait_until(ok, timeout_s, "cluster_state:ok on every node")

    def stop(self) -> None:
        for node in self.nodes:
            node.kill()


def _serves_slots(c: redis.Redis) -> bool:
    myself = next(line for line in c.execute_command("CLUSTER", "NODES").decode().splitlines() if "myself" in line)
    return len(myself.split()) > 8


@contextmanager
def start_cluster(workdir: Path | str, n_masters: int = 3, replicas: int = 0, *, tls: TlsCerts | None = None,
                  password: str | None = None, node_timeout_ms: int = 1500) -> Iterator[ClusterHandle]:
    """A Redis Cluster of ``n_masters`` masters with ``replicas`` replicas each, slots assigned, state ok.

    ``node_timeout_ms`` is short so a killed master's replica is promoted within a few seconds.
    """
    conf = ("cluster-enabled yes", f"cluster-node-timeout {node_timeout_ms}", "cluster-config-file nodes.conf",
            "cluster-replica-validity-factor 0", "cluster-require-full-coverage yes")
    if not os.path.exists(REDIS_CLI):
        raise RedisServerError(f"redis-cli not found at {REDIS_CLI} (needed to create a cluster)")
    handle = ClusterHandle(nodes=[], tls=tls, password=password)
    try:
        for _ in range(n_masters * (1 + replicas)):
            handle.nodes.append(spawn_redis(workdir, tls=tls, password=password, conf_lines=conf))
        cmd = [REDIS_CLI, "--cluster", "create", *(n.address for n in handle.nodes), "--cluster-replicas",
               str(replicas), "--cluster-yes"]
        if password:
            cmd += ["-a", password, "--no-auth-warning"]
        if tls:
            cmd += ["--tls", "--cacert", tls.ca_file, "--cert", tls.client_cert, "--key", tls.client_key]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RedisServerError(f"redis-cli --cluster create failed: {(done.stdout + done.stderr)[-800:]}")
        handle.wait_healthy()
        if replicas:
            wait_until(lambda: sum(_replica_count(n) for n in handle.nodes if n.alive) >= n_masters * replicas,
                       20.0, "every replica linked to its master")
        yield handle
    finally:
        handle.stop()


def _replica_count(node: RedisProcess) -> int:
    with node.client() as c:
        info = c.info("replication")
        return 1 if info.get("role") == "slave" and info.get("master_link_status") == "up" else 0


# -- Sentinel --------------------------------------------------------------------------------------

@dataclass(slots=True)
class SentinelGroup:
    master_name: str
    servers: list[RedisProcess]
    sentinels: list[RedisProcess]
    tls: TlsCerts | None = None
    password: str | None = None
    killed: list[RedisProcess] = field(default_factory=list)

    @property
    def sentinel_nodes(self) -> list[str]:
        return [s.address for s in self.sentinels]

    def current_master(self) -> RedisProcess:
        """The server the (first live) sentinel names as master."""
        sentinel = next(s for s in self.sentinels if s.alive)
        with sentinel.client() as c:
            _host, port = c.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name)
        return next(s for s in self.servers if s.port == int(port))

    def kill_master(self) -> RedisProcess:
        master = self.current_master()
        master.kill()
        self.killed.append(master)
        return master

    def wait_promoted(self, timeout_s: float = 20.0) -> RedisProcess:
        """Until the sentinels name a live master that says it is one."""
        def promoted() -> RedisProcess | None:
            master = self.current_master()
            if not master.alive:
                return None
            with master.client() as c:
                return master if c.info("replication").get("role") == "master" else None

        return wait_until(promoted, timeout_s, f"a new master for {self.master_name}")

    def stop(self) -> None:
        for proc in [*self.sentinels, *self.servers]:
            proc.kill()


@contextmanager
def start_sentinel_group(workdir: Path | str, *, replicas: int = 1, sentinels: int = 1, quorum: int | None = None,
                         master_name: str = "loopgate", tls: TlsCerts | None = None,
                         password: str | None = None, sentinel_password: str | None = None,
                         down_after_ms: int = 1000) -> Iterator[SentinelGroup]:
    """A master, ``replicas`` replicas and ``sentinels`` sentinels watching them (fast failover settings).

    ``password`` protects the data nodes (the sentinels are told it with ``auth-pass``),
    ``sentinel_password`` the sentinels themselves; with ``tls`` every link, sentinels included, is TLS.
    """
    group = SentinelGroup(master_name=master_name, servers=[], sentinels=[], tls=tls, password=password)
    try:
        master = spawn_redis(workdir, tls=tls, password=password)
        group.servers.append(master)
        for _ in range(replicas):
            group.servers.append(spawn_redis(workdir, tls=tls, password=password,
                                             conf_lines=(f"replicaof {HOST} {master.port}",)))
        wait_until(lambda: all(_replica_count(r) for r in group.servers[1:]), 15.0, "replicas linked")
        quorum = quorum or max(1, sentinels // 2 + 1)
        lines = [f"sentinel monitor {master_name} {HOST} {master.port} {quorum}",
                 f"sentinel down-after-milliseconds {master_name} {down_after_ms}",
                 f"sentinel failover-timeout {master_name} 3000",
                 f"sentinel parallel-syncs {master_name} 1",
                 "sentinel resolve-hostnames yes"]
        if password:
            lines.append(f"sentinel auth-pass {master_name} {password}")
        if sentinel_password:
            lines.append(f"sentinel sentinel-pass {sentinel_password}")
        for _ in range(sentinels):
            group.sentinels.append(spawn_redis(workdir, tls=tls, sentinel=True, password=sentinel_password,
                                               conf_lines=tuple(lines)))

        def known() -> bool:
            for s in group.sentinels:
                with s.client() as c:
                    fields = c.sentinel_master(master_name)  # parsed by redis-py into a dict
                    if int(fields.get("num-slaves", 0)) < replicas:
                        return False
                    if sentinels > 1 and int(fields.get("num-other-sentinels", 0)) < sentinels - 1:
                        return False
            return True

        wait_until(known, 20.0, "sentinels to discover the replicas and each other")
        yield group
    finally:
        group.stop()


__all__ = [
    "PATIENT", "ClusterHandle", "RedisProcess", "RedisServerError", "SentinelGroup", "TlsCerts",
    "make_tls_certs", "spawn_redis", "start_cluster", "start_or_skip", "start_redis", "start_sentinel_group",
    "wait_until",
]
