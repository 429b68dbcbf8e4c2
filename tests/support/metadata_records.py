"""Metadata log records, built with few words: brokers, topics, partitions, configs."""
from __future__ import annotations

import core.protocol.messages as m

T1 = bytes(range(1, 17))
T2 = bytes(range(17, 33))
INC = bytes([9] * 16)


def reg(bid, epoch=10, fenced=True, rack=None):
    return m.RegisterBrokerRecord(
        broker_id=bid, incarnation_id=INC, broker_epoch=epoch,
        end_points=[m.RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host=f"b{bid}",
                                                          port=9092, security_protocol=0)],
        features=[m.RegisterBrokerRecord.BrokerFeature(name="metadata.version",
                                                       min_supported_version=1,
                                                       max_supported_version=20)],
        rack=rack, fenced=fenced)


def topic(name="orders", tid=T1):
    return m.TopicRecord(name=name, topic_id=tid)


def part(pid=0, tid=T1, replicas=(1, 2, 3), isr=(1, 2, 3), leader=1):
    return m.PartitionRecord(partition_id=pid, topic_id=tid, replicas=list(replicas),
                             isr=list(isr), removing_replicas=[], adding_replicas=[],
                             leader=leader, leader_epoch=0, partition_epoch=0)


def change(pid=0, tid=T1, **kw):
    return m.PartitionChangeRecord(partition_id=pid, topic_id=tid, **kw)


def cfg(rtype, rname, name, value):
    return m.ConfigRecord(resource_type=rtype, resource_name=rname, name=name, value=value)
