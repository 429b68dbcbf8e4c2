"""ControllerChannel: what a KRaft broker asks the active controller.

Brokers forward the admin requests that change metadata (CreateTopics, DeleteTopics,
CreatePartitions, AlterConfigs, IncrementalAlterConfigs) and create topics (auto-creation,
__consumer_offsets) by sending the same request to the active controller's listener, as Kafka
brokers do. The active controller is the quorum leader, at its controller.quorum.voters
address. A lost connection, no known leader, or NOT_CONTROLLER in the answer (the leader
changed under us) mean: find the leader again and resend, until the request's deadline. The
controller answers only after its records committed, but a resend may still find the first
attempt applied (the answer was lost, or a controller that lost its leadership answered
NOT_CONTROLLER for records its successor committed). `send_tracked` says when that may be, and
the forwarding handler (handlers/forwarded.py) then reconciles the answer with the log, so a
client is never told TOPIC_ALREADY_EXISTS for its own creation.

After a successful write the broker waits (bounded) until its own metadata image shows it, so
that a client that creates a topic and at once asks this broker's Metadata finds it.
"""
from __future__ import annotations

import logging

import anyio

from core.client.connection import BrokerConnection
from core.client.errors import KafkaError
from core.protocol import messages as m
from core.protocol.errors import ErrorCode

from .metadata_sync import MetadataSync
from .replication.manager import ReplicaManager

log = logging.getLogger(__name__)

RETRY_BACKOFF_S = 0.05


def not_controller(response) -> bool:
    """Does any part of a controller's answer say NOT_CONTROLLER?"""
    if getattr(response, "error_code", 0) == ErrorCode.NOT_CONTROLLER:
        return True
    for field in ("topics", "results", "responses"):
        for entry in getattr(response, field, None) or ():
            if getattr(entry, "error_code", 0) == ErrorCode.NOT_CONTROLLER:
                return True
    return False


class ControllerChannel:
    def __init__(self, config, quorum):
        self.config = config
        self.quorum = quorum
        self._conn: BrokerConnection | None = None
        self._target = -1
        self._lock = anyio.Lock()

    async def _connection(self) -> BrokerConnection:
        leader = self.quorum.leader_id
        if leader < 0 or leader not in self.config.quorum_voters:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "no active controller known")
        async with self._lock:
            if self._conn is not None and not self._conn.closed and self._target == leader:
                return self._conn
            if self._conn is not None:
                await self._conn.close()
            host, port = self.config.quorum_voters[leader]
            timeout = self.config["controller.quorum.request.timeout.ms"]
            conn = BrokerConnection(host, port, node_id=leader,
                                    client_id=f"broker-{self.config.node_id}-forwarding",
                                    request_timeout_ms=30_000, connect_timeout_ms=timeout,
                                    local_address=self.config["client.local.address"],
                                    ssl_context=self.config.controller_client_tls,
                                    sasl=self.config.controller_client_sasl)
            await conn.connect()
            self._conn, self._target = conn, leader
            return conn

    async def send(self, api_key: int, request, version: int, timeout_s: float):
        """The active controller's answer, or the last NOT_CONTROLLER answer at the deadline.
        Raises KafkaError (NOT_CONTROLLER / a network error) if no controller answered."""
        answer, _ = await self.send_tracked(api_key, request, version, timeout_s)
        return answer

    async def send_tracked(self, api_key: int, request, version: int, timeout_s: float):
        """send(), and whether the answer may be a resend's: True when an earlier attempt
        reached a controller and got no usable answer (a lost connection, a timeout, or
        NOT_CONTROLLER, which a controller that lost its leadership also answers for records
        a later leader may still commit). Such an earlier attempt may have been applied."""
        last_error: Exception | None = None
        last_answer = None
        delivered = 0
        with anyio.move_on_after(timeout_s):
            while True:
                try:
                    conn = await self._connection()
                    use = min(version, conn.version_for(api_key))
                    delivered += 1
                    answer = await conn.send(request, api_key, version=use)
                    if not not_controller(answer):
                        return answer, delivered > 1
                    last_answer = answer
                except (KafkaError, OSError) as exc:
                    last_error = exc
                    if self._conn is not None and self._conn.closed:
                        self._conn = None
                await anyio.sleep(RETRY_BACKOFF_S)
        if last_answer is not None:
            return last_answer, delivered > 1
        raise last_error if isinstance(last_error, KafkaError) else \
            KafkaError(ErrorCode.NOT_CONTROLLER, f"no active controller answered: {last_error}")

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()


class KRaftLink:
    """A broker's link to the metadata quorum: its place in the quorum (the image), the channel
    to the active controller, and the sync of its partitions."""

    def __init__(self, broker, quorum, lifecycle):
        self.broker = broker
        self.quorum = quorum
        self.lifecycle = lifecycle
        self.channel = ControllerChannel(broker.config, quorum)
        self.replicas = ReplicaManager(broker, self)
        self.sync = MetadataSync(broker, quorum)

    @property
    def image(self):
        """The image this broker describes to clients: the one its partitions were last
        reconciled with, not the loader's newest. Between the two, a topic the loader already
        holds is not yet opened here, and a client told about it would be answered
        NOT_LEADER_OR_FOLLOWER by the very broker its Metadata named leader."""
        return self.sync.reconciled

    async def allocate_producer_ids(self, timeout_s: float = 10.0) -> tuple[int, int]:
        """A block of producer ids from the controller: (first id, count). Raises KafkaError
        (COORDINATOR_LOAD_IN_PROGRESS, retriable) until the broker is registered and a
        controller answers."""
        epoch = self.lifecycle.broker_epoch
        if epoch < 0:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "this broker is not registered yet")
        try:
            answer = await self.channel.send(m.ApiKey.ALLOCATE_PRODUCER_IDS, m.AllocateProducerIdsRequest(
                broker_id=self.broker.node_id, broker_epoch=epoch), 0, timeout_s)
        except KafkaError as exc:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, str(exc)) from None
        if answer.error_code:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                              f"the controller refused a producer id block: {ErrorCode(answer.error_code).name}")
        return answer.producer_id_start, answer.producer_id_len

    async def create_topics(self, names, num_partitions: int = -1, replication_factor: int = -1,
                            configs: dict[str, str] | None = None,
                            timeout_s: float = 10.0) -> dict[str, ErrorCode]:
        """Create topics through the controller (auto-creation, internal topics); waits until
        this broker has reconciled those that were created (their partitions opened, leading or
        following), so the Metadata answer that follows never names a leader not ready yet.
        Error codes by name."""
        R = m.CreateTopicsRequest
        request = R(topics=[R.CreatableTopic(name=n, num_partitions=num_partitions,
                                             replication_factor=replication_factor, assignments=[],
                                             configs=[R.CreatableTopicConfig(name=k, value=v)
                                                      for k, v in (configs or {}).items()])
                            for n in names],
                    timeout_ms=int(timeout_s * 1000), validate_only=False)
        try:
            answer = await self.channel.send(m.ApiKey.CREATE_TOPICS, request, 7, timeout_s)
        except KafkaError as exc:
            return {n: ErrorCode(exc.code) for n in names}
        codes = {t.name: ErrorCode(t.error_code) for t in answer.topics}
        ok = [n for n, c in codes.items() if c in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS)]
        await self.sync.wait_synced(lambda: all(n in self.sync.reconciled.topic_ids for n in ok), timeout_s)
        return codes
