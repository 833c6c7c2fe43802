"""Redis topologies for the chaos run, as real local ``redis-server`` processes that can be SIGKILLed.

* ``ReplicaPair``: a master and one replica (``--replicaof``); no automatic failover.
* ``RedisCluster``: three masters and three replicas (``redis-cli --cluster create --cluster-replicas 1``);
  a killed master's replica is promoted by the cluster itself (``cluster-node-timeout`` 1 s).
* ``SentinelGroup``: a master, one replica and three sentinels (quorum 2, down after 1 s).

Each topology says how the gateway's ``store`` section names it (``store_yaml``), kills its master
(``kill_master``) and waits until a replica serves as the new master (``wait_failover``).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from tests.ports import free_port

REDIS_SERVER = "redis-server"
REDIS_CLI = "redis-cli"
START_TIMEOUT_S = 20.0
NODE_TIMEOUT_MS = 1000  # cluster-node-timeout and sentinel down-after-milliseconds: a quick failover
SENTINEL_MASTER = "loopgate"


class RedisUnavailable(RuntimeError):
    """The Redis servers could not be started (missing binaries, ports, ...)."""


class RedisNode:
    def __init__(self, port: int, root: Path, *args: str) -> None:
        self.port = port
        self.dir = root / str(port)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.args = args
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisNode:
        log = (self.dir / "redis.log").open("ab")
        self.process = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir), "--save", "",
             "--appendonly", "no", "--protected-mode", "no", "--repl-diskless-sync-delay", "0",
             *self.args], stdout=log, stderr=subprocess.STDOUT)
        self.client().ping()
        return self

    def client(self) -> redis.Redis:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise RedisUnavailable(f"redis-server on {self.port} exited: {self.log()[-2000:]}")
            try:
                conn = redis.Redis(port=self.port, socket_timeout=2, decode_responses=True)
                conn.ping()
                return conn
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise RedisUnavailable(f"redis-server on {self.port} did not answer") from None
                time.sleep(0.05)

    def log(self) -> str:
        path = self.dir / "redis.log"
        return path.read_text(errors="replace") if path.exists() else ""

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        if self.alive:
            assert self.process is not None
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        if self.alive:
            assert self.process is not None
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()


class Topology:
    name = "?"

    def __init__(self) -> None:
        if shutil.which(REDIS_SERVER) is None or shutil.which(REDIS_CLI) is None:
            raise RedisUnavailable("redis-server / redis-cli are not installed")
        self.root = Path(tempfile.mkdtemp(prefix=f"loopgate-chaos-{self.name}-"))
        self.nodes: list[RedisNode] = []
        self.killed: list[int] = []  # ports of the masters killed

    def start(self) -> Topology:
        """Start the servers; on failure, stop what was started and raise ``RedisUnavailable``."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> Topology:
        raise NotImplementedError

    def store_yaml(self, wait_replicas: int | None, claim_lease_margin_s: float | None = None) -> str:
        raise NotImplementedError

    @staticmethod
    def _options(wait_replicas: int | None, claim_lease_margin_s: float | None) -> str:
        """``store.wait_replicas`` and ``store.claim_lease_margin_s`` where given (else the gateway's defaults)."""
        durability = "" if wait_replicas is None else f", wait_replicas: {wait_replicas}"
        return durability + ("" if claim_lease_margin_s is None else f", claim_lease_margin_s: {claim_lease_margin_s}")

    def victim(self) -> RedisNode:
        """The master to kill."""
        raise NotImplementedError

    def kill_master(self, lag_s: float = 0.0) -> int:
        """SIGKILL a master; returns its port.

        ``lag_s`` > 0: its replicas are frozen (SIGSTOP) and cut off (``CLIENT KILL TYPE replica``: what the
        kernel had buffered for them still arrives, nothing after) for that long, then it dies and they
        thaw: writes it took in that window never reached them, so only ``WAIT`` keeps such a write from
        being acknowledged (and then lost when a replica is promoted).
        """
        victim = self.victim()
        replicas = [node for node in self.nodes if node.alive and node is not victim
                    and node.client().info("replication").get("master_port") == victim.port]
        for node in replicas:
            assert node.process is not None
            node.process.send_signal(signal.SIGSTOP)
        try:
            if replicas and lag_s > 0:
                victim.client().execute_command("CLIENT", "KILL", "TYPE", "replica")
            time.sleep(lag_s)
            victim.kill()
        finally:
            for node in replicas:
                assert node.process is not None
                node.process.send_signal(signal.SIGCONT)
        self.killed.append(victim.port)
        return victim.port

    def wait_failover(self, timeout_s: float = 30.0) -> bool:
        """Whether a replica took over the killed master within ``timeout_s``."""
        raise NotImplementedError

    def restore(self, timeout_s: float = 30.0) -> bool:
        """Restart the killed master's process; whether it rejoined as a replica of the promoted one in time."""
        node = next(n for n in self.nodes if n.port == self.killed[-1])
        node.start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                replication = node.client().info("replication")
                if replication.get("role") == "slave" and replication.get("master_link_status") == "up":
                    return True
            except (redis.RedisError, RedisUnavailable):
                pass
            time.sleep(0.1)
        return False

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def _wait_replication(self, replica: RedisNode) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while replica.client().info("replication").get("master_link_status") != "up":
            if time.monotonic() > deadline:
                raise RedisUnavailable(f"replica {replica.port} did not sync with its master")
            time.sleep(0.05)


class ReplicaPair(Topology):
    """A master and a replica: ``WAIT 1`` has a replica to confirm, but nothing promotes it."""

    name = "replica"

    def _start(self) -> ReplicaPair:
        master_port, replica_port = [free_port(with_bus=True) for _ in range(2)]
        self.master = RedisNode(master_port, self.root).start()
        self.replica = RedisNode(replica_port, self.root, "--replicaof", "127.0.0.1", str(master_port)).start()
        self.nodes = [self.master, self.replica]
        self._wait_replication(self.replica)
        return self

    def store_yaml(self, wait_replicas: int | None, claim_lease_margin_s: float | None = None) -> str:
        return f'{{url: "redis://127.0.0.1:{self.master.port}/0", continuation_ttl_s: 600' \
               f'{self._options(wait_replicas, claim_lease_margin_s)}}}'

    def victim(self) -> RedisNode:
        raise RedisUnavailable("a replica pair has no failover: its master is not killed")

    def wait_failover(self, timeout_s: float = 30.0) -> bool:
        return False


class RedisCluster(Topology):
    name = "cluster"

    def _start(self) -> RedisCluster:
        ports = [free_port(with_bus=True) for _ in range(6)]
        self.nodes = [RedisNode(port, self.root, "--cluster-enabled", "yes", "--cluster-config-file",
                                f"nodes-{port}.conf", "--cluster-node-timeout", str(NODE_TIMEOUT_MS)).start()
                      for port in ports]
        create = subprocess.run(
            [REDIS_CLI, "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports), "--cluster-replicas", "1",
             "--cluster-yes"], capture_output=True, text=True, timeout=60)
        if create.returncode != 0:
            raise RedisUnavailable(f"redis-cli --cluster create failed: {create.stdout[-2000:]}{create.stderr}")
        deadline = time.monotonic() + START_TIMEOUT_S
        while not all(self._state_ok(node) for node in self.nodes):
            if time.monotonic() > deadline:
                raise RedisUnavailable("the cluster did not reach cluster_state:ok")
            time.sleep(0.1)
        for node in self.nodes:
            if self._role(node) == "slave":
                self._wait_replication(node)
        return self

    @staticmethod
    def _state_ok(node: RedisNode) -> bool:
        try:
            return "cluster_state:ok" in str(node.client().execute_command("CLUSTER", "INFO"))
        except (redis.RedisError, RedisUnavailable):
            return False

    @staticmethod
    def _role(node: RedisNode) -> str:
        return str(node.client().execute_command("ROLE")[0])

    def masters(self) -> list[RedisNode]:
        return [node for node in self.nodes if node.alive and self._role(node) == "master"]

    def store_yaml(self, wait_replicas: int | None, claim_lease_margin_s: float | None = None) -> str:
        # A node that starts as a replica: never killed, so a gateway restarted after the failover can start.
        seed = next(node for node in self.nodes if self._role(node) == "slave")
        return f'{{url: "redis://127.0.0.1:{seed.port}/0", cluster: true, continuation_ttl_s: 600' \
               f'{self._options(wait_replicas, claim_lease_margin_s)}}}'

    def victim(self) -> RedisNode:
        # The master holding the most keys: the one whose loss tests the most acknowledged writes.
        return max(self.masters(), key=lambda node: int(node.client().dbsize()))

    def wait_failover(self, timeout_s: float = 30.0) -> bool:
        """A replica of the killed master serves its slots and the cluster is ok again."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            survivors = [node for node in self.nodes if node.alive]
            if len(self.masters()) == 3 and all(self._state_ok(node) for node in survivors):
                return True
            time.sleep(0.1)
        return False


class SentinelGroup(Topology):
    name = "sentinel"

    def _start(self) -> SentinelGroup:
        master_port, replica_port, *sentinel_ports = [free_port(with_bus=True) for _ in range(5)]
        self.master = RedisNode(master_port, self.root).start()
        self.replica = RedisNode(replica_port, self.root, "--replicaof", "127.0.0.1", str(master_port)).start()
        self._wait_replication(self.replica)
        self.sentinels: list[RedisNode] = []
        for port in sentinel_ports:
            conf = self.root / f"sentinel-{port}.conf"
            conf.write_text(f"port {port}\nbind 127.0.0.1\nprotected-mode no\n"
                            f"sentinel monitor {SENTINEL_MASTER} 127.0.0.1 {master_port} 2\n"
                            f"sentinel down-after-milliseconds {SENTINEL_MASTER} {NODE_TIMEOUT_MS}\n"
                            f"sentinel failover-timeout {SENTINEL_MASTER} 10000\n"
                            f"sentinel parallel-syncs {SENTINEL_MASTER} 1\n")
            self.sentinels.append(self._start_sentinel(port, conf))
        self.nodes = [self.master, self.replica, *self.sentinels]
        deadline = time.monotonic() + START_TIMEOUT_S
        while not all(self._knows_replica(s) for s in self.sentinels):
            if time.monotonic() > deadline:
                raise RedisUnavailable("the sentinels did not discover the replica and each other")
            time.sleep(0.1)
        return self

    def _start_sentinel(self, port: int, conf: Path) -> RedisNode:
        node = RedisNode(port, self.root)
        log = (node.dir / "redis.log").open("ab")
        node.process = subprocess.Popen([REDIS_SERVER, str(conf), "--sentinel"], stdout=log,
                                        stderr=subprocess.STDOUT)
        node.client().ping()
        return node

    @staticmethod
    def _knows_replica(sentinel: RedisNode) -> bool:
        info = sentinel.client().execute_command("SENTINEL", "MASTER", SENTINEL_MASTER)
        fields = dict(zip(info[::2], info[1::2], strict=False)) if isinstance(info, list) else dict(info)
        return int(fields.get("num-slaves", 0)) >= 1 and int(fields.get("num-other-sentinels", 0)) >= 2

    def master_port(self) -> int:
        _host, port = self.sentinels[0].client().execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME",
                                                                 SENTINEL_MASTER)
        return int(port)

    def store_yaml(self, wait_replicas: int | None, claim_lease_margin_s: float | None = None) -> str:
        nodes = ", ".join(f'"127.0.0.1:{s.port}"' for s in self.sentinels)
        return f'{{url: "redis://127.0.0.1/0", sentinel: {{master: {SENTINEL_MASTER}, nodes: [{nodes}]}}, ' \
               f'continuation_ttl_s: 600{self._options(wait_replicas, claim_lease_margin_s)}}}'

    def victim(self) -> RedisNode:
        port = self.master_port()
        return next(node for node in (self.master, self.replica) if node.port == port)

    def wait_failover(self, timeout_s: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                port = self.master_port()
            except (redis.RedisError, RedisUnavailable):
                port = self.killed[-1]
            if port not in self.killed:
                node = next(n for n in (self.master, self.replica) if n.port == port)
                if node.alive and str(node.client().execute_command("ROLE")[0]) == "master":
                    return True
            time.sleep(0.1)
        return False

    def restore(self, timeout_s: float = 30.0) -> bool:
        """Restart the killed master as a replica of the promoted one, once every sentinel names that one.

        A node without persistence must never come back as a master: it is empty, and a sentinel that
        had not yet taken in the failover would make the promoted node replicate it, wiping every
        acknowledged write (the procedure Redis documents for a master restarted without persistence).
        """
        deadline = time.monotonic() + timeout_s
        promoted = None
        while time.monotonic() < deadline:
            try:
                ports = {int(s.client().execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SENTINEL_MASTER)[1])
                         for s in self.sentinels}
            except (redis.RedisError, RedisUnavailable, TypeError, IndexError):
                ports = set()
            if len(ports) == 1 and not ports & set(self.killed):
                promoted = ports.pop()
                break
            time.sleep(0.1)
        if promoted is None:
            return False
        node = next(n for n in self.nodes if n.port == self.killed[-1])
        args = list(node.args)
        if "--replicaof" in args:
            at = args.index("--replicaof")
            del args[at:at + 3]
        node.args = (*args, "--replicaof", "127.0.0.1", str(promoted))
        return super().restore(max(1.0, deadline - time.monotonic()))


TOPOLOGIES: dict[str, type[Topology]] = {"replica": ReplicaPair, "cluster": RedisCluster, "sentinel": SentinelGroup}
