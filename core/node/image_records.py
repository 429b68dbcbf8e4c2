"""A MetadataImage written back out as the metadata records that rebuild it (a snapshot).

Replaying `image_records(image)` into an empty image gives an equal image: that round trip is
what makes a snapshot a faithful stand-in for the log it replaces (tested in
tests/unit/test_metadata_snapshot.py).
"""
from __future__ import annotations

from typing import Iterator

from core.controller.image import MetadataImage
from core.protocol import messages as m
from core.protocol.codegen import Message


def image_records(image: MetadataImage) -> Iterator[Message]:
    for name, level in sorted(image.features.items()):
        yield m.FeatureLevelRecord(name=name, feature_level=level)
    for broker in sorted(image.brokers.values(), key=lambda b: b.id):
        yield m.RegisterBrokerRecord(
            broker_id=broker.id, is_migrating_zk_broker=broker.is_migrating_zk_broker,
            incarnation_id=broker.incarnation_id, broker_epoch=broker.epoch,
            end_points=[m.RegisterBrokerRecord.BrokerEndpoint(name=e.name, host=e.host, port=e.port,
                                                               security_protocol=e.security_protocol)
                        for e in broker.endpoints],
            features=[m.RegisterBrokerRecord.BrokerFeature(name=n, min_supported_version=lo,
                                                            max_supported_version=hi)
                      for n, (lo, hi) in sorted(broker.supported_features.items())],
            rack=broker.rack, fenced=broker.fenced,
            in_controlled_shutdown=broker.in_controlled_shutdown, log_dirs=list(broker.log_dirs))
    for name in sorted(image.topic_ids):
        topic = image.topics[image.topic_ids[name]]
        yield m.TopicRecord(name=name, topic_id=topic.id)
        for index, p in sorted(topic.partitions.items()):
            yield m.PartitionRecord(
                partition_id=index, topic_id=topic.id, replicas=list(p.replicas), isr=list(p.isr),
                removing_replicas=list(p.removing_replicas), adding_replicas=list(p.adding_replicas),
                leader=p.leader, leader_recovery_state=p.leader_recovery_state,
                leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                directories=list(p.directories),
                eligible_leader_replicas=list(p.elr) or None,
                last_known_elr=list(p.last_known_elr) or None)
    for (rtype, rname), entries in sorted(image.configs.items()):
        for key, value in sorted(entries.items()):
            yield m.ConfigRecord(resource_type=rtype, resource_name=rname, name=key, value=value)
    for (user, mechanism), entry in sorted(image.scram.items()):
        yield m.UserScramCredentialRecord(name=user, mechanism=mechanism, salt=entry.salt,
                                          stored_key=entry.stored_key, server_key=entry.server_key,
                                          iterations=entry.iterations)
    for acl_id, a in sorted(image.acls.items()):
        yield m.AccessControlEntryRecord(id=acl_id, resource_type=a.resource_type, resource_name=a.resource_name,
                                         pattern_type=a.pattern_type, principal=a.principal, host=a.host,
                                         operation=a.operation, permission_type=a.permission)
    if image.next_producer_id > 0:
        # The broker id and epoch of the last allocation are not part of the image; any valid
        # values do, since replay checks only that the next id grows.
        yield m.ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=image.next_producer_id)
