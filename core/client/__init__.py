"""Seaway's asyncio Kafka client. It speaks only the wire protocol (core.protocol).

    async with KafkaClient("127.0.0.1:9092") as client:
        async with Producer(client, acks=-1, compression="zstd") as producer:
            meta = await (await producer.send("orders", b"value", key=b"k"))
        consumer = Consumer(client, group_id="billing")   # or Consumer(client) + assign()
        consumer.subscribe(["orders"])
        records = await consumer.poll(timeout_ms=1000)
        await consumer.commit()
        await consumer.close()
        admin = Admin(client)
        check(await admin.create_topics([NewTopic("events", 3, 1)]))

Producer, Consumer and Admin share one KafkaClient (its connections and metadata) and do
not close it: the code that created the client closes it.

Background work runs in anyio task groups (tasks.py). The client's and each producer's are
entered by `async with` (or `start()`) and left by `close()`, which must come from the same
task, outside any cancel scope entered since (anyio's rule: `async with` does it right). A
consumer's runs inside its client's: it needs no start() and may be polled and closed from any
task. Closing the client stops whatever it still runs.
"""
from core.protocol.errors import ErrorCode, KafkaError

from .accumulator import RecordMetadata
from .admin import (Admin, AlterConfigOp, ClusterDescription, ConfigEntry, ConfigResource,
                    ConfigResourceType, NewTopic, PartitionDescription, TopicDescription, check)
from .assignors import Assignor, CooperativeStickyAssignor, RangeAssignor, RoundRobinAssignor
from .client import KafkaClient
from .cluster import BrokerInfo, ClusterView, PartitionInfo, TopicInfo
from .connection import BrokerConnection
from .consumer import Consumer, ConsumerRecord
from .errors import (ClientClosedError, KafkaConnectionError, ProtocolError, RequestTimedOutError,
                     UnsupportedVersionError)
from .group import CommitFailedError, GroupMetadata, RebalanceListener
from .group_admin import GroupDescription, GroupListing, MemberDescription, OffsetAndMetadata
from .offsets import EARLIEST, LATEST, MAX_TIMESTAMP, OffsetAndTimestamp
from .partitioner import DefaultPartitioner, RoundRobinPartitioner, murmur2, murmur2_partition
from .producer import Producer

__all__ = [
    "KafkaClient", "Producer", "Consumer", "Admin", "BrokerConnection",
    "RecordMetadata", "ConsumerRecord", "OffsetAndTimestamp",
    "GroupMetadata", "CommitFailedError", "RebalanceListener",
    "Assignor", "RangeAssignor", "RoundRobinAssignor", "CooperativeStickyAssignor",
    "NewTopic", "TopicDescription", "PartitionDescription", "ConfigResource", "ConfigResourceType",
    "ConfigEntry", "AlterConfigOp", "ClusterDescription", "check",
    "GroupListing", "GroupDescription", "MemberDescription", "OffsetAndMetadata",
    "ClusterView", "BrokerInfo", "TopicInfo", "PartitionInfo",
    "KafkaError", "ErrorCode", "KafkaConnectionError", "RequestTimedOutError",
    "UnsupportedVersionError", "ClientClosedError", "ProtocolError",
    "EARLIEST", "LATEST", "MAX_TIMESTAMP",
    "DefaultPartitioner", "RoundRobinPartitioner", "murmur2", "murmur2_partition",
]
