"""Run a KRaft cluster of real Seaway node processes.

    with KRaftCluster(tmp_path, controllers=3) as c:          # controllers only
    with KRaftCluster(tmp_path, controllers=3, brokers=3) as c:
    with KRaftCluster(tmp_path, combined=3) as c:             # broker,controller nodes
        c.wait_for_leader()                                    # -> (leader id, epoch)
        c.kill(c.leader_id())                                  # kill -9
        c.nodes[2].start()

Every node's storage is formatted with one cluster id first (`seaway storage format`), as an
operator does. Controllers listen on CONTROLLER://127.0.0.1:<port>, brokers on PLAINTEXT.
Node ids: controllers (and combined nodes) 1..n, brokers 101, 102, ...

Behind a fault network (tests/support/faultnet.py):

    with KRaftCluster(tmp_path, combined=3, faultnet=True) as c:
        c.net.isolate(1); c.net.heal_all()
        c.sigstop(2); c.sigcont(2); c.kill9(3); c.restart(3)

Every listener then has a proxy in front of it: `controller.quorum.voters` and
`advertised.listeners` name the proxies, and each node binds its outbound connections to
127.0.1.<node id> (`client.local.address`) so the proxies know who is talking to whom.
`bootstrap` names the proxies too (clients go through the network like nodes do);
`direct_bootstrap` and `controller_ports` are the real ports. `describe()` asks a real port,
then the leader at its voter (proxy) address, as a client: only faults that include clients
(`isolate(n, clients=True)`, rules on "client" links) get in its way.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import anyio

from .faultnet import FaultNet
from .node import REPO, NodeError, SeawayNode, free_port

FAST_QUORUM = {
    # Kafka's defaults are 1 s election and 2 s fetch timeouts; tests keep them, so that the
    # failover times measured here are the ones an operator gets.
    "log.flush.scheduler.interval.ms": "200",
}


class KRaftCluster:
    def __init__(self, directory: Path, *, controllers: int = 0, brokers: int = 0, combined: int = 0,
                 overrides: dict[str, str] | None = None, cluster_id: str | None = None,
                 faultnet: "bool | FaultNet" = False):
        if combined and controllers:
            raise ValueError("a cluster has combined nodes or dedicated controllers, not both")
        self.directory = Path(directory)
        self.overrides = dict(FAST_QUORUM, **(overrides or {}))
        self.cluster_id = cluster_id or subprocess.run(
            [sys.executable, "-m", "core.cli", "storage", "random-uuid"], cwd=REPO, check=True,
            capture_output=True, text=True).stdout.strip()
        voter_ids = list(range(1, (controllers or combined) + 1))
        self.controller_ports = {i: free_port() for i in voter_ids}
        self.net: FaultNet | None = FaultNet() if faultnet is True else (faultnet or None)
        # (node id, listener name) -> the proxy port in front of it; empty without a FaultNet
        self.proxy_ports: dict[tuple[int, str], int] = {}
        if self.net is not None:
            for i, p in self.controller_ports.items():
                self.proxy_ports[(i, "CONTROLLER")] = self.net.expose(i, p)
        self.voters = ",".join(f"{i}@127.0.0.1:{self.proxy_ports.get((i, 'CONTROLLER'), p)}"
                               for i, p in self.controller_ports.items())
        self.nodes: dict[int, SeawayNode] = {}
        for i in voter_ids:
            self._add(i, "broker,controller" if combined else "controller")
        for b in range(brokers):
            self._add(101 + b, "broker")

    def _add(self, node_id: int, roles: str) -> None:
        props = {"process.roles": roles, "controller.quorum.voters": self.voters,
                 "controller.listener.names": "CONTROLLER"}
        listeners = []
        broker_port = None
        if "broker" in roles:
            broker_port = free_port()
            listeners.append(f"PLAINTEXT://127.0.0.1:{broker_port}")
        if "controller" in roles:
            listeners.append(f"CONTROLLER://127.0.0.1:{self.controller_ports[node_id]}")
        props["listeners"] = ",".join(listeners)
        if self.net is not None:
            props["client.local.address"] = FaultNet.address_of(node_id)
            if broker_port is not None:
                proxy = self.proxy_ports[(node_id, "PLAINTEXT")] = self.net.expose(node_id, broker_port)
                props["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{proxy}"
        props.update(self.overrides)
        port = broker_port or self.controller_ports[node_id]
        node = SeawayNode(self.directory / f"node-{node_id}", props, port=port, node_id=node_id)
        subprocess.run([sys.executable, "-m", "core.cli", "storage", "format", "-c", str(node.config_path),
                        f"--cluster-id={self.cluster_id}"], cwd=REPO, check=True, capture_output=True)
        self.nodes[node_id] = node

    # ------------------------------------------------------------------ views

    @property
    def controller_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.controller_ports.values())

    @property
    def bootstrap(self) -> str:
        if self.net is not None:
            return ",".join(f"127.0.0.1:{p}" for (i, name), p in self.proxy_ports.items()
                            if name == "PLAINTEXT")
        return self.direct_bootstrap

    @property
    def direct_bootstrap(self) -> str:
        """The brokers' real ports, past any fault network."""
        return ",".join(n.bootstrap for i, n in self.nodes.items() if "broker" in self.roles(i))

    def roles(self, node_id: int) -> str:
        return self.nodes[node_id].config_path.read_text().split("process.roles=")[1].split("\n")[0]

    def running(self) -> list[int]:
        return [i for i, n in self.nodes.items() if n.proc is not None and n.proc.poll() is None]

    def describe(self, timeout: float = 5.0):
        """The active controller's DescribeQuorum answer, or None if there is no leader yet."""
        from core.client.quorum import QuorumError, describe_quorum
        live = ",".join(f"127.0.0.1:{p}" for i, p in self.controller_ports.items() if i in self.running())
        if not live:
            return None
        try:
            return anyio.run(describe_quorum, live, int(timeout * 1000))[1]
        except (QuorumError, TimeoutError, OSError):
            return None

    def leader_id(self) -> int | None:
        d = self.describe()
        return None if d is None else d.leader_id

    def wait_for_leader(self, timeout: float = 30.0, *, not_in=(), min_epoch: int = 0):
        """(leader id, epoch) once a running voter leads (not one of `not_in`, epoch >= min_epoch)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            d = self.describe()
            if (d is not None and d.leader_id >= 0 and d.leader_id not in not_in
                    and d.leader_epoch >= min_epoch and d.leader_id in self.running()):
                return d.leader_id, d.leader_epoch
            time.sleep(0.05)
        raise NodeError(f"no leader within {timeout}s;\n" + self.log_tails())

    def admin_when_ready(self, brokers: int | None = None, timeout: float = 60.0):
        """A confluent-kafka AdminClient, once the quorum has a leader and `brokers` (default:
        every broker node) are registered and serving."""
        from confluent_kafka.admin import AdminClient
        want = brokers if brokers is not None else sum("broker" in self.roles(i) for i in self.nodes)
        self.wait_for_leader(timeout=timeout)
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + timeout
        while len(admin.list_topics(timeout=10).brokers) < want:
            if time.monotonic() > deadline:
                raise NodeError(f"{want} brokers did not register within {timeout}s;\n" + self.log_tails())
            time.sleep(0.2)
        return admin

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> "KRaftCluster":
        for node in self.nodes.values():
            node.start()
        return self

    def kill(self, node_id: int) -> None:
        self.nodes[node_id].kill()

    kill9 = kill

    def sigstop(self, node_id: int) -> None:
        self.nodes[node_id].pause()

    def sigcont(self, node_id: int) -> None:
        self.nodes[node_id].resume()

    def restart(self, node_id: int, *, hard: bool = True, timeout: float = 60.0) -> None:
        """kill -9 (or SIGTERM with hard=False) and start again on the same ports and data."""
        node = self.nodes[node_id]
        if hard:
            node.kill()
        else:
            node.resume()
            node.stop(timeout=timeout)
        node.start(timeout=timeout)

    def stop(self) -> None:
        """Stop the cluster as an operator would: brokers first, all at once (each does its
        controlled shutdown while the controllers are there to grant it), then the
        controllers (and combined nodes) all at once."""
        import signal
        brokers = [n for i, n in self.nodes.items() if self.roles(i) == "broker"]
        rest = [n for n in self.nodes.values() if n not in brokers]
        for node in self.nodes.values():
            node.resume()   # a SIGSTOPped node would sit on its SIGTERM until killed
        for group in (brokers, rest):
            for node in group:
                if node.proc is not None and node.proc.poll() is None:
                    node.proc.send_signal(signal.SIGTERM)
            for node in group:
                try:
                    node.stop(timeout=20)
                except NodeError:
                    pass

    def log_tails(self, lines: int = 25) -> str:
        return "\n".join(f"--- node {i} ---\n{n.log_tail(lines)}" for i, n in self.nodes.items())

    def __enter__(self) -> "KRaftCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.net is not None:
            self.net.heal_all()     # a partitioned node cannot finish its controlled shutdown
        self.stop()
        for node in self.nodes.values():
            if node.proc is not None and node.proc.stdout:
                node.proc.stdout.close()
        if self.net is not None:
            self.net.close()


# ---------------------------------------------------------------------- requests to controllers

def create_topics_request(names, partitions: int = 1, replication_factor: int = 1, configs=None):
    from core.protocol import messages as m
    R = m.CreateTopicsRequest
    return R(topics=[R.CreatableTopic(name=n, num_partitions=partitions,
                                      replication_factor=replication_factor, assignments=[],
                                      configs=[R.CreatableTopicConfig(name=k, value=v)
                                               for k, v in (configs or {}).items()])
                     for n in names], timeout_ms=5000, validate_only=False)


def ask_controller(cluster: KRaftCluster, api_key: int, request, timeout: float = 10.0):
    """Send a request to the active controller (found with DescribeQuorum) and return the
    response; raises NodeError if there is no leader and KafkaError if it cannot be reached."""
    from core.client.connection import BrokerConnection

    d = cluster.describe(timeout=timeout)
    if d is None or d.leader_id < 0:
        raise NodeError("no active controller")

    async def send():
        conn = BrokerConnection("127.0.0.1", cluster.controller_ports[d.leader_id],
                                request_timeout_ms=int(timeout * 1000),
                                connect_timeout_ms=int(timeout * 1000))
        await conn.connect()
        try:
            return await conn.send(request, api_key)
        finally:
            await conn.close()
    return anyio.run(send)


# ---------------------------------------------------------------------- reading logs back

def read_metadata_log(node) -> tuple[object, tuple]:
    """(snapshot or None, entries after it) of a stopped node's __cluster_metadata, read from
    its files with the same code a restart uses."""
    from core.config import BrokerConfig, load_properties
    from core.raft.storage import RaftStorage
    config = BrokerConfig(load_properties(node.config_path), warn_unknown=False)
    storage = RaftStorage.open(config.metadata_log_dir)
    try:
        _, loaded = storage.load()
        log = loaded.log
        return loaded.snapshot, log.slice(log.start_offset, log.end_offset)
    finally:
        storage.close()


def image_of(snapshot, entries):
    """The metadata image a node's log describes (snapshot, then every metadata record)."""
    from core.controller.image import MetadataImage
    from core.node.loader import image_from_snapshot
    from core.protocol.metadata_records import decode_record
    image = image_from_snapshot(snapshot.data) if snapshot is not None else MetadataImage.empty()
    return image.apply_all(decode_record(e.payload) for e in entries if not e.control)


def metadata_image(cluster: KRaftCluster):
    """The committed metadata image, fetched from the active controller as an observer."""
    from core.client.connection import BrokerConnection
    from core.raft import wire
    from core.raft.messages import FetchRequest

    leader, leader_epoch = cluster.wait_for_leader()

    async def fetch_all():
        conn = await BrokerConnection("127.0.0.1", cluster.controller_ports[leader]).connect()
        entries, offset, epoch = [], 0, 0
        try:
            while True:
                key, request = wire.to_wire(FetchRequest(
                    cluster_id=None, replica_id=-1, max_wait_ms=0, max_bytes=1 << 22,
                    current_leader_epoch=leader_epoch, fetch_offset=offset,
                    last_fetched_epoch=epoch, partition_max_bytes=1 << 22), 13)
                raw = await conn.send(request, key, version=13)
                answer = wire.from_wire(key, 13, raw, is_request=False)
                assert (answer.error_code, answer.partition_error_code, answer.snapshot_id,
                        answer.diverging_epoch) == (0, 0, None, None), answer
                got = [e for e in answer.records if e.offset < answer.high_watermark]
                entries += got
                if got:
                    offset, epoch = got[-1].offset + 1, got[-1].epoch
                if offset >= answer.high_watermark or not got:
                    return entries
        finally:
            await conn.close()
    return image_of(None, anyio.run(fetch_all))


def assert_replicates(cluster: KRaftCluster, client: dict, topic: str, count: int = 100) -> None:
    """Through clients configured by `client` (security settings and the like): every broker
    registers, a topic of replication factor 3 gets an ISR of 3, and `count` records produced
    with acks=all read back in order. A cluster whose nodes cannot reach each other fails here
    with their logs."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.direct_bootstrap, **client})
    deadline = time.monotonic() + 60
    while len(admin.list_topics(timeout=10).brokers) < 3:
        assert time.monotonic() < deadline, "the brokers did not register:\n" + cluster.log_tails()
        time.sleep(0.3)
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(timeout=30)
    deadline = time.monotonic() + 30
    while len(admin.list_topics(topic, timeout=10).topics[topic].partitions[0].isrs) < 3:
        assert time.monotonic() < deadline, "the followers never joined the ISR:\n" + cluster.log_tails()
        time.sleep(0.3)
    producer = Producer({"bootstrap.servers": cluster.direct_bootstrap, "acks": "all", **client})
    for i in range(count):
        producer.produce(topic, b"m%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.direct_bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False, **client})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        got += [msg.value() for msg in consumer.consume(count, 1) if not msg.error()]
    consumer.close()
    assert got == [b"m%d" % i for i in range(count)]
