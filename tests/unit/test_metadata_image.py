"""MetadataImage / MetadataDelta: records of the metadata log -> the image they describe."""
import pytest

import core.protocol.messages as m
from core.controller import MetadataImage, MetadataImageError, UnsupportedMetadataRecord
from core.protocol.metadata_records import MetadataRecord, decode_record, encode_record
from tests.support.metadata_records import INC, T1, T2, cfg, change, part, reg, topic

BASE = [reg(1), reg(2), reg(3), topic(), part()]


def apply(records):
    return MetadataImage.empty().apply_all(records)


# --------------------------------------------------------------------------- brokers

@pytest.mark.parametrize("records, expect", [
    ([reg(1)], {1: (True, False, 10)}),
    ([reg(1), m.UnfenceBrokerRecord(id=1, epoch=10)], {1: (False, False, 10)}),
    ([reg(1), m.UnfenceBrokerRecord(id=1, epoch=10), m.FenceBrokerRecord(id=1, epoch=10)],
     {1: (True, False, 10)}),
    ([reg(1), m.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, fenced=-1)],
     {1: (False, False, 10)}),
    ([reg(1, fenced=False),
      m.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, fenced=0,
                                       in_controlled_shutdown=1)], {1: (False, True, 10)}),
    ([reg(1, fenced=False), m.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10,
                                                             fenced=1)], {1: (True, False, 10)}),
    # a new registration replaces the old one, flags included
    ([reg(1), m.UnfenceBrokerRecord(id=1, epoch=10), reg(1, epoch=11)], {1: (True, False, 11)}),
    ([reg(1), reg(2), m.UnregisterBrokerRecord(broker_id=1, broker_epoch=10)],
     {2: (True, False, 10)}),
], ids=["register", "unfence", "fence", "change-unfence", "change-shutdown", "change-fence",
        "re-register", "unregister"])
def test_broker_sequences(records, expect):
    image = apply(records)
    assert {b.id: (b.fenced, b.in_controlled_shutdown, b.epoch)
            for b in image.brokers.values()} == expect


def test_broker_registration_fields():
    b = apply([reg(4, rack="r1")]).brokers[4]
    assert b.incarnation_id == INC and b.rack == "r1"
    assert [(e.name, e.host, e.port) for e in b.endpoints] == [("PLAINTEXT", "b4", 9092)]
    assert b.supported_features == {"metadata.version": (1, 20)}


@pytest.mark.parametrize("record, match", [
    (m.FenceBrokerRecord(id=9, epoch=10), "broker 9: it is not registered"),
    (m.UnfenceBrokerRecord(id=1, epoch=9), "epoch 9: its registration has epoch 10"),
    (m.UnregisterBrokerRecord(broker_id=7, broker_epoch=10), "not registered"),
    (m.BrokerRegistrationChangeRecord(broker_id=8, broker_epoch=10), "not registered"),
    (m.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, fenced=5), "invalid Fenced"),
    (m.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, in_controlled_shutdown=3),
     "invalid InControlledShutdown"),
])
def test_broker_bad_references(record, match):
    image = apply([reg(1)])
    with pytest.raises(MetadataImageError, match=match):
        image.apply(record)


# --------------------------------------------------------------------------- partitions

# (changes, (replicas, isr, leader, leader_epoch, partition_epoch))
@pytest.mark.parametrize("changes, expect", [
    ([], ((1, 2, 3), (1, 2, 3), 1, 0, 0)),
    ([change(isr=[1, 2])], ((1, 2, 3), (1, 2), 1, 0, 1)),               # ISR only: no leader bump
    ([change(leader=2)], ((1, 2, 3), (1, 2, 3), 2, 1, 1)),
    ([change(leader=-1, isr=[])], ((1, 2, 3), (), -1, 1, 1)),           # no leader still bumps
    ([change(leader=1)], ((1, 2, 3), (1, 2, 3), 1, 1, 1)),              # same leader, set: bump
    ([change(isr=[1, 2], leader=1)], ((1, 2, 3), (1, 2), 1, 1, 1)),     # controller-forced bump
    ([change(replicas=[1, 2, 3, 4], adding_replicas=[4])], ((1, 2, 3, 4), (1, 2, 3), 1, 0, 1)),
    ([change(isr=[1]), change(leader=-1, isr=[]), change(leader=3, isr=[3])],
     ((1, 2, 3), (3,), 3, 2, 3)),
    ([change()], ((1, 2, 3), (1, 2, 3), 1, 0, 1)),                      # empty change: epoch only
], ids=["none", "isr", "leader", "no-leader", "same-leader", "isr+leader", "reassign", "sequence",
        "empty"])
def test_partition_change_epochs(changes, expect):
    p = apply(BASE + changes).partition("orders", 0)
    assert (p.replicas, p.isr, p.leader, p.leader_epoch, p.partition_epoch) == expect


def test_partition_change_keeps_unset_fields():
    p = apply(BASE + [change(replicas=[1, 2, 3, 4], adding_replicas=[4]),
                      change(leader_recovery_state=1), change(isr=[1])]).partition("orders", 0)
    assert p.adding_replicas == (4,) and p.leader_recovery_state == 1 and p.isr == (1,)
    assert p.partition_epoch == 3


@pytest.mark.parametrize("record, match", [
    (part(tid=T2), "unknown topic id"),
    (change(tid=T2, isr=[1]), "unknown topic id"),
    (change(pid=5, isr=[1]), "unknown partition orders-5"),
    (change(leader=-3), "invalid leader -3"),
    (topic("orders", T2), "already exists"),
    (topic("other", T1), "already belongs to topic 'orders'"),
    (m.RemoveTopicRecord(topic_id=T2), "unknown topic id"),
    (cfg(2, "nope", "retention.ms", "1"), "unknown topic 'nope'"),
    (cfg(4, "broker-x", "k", "v"), "not a broker id"),
    (topic("zero", bytes(16)), "zero topic id"),
])
def test_topic_bad_references(record, match):
    image = apply(BASE)
    with pytest.raises(MetadataImageError, match=match):
        image.apply(record)


def test_failed_apply_leaves_image_unchanged():
    image = apply(BASE)
    with pytest.raises(MetadataImageError):
        image.apply(change(pid=9, isr=[1]))
    assert image == apply(BASE)


def test_apply_does_not_mutate_previous_image():
    before = apply(BASE)
    after = before.apply(change(leader=2))
    assert before.partition("orders", 0).leader == 1 and after.partition("orders", 0).leader == 2
    with pytest.raises(TypeError):
        after.topics[T2] = None


# --------------------------------------------------------------------------- topics and configs

def test_topic_removal_drops_partitions_and_configs():
    image = apply(BASE + [topic("logs", T2), part(tid=T2), cfg(2, "orders", "retention.ms", "1"),
                          cfg(2, "logs", "cleanup.policy", "compact"),
                          m.RemoveTopicRecord(topic_id=T1)])
    assert image.topic("orders") is None and T1 not in image.topics
    assert image.topic_config("orders") == {}
    assert image.topic_config("logs") == {"cleanup.policy": "compact"}
    # the name can be reused with a new id, and starts clean
    image = image.apply(topic("orders", bytes([7] * 16)))
    assert image.topic("orders").partitions == {} and image.topic_config("orders") == {}


def test_config_set_overwrite_delete():
    image = apply(BASE + [cfg(2, "orders", "retention.ms", "1"), cfg(2, "orders", "retention.ms", "2"),
                          cfg(2, "orders", "segment.ms", "3"), cfg(4, "1", "log.retention", "x"),
                          cfg(4, "", "cluster.default", "y"), cfg(2, "orders", "segment.ms", None)])
    assert image.topic_config("orders") == {"retention.ms": "2"}
    assert image.broker_config(1) == {"log.retention": "x"}
    assert image.broker_config("") == {"cluster.default": "y"}
    image = image.apply(cfg(4, "1", "log.retention", None))
    assert (4, "1") not in image.configs  # an emptied resource disappears
    image = image.apply(cfg(4, "1", "never.set", None))
    assert (4, "1") not in image.configs


def test_config_copy_on_write():
    a = apply(BASE + [cfg(2, "orders", "k", "1")])
    b = a.apply(cfg(2, "orders", "k", "2"))
    assert a.topic_config("orders") == {"k": "1"} and b.topic_config("orders") == {"k": "2"}


# --------------------------------------------------------------------------- producer ids, features

def test_producer_ids_and_features():
    image = apply([m.ProducerIdsRecord(broker_id=1, broker_epoch=10, next_producer_id=1000),
                   m.ProducerIdsRecord(broker_id=2, broker_epoch=10, next_producer_id=2000),
                   m.FeatureLevelRecord(name="metadata.version", feature_level=20),
                   m.FeatureLevelRecord(name="kraft.version", feature_level=1),
                   m.FeatureLevelRecord(name="kraft.version", feature_level=0),
                   m.NoOpRecord()])
    assert image.next_producer_id == 2000
    assert image.features == {"metadata.version": 20}
    with pytest.raises(MetadataImageError, match="not greater"):
        image.apply(m.ProducerIdsRecord(broker_id=1, broker_epoch=10, next_producer_id=2000))


def test_unsupported_record_type_raises():
    with pytest.raises(UnsupportedMetadataRecord, match="ClientQuotaRecord"):
        MetadataImage.empty().apply(m.ClientQuotaRecord(entity=[], key="producer_byte_rate", value=1.0,
                                                        remove=False))


def test_acls_are_added_by_a_new_id_and_removed_by_an_existing_one():
    def entry(acl_id: bytes, name: str = "t"):
        return m.AccessControlEntryRecord(id=acl_id, resource_type=2, resource_name=name, pattern_type=3,
                                          principal="User:a", host="*", operation=3, permission_type=3)
    first, second = bytes(range(16)), bytes(range(1, 17))
    image = MetadataImage.empty().apply_all([entry(first), entry(second, "u")])
    assert {a.resource_name for a in image.acls.values()} == {"t", "u"}
    with pytest.raises(MetadataImageError, match="already exists"):
        image.apply(entry(first, "v"))
    smaller = image.apply(m.RemoveAccessControlEntryRecord(id=first))
    assert list(smaller.acls) == [second] and len(image.acls) == 2   # the old image is untouched
    with pytest.raises(MetadataImageError, match="no ACL has id"):
        smaller.apply(m.RemoveAccessControlEntryRecord(id=first))


# --------------------------------------------------------------------------- wire round trip

FULL_LOG = BASE + [
    m.UnfenceBrokerRecord(id=1, epoch=10),
    m.BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=10, fenced=-1,
                                     in_controlled_shutdown=1),
    topic("logs", T2), part(tid=T2), part(pid=1, tid=T2, leader=2),
    change(isr=[1, 2]), change(leader=2, isr=[2]), change(tid=T2, pid=1, leader=-1, isr=[]),
    cfg(2, "logs", "cleanup.policy", "compact"), cfg(4, "1", "k", "v"),
    m.ProducerIdsRecord(broker_id=1, broker_epoch=10, next_producer_id=1000),
    m.FeatureLevelRecord(name="metadata.version", feature_level=20),
    m.RemoveTopicRecord(topic_id=T2),
    m.UnregisterBrokerRecord(broker_id=3, broker_epoch=10),
]


def test_round_trip_through_encoded_records_gives_same_image():
    direct = apply(FULL_LOG)
    decoded = [decode_record(encode_record(r)) for r in FULL_LOG]
    assert all(isinstance(r, MetadataRecord) for r in decoded)
    assert apply(decoded) == direct
    # and one record at a time gives the same as one delta for all
    image = MetadataImage.empty()
    for r in decoded:
        image = image.apply(r)
    assert image == direct
    assert set(direct.brokers) == {1, 2} and not direct.brokers[1].fenced
    assert direct.brokers[2].in_controlled_shutdown
    p = direct.partition("orders", 0)
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (2, (2,), 1, 2)
    assert direct.topic("logs") is None and direct.configs == {(4, "1"): {"k": "v"}}


def test_round_trip_at_older_versions():
    old = [MetadataRecord(r, 0) for r in FULL_LOG]
    decoded = [decode_record(encode_record(r)) for r in old]
    image, expected = apply(decoded), apply(FULL_LOG)
    # BrokerRegistrationChangeRecord v0 has no InControlledShutdown: that change is lost at v0
    assert not image.brokers[2].in_controlled_shutdown and expected.brokers[2].in_controlled_shutdown
    assert image.topics == expected.topics and image.configs == expected.configs
    assert image.brokers[1] == expected.brokers[1]
