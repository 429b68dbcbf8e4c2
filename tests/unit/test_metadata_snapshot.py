"""A MetadataImage written out as records (core/node/image_records.py, what a snapshot holds)
rebuilds the same image: every part of the image, SCRAM credentials and ACLs included."""
import core.protocol.messages as m
from core.controller import MetadataImage
from core.node.image_records import image_records
from core.protocol.metadata_records import decode_record, encode_record
from tests.support.metadata_records import T1, T2, cfg, change, part, reg, topic

LOG = [
    reg(1), reg(2), reg(3), m.UnfenceBrokerRecord(id=1, epoch=10),
    topic(), part(), topic("logs", T2), part(tid=T2), part(pid=1, tid=T2, leader=2),
    change(isr=[1, 2]), cfg(2, "logs", "cleanup.policy", "compact"), cfg(4, "1", "k", "v"),
    m.ProducerIdsRecord(broker_id=1, broker_epoch=10, next_producer_id=1000),
    m.FeatureLevelRecord(name="metadata.version", feature_level=20),
    m.UserScramCredentialRecord(name="alice", mechanism=1, salt=b"s", stored_key=b"k", server_key=b"v",
                                iterations=8192),
    m.UserScramCredentialRecord(name="alice", mechanism=2, salt=b"t", stored_key=b"l", server_key=b"w",
                                iterations=4096),
    m.AccessControlEntryRecord(id=bytes(range(16)), resource_type=2, resource_name="orders-", pattern_type=4,
                               principal="User:alice", host="*", operation=4, permission_type=3),
    m.AccessControlEntryRecord(id=bytes(range(1, 17)), resource_type=4, resource_name="kafka-cluster",
                               pattern_type=3, principal="User:*", host="10.0.0.1", operation=8,
                               permission_type=2),
]


def test_an_image_written_as_records_rebuilds_itself():
    image = MetadataImage.empty().apply_all(LOG)
    assert len(image.scram) == 2 and len(image.acls) == 2 and T1 in image.topics
    records = list(image_records(image))
    assert MetadataImage.empty().apply_all(records) == image
    # ... through the wire encoding too, as a snapshot file carries them.
    decoded = [decode_record(encode_record(r)).message for r in records]
    assert MetadataImage.empty().apply_all(decoded) == image


def test_removals_leave_nothing_behind_in_the_snapshot():
    image = MetadataImage.empty().apply_all(LOG + [
        m.RemoveUserScramCredentialRecord(name="alice", mechanism=1),
        m.RemoveAccessControlEntryRecord(id=bytes(range(16)))])
    rebuilt = MetadataImage.empty().apply_all(image_records(image))
    assert list(rebuilt.scram) == [("alice", 2)] and list(rebuilt.acls) == [bytes(range(1, 17))]
