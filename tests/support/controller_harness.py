"""A fake metadata log around QuorumController, shared by the test_controller_* modules.

Every record the controller returns goes through the real record codec (encode_record /
decode_record) into the fake log, and is replayed from there when committed, so tests drive
the controller exactly as a driver would. Every response is encoded at the version asked.
After each commit the images are checked: partition invariants hold, and replaying the whole
log from scratch gives the committed image (and, while active, the pending one).
"""
from __future__ import annotations

from core.controller import ControllerConfig, MetadataImage, QuorumController
from core.controller.election import RECOVERED
from core.protocol import messages as m
from core.protocol.metadata_records import decode_record, encode_record

CLUSTER = "q1w2e3r4t5y6u7i8o9p0aa"
CONTROLLER_ID = 100
API_OF = {"broker_registration": 62, "broker_heartbeat": 63, "unregister_broker": 64,
          "create_topics": 19, "delete_topics": 20, "create_partitions": 37,
          "incremental_alter_configs": 44, "alter_configs": 33, "allocate_producer_ids": 67}
R = m.AlterPartitionRequest


class Clock:
    def __init__(self, now: int = 1_000_000):
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def incarnation(broker_id: int, generation: int = 0) -> bytes:
    return bytes([broker_id % 256, generation]) + bytes([7] * 14)


def registration(broker_id: int, *, rack: str | None = None, generation: int = 0,
                 cluster: str = CLUSTER, features=(), zk: bool = False):
    R = m.BrokerRegistrationRequest
    return R(broker_id=broker_id, cluster_id=cluster,
             incarnation_id=incarnation(broker_id, generation),
             listeners=[R.Listener(name="PLAINTEXT", host=f"b{broker_id}", port=9092,
                                   security_protocol=0)],
             features=[R.Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                       for n, lo, hi in features],
             rack=rack, is_migrating_zk_broker=zk, log_dirs=[], previous_broker_epoch=-1)


def heartbeat(broker_id: int, epoch: int, offset: int, *, fence: bool = False,
              shut_down: bool = False):
    return m.BrokerHeartbeatRequest(broker_id=broker_id, broker_epoch=epoch,
                                    current_metadata_offset=offset, want_fence=fence,
                                    want_shut_down=shut_down)


def new_topic(name: str, partitions: int = 1, rf: int = 1, *, configs=None, assignments=None):
    """A CreatableTopic; with `assignments` (partition -> brokers) the counts become -1."""
    C = m.CreateTopicsRequest
    if assignments:
        partitions = rf = -1
    return C.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=rf,
        assignments=[C.CreatableReplicaAssignment(partition_index=i, broker_ids=list(b))
                     for i, b in (assignments or {}).items()],
        configs=[C.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])


def create_request(*topics, validate_only: bool = False):
    return m.CreateTopicsRequest(topics=list(topics), timeout_ms=1000, validate_only=validate_only)


def check_invariants(image: MetadataImage) -> None:
    for topic in image.topics.values():
        assert sorted(topic.partitions) == list(range(len(topic.partitions))), topic.name
        for pid, p in topic.partitions.items():
            where = f"{topic.name}-{pid}: {p}"
            assert len(set(p.replicas)) == len(p.replicas), where
            assert set(p.isr) <= set(p.replicas), where
            assert p.isr, where
            if p.leader != -1:
                assert p.leader in p.isr, where
                reg = image.brokers.get(p.leader)
                assert reg is not None and not reg.fenced, where


class Harness:
    """One controller and its log. Offset 0 holds the leader's LeaderChange control record;
    metadata records follow from offset 1."""

    def __init__(self, config: ControllerConfig | None = None, *, seed: int = 0,
                 activate: bool = True):
        self.clock = Clock()
        self.ctl = QuorumController(CONTROLLER_ID, CLUSTER, config or ControllerConfig(),
                                    clock=self.clock, seed=seed)
        self.log: list = []       # decoded records; log[i] is at offset i + 1
        self.replayed = 0
        self.epochs: dict[int, int] = {}
        # Replaying the whole log at every commit is O(log) each time; long runs turn it off
        # and call check(full=True) now and then.
        self.full_checks = True
        if activate:
            self.append(self.ctl.activate(self.end_offset))
            self.commit()

    @property
    def end_offset(self) -> int:
        return 1 + len(self.log)

    @property
    def image(self) -> MetadataImage:
        return self.ctl.pending_image

    def append(self, records) -> None:
        for record in records:
            self.log.append(decode_record(encode_record(record)))

    def commit(self) -> None:
        new = self.log[self.replayed:]
        if new:
            self.ctl.replay(new, self.end_offset - 1)
        self.replayed = len(self.log)
        self.check()

    def check(self, full: bool | None = None) -> None:
        ctl = self.ctl
        check_invariants(ctl.committed_image)
        check_invariants(ctl.pending_image)
        if not (self.full_checks if full is None else full):
            return
        assert MetadataImage.empty().apply_all(self.log[:self.replayed]) == ctl.committed_image
        if ctl.is_active:
            assert MetadataImage.empty().apply_all(self.log) == ctl.pending_image

    def call(self, name: str, request, version: int, *, commit: bool = True):
        result = getattr(self.ctl, name)(request, version)
        api = m.API[API_OF[name]]
        encoded = api.response.encode(version, result.response)
        assert api.response.decode(version, encoded) is not None
        self.append(result.records)
        if commit:
            self.commit()
        return result

    def inject(self, *records, commit: bool = True) -> None:
        """Have the controller write records no request of ours makes (an AlterPartition's
        ISR change, say)."""
        self.ctl._propose(list(records))
        self.append(records)
        if commit:
            self.commit()

    def tick(self, *, commit: bool = True) -> list:
        records = self.ctl.tick()
        self.append(records)
        if commit:
            self.commit()
        return records

    # -- brokers
    def register(self, broker_id: int, **kw):
        result = self.call("broker_registration", registration(broker_id, **kw), 4)
        if result.response.error_code == 0:
            self.epochs[broker_id] = result.response.broker_epoch
        return result

    def heartbeat(self, broker_id: int, *, offset: int | None = None, epoch: int | None = None,
                  commit: bool = True, **kw):
        offset = self.end_offset - 1 if offset is None else offset
        epoch = self.epochs[broker_id] if epoch is None else epoch
        return self.call("broker_heartbeat", heartbeat(broker_id, epoch, offset, **kw), 1,
                         commit=commit)

    def add_brokers(self, racks: dict[int, str | None]) -> None:
        """Register and unfence brokers (id -> rack)."""
        for broker_id, rack in racks.items():
            assert self.register(broker_id, rack=rack).response.error_code == 0
        for broker_id in racks:
            assert not self.heartbeat(broker_id).response.is_fenced

    # -- topics
    def create(self, *topics, version: int = 7, validate_only: bool = False):
        return self.call("create_topics", create_request(*topics, validate_only=validate_only),
                         version)

    def create_topic(self, name: str, partitions: int = 1, rf: int = 1, **kw):
        result = self.create(new_topic(name, partitions, rf, **kw))
        assert result.response.topics[0].error_code == 0, result.response.topics[0]
        return result

    def partition(self, name: str, pid: int = 0):
        return self.image.partition(name, pid)


# --------------------------------------------------------------------------- requests by API key

def call(h: Harness, api_key: int, request, version: int, *, commit: bool = True):
    """Run a request through the controller and its answer through the codec; (records, the
    answer as the wire carries it)."""
    result = h.ctl.handle(api_key, request, version)
    api = m.API[api_key]
    answer = api.response.decode(version, api.response.encode(version, result.response))
    h.append(result.records)
    if commit:
        h.commit()
    return result.records, answer


def alter(h: Harness, isr, *, version: int = 3, broker: int | None = None,
          broker_epoch: int | None = None, leader_epoch: int | None = None,
          partition_epoch: int | None = None, lrs: int = RECOVERED, topic: str = "t",
          partition: int = 0, member_epochs: dict[int, int] | None = None,
          topic_id: bytes | None = None):
    """An AlterPartition from the partition's leader (by default) with its current epochs."""
    part = h.partition(topic, partition) or h.partition(topic, 0)
    broker = part.leader if broker is None else broker
    epochs = {**h.epochs, **(member_epochs or {})}
    pd = R.PartitionData(
        partition_index=partition,
        leader_epoch=part.leader_epoch if leader_epoch is None else leader_epoch,
        partition_epoch=part.partition_epoch if partition_epoch is None else partition_epoch,
        leader_recovery_state=lrs, new_isr=list(isr),
        new_isr_with_epochs=[R.BrokerState(broker_id=b, broker_epoch=epochs.get(b, -1))
                             for b in isr])
    if topic_id is None:
        topic_id = h.image.topic(topic).id
    return R(broker_id=broker, broker_epoch=h.epochs.get(broker, 7) if broker_epoch is None
             else broker_epoch,
             topics=[R.TopicData(topic_name=topic, topic_id=topic_id, partitions=[pd])])


def only(answer):
    [t] = answer.topics
    [p] = t.partitions
    return p
