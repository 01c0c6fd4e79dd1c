"""Local Apache Kafka: one or three combined broker+controller KRaft nodes on 127.0.0.1.

Layout under ``<home>`` (``<data_dir>/kafka/brokers-<n>`` for ``flywheel up``):
``node-<id>/server.properties``, ``node-<id>/data`` (log dirs, formatted once),
``node-<id>/kafka.pid``, ``node-<id>/server.log`` and ``cluster.id``. Node ``i`` (0-based)
listens on ``port + 2*i`` (clients) and ``controller_port + 2*i`` (KRaft quorum), so the
defaults 19092/19093 give 19092..19097 for three nodes.

Durability: one node runs replication 1 (internal topics too, so transactions and consumer
offsets work); three nodes run replication 3 with min.insync.replicas 2, so an acks=all write
survives losing any one node. Stop sends SIGTERM (a controlled shutdown flushes the logs) and
falls back to SIGKILL after a grace period.
"""

from __future__ import annotations

import base64
import logging
import os
import random
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from infra.runtime.errors import UserError
from infra.runtime.topics import MAX_MESSAGE_BYTES
from infra.kafka.tls import MECHANISM, Security
from infra.kafka.jars import java_executable, jars_ready

log = logging.getLogger("flywheel.kafka")

HEAP_OPTS = ["-Xms128m", "-Xmx512m"]  # the host is shared with browsers, chDB and torch
START_TIMEOUT_S = 120.0
STOP_GRACE_S = 30.0

LOG4J = """\
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
"""


def new_cluster_id() -> str:
    """A Kafka ``Uuid`` string (url-safe base64, 22 chars), never starting with '-' like Kafka's own."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port_block(count: int) -> int:
    """A base port with ``count`` consecutive free ports after it (for test clusters).

    Drawn below the kernel's ephemeral range: an outgoing connection (the nodes dial each
    other while starting) must not take a port a node is about to listen on.
    """
    high = _ephemeral_low() - count
    for _ in range(200):
        base = random.randrange(20000, max(20001, high))
        if all(port_free(base + k) for k in range(count)):
            return base
    raise RuntimeError(f"no block of {count} free ports on 127.0.0.1")


def pid_alive(pid: int) -> bool:
    """True when ``pid`` runs a Kafka broker (guards against a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    if b"kafka.Kafka" not in cmdline:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@dataclass(frozen=True)
class Node:
    node_id: int
    port: int
    controller_port: int
    dir: Path

    @property
    def pid_file(self) -> Path:
        return self.dir / "kafka.pid"

    @property
    def log_file(self) -> Path:
        return self.dir / "server.log"

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if pid_alive(pid) else None


def listener_properties(node: Node, security: Security | None) -> dict[str, object]:
    """Client listener: PLAINTEXT, or SASL_SSL with SCRAM-SHA-512 (brokers talk to each other
    over it as their own SCRAM user and verify each other against the CA). The KRaft controller
    listener stays PLAINTEXT on 127.0.0.1."""
    if security is None:
        return {
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        }
    jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="{security.broker_user}" password="{security.broker_password}";')
    return {
        "listeners": f"SASL_SSL://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
        "advertised.listeners": f"SASL_SSL://127.0.0.1:{node.port}",
        "inter.broker.listener.name": "SASL_SSL",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config": jaas,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": security.keystore,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": security.ca,
        "ssl.client.auth": "none",
    }


def server_properties(node: Node, nodes: list[Node], security: Security | None = None) -> str:
    n = len(nodes)
    voters = ",".join(f"{x.node_id}@127.0.0.1:{x.controller_port}" for x in nodes)
    repl = min(n, 3)
    min_isr = 2 if n >= 3 else 1
    props = {
        "process.roles": "broker,controller",
        "node.id": node.node_id,
        "controller.quorum.voters": voters,
        **listener_properties(node, security),
        "controller.listener.names": "CONTROLLER",
        "log.dirs": node.dir / "data",
        # Topics are declared in the catalog and created by `flywheel topics`: a typo must fail,
        # not silently create a one-partition topic.
        "auto.create.topics.enable": "false",
        "num.partitions": 1,
        "default.replication.factor": repl,
        "min.insync.replicas": min_isr,
        "unclean.leader.election.enable": "false",
        "offsets.topic.replication.factor": repl,
        "offsets.topic.num.partitions": 8,
        "transaction.state.log.replication.factor": repl,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": 8,
        "group.initial.rebalance.delay.ms": 0,  # tests and demos start consumers right away
        "num.network.threads": 2,
        "num.io.threads": 4,
        "message.max.bytes": MAX_MESSAGE_BYTES + 1024,  # a batch's overhead above the largest record
        "replica.fetch.max.bytes": MAX_MESSAGE_BYTES + 1024,
        "log.retention.check.interval.ms": 60000,
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


@dataclass(frozen=True)
class LocalCluster:
    """A local KRaft cluster of ``brokers`` combined nodes whose state lives under ``home``."""

    home: Path
    libs: Path
    brokers: int = 1
    port: int = 19092
    controller_port: int = 19093
    security: Security | None = None  # SASL_SSL with SCRAM (infra.kafka.tls); None: PLAINTEXT

    def client_config(self) -> dict[str, str]:
        """librdkafka settings to reach this cluster (its security included)."""
        cfg = {"bootstrap.servers": self.bootstrap}
        if self.security is not None:
            cfg.update({"security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM,
                        "sasl.username": self.security.user, "sasl.password": self.security.password,
                        "ssl.ca.location": str(self.security.ca)})
        return cfg

    @property
    def nodes(self) -> list[Node]:
        return [
            Node(i + 1, self.port + 2 * i, self.controller_port + 2 * i, self.home / f"node-{i + 1}")
            for i in range(self.brokers)
        ]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def running(self) -> dict[int, int]:
        """node id -> pid of the nodes whose process is alive."""
        return {n.node_id: pid for n in self.nodes if (pid := n.pid()) is not None}

    # -- start ------------------------------------------------------------------------------

    def _check_ports(self, todo: list[Node]) -> None:
        ports = [p for n in self.nodes for p in (n.port, n.controller_port)]
        if len(set(ports)) != len(ports):
            raise UserError(f"Kafka ports overlap: {sorted(ports)}; choose kafka_port and kafka_controller_port further apart")
        busy = [p for n in todo for p in (n.port, n.controller_port) if not port_free(p)]
        if busy:
            raise UserError(
                f"port {busy[0]} on 127.0.0.1 is already in use by another program; "
                "stop it or pick other ports with --kafka-port/--kafka-controller-port "
                "(FLYWHEEL_KAFKA_PORT, FLYWHEEL_KAFKA_CONTROLLER_PORT)"
            )

    def _cluster_id(self) -> str:
        path = self.home / "cluster.id"
        if not path.exists():
            path.write_text(new_cluster_id() + "\n")
        return path.read_text().strip()

    def _java(self, java: str, node: Node, main: list[str]) -> list[str]:
        return [
            java, *HEAP_OPTS, "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j.configuration=file:{node.dir / 'log4j.properties'}",
            f"-Dkafka.logs.dir={node.dir}",
            "-cp", str(self.libs.resolve() / "*"), *main,
        ]

    def _prepare(self, java: str, node: Node) -> None:
        node.dir.mkdir(parents=True, exist_ok=True)
        props = node.dir / "server.properties"
        props.write_text(server_properties(node, self.nodes, self.security))
        (node.dir / "log4j.properties").write_text(LOG4J.format(log=node.log_file))
        if (node.dir / "data" / "meta.properties").exists():
            return
        scram = []
        if self.security is not None:  # SCRAM users live in the KRaft metadata from the first start
            for name, password in ((self.security.broker_user, self.security.broker_password),
                                   (self.security.user, self.security.password)):
                scram += ["--add-scram", f"{MECHANISM}=[name={name},password={password}]"]
        fmt = self._java(java, node, ["kafka.tools.StorageTool", "format", "--ignore-formatted",
                                      "-t", self._cluster_id(), "-c", str(props), *scram])
        proc = subprocess.run(fmt, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise UserError(f"formatting Kafka storage in {node.dir / 'data'} failed: {last[0]}")

    def _spawn(self, java: str, node: Node) -> subprocess.Popen:
        cmd = self._java(java, node, ["kafka.Kafka", str(node.dir / "server.properties")])
        with open(node.dir / "stdout.log", "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=node.dir)
        node.pid_file.write_text(f"{proc.pid}\n")
        return proc

    def start(self, timeout: float = START_TIMEOUT_S, nodes: list[Node] | None = None) -> float:
        """Format (once) and start the nodes that are not running; wait until every broker
        answers. Returns the seconds it took. Raises UserError with the broker's own error."""
        if not jars_ready(self.libs):
            raise UserError(f"the Kafka jars are not in {self.libs}; run `flywheel kafka-fetch` first")
        java = java_executable()
        t0 = time.monotonic()
        todo = [n for n in (nodes or self.nodes) if n.pid() is None]
        if not todo:
            return 0.0
        self.home.mkdir(parents=True, exist_ok=True)
        self._check_ports(todo)
        for node in todo:
            self._prepare(java, node)
        procs = {node.node_id: self._spawn(java, node) for node in todo}
        self.wait_ready(timeout, procs)
        return time.monotonic() - t0

    def wait_ready(self, timeout: float, procs: dict[int, subprocess.Popen] | None = None) -> None:
        from infra.runtime.probe import probe_brokers  # lazy: keeps confluent-kafka out of `kafka-fetch`

        deadline = time.monotonic() + timeout
        while True:
            for node in self.nodes:
                proc = (procs or {}).get(node.node_id)
                if proc is not None and proc.poll() is not None:
                    raise UserError(f"Kafka node {node.node_id} exited during start: {exit_reason(node)} "
                                    f"(log: {node.log_file})")
            if len(probe_brokers(self.client_config(), timeout=1.0) or {}) >= self.brokers:
                return
            if time.monotonic() > deadline:
                raise UserError(f"Kafka did not answer at {self.bootstrap} within {timeout:.0f}s "
                                f"(log: {self.nodes[0].log_file})")
            time.sleep(0.3)

    # -- stop -------------------------------------------------------------------------------

    def kill(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to one node (fault tests)."""
        node = self.nodes[node_id - 1]
        pid = node.pid()
        if pid is not None:
            os.kill(pid, sig)

    def stop(self, grace: float = STOP_GRACE_S, nodes: list[Node] | None = None) -> list[int]:
        """SIGTERM every running node at once (no node waits on a quorum that is leaving),
        wait up to ``grace`` seconds, then SIGKILL what is left. Returns the stopped node ids."""
        targets = {n.node_id: (n, pid) for n in (nodes or self.nodes) if (pid := n.pid()) is not None}
        for _, pid in targets.values():
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(pid_alive(pid) for _, pid in targets.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
            for _, pid in targets.values():
                _reap(pid)
        for node, pid in targets.values():
            if pid_alive(pid):
                log.warning("Kafka node %d did not stop within %.0fs; killing it", node.node_id, grace)
                _signal(pid, signal.SIGKILL)
                _wait_gone(pid, 10.0)
            node.pid_file.unlink(missing_ok=True)
        return sorted(targets)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    """Collect the exit status of a node this process started, so it leaves no zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
        _reap(pid)


def exit_reason(node: Node) -> str:
    """Why a node died: the JVM's own output (class path, memory) first, else the broker log."""
    try:
        out = [ln.strip() for ln in (node.dir / "stdout.log").read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        out = []
    errors = [ln for ln in out if "Error" in ln or "Exception" in ln]
    return errors[-1][:300] if errors else last_error(node.log_file)


def last_error(log_file: Path) -> str:
    """The last ERROR/FATAL line of a broker log, for one-line messages."""
    try:
        lines = log_file.read_text(errors="replace").splitlines()
    except OSError:
        return "no log written"
    for line in reversed(lines):
        if " ERROR " in line or " FATAL " in line:
            return line.strip()[:300]
    return lines[-1].strip()[:300] if lines else "empty log"
