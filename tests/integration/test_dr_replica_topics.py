"""A DR replica topic (topic config seaway.replica.of, core/protocol/dr.py) refuses records from
everyone but its mirror, and every real client reports that at once, as a final error that
names the topic, rather than retrying; promoting the topic makes it writable again.

Also: a replica is read as any topic is, and the refusal comes only from the produce path."""
from __future__ import annotations

import subprocess
import time

import anyio
import pytest

from core.client import Admin, KafkaClient, NewTopic, Producer
from core.client.admin import ConfigResource
from core.client.errors import KafkaError
from core.protocol.dr import DR_EPOCH, DR_STATE_TOPIC, REPLICA_OF, UNPLANNED_FROM, mirror_client_id
from core.protocol.errors import ErrorCode
from tests.support.cli import seaway
from tests.support.clients import CLIENTS, Record, unique_topic

pytestmark = pytest.mark.integration

# What each client says when the broker answers INVALID_TOPIC_EXCEPTION (error 17). The README's
# DR section quotes these, so an operator can search for what their application logged.
CLIENT_SAYS = {
    "confluent": "Broker: Invalid topic",
    "kafka-python": "InvalidTopicError",
    "kcat": "Broker: Invalid topic",
    "kafkajs": "The request attempted to perform an operation on an invalid topic",
}


async def _admin(bootstrap: str, fn):
    async with KafkaClient(bootstrap) as client:
        return await fn(Admin(client))


def create_replica(bootstrap: str, name: str, of: str = "eu-west-1") -> None:
    result = anyio.run(_admin, bootstrap, lambda a: a.create_topics([NewTopic(name, 1, 1, {REPLICA_OF: of})]))
    assert result[name] is None, result


def set_configs(bootstrap: str, topic: str, configs: dict) -> KafkaError | None:
    result = anyio.run(_admin, bootstrap, lambda a: a.incremental_alter_configs({ConfigResource.topic(topic): configs}))
    return result[ConfigResource.topic(topic)]


async def _send(bootstrap: str, topic: str, client_id: str) -> int:
    async with KafkaClient(bootstrap, client_id=client_id) as client:
        async with Producer(client, acks=-1) as producer:
            delivery = await producer.send(topic, b"v", partition=0)
            return (await delivery).offset


@pytest.mark.parametrize("name", list(CLIENTS))
def test_every_client_gets_a_final_error_naming_the_topic(seaway_broker, name):
    client = CLIENTS[name]
    topic = unique_topic(f"replica-{name}")
    create_replica(seaway_broker, topic)
    started = time.monotonic()
    if name == "kcat":      # as a person runs it: the harness's kcat is quiet (-q)
        proc = subprocess.run([client.binary, "-P", "-b", seaway_broker, "-t", topic, "-p", "0"],
                              input=b"v\n", capture_output=True, timeout=60)
        assert proc.returncode == 1
        said = proc.stderr.decode()
    else:
        with pytest.raises(Exception) as raised:
            client.produce(seaway_broker, topic, [Record(key=b"k", value=b"v", partition=0)], timeout=60)
        said = str(raised.value)
    # Final, not retried until the delivery timeout: the application hears of it at once.
    assert time.monotonic() - started < 20
    assert CLIENT_SAYS[name] in said, said
    # Nothing reached the log: the mirror's own write is the first record.
    assert anyio.run(_send, seaway_broker, topic, mirror_client_id("eu-west-1")) == 0


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_only_the_mirror_from_the_named_cluster_writes(seaway_broker, anyio_backend):
    topic = unique_topic("replica-own")
    async with KafkaClient(seaway_broker) as client:
        assert (await Admin(client).create_topics([NewTopic(topic, 1, 1, {REPLICA_OF: "eu-west-1"})]))[topic] is None
    for client_id in ("app", mirror_client_id("us-east-1"), "__seaway_mirror", None):
        with pytest.raises(KafkaError) as raised:
            await _send(seaway_broker, topic, client_id)
        assert raised.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert f"{topic} is a read-only DR replica of cluster eu-west-1" in str(raised.value)
    assert await _send(seaway_broker, topic, mirror_client_id("eu-west-1")) == 0


def test_promoting_a_replica_makes_it_writable_and_fencing_makes_it_read_only(seaway_broker):
    topic = unique_topic("replica-promote")
    create_replica(seaway_broker, topic)
    confluent = CLIENTS["confluent"]
    # Promote, as the README shows it.
    seaway("topics", "--bootstrap-server", seaway_broker, "alter", topic, "--delete-config", REPLICA_OF)
    acked = confluent.produce(seaway_broker, topic, [Record(value=b"after", partition=0)])
    assert acked[0].offset == 0
    # Fenced towards the other cluster (the old primary's side of a planned failover).
    assert set_configs(seaway_broker, topic, {REPLICA_OF: "us-east-1"}) is None
    with pytest.raises(Exception, match="Invalid topic"):
        confluent.produce(seaway_broker, topic, [Record(value=b"fenced", partition=0)])
    assert anyio.run(_send, seaway_broker, topic, mirror_client_id("us-east-1")) == 1
    # Readers are never fenced.
    got = confluent.consume(seaway_broker, topic, [0], count=2)
    assert [r.value for r in got] == [b"after", b"v"]


def test_a_stale_epoch_is_refused_over_the_wire(seaway_broker):
    """The cluster's epoch rules (unit-tested in test_controller_dr_epochs.py), end to end:
    the error code and message reach an admin client."""
    topic = unique_topic("replica-epoch")
    create_replica(seaway_broker, topic)
    result = anyio.run(_admin, seaway_broker,
                       lambda a: a.create_topics([NewTopic(DR_STATE_TOPIC, 1, 1, {"cleanup.policy": "compact"})]))
    assert result[DR_STATE_TOPIC] is None or result[DR_STATE_TOPIC].code == ErrorCode.TOPIC_ALREADY_EXISTS
    current = anyio.run(_admin, seaway_broker, lambda a: a.describe_configs(ConfigResource.topic(DR_STATE_TOPIC)))
    epoch = int(current[ConfigResource.topic(DR_STATE_TOPIC)][DR_EPOCH].value)
    assert set_configs(seaway_broker, DR_STATE_TOPIC, {DR_EPOCH: str(epoch + 1)}) is None
    lost = set_configs(seaway_broker, DR_STATE_TOPIC, {DR_EPOCH: str(epoch + 1)})
    assert lost is not None and lost.code == ErrorCode.STALE_CONTROLLER_EPOCH
    stale = set_configs(seaway_broker, topic, {REPLICA_OF: None, DR_EPOCH: str(epoch)})
    assert stale is not None and stale.code == ErrorCode.STALE_CONTROLLER_EPOCH
    assert f"at least this cluster's DR epoch {epoch + 1}" in str(stale)
    assert set_configs(seaway_broker, topic, {REPLICA_OF: None, DR_EPOCH: str(epoch + 1)}) is None


def test_changing_a_config_to_what_it_is_answers_at_once(seaway_broker):
    """A role change run again (a DR controller finishing a failover) writes no metadata record;
    the broker answers as soon as its image shows the values, not after waiting for a record
    that never comes."""
    topic = unique_topic("replica-again")
    create_replica(seaway_broker, topic)
    for _ in range(3):
        started = time.monotonic()
        assert set_configs(seaway_broker, topic, {REPLICA_OF: "eu-west-1", "retention.ms": None}) is None
        assert time.monotonic() - started < 2


def test_a_retry_after_the_fence_is_answered_as_the_duplicate_it_is_and_new_records_are_refused(seaway_broker):
    """The role is checked where the partition appends, after the idempotence check: a batch
    appended before the fence and retried after it (its answer was lost) is answered with its
    offset, as any duplicate is, so the producer does not fail a record that is in the log;
    a new batch is refused, with NOT_LEADER_OR_FOLLOWER (core/protocol/dr.py)."""
    from core.client.connection import BrokerConnection
    from core.protocol import messages as m
    from core.protocol.records import build_batch

    topic = unique_topic("fence-retry")
    anyio.run(_admin, seaway_broker, lambda a: a.create_topics([NewTopic(topic, 1, 1)]))
    host, port = seaway_broker.rsplit(":", 1)

    async def scenario() -> tuple[tuple[int, int], tuple[int, int, str | None]]:
        conn = await BrokerConnection(host, int(port)).connect()
        try:
            init = await conn.send(m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000,
                                                           producer_id=-1, producer_epoch=-1), 22)
            assert init.error_code == 0, init

            async def produce(sequence: int):
                records = build_batch([(b"k", b"v%d" % sequence, [], 1000)], producer_id=init.producer_id,
                                      producer_epoch=init.producer_epoch, base_sequence=sequence)
                R = m.ProduceRequest
                answer = await conn.send(R(transactional_id=None, acks=-1, timeout_ms=10000, topic_data=[
                    R.TopicProduceData(name=topic, partition_data=[R.PartitionProduceData(index=0, records=records)])]),
                    0)
                part = answer.responses[0].partition_responses[0]
                return part.error_code, part.base_offset, part.error_message

            first = await produce(0)
            assert first[:2] == (0, 0), first
            assert await _fence(conn, topic) == 0
            retried, new = await produce(0), await produce(1)
            return retried[:2], new
        finally:
            await conn.close()

    retried, new = anyio.run(scenario)
    assert retried == (0, 0)            # the duplicate: its original offset, no error
    # Refused with a retriable error: the fence passes, and the retry lands on the promoted side.
    assert new[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER and "fenced" in (new[2] or ""), new


def test_a_producer_from_the_partner_skips_sequences_only_where_an_unplanned_failover_promoted(seaway_broker):
    """A producer whose id is the partner cluster's (its state copied here by the DR link) may
    leave a forward gap only on a topic promoted by an unplanned failover (UNPLANNED_FROM):
    the gap is what is stranded there. Anywhere else a gap is requests lost on the way (a
    move between a producer's pipelined requests, say) and is refused as Kafka refuses it:
    accepting the later request would let the client count the earlier ones written."""
    from core.client.connection import BrokerConnection
    from core.protocol import messages as m
    from core.protocol.records import build_batch

    topic = unique_topic("partner-gap")
    anyio.run(_admin, seaway_broker, lambda a: a.create_topics([NewTopic(topic, 1, 1)]))
    host, port = seaway_broker.rsplit(":", 1)

    async def scenario() -> list[int]:
        conn = await BrokerConnection(host, int(port)).connect()
        try:
            init = await conn.send(m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000,
                                                           producer_id=-1, producer_epoch=-1), 22)
            assert init.error_code == 0, init
            own = init.producer_id
            partner = own ^ (1 << 32)       # another cluster's range (core/protocol/dr.py)

            async def produce(pid: int, sequence: int) -> int:
                records = build_batch([(b"k", b"v%d" % sequence, [], 1000)], producer_id=pid,
                                      producer_epoch=0, base_sequence=sequence)
                R = m.ProduceRequest
                answer = await conn.send(R(transactional_id=None, acks=-1, timeout_ms=10000, topic_data=[
                    R.TopicProduceData(name=topic, partition_data=[R.PartitionProduceData(index=0, records=records)])]),
                    0)
                return answer.responses[0].partition_responses[0].error_code

            codes = [await produce(partner, 0), await produce(own, 0),
                     await produce(partner, 5), await produce(own, 5)]          # a gap: refused
            promoted = await _admin(seaway_broker, lambda a: a.incremental_alter_configs(
                {ConfigResource.topic(topic): {UNPLANNED_FROM: "eu-west-1"}}))
            assert promoted[ConfigResource.topic(topic)] is None, promoted
            codes += [await produce(partner, 5), await produce(partner, 6),     # skipped: accepted
                      await produce(own, 5)]                                    # its own: still refused
            return codes
        finally:
            await conn.close()

    codes = anyio.run(scenario)
    oos = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert codes == [0, 0, oos, oos, 0, 0, oos], codes
    # Bad input gets the config's name.
    bad = set_configs(seaway_broker, topic, {UNPLANNED_FROM: "(fenced)"})
    assert bad is not None and bad.code == ErrorCode.INVALID_CONFIG and UNPLANNED_FROM in str(bad), bad


async def _fence(conn, topic: str):
    """Fence `topic` at the broker's current DR epoch (other tests of the shared broker may
    have raised it: a role change below it is refused)."""
    from core.protocol import messages as m
    D = m.DescribeConfigsRequest
    described = await conn.send(D(resources=[D.DescribeConfigsResource(
        resource_type=2, resource_name=DR_STATE_TOPIC, configuration_keys=[DR_EPOCH])],
        include_synonyms=False, include_documentation=False), 32)
    epoch = next((c.value for r in described.results if not r.error_code for c in r.configs
                  if c.name == DR_EPOCH and c.value), "0")
    R = m.IncrementalAlterConfigsRequest
    answer = await conn.send(R(resources=[R.AlterConfigsResource(
        resource_type=2, resource_name=topic,
        configs=[R.AlterableConfig(name=REPLICA_OF, config_operation=0, value="(fenced)"),
                 R.AlterableConfig(name=DR_EPOCH, config_operation=0, value=epoch)])],
        validate_only=False), 44)
    return answer.responses[0].error_code
