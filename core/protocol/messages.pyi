# Generated from core/protocol/schema by `python -m core.protocol.codegen --stubs`. Do not edit.
"""Types of core/protocol/messages.py: the registry, and every class it compiles from the
schema (requests and responses, headers, data structs, metadata records)."""
from collections.abc import Sequence
from typing import TypeAlias

from .api_keys import ApiKey as ApiKey
from .codegen import Message, MessageCodec
from .dsl import ApiSchema

_Buffer: TypeAlias = bytes | bytearray | memoryview
# Decoded: a memoryview of the frame. Encoded from one buffer or a sequence of them.
_Records: TypeAlias = _Buffer | Sequence[_Buffer] | None

class Api:
    key: int
    name: str
    min_version: int
    max_version: int
    request: MessageCodec
    response: MessageCodec
    schema: ApiSchema
    _flexible: frozenset[int]
    def __init__(
        self,
        key: int,
        name: str,
        min_version: int,
        max_version: int,
        request: MessageCodec,
        response: MessageCodec,
        schema: ApiSchema,
    ) -> None: ...
    def is_flexible(self, version: int) -> bool: ...
    def request_header_version(self, version: int) -> int: ...
    def response_header_version(self, version: int) -> int: ...
    def supports(self, version: int) -> bool: ...

API: dict[int, Api]
API_BY_NAME: dict[str, Api]
REQUEST_HEADER: MessageCodec
RESPONSE_HEADER: MessageCodec
DATA: dict[str, MessageCodec]
METADATA_RECORDS: dict[int, MessageCodec]
METADATA_RECORDS_BY_NAME: dict[str, MessageCodec]

# --------------------------------------------------------------------------- APIs, by key

class ProduceRequest(Message):
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[ProduceRequest.TopicProduceData]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        transactional_id: str | None = ...,
        acks: int = ...,
        timeout_ms: int = ...,
        topic_data: list[ProduceRequest.TopicProduceData] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class TopicProduceData(Message):
        name: str
        partition_data: list[ProduceRequest.PartitionProduceData]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partition_data: list[ProduceRequest.PartitionProduceData] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class PartitionProduceData(Message):
        index: int
        records: _Records
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            index: int = ...,
            records: _Records = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class ProduceResponse(Message):
    responses: list[ProduceResponse.TopicProduceResponse]
    throttle_time_ms: int
    node_endpoints: list[ProduceResponse.NodeEndpoint]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        responses: list[ProduceResponse.TopicProduceResponse] = ...,
        throttle_time_ms: int = ...,
        node_endpoints: list[ProduceResponse.NodeEndpoint] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class TopicProduceResponse(Message):
        name: str
        partition_responses: list[ProduceResponse.PartitionProduceResponse]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partition_responses: list[ProduceResponse.PartitionProduceResponse] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class PartitionProduceResponse(Message):
        index: int
        error_code: int
        base_offset: int
        log_append_time_ms: int
        log_start_offset: int
        record_errors: list[ProduceResponse.BatchIndexAndErrorMessage]
        error_message: str | None
        current_leader: ProduceResponse.LeaderIdAndEpoch
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            index: int = ...,
            error_code: int = ...,
            base_offset: int = ...,
            log_append_time_ms: int = ...,
            log_start_offset: int = ...,
            record_errors: list[ProduceResponse.BatchIndexAndErrorMessage] = ...,
            error_message: str | None = ...,
            current_leader: ProduceResponse.LeaderIdAndEpoch = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class BatchIndexAndErrorMessage(Message):
        batch_index: int
        batch_index_error_message: str | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            batch_index: int = ...,
            batch_index_error_message: str | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class LeaderIdAndEpoch(Message):
        leader_id: int
        leader_epoch: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            leader_id: int = ...,
            leader_epoch: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class NodeEndpoint(Message):
        node_id: int
        host: str
        port: int
        rack: str | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            node_id: int = ...,
            host: str = ...,
            port: int = ...,
            rack: str | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class FetchRequest(Message):
    cluster_id: str | None
    replica_id: int
    replica_state: FetchRequest.ReplicaState
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: list[FetchRequest.FetchTopic]
    forgotten_topics_data: list[FetchRequest.ForgottenTopic]
    rack_id: str
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        cluster_id: str | None = ...,
        replica_id: int = ...,
        replica_state: FetchRequest.ReplicaState = ...,
        max_wait_ms: int = ...,
        min_bytes: int = ...,
        max_bytes: int = ...,
        isolation_level: int = ...,
        session_id: int = ...,
        session_epoch: int = ...,
        topics: list[FetchRequest.FetchTopic] = ...,
        forgotten_topics_data: list[FetchRequest.ForgottenTopic] = ...,
        rack_id: str = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class ReplicaState(Message):
        replica_id: int
        replica_epoch: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            replica_id: int = ...,
            replica_epoch: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class FetchTopic(Message):
        topic: str
        topic_id: bytes
        partitions: list[FetchRequest.FetchPartition]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            topic: str = ...,
            topic_id: bytes = ...,
            partitions: list[FetchRequest.FetchPartition] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class FetchPartition(Message):
        partition: int
        current_leader_epoch: int
        fetch_offset: int
        last_fetched_epoch: int
        log_start_offset: int
        partition_max_bytes: int
        replica_directory_id: bytes
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition: int = ...,
            current_leader_epoch: int = ...,
            fetch_offset: int = ...,
            last_fetched_epoch: int = ...,
            log_start_offset: int = ...,
            partition_max_bytes: int = ...,
            replica_directory_id: bytes = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class ForgottenTopic(Message):
        topic: str
        topic_id: bytes
        partitions: list[int]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            topic: str = ...,
            topic_id: bytes = ...,
            partitions: list[int] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class FetchResponse(Message):
    throttle_time_ms: int
    error_code: int
    session_id: int
    responses: list[FetchResponse.FetchableTopicResponse]
    node_endpoints: list[FetchResponse.NodeEndpoint]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        session_id: int = ...,
        responses: list[FetchResponse.FetchableTopicResponse] = ...,
        node_endpoints: list[FetchResponse.NodeEndpoint] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class FetchableTopicResponse(Message):
        topic: str
        topic_id: bytes
        partitions: list[FetchResponse.PartitionData]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            topic: str = ...,
            topic_id: bytes = ...,
            partitions: list[FetchResponse.PartitionData] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class PartitionData(Message):
        partition_index: int
        error_code: int
        high_watermark: int
        last_stable_offset: int
        log_start_offset: int
        diverging_epoch: FetchResponse.EpochEndOffset
        current_leader: FetchResponse.LeaderIdAndEpoch
        snapshot_id: FetchResponse.SnapshotId
        aborted_transactions: list[FetchResponse.AbortedTransaction] | None
        preferred_read_replica: int
        records: _Records
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            error_code: int = ...,
            high_watermark: int = ...,
            last_stable_offset: int = ...,
            log_start_offset: int = ...,
            diverging_epoch: FetchResponse.EpochEndOffset = ...,
            current_leader: FetchResponse.LeaderIdAndEpoch = ...,
            snapshot_id: FetchResponse.SnapshotId = ...,
            aborted_transactions: list[FetchResponse.AbortedTransaction] | None = ...,
            preferred_read_replica: int = ...,
            records: _Records = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class EpochEndOffset(Message):
        epoch: int
        end_offset: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            epoch: int = ...,
            end_offset: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class LeaderIdAndEpoch(Message):
        leader_id: int
        leader_epoch: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            leader_id: int = ...,
            leader_epoch: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class SnapshotId(Message):
        end_offset: int
        epoch: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            end_offset: int = ...,
            epoch: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class AbortedTransaction(Message):
        producer_id: int
        first_offset: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            producer_id: int = ...,
            first_offset: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class NodeEndpoint(Message):
        node_id: int
        host: str
        port: int
        rack: str | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            node_id: int = ...,
            host: str = ...,
            port: int = ...,
            rack: str | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class ListOffsetsRequest(Message):
    replica_id: int
    isolation_level: int
    topics: list[ListOffsetsRequest.ListOffsetsTopic]
    timeout_ms: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        replica_id: int = ...,
        isolation_level: int = ...,
        topics: list[ListOffsetsRequest.ListOffsetsTopic] = ...,
        timeout_ms: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class ListOffsetsTopic(Message):
        name: str
        partitions: list[ListOffsetsRequest.ListOffsetsPartition]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partitions: list[ListOffsetsRequest.ListOffsetsPartition] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class ListOffsetsPartition(Message):
        partition_index: int
        current_leader_epoch: int
        timestamp: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            current_leader_epoch: int = ...,
            timestamp: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class ListOffsetsResponse(Message):
    throttle_time_ms: int
    topics: list[ListOffsetsResponse.ListOffsetsTopicResponse]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        topics: list[ListOffsetsResponse.ListOffsetsTopicResponse] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class ListOffsetsTopicResponse(Message):
        name: str
        partitions: list[ListOffsetsResponse.ListOffsetsPartitionResponse]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partitions: list[ListOffsetsResponse.ListOffsetsPartitionResponse] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class ListOffsetsPartitionResponse(Message):
        partition_index: int
        error_code: int
        timestamp: int
        offset: int
        leader_epoch: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            error_code: int = ...,
            timestamp: int = ...,
            offset: int = ...,
            leader_epoch: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class MetadataRequest(Message):
    topics: list[MetadataRequest.MetadataRequestTopic] | None
    allow_auto_topic_creation: bool
    include_cluster_authorized_operations: bool
    include_topic_authorized_operations: bool
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        topics: list[MetadataRequest.MetadataRequestTopic] | None = ...,
        allow_auto_topic_creation: bool = ...,
        include_cluster_authorized_operations: bool = ...,
        include_topic_authorized_operations: bool = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class MetadataRequestTopic(Message):
        topic_id: bytes
        name: str | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            topic_id: bytes = ...,
            name: str | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class MetadataResponse(Message):
    throttle_time_ms: int
    brokers: list[MetadataResponse.MetadataResponseBroker]
    cluster_id: str | None
    controller_id: int
    topics: list[MetadataResponse.MetadataResponseTopic]
    cluster_authorized_operations: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        brokers: list[MetadataResponse.MetadataResponseBroker] = ...,
        cluster_id: str | None = ...,
        controller_id: int = ...,
        topics: list[MetadataResponse.MetadataResponseTopic] = ...,
        cluster_authorized_operations: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class MetadataResponseBroker(Message):
        node_id: int
        host: str
        port: int
        rack: str | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            node_id: int = ...,
            host: str = ...,
            port: int = ...,
            rack: str | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class MetadataResponseTopic(Message):
        error_code: int
        name: str | None
        topic_id: bytes
        is_internal: bool
        partitions: list[MetadataResponse.MetadataResponsePartition]
        topic_authorized_operations: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            error_code: int = ...,
            name: str | None = ...,
            topic_id: bytes = ...,
            is_internal: bool = ...,
            partitions: list[MetadataResponse.MetadataResponsePartition] = ...,
            topic_authorized_operations: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class MetadataResponsePartition(Message):
        error_code: int
        partition_index: int
        leader_id: int
        leader_epoch: int
        replica_nodes: list[int]
        isr_nodes: list[int]
        offline_replicas: list[int]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            error_code: int = ...,
            partition_index: int = ...,
            leader_id: int = ...,
            leader_epoch: int = ...,
            replica_nodes: list[int] = ...,
            isr_nodes: list[int] = ...,
            offline_replicas: list[int] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class OffsetCommitRequest(Message):
    group_id: str
    generation_id_or_member_epoch: int
    member_id: str
    group_instance_id: str | None
    retention_time_ms: int
    topics: list[OffsetCommitRequest.OffsetCommitRequestTopic]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        group_id: str = ...,
        generation_id_or_member_epoch: int = ...,
        member_id: str = ...,
        group_instance_id: str | None = ...,
        retention_time_ms: int = ...,
        topics: list[OffsetCommitRequest.OffsetCommitRequestTopic] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class OffsetCommitRequestTopic(Message):
        name: str
        partitions: list[OffsetCommitRequest.OffsetCommitRequestPartition]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partitions: list[OffsetCommitRequest.OffsetCommitRequestPartition] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class OffsetCommitRequestPartition(Message):
        partition_index: int
        committed_offset: int
        committed_leader_epoch: int
        commit_timestamp: int
        committed_metadata: str | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            committed_offset: int = ...,
            committed_leader_epoch: int = ...,
            commit_timestamp: int = ...,
            committed_metadata: str | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class OffsetCommitResponse(Message):
    throttle_time_ms: int
    topics: list[OffsetCommitResponse.OffsetCommitResponseTopic]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        topics: list[OffsetCommitResponse.OffsetCommitResponseTopic] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class OffsetCommitResponseTopic(Message):
        name: str
        partitions: list[OffsetCommitResponse.OffsetCommitResponsePartition]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partitions: list[OffsetCommitResponse.OffsetCommitResponsePartition] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class OffsetCommitResponsePartition(Message):
        partition_index: int
        error_code: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            error_code: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class OffsetFetchRequest(Message):
    group_id: str
    topics: list[OffsetFetchRequest.OffsetFetchRequestTopic] | None
    groups: list[OffsetFetchRequest.OffsetFetchRequestGroup]
    require_stable: bool
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        group_id: str = ...,
        topics: list[OffsetFetchRequest.OffsetFetchRequestTopic] | None = ...,
        groups: list[OffsetFetchRequest.OffsetFetchRequestGroup] = ...,
        require_stable: bool = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class OffsetFetchRequestTopic(Message):
        name: str
        partition_indexes: list[int]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partition_indexes: list[int] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class OffsetFetchRequestGroup(Message):
        group_id: str
        member_id: str | None
        member_epoch: int
        topics: list[OffsetFetchRequest.OffsetFetchRequestTopics] | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            group_id: str = ...,
            member_id: str | None = ...,
            member_epoch: int = ...,
            topics: list[OffsetFetchRequest.OffsetFetchRequestTopics] | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class OffsetFetchRequestTopics(Message):
        name: str
        partition_indexes: list[int]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partition_indexes: list[int] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class OffsetFetchResponse(Message):
    throttle_time_ms: int
    topics: list[OffsetFetchResponse.OffsetFetchResponseTopic]
    error_code: int
    groups: list[OffsetFetchResponse.OffsetFetchResponseGroup]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        topics: list[OffsetFetchResponse.OffsetFetchResponseTopic] = ...,
        error_code: int = ...,
        groups: list[OffsetFetchResponse.OffsetFetchResponseGroup] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class OffsetFetchResponseTopic(Message):
        name: str
        partitions: list[OffsetFetchResponse.OffsetFetchResponsePartition]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partitions: list[OffsetFetchResponse.OffsetFetchResponsePartition] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class OffsetFetchResponsePartition(Message):
        partition_index: int
        committed_offset: int
        committed_leader_epoch: int
        metadata: str | None
        error_code: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            committed_offset: int = ...,
            committed_leader_epoch: int = ...,
            metadata: str | None = ...,
            error_code: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class OffsetFetchResponseGroup(Message):
        group_id: str
        topics: list[OffsetFetchResponse.OffsetFetchResponseTopics]
        error_code: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            group_id: str = ...,
            topics: list[OffsetFetchResponse.OffsetFetchResponseTopics] = ...,
            error_code: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class OffsetFetchResponseTopics(Message):
        name: str
        partitions: list[OffsetFetchResponse.OffsetFetchResponsePartitions]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partitions: list[OffsetFetchResponse.OffsetFetchResponsePartitions] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class OffsetFetchResponsePartitions(Message):
        partition_index: int
        committed_offset: int
        committed_leader_epoch: int
        metadata: str | None
        error_code: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            committed_offset: int = ...,
            committed_leader_epoch: int = ...,
            metadata: str | None = ...,
            error_code: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class FindCoordinatorRequest(Message):
    key: str
    key_type: int
    coordinator_keys: list[str]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        key: str = ...,
        key_type: int = ...,
        coordinator_keys: list[str] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class FindCoordinatorResponse(Message):
    throttle_time_ms: int
    error_code: int
    error_message: str | None
    node_id: int
    host: str
    port: int
    coordinators: list[FindCoordinatorResponse.Coordinator]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        error_message: str | None = ...,
        node_id: int = ...,
        host: str = ...,
        port: int = ...,
        coordinators: list[FindCoordinatorResponse.Coordinator] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class Coordinator(Message):
        key: str
        node_id: int
        host: str
        port: int
        error_code: int
        error_message: str | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            key: str = ...,
            node_id: int = ...,
            host: str = ...,
            port: int = ...,
            error_code: int = ...,
            error_message: str | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class JoinGroupRequest(Message):
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: list[JoinGroupRequest.JoinGroupRequestProtocol]
    reason: str | None
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        group_id: str = ...,
        session_timeout_ms: int = ...,
        rebalance_timeout_ms: int = ...,
        member_id: str = ...,
        group_instance_id: str | None = ...,
        protocol_type: str = ...,
        protocols: list[JoinGroupRequest.JoinGroupRequestProtocol] = ...,
        reason: str | None = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class JoinGroupRequestProtocol(Message):
        name: str
        metadata: bytes
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            metadata: bytes = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class JoinGroupResponse(Message):
    throttle_time_ms: int
    error_code: int
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str
    skip_assignment: bool
    member_id: str
    members: list[JoinGroupResponse.JoinGroupResponseMember]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        generation_id: int = ...,
        protocol_type: str | None = ...,
        protocol_name: str | None = ...,
        leader: str = ...,
        skip_assignment: bool = ...,
        member_id: str = ...,
        members: list[JoinGroupResponse.JoinGroupResponseMember] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class JoinGroupResponseMember(Message):
        member_id: str
        group_instance_id: str | None
        metadata: bytes
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            member_id: str = ...,
            group_instance_id: str | None = ...,
            metadata: bytes = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class HeartbeatRequest(Message):
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        group_id: str = ...,
        generation_id: int = ...,
        member_id: str = ...,
        group_instance_id: str | None = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class HeartbeatResponse(Message):
    throttle_time_ms: int
    error_code: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class LeaveGroupRequest(Message):
    group_id: str
    member_id: str
    members: list[LeaveGroupRequest.MemberIdentity]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        group_id: str = ...,
        member_id: str = ...,
        members: list[LeaveGroupRequest.MemberIdentity] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class MemberIdentity(Message):
        member_id: str
        group_instance_id: str | None
        reason: str | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            member_id: str = ...,
            group_instance_id: str | None = ...,
            reason: str | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class LeaveGroupResponse(Message):
    throttle_time_ms: int
    error_code: int
    members: list[LeaveGroupResponse.MemberResponse]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        members: list[LeaveGroupResponse.MemberResponse] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class MemberResponse(Message):
        member_id: str
        group_instance_id: str | None
        error_code: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            member_id: str = ...,
            group_instance_id: str | None = ...,
            error_code: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class SyncGroupRequest(Message):
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: list[SyncGroupRequest.SyncGroupRequestAssignment]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        group_id: str = ...,
        generation_id: int = ...,
        member_id: str = ...,
        group_instance_id: str | None = ...,
        protocol_type: str | None = ...,
        protocol_name: str | None = ...,
        assignments: list[SyncGroupRequest.SyncGroupRequestAssignment] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class SyncGroupRequestAssignment(Message):
        member_id: str
        assignment: bytes
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            member_id: str = ...,
            assignment: bytes = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class SyncGroupResponse(Message):
    throttle_time_ms: int
    error_code: int
    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        protocol_type: str | None = ...,
        protocol_name: str | None = ...,
        assignment: bytes = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class DescribeGroupsRequest(Message):
    groups: list[str]
    include_authorized_operations: bool
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        groups: list[str] = ...,
        include_authorized_operations: bool = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class DescribeGroupsResponse(Message):
    throttle_time_ms: int
    groups: list[DescribeGroupsResponse.DescribedGroup]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        groups: list[DescribeGroupsResponse.DescribedGroup] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class DescribedGroup(Message):
        error_code: int
        group_id: str
        group_state: str
        protocol_type: str
        protocol_data: str
        members: list[DescribeGroupsResponse.DescribedGroupMember]
        authorized_operations: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            error_code: int = ...,
            group_id: str = ...,
            group_state: str = ...,
            protocol_type: str = ...,
            protocol_data: str = ...,
            members: list[DescribeGroupsResponse.DescribedGroupMember] = ...,
            authorized_operations: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class DescribedGroupMember(Message):
        member_id: str
        group_instance_id: str | None
        client_id: str
        client_host: str
        member_metadata: bytes
        member_assignment: bytes
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            member_id: str = ...,
            group_instance_id: str | None = ...,
            client_id: str = ...,
            client_host: str = ...,
            member_metadata: bytes = ...,
            member_assignment: bytes = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class ListGroupsRequest(Message):
    states_filter: list[str]
    types_filter: list[str]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        states_filter: list[str] = ...,
        types_filter: list[str] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class ListGroupsResponse(Message):
    throttle_time_ms: int
    error_code: int
    groups: list[ListGroupsResponse.ListedGroup]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        groups: list[ListGroupsResponse.ListedGroup] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class ListedGroup(Message):
        group_id: str
        protocol_type: str
        group_state: str
        group_type: str
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            group_id: str = ...,
            protocol_type: str = ...,
            group_state: str = ...,
            group_type: str = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class SaslHandshakeRequest(Message):
    mechanism: str
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        mechanism: str = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class SaslHandshakeResponse(Message):
    error_code: int
    mechanisms: list[str]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        error_code: int = ...,
        mechanisms: list[str] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class ApiVersionsRequest(Message):
    client_software_name: str
    client_software_version: str
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        client_software_name: str = ...,
        client_software_version: str = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class ApiVersionsResponse(Message):
    error_code: int
    api_keys: list[ApiVersionsResponse.ApiVersion]
    throttle_time_ms: int
    supported_features: list[ApiVersionsResponse.SupportedFeatureKey]
    finalized_features_epoch: int
    finalized_features: list[ApiVersionsResponse.FinalizedFeatureKey]
    zk_migration_ready: bool
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        error_code: int = ...,
        api_keys: list[ApiVersionsResponse.ApiVersion] = ...,
        throttle_time_ms: int = ...,
        supported_features: list[ApiVersionsResponse.SupportedFeatureKey] = ...,
        finalized_features_epoch: int = ...,
        finalized_features: list[ApiVersionsResponse.FinalizedFeatureKey] = ...,
        zk_migration_ready: bool = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class ApiVersion(Message):
        api_key: int
        min_version: int
        max_version: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            api_key: int = ...,
            min_version: int = ...,
            max_version: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class SupportedFeatureKey(Message):
        name: str
        min_version: int
        max_version: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            min_version: int = ...,
            max_version: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class FinalizedFeatureKey(Message):
        name: str
        max_version_level: int
        min_version_level: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            max_version_level: int = ...,
            min_version_level: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class CreateTopicsRequest(Message):
    topics: list[CreateTopicsRequest.CreatableTopic]
    timeout_ms: int
    validate_only: bool
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        topics: list[CreateTopicsRequest.CreatableTopic] = ...,
        timeout_ms: int = ...,
        validate_only: bool = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class CreatableTopic(Message):
        name: str
        num_partitions: int
        replication_factor: int
        assignments: list[CreateTopicsRequest.CreatableReplicaAssignment]
        configs: list[CreateTopicsRequest.CreatableTopicConfig]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            num_partitions: int = ...,
            replication_factor: int = ...,
            assignments: list[CreateTopicsRequest.CreatableReplicaAssignment] = ...,
            configs: list[CreateTopicsRequest.CreatableTopicConfig] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class CreatableReplicaAssignment(Message):
        partition_index: int
        broker_ids: list[int]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            broker_ids: list[int] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class CreatableTopicConfig(Message):
        name: str
        value: str | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            value: str | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class CreateTopicsResponse(Message):
    throttle_time_ms: int
    topics: list[CreateTopicsResponse.CreatableTopicResult]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        topics: list[CreateTopicsResponse.CreatableTopicResult] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class CreatableTopicResult(Message):
        name: str
        topic_id: bytes
        error_code: int
        error_message: str | None
        topic_config_error_code: int
        num_partitions: int
        replication_factor: int
        configs: list[CreateTopicsResponse.CreatableTopicConfigs] | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            topic_id: bytes = ...,
            error_code: int = ...,
            error_message: str | None = ...,
            topic_config_error_code: int = ...,
            num_partitions: int = ...,
            replication_factor: int = ...,
            configs: list[CreateTopicsResponse.CreatableTopicConfigs] | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class CreatableTopicConfigs(Message):
        name: str
        value: str | None
        read_only: bool
        config_source: int
        is_sensitive: bool
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            value: str | None = ...,
            read_only: bool = ...,
            config_source: int = ...,
            is_sensitive: bool = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class DeleteTopicsRequest(Message):
    topics: list[DeleteTopicsRequest.DeleteTopicState]
    topic_names: list[str]
    timeout_ms: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        topics: list[DeleteTopicsRequest.DeleteTopicState] = ...,
        topic_names: list[str] = ...,
        timeout_ms: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class DeleteTopicState(Message):
        name: str | None
        topic_id: bytes
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str | None = ...,
            topic_id: bytes = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class DeleteTopicsResponse(Message):
    throttle_time_ms: int
    responses: list[DeleteTopicsResponse.DeletableTopicResult]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        responses: list[DeleteTopicsResponse.DeletableTopicResult] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class DeletableTopicResult(Message):
        name: str | None
        topic_id: bytes
        error_code: int
        error_message: str | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str | None = ...,
            topic_id: bytes = ...,
            error_code: int = ...,
            error_message: str | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class DeleteRecordsRequest(Message):
    topics: list[DeleteRecordsRequest.DeleteRecordsTopic]
    timeout_ms: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        topics: list[DeleteRecordsRequest.DeleteRecordsTopic] = ...,
        timeout_ms: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class DeleteRecordsTopic(Message):
        name: str
        partitions: list[DeleteRecordsRequest.DeleteRecordsPartition]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partitions: list[DeleteRecordsRequest.DeleteRecordsPartition] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class DeleteRecordsPartition(Message):
        partition_index: int
        offset: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            offset: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class DeleteRecordsResponse(Message):
    throttle_time_ms: int
    topics: list[DeleteRecordsResponse.DeleteRecordsTopicResult]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        topics: list[DeleteRecordsResponse.DeleteRecordsTopicResult] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class DeleteRecordsTopicResult(Message):
        name: str
        partitions: list[DeleteRecordsResponse.DeleteRecordsPartitionResult]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partitions: list[DeleteRecordsResponse.DeleteRecordsPartitionResult] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class DeleteRecordsPartitionResult(Message):
        partition_index: int
        low_watermark: int
        error_code: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            low_watermark: int = ...,
            error_code: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class InitProducerIdRequest(Message):
    transactional_id: str | None
    transaction_timeout_ms: int
    producer_id: int
    producer_epoch: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        transactional_id: str | None = ...,
        transaction_timeout_ms: int = ...,
        producer_id: int = ...,
        producer_epoch: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class InitProducerIdResponse(Message):
    throttle_time_ms: int
    error_code: int
    producer_id: int
    producer_epoch: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        producer_id: int = ...,
        producer_epoch: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class OffsetForLeaderEpochRequest(Message):
    replica_id: int
    topics: list[OffsetForLeaderEpochRequest.OffsetForLeaderTopic]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        replica_id: int = ...,
        topics: list[OffsetForLeaderEpochRequest.OffsetForLeaderTopic] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class OffsetForLeaderTopic(Message):
        topic: str
        partitions: list[OffsetForLeaderEpochRequest.OffsetForLeaderPartition]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            topic: str = ...,
            partitions: list[OffsetForLeaderEpochRequest.OffsetForLeaderPartition] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class OffsetForLeaderPartition(Message):
        partition: int
        current_leader_epoch: int
        leader_epoch: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition: int = ...,
            current_leader_epoch: int = ...,
            leader_epoch: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class OffsetForLeaderEpochResponse(Message):
    throttle_time_ms: int
    topics: list[OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        topics: list[OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class OffsetForLeaderTopicResult(Message):
        topic: str
        partitions: list[OffsetForLeaderEpochResponse.EpochEndOffset]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            topic: str = ...,
            partitions: list[OffsetForLeaderEpochResponse.EpochEndOffset] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class EpochEndOffset(Message):
        error_code: int
        partition: int
        leader_epoch: int
        end_offset: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            error_code: int = ...,
            partition: int = ...,
            leader_epoch: int = ...,
            end_offset: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class AddPartitionsToTxnRequest(Message):
    transactions: list[AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction]
    v3_and_below_transactional_id: str
    v3_and_below_producer_id: int
    v3_and_below_producer_epoch: int
    v3_and_below_topics: list[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        transactions: list[AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction] = ...,
        v3_and_below_transactional_id: str = ...,
        v3_and_below_producer_id: int = ...,
        v3_and_below_producer_epoch: int = ...,
        v3_and_below_topics: list[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class AddPartitionsToTxnTransaction(Message):
        transactional_id: str
        producer_id: int
        producer_epoch: int
        verify_only: bool
        topics: list[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            transactional_id: str = ...,
            producer_id: int = ...,
            producer_epoch: int = ...,
            verify_only: bool = ...,
            topics: list[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class AddPartitionsToTxnTopic(Message):
        name: str
        partitions: list[int]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partitions: list[int] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class AddPartitionsToTxnResponse(Message):
    throttle_time_ms: int
    error_code: int
    results_by_transaction: list[AddPartitionsToTxnResponse.AddPartitionsToTxnResult]
    results_by_topic_v3_and_below: list[AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        results_by_transaction: list[AddPartitionsToTxnResponse.AddPartitionsToTxnResult] = ...,
        results_by_topic_v3_and_below: list[AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class AddPartitionsToTxnResult(Message):
        transactional_id: str
        topic_results: list[AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            transactional_id: str = ...,
            topic_results: list[AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class AddPartitionsToTxnTopicResult(Message):
        name: str
        results_by_partition: list[AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            results_by_partition: list[AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class AddPartitionsToTxnPartitionResult(Message):
        partition_index: int
        partition_error_code: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            partition_error_code: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class AddOffsetsToTxnRequest(Message):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        transactional_id: str = ...,
        producer_id: int = ...,
        producer_epoch: int = ...,
        group_id: str = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class AddOffsetsToTxnResponse(Message):
    throttle_time_ms: int
    error_code: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class EndTxnRequest(Message):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        transactional_id: str = ...,
        producer_id: int = ...,
        producer_epoch: int = ...,
        committed: bool = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class EndTxnResponse(Message):
    throttle_time_ms: int
    error_code: int
    producer_id: int
    producer_epoch: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        producer_id: int = ...,
        producer_epoch: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class WriteTxnMarkersRequest(Message):
    markers: list[WriteTxnMarkersRequest.WritableTxnMarker]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        markers: list[WriteTxnMarkersRequest.WritableTxnMarker] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class WritableTxnMarker(Message):
        producer_id: int
        producer_epoch: int
        transaction_result: bool
        topics: list[WriteTxnMarkersRequest.WritableTxnMarkerTopic]
        coordinator_epoch: int
        seaway_transaction_start_ms: int
        seaway_transaction_topics: list[WriteTxnMarkersRequest.SeawayTransactionTopic]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            producer_id: int = ...,
            producer_epoch: int = ...,
            transaction_result: bool = ...,
            topics: list[WriteTxnMarkersRequest.WritableTxnMarkerTopic] = ...,
            coordinator_epoch: int = ...,
            seaway_transaction_start_ms: int = ...,
            seaway_transaction_topics: list[WriteTxnMarkersRequest.SeawayTransactionTopic] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class WritableTxnMarkerTopic(Message):
        name: str
        partition_indexes: list[int]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partition_indexes: list[int] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class SeawayTransactionTopic(Message):
        name: str
        partition_count: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partition_count: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class WriteTxnMarkersResponse(Message):
    markers: list[WriteTxnMarkersResponse.WritableTxnMarkerResult]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        markers: list[WriteTxnMarkersResponse.WritableTxnMarkerResult] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class WritableTxnMarkerResult(Message):
        producer_id: int
        topics: list[WriteTxnMarkersResponse.WritableTxnMarkerTopicResult]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            producer_id: int = ...,
            topics: list[WriteTxnMarkersResponse.WritableTxnMarkerTopicResult] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class WritableTxnMarkerTopicResult(Message):
        name: str
        partitions: list[WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partitions: list[WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class WritableTxnMarkerPartitionResult(Message):
        partition_index: int
        error_code: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            error_code: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class TxnOffsetCommitRequest(Message):
    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int
    member_id: str
    group_instance_id: str | None
    topics: list[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        transactional_id: str = ...,
        group_id: str = ...,
        producer_id: int = ...,
        producer_epoch: int = ...,
        generation_id: int = ...,
        member_id: str = ...,
        group_instance_id: str | None = ...,
        topics: list[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class TxnOffsetCommitRequestTopic(Message):
        name: str
        partitions: list[TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partitions: list[TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class TxnOffsetCommitRequestPartition(Message):
        partition_index: int
        committed_offset: int
        committed_leader_epoch: int
        committed_metadata: str | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            committed_offset: int = ...,
            committed_leader_epoch: int = ...,
            committed_metadata: str | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class TxnOffsetCommitResponse(Message):
    throttle_time_ms: int
    topics: list[TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        topics: list[TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class TxnOffsetCommitResponseTopic(Message):
        name: str
        partitions: list[TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partitions: list[TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class TxnOffsetCommitResponsePartition(Message):
        partition_index: int
        error_code: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            error_code: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class DescribeAclsRequest(Message):
    resource_type_filter: int
    resource_name_filter: str | None
    pattern_type_filter: int
    principal_filter: str | None
    host_filter: str | None
    operation: int
    permission_type: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        resource_type_filter: int = ...,
        resource_name_filter: str | None = ...,
        pattern_type_filter: int = ...,
        principal_filter: str | None = ...,
        host_filter: str | None = ...,
        operation: int = ...,
        permission_type: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class DescribeAclsResponse(Message):
    throttle_time_ms: int
    error_code: int
    error_message: str | None
    resources: list[DescribeAclsResponse.DescribeAclsResource]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        error_message: str | None = ...,
        resources: list[DescribeAclsResponse.DescribeAclsResource] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class DescribeAclsResource(Message):
        resource_type: int
        resource_name: str
        pattern_type: int
        acls: list[DescribeAclsResponse.AclDescription]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            resource_type: int = ...,
            resource_name: str = ...,
            pattern_type: int = ...,
            acls: list[DescribeAclsResponse.AclDescription] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class AclDescription(Message):
        principal: str
        host: str
        operation: int
        permission_type: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            principal: str = ...,
            host: str = ...,
            operation: int = ...,
            permission_type: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class CreateAclsRequest(Message):
    creations: list[CreateAclsRequest.AclCreation]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        creations: list[CreateAclsRequest.AclCreation] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class AclCreation(Message):
        resource_type: int
        resource_name: str
        resource_pattern_type: int
        principal: str
        host: str
        operation: int
        permission_type: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            resource_type: int = ...,
            resource_name: str = ...,
            resource_pattern_type: int = ...,
            principal: str = ...,
            host: str = ...,
            operation: int = ...,
            permission_type: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class CreateAclsResponse(Message):
    throttle_time_ms: int
    results: list[CreateAclsResponse.AclCreationResult]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        results: list[CreateAclsResponse.AclCreationResult] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class AclCreationResult(Message):
        error_code: int
        error_message: str | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            error_code: int = ...,
            error_message: str | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class DeleteAclsRequest(Message):
    filters: list[DeleteAclsRequest.DeleteAclsFilter]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        filters: list[DeleteAclsRequest.DeleteAclsFilter] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class DeleteAclsFilter(Message):
        resource_type_filter: int
        resource_name_filter: str | None
        pattern_type_filter: int
        principal_filter: str | None
        host_filter: str | None
        operation: int
        permission_type: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            resource_type_filter: int = ...,
            resource_name_filter: str | None = ...,
            pattern_type_filter: int = ...,
            principal_filter: str | None = ...,
            host_filter: str | None = ...,
            operation: int = ...,
            permission_type: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class DeleteAclsResponse(Message):
    throttle_time_ms: int
    filter_results: list[DeleteAclsResponse.DeleteAclsFilterResult]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        filter_results: list[DeleteAclsResponse.DeleteAclsFilterResult] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class DeleteAclsFilterResult(Message):
        error_code: int
        error_message: str | None
        matching_acls: list[DeleteAclsResponse.DeleteAclsMatchingAcl]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            error_code: int = ...,
            error_message: str | None = ...,
            matching_acls: list[DeleteAclsResponse.DeleteAclsMatchingAcl] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class DeleteAclsMatchingAcl(Message):
        error_code: int
        error_message: str | None
        resource_type: int
        resource_name: str
        pattern_type: int
        principal: str
        host: str
        operation: int
        permission_type: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            error_code: int = ...,
            error_message: str | None = ...,
            resource_type: int = ...,
            resource_name: str = ...,
            pattern_type: int = ...,
            principal: str = ...,
            host: str = ...,
            operation: int = ...,
            permission_type: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class DescribeConfigsRequest(Message):
    resources: list[DescribeConfigsRequest.DescribeConfigsResource]
    include_synonyms: bool
    include_documentation: bool
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        resources: list[DescribeConfigsRequest.DescribeConfigsResource] = ...,
        include_synonyms: bool = ...,
        include_documentation: bool = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class DescribeConfigsResource(Message):
        resource_type: int
        resource_name: str
        configuration_keys: list[str] | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            resource_type: int = ...,
            resource_name: str = ...,
            configuration_keys: list[str] | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class DescribeConfigsResponse(Message):
    throttle_time_ms: int
    results: list[DescribeConfigsResponse.DescribeConfigsResult]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        results: list[DescribeConfigsResponse.DescribeConfigsResult] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class DescribeConfigsResult(Message):
        error_code: int
        error_message: str | None
        resource_type: int
        resource_name: str
        configs: list[DescribeConfigsResponse.DescribeConfigsResourceResult]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            error_code: int = ...,
            error_message: str | None = ...,
            resource_type: int = ...,
            resource_name: str = ...,
            configs: list[DescribeConfigsResponse.DescribeConfigsResourceResult] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class DescribeConfigsResourceResult(Message):
        name: str
        value: str | None
        read_only: bool
        is_default: bool
        config_source: int
        is_sensitive: bool
        synonyms: list[DescribeConfigsResponse.DescribeConfigsSynonym]
        config_type: int
        documentation: str | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            value: str | None = ...,
            read_only: bool = ...,
            is_default: bool = ...,
            config_source: int = ...,
            is_sensitive: bool = ...,
            synonyms: list[DescribeConfigsResponse.DescribeConfigsSynonym] = ...,
            config_type: int = ...,
            documentation: str | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class DescribeConfigsSynonym(Message):
        name: str
        value: str | None
        source: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            value: str | None = ...,
            source: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class AlterConfigsRequest(Message):
    resources: list[AlterConfigsRequest.AlterConfigsResource]
    validate_only: bool
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        resources: list[AlterConfigsRequest.AlterConfigsResource] = ...,
        validate_only: bool = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class AlterConfigsResource(Message):
        resource_type: int
        resource_name: str
        configs: list[AlterConfigsRequest.AlterableConfig]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            resource_type: int = ...,
            resource_name: str = ...,
            configs: list[AlterConfigsRequest.AlterableConfig] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class AlterableConfig(Message):
        name: str
        value: str | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            value: str | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class AlterConfigsResponse(Message):
    throttle_time_ms: int
    responses: list[AlterConfigsResponse.AlterConfigsResourceResponse]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        responses: list[AlterConfigsResponse.AlterConfigsResourceResponse] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class AlterConfigsResourceResponse(Message):
        error_code: int
        error_message: str | None
        resource_type: int
        resource_name: str
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            error_code: int = ...,
            error_message: str | None = ...,
            resource_type: int = ...,
            resource_name: str = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class DescribeLogDirsRequest(Message):
    topics: list[DescribeLogDirsRequest.DescribableLogDirTopic] | None
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        topics: list[DescribeLogDirsRequest.DescribableLogDirTopic] | None = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class DescribableLogDirTopic(Message):
        topic: str
        partitions: list[int]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            topic: str = ...,
            partitions: list[int] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class DescribeLogDirsResponse(Message):
    throttle_time_ms: int
    error_code: int
    results: list[DescribeLogDirsResponse.DescribeLogDirsResult]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        results: list[DescribeLogDirsResponse.DescribeLogDirsResult] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class DescribeLogDirsResult(Message):
        error_code: int
        log_dir: str
        topics: list[DescribeLogDirsResponse.DescribeLogDirsTopic]
        total_bytes: int
        usable_bytes: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            error_code: int = ...,
            log_dir: str = ...,
            topics: list[DescribeLogDirsResponse.DescribeLogDirsTopic] = ...,
            total_bytes: int = ...,
            usable_bytes: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class DescribeLogDirsTopic(Message):
        name: str
        partitions: list[DescribeLogDirsResponse.DescribeLogDirsPartition]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partitions: list[DescribeLogDirsResponse.DescribeLogDirsPartition] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class DescribeLogDirsPartition(Message):
        partition_index: int
        partition_size: int
        offset_lag: int
        is_future_key: bool
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            partition_size: int = ...,
            offset_lag: int = ...,
            is_future_key: bool = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class SaslAuthenticateRequest(Message):
    auth_bytes: bytes
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        auth_bytes: bytes = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class SaslAuthenticateResponse(Message):
    error_code: int
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        error_code: int = ...,
        error_message: str | None = ...,
        auth_bytes: bytes = ...,
        session_lifetime_ms: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class CreatePartitionsRequest(Message):
    topics: list[CreatePartitionsRequest.CreatePartitionsTopic]
    timeout_ms: int
    validate_only: bool
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        topics: list[CreatePartitionsRequest.CreatePartitionsTopic] = ...,
        timeout_ms: int = ...,
        validate_only: bool = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class CreatePartitionsTopic(Message):
        name: str
        count: int
        assignments: list[CreatePartitionsRequest.CreatePartitionsAssignment] | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            count: int = ...,
            assignments: list[CreatePartitionsRequest.CreatePartitionsAssignment] | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class CreatePartitionsAssignment(Message):
        broker_ids: list[int]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            broker_ids: list[int] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class CreatePartitionsResponse(Message):
    throttle_time_ms: int
    results: list[CreatePartitionsResponse.CreatePartitionsTopicResult]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        results: list[CreatePartitionsResponse.CreatePartitionsTopicResult] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class CreatePartitionsTopicResult(Message):
        name: str
        error_code: int
        error_message: str | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            error_code: int = ...,
            error_message: str | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class DeleteGroupsRequest(Message):
    groups_names: list[str]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        groups_names: list[str] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class DeleteGroupsResponse(Message):
    throttle_time_ms: int
    results: list[DeleteGroupsResponse.DeletableGroupResult]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        results: list[DeleteGroupsResponse.DeletableGroupResult] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class DeletableGroupResult(Message):
        group_id: str
        error_code: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            group_id: str = ...,
            error_code: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class ElectLeadersRequest(Message):
    election_type: int
    topic_partitions: list[ElectLeadersRequest.TopicPartitions] | None
    timeout_ms: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        election_type: int = ...,
        topic_partitions: list[ElectLeadersRequest.TopicPartitions] | None = ...,
        timeout_ms: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class TopicPartitions(Message):
        topic: str
        partitions: list[int]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            topic: str = ...,
            partitions: list[int] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class ElectLeadersResponse(Message):
    throttle_time_ms: int
    error_code: int
    replica_election_results: list[ElectLeadersResponse.ReplicaElectionResult]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        replica_election_results: list[ElectLeadersResponse.ReplicaElectionResult] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class ReplicaElectionResult(Message):
        topic: str
        partition_result: list[ElectLeadersResponse.PartitionResult]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            topic: str = ...,
            partition_result: list[ElectLeadersResponse.PartitionResult] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class PartitionResult(Message):
        partition_id: int
        error_code: int
        error_message: str | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_id: int = ...,
            error_code: int = ...,
            error_message: str | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class IncrementalAlterConfigsRequest(Message):
    resources: list[IncrementalAlterConfigsRequest.AlterConfigsResource]
    validate_only: bool
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        resources: list[IncrementalAlterConfigsRequest.AlterConfigsResource] = ...,
        validate_only: bool = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class AlterConfigsResource(Message):
        resource_type: int
        resource_name: str
        configs: list[IncrementalAlterConfigsRequest.AlterableConfig]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            resource_type: int = ...,
            resource_name: str = ...,
            configs: list[IncrementalAlterConfigsRequest.AlterableConfig] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class AlterableConfig(Message):
        name: str
        config_operation: int
        value: str | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            config_operation: int = ...,
            value: str | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class IncrementalAlterConfigsResponse(Message):
    throttle_time_ms: int
    responses: list[IncrementalAlterConfigsResponse.AlterConfigsResourceResponse]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        responses: list[IncrementalAlterConfigsResponse.AlterConfigsResourceResponse] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class AlterConfigsResourceResponse(Message):
        error_code: int
        error_message: str | None
        resource_type: int
        resource_name: str
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            error_code: int = ...,
            error_message: str | None = ...,
            resource_type: int = ...,
            resource_name: str = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class AlterPartitionReassignmentsRequest(Message):
    timeout_ms: int
    topics: list[AlterPartitionReassignmentsRequest.ReassignableTopic]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        timeout_ms: int = ...,
        topics: list[AlterPartitionReassignmentsRequest.ReassignableTopic] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class ReassignableTopic(Message):
        name: str
        partitions: list[AlterPartitionReassignmentsRequest.ReassignablePartition]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partitions: list[AlterPartitionReassignmentsRequest.ReassignablePartition] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class ReassignablePartition(Message):
        partition_index: int
        replicas: list[int] | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            replicas: list[int] | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class AlterPartitionReassignmentsResponse(Message):
    throttle_time_ms: int
    error_code: int
    error_message: str | None
    responses: list[AlterPartitionReassignmentsResponse.ReassignableTopicResponse]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        error_message: str | None = ...,
        responses: list[AlterPartitionReassignmentsResponse.ReassignableTopicResponse] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class ReassignableTopicResponse(Message):
        name: str
        partitions: list[AlterPartitionReassignmentsResponse.ReassignablePartitionResponse]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partitions: list[AlterPartitionReassignmentsResponse.ReassignablePartitionResponse] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class ReassignablePartitionResponse(Message):
        partition_index: int
        error_code: int
        error_message: str | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            error_code: int = ...,
            error_message: str | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class ListPartitionReassignmentsRequest(Message):
    timeout_ms: int
    topics: list[ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics] | None
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        timeout_ms: int = ...,
        topics: list[ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics] | None = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class ListPartitionReassignmentsTopics(Message):
        name: str
        partition_indexes: list[int]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partition_indexes: list[int] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class ListPartitionReassignmentsResponse(Message):
    throttle_time_ms: int
    error_code: int
    error_message: str | None
    topics: list[ListPartitionReassignmentsResponse.OngoingTopicReassignment]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        error_message: str | None = ...,
        topics: list[ListPartitionReassignmentsResponse.OngoingTopicReassignment] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class OngoingTopicReassignment(Message):
        name: str
        partitions: list[ListPartitionReassignmentsResponse.OngoingPartitionReassignment]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partitions: list[ListPartitionReassignmentsResponse.OngoingPartitionReassignment] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class OngoingPartitionReassignment(Message):
        partition_index: int
        replicas: list[int]
        adding_replicas: list[int]
        removing_replicas: list[int]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            replicas: list[int] = ...,
            adding_replicas: list[int] = ...,
            removing_replicas: list[int] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class OffsetDeleteRequest(Message):
    group_id: str
    topics: list[OffsetDeleteRequest.OffsetDeleteRequestTopic]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        group_id: str = ...,
        topics: list[OffsetDeleteRequest.OffsetDeleteRequestTopic] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class OffsetDeleteRequestTopic(Message):
        name: str
        partitions: list[OffsetDeleteRequest.OffsetDeleteRequestPartition]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partitions: list[OffsetDeleteRequest.OffsetDeleteRequestPartition] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class OffsetDeleteRequestPartition(Message):
        partition_index: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class OffsetDeleteResponse(Message):
    error_code: int
    throttle_time_ms: int
    topics: list[OffsetDeleteResponse.OffsetDeleteResponseTopic]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        error_code: int = ...,
        throttle_time_ms: int = ...,
        topics: list[OffsetDeleteResponse.OffsetDeleteResponseTopic] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class OffsetDeleteResponseTopic(Message):
        name: str
        partitions: list[OffsetDeleteResponse.OffsetDeleteResponsePartition]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partitions: list[OffsetDeleteResponse.OffsetDeleteResponsePartition] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class OffsetDeleteResponsePartition(Message):
        partition_index: int
        error_code: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            error_code: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class DescribeUserScramCredentialsRequest(Message):
    users: list[DescribeUserScramCredentialsRequest.UserName] | None
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        users: list[DescribeUserScramCredentialsRequest.UserName] | None = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class UserName(Message):
        name: str
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class DescribeUserScramCredentialsResponse(Message):
    throttle_time_ms: int
    error_code: int
    error_message: str | None
    results: list[DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        error_message: str | None = ...,
        results: list[DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class DescribeUserScramCredentialsResult(Message):
        user: str
        error_code: int
        error_message: str | None
        credential_infos: list[DescribeUserScramCredentialsResponse.CredentialInfo]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            user: str = ...,
            error_code: int = ...,
            error_message: str | None = ...,
            credential_infos: list[DescribeUserScramCredentialsResponse.CredentialInfo] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class CredentialInfo(Message):
        mechanism: int
        iterations: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            mechanism: int = ...,
            iterations: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class AlterUserScramCredentialsRequest(Message):
    deletions: list[AlterUserScramCredentialsRequest.ScramCredentialDeletion]
    upsertions: list[AlterUserScramCredentialsRequest.ScramCredentialUpsertion]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        deletions: list[AlterUserScramCredentialsRequest.ScramCredentialDeletion] = ...,
        upsertions: list[AlterUserScramCredentialsRequest.ScramCredentialUpsertion] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class ScramCredentialDeletion(Message):
        name: str
        mechanism: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            mechanism: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class ScramCredentialUpsertion(Message):
        name: str
        mechanism: int
        iterations: int
        salt: bytes
        salted_password: bytes
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            mechanism: int = ...,
            iterations: int = ...,
            salt: bytes = ...,
            salted_password: bytes = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class AlterUserScramCredentialsResponse(Message):
    throttle_time_ms: int
    results: list[AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        results: list[AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class AlterUserScramCredentialsResult(Message):
        user: str
        error_code: int
        error_message: str | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            user: str = ...,
            error_code: int = ...,
            error_message: str | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class VoteRequest(Message):
    cluster_id: str | None
    voter_id: int
    topics: list[VoteRequest.TopicData]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        cluster_id: str | None = ...,
        voter_id: int = ...,
        topics: list[VoteRequest.TopicData] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class TopicData(Message):
        topic_name: str
        partitions: list[VoteRequest.PartitionData]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            topic_name: str = ...,
            partitions: list[VoteRequest.PartitionData] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class PartitionData(Message):
        partition_index: int
        candidate_epoch: int
        candidate_id: int
        candidate_directory_id: bytes
        voter_directory_id: bytes
        last_offset_epoch: int
        last_offset: int
        pre_vote: bool
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            candidate_epoch: int = ...,
            candidate_id: int = ...,
            candidate_directory_id: bytes = ...,
            voter_directory_id: bytes = ...,
            last_offset_epoch: int = ...,
            last_offset: int = ...,
            pre_vote: bool = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class VoteResponse(Message):
    error_code: int
    topics: list[VoteResponse.TopicData]
    node_endpoints: list[VoteResponse.NodeEndpoint]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        error_code: int = ...,
        topics: list[VoteResponse.TopicData] = ...,
        node_endpoints: list[VoteResponse.NodeEndpoint] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class TopicData(Message):
        topic_name: str
        partitions: list[VoteResponse.PartitionData]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            topic_name: str = ...,
            partitions: list[VoteResponse.PartitionData] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class PartitionData(Message):
        partition_index: int
        error_code: int
        leader_id: int
        leader_epoch: int
        vote_granted: bool
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            error_code: int = ...,
            leader_id: int = ...,
            leader_epoch: int = ...,
            vote_granted: bool = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class NodeEndpoint(Message):
        node_id: int
        host: str
        port: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            node_id: int = ...,
            host: str = ...,
            port: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class BeginQuorumEpochRequest(Message):
    cluster_id: str | None
    voter_id: int
    topics: list[BeginQuorumEpochRequest.TopicData]
    leader_endpoints: list[BeginQuorumEpochRequest.LeaderEndpoint]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        cluster_id: str | None = ...,
        voter_id: int = ...,
        topics: list[BeginQuorumEpochRequest.TopicData] = ...,
        leader_endpoints: list[BeginQuorumEpochRequest.LeaderEndpoint] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class TopicData(Message):
        topic_name: str
        partitions: list[BeginQuorumEpochRequest.PartitionData]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            topic_name: str = ...,
            partitions: list[BeginQuorumEpochRequest.PartitionData] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class PartitionData(Message):
        partition_index: int
        voter_directory_id: bytes
        leader_id: int
        leader_epoch: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            voter_directory_id: bytes = ...,
            leader_id: int = ...,
            leader_epoch: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class LeaderEndpoint(Message):
        name: str
        host: str
        port: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            host: str = ...,
            port: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class BeginQuorumEpochResponse(Message):
    error_code: int
    topics: list[BeginQuorumEpochResponse.TopicData]
    node_endpoints: list[BeginQuorumEpochResponse.NodeEndpoint]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        error_code: int = ...,
        topics: list[BeginQuorumEpochResponse.TopicData] = ...,
        node_endpoints: list[BeginQuorumEpochResponse.NodeEndpoint] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class TopicData(Message):
        topic_name: str
        partitions: list[BeginQuorumEpochResponse.PartitionData]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            topic_name: str = ...,
            partitions: list[BeginQuorumEpochResponse.PartitionData] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class PartitionData(Message):
        partition_index: int
        error_code: int
        leader_id: int
        leader_epoch: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            error_code: int = ...,
            leader_id: int = ...,
            leader_epoch: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class NodeEndpoint(Message):
        node_id: int
        host: str
        port: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            node_id: int = ...,
            host: str = ...,
            port: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class EndQuorumEpochRequest(Message):
    cluster_id: str | None
    topics: list[EndQuorumEpochRequest.TopicData]
    leader_endpoints: list[EndQuorumEpochRequest.LeaderEndpoint]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        cluster_id: str | None = ...,
        topics: list[EndQuorumEpochRequest.TopicData] = ...,
        leader_endpoints: list[EndQuorumEpochRequest.LeaderEndpoint] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class TopicData(Message):
        topic_name: str
        partitions: list[EndQuorumEpochRequest.PartitionData]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            topic_name: str = ...,
            partitions: list[EndQuorumEpochRequest.PartitionData] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class PartitionData(Message):
        partition_index: int
        leader_id: int
        leader_epoch: int
        preferred_successors: list[int]
        preferred_candidates: list[EndQuorumEpochRequest.ReplicaInfo]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            leader_id: int = ...,
            leader_epoch: int = ...,
            preferred_successors: list[int] = ...,
            preferred_candidates: list[EndQuorumEpochRequest.ReplicaInfo] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class ReplicaInfo(Message):
        candidate_id: int
        candidate_directory_id: bytes
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            candidate_id: int = ...,
            candidate_directory_id: bytes = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class LeaderEndpoint(Message):
        name: str
        host: str
        port: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            host: str = ...,
            port: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class EndQuorumEpochResponse(Message):
    error_code: int
    topics: list[EndQuorumEpochResponse.TopicData]
    node_endpoints: list[EndQuorumEpochResponse.NodeEndpoint]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        error_code: int = ...,
        topics: list[EndQuorumEpochResponse.TopicData] = ...,
        node_endpoints: list[EndQuorumEpochResponse.NodeEndpoint] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class TopicData(Message):
        topic_name: str
        partitions: list[EndQuorumEpochResponse.PartitionData]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            topic_name: str = ...,
            partitions: list[EndQuorumEpochResponse.PartitionData] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class PartitionData(Message):
        partition_index: int
        error_code: int
        leader_id: int
        leader_epoch: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            error_code: int = ...,
            leader_id: int = ...,
            leader_epoch: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class NodeEndpoint(Message):
        node_id: int
        host: str
        port: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            node_id: int = ...,
            host: str = ...,
            port: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class DescribeQuorumRequest(Message):
    topics: list[DescribeQuorumRequest.TopicData]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        topics: list[DescribeQuorumRequest.TopicData] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class TopicData(Message):
        topic_name: str
        partitions: list[DescribeQuorumRequest.PartitionData]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            topic_name: str = ...,
            partitions: list[DescribeQuorumRequest.PartitionData] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class PartitionData(Message):
        partition_index: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class DescribeQuorumResponse(Message):
    error_code: int
    error_message: str | None
    topics: list[DescribeQuorumResponse.TopicData]
    nodes: list[DescribeQuorumResponse.Node]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        error_code: int = ...,
        error_message: str | None = ...,
        topics: list[DescribeQuorumResponse.TopicData] = ...,
        nodes: list[DescribeQuorumResponse.Node] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class TopicData(Message):
        topic_name: str
        partitions: list[DescribeQuorumResponse.PartitionData]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            topic_name: str = ...,
            partitions: list[DescribeQuorumResponse.PartitionData] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class PartitionData(Message):
        partition_index: int
        error_code: int
        error_message: str | None
        leader_id: int
        leader_epoch: int
        high_watermark: int
        current_voters: list[DescribeQuorumResponse.ReplicaState]
        observers: list[DescribeQuorumResponse.ReplicaState]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            error_code: int = ...,
            error_message: str | None = ...,
            leader_id: int = ...,
            leader_epoch: int = ...,
            high_watermark: int = ...,
            current_voters: list[DescribeQuorumResponse.ReplicaState] = ...,
            observers: list[DescribeQuorumResponse.ReplicaState] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class ReplicaState(Message):
        replica_id: int
        replica_directory_id: bytes
        log_end_offset: int
        last_fetch_timestamp: int
        last_caught_up_timestamp: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            replica_id: int = ...,
            replica_directory_id: bytes = ...,
            log_end_offset: int = ...,
            last_fetch_timestamp: int = ...,
            last_caught_up_timestamp: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class Node(Message):
        node_id: int
        listeners: list[DescribeQuorumResponse.Listener]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            node_id: int = ...,
            listeners: list[DescribeQuorumResponse.Listener] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class Listener(Message):
        name: str
        host: str
        port: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            host: str = ...,
            port: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class AlterPartitionRequest(Message):
    broker_id: int
    broker_epoch: int
    topics: list[AlterPartitionRequest.TopicData]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        broker_id: int = ...,
        broker_epoch: int = ...,
        topics: list[AlterPartitionRequest.TopicData] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class TopicData(Message):
        topic_name: str
        topic_id: bytes
        partitions: list[AlterPartitionRequest.PartitionData]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            topic_name: str = ...,
            topic_id: bytes = ...,
            partitions: list[AlterPartitionRequest.PartitionData] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class PartitionData(Message):
        partition_index: int
        leader_epoch: int
        new_isr: list[int]
        new_isr_with_epochs: list[AlterPartitionRequest.BrokerState]
        leader_recovery_state: int
        partition_epoch: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            leader_epoch: int = ...,
            new_isr: list[int] = ...,
            new_isr_with_epochs: list[AlterPartitionRequest.BrokerState] = ...,
            leader_recovery_state: int = ...,
            partition_epoch: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class BrokerState(Message):
        broker_id: int
        broker_epoch: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            broker_id: int = ...,
            broker_epoch: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class AlterPartitionResponse(Message):
    throttle_time_ms: int
    error_code: int
    topics: list[AlterPartitionResponse.TopicData]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        topics: list[AlterPartitionResponse.TopicData] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class TopicData(Message):
        topic_name: str
        topic_id: bytes
        partitions: list[AlterPartitionResponse.PartitionData]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            topic_name: str = ...,
            topic_id: bytes = ...,
            partitions: list[AlterPartitionResponse.PartitionData] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class PartitionData(Message):
        partition_index: int
        error_code: int
        leader_id: int
        leader_epoch: int
        isr: list[int]
        leader_recovery_state: int
        partition_epoch: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            error_code: int = ...,
            leader_id: int = ...,
            leader_epoch: int = ...,
            isr: list[int] = ...,
            leader_recovery_state: int = ...,
            partition_epoch: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class EnvelopeRequest(Message):
    request_data: bytes
    request_principal: bytes | None
    client_host_address: bytes
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        request_data: bytes = ...,
        request_principal: bytes | None = ...,
        client_host_address: bytes = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class EnvelopeResponse(Message):
    response_data: bytes | None
    error_code: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        response_data: bytes | None = ...,
        error_code: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class FetchSnapshotRequest(Message):
    cluster_id: str | None
    replica_id: int
    max_bytes: int
    topics: list[FetchSnapshotRequest.TopicSnapshot]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        cluster_id: str | None = ...,
        replica_id: int = ...,
        max_bytes: int = ...,
        topics: list[FetchSnapshotRequest.TopicSnapshot] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class TopicSnapshot(Message):
        name: str
        partitions: list[FetchSnapshotRequest.PartitionSnapshot]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partitions: list[FetchSnapshotRequest.PartitionSnapshot] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class PartitionSnapshot(Message):
        partition: int
        current_leader_epoch: int
        snapshot_id: FetchSnapshotRequest.SnapshotId
        position: int
        replica_directory_id: bytes
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition: int = ...,
            current_leader_epoch: int = ...,
            snapshot_id: FetchSnapshotRequest.SnapshotId = ...,
            position: int = ...,
            replica_directory_id: bytes = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class SnapshotId(Message):
        end_offset: int
        epoch: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            end_offset: int = ...,
            epoch: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class FetchSnapshotResponse(Message):
    throttle_time_ms: int
    error_code: int
    topics: list[FetchSnapshotResponse.TopicSnapshot]
    node_endpoints: list[FetchSnapshotResponse.NodeEndpoint]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        topics: list[FetchSnapshotResponse.TopicSnapshot] = ...,
        node_endpoints: list[FetchSnapshotResponse.NodeEndpoint] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class TopicSnapshot(Message):
        name: str
        partitions: list[FetchSnapshotResponse.PartitionSnapshot]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partitions: list[FetchSnapshotResponse.PartitionSnapshot] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class PartitionSnapshot(Message):
        index: int
        error_code: int
        snapshot_id: FetchSnapshotResponse.SnapshotId
        current_leader: FetchSnapshotResponse.LeaderIdAndEpoch
        size: int
        position: int
        unaligned_records: _Records
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            index: int = ...,
            error_code: int = ...,
            snapshot_id: FetchSnapshotResponse.SnapshotId = ...,
            current_leader: FetchSnapshotResponse.LeaderIdAndEpoch = ...,
            size: int = ...,
            position: int = ...,
            unaligned_records: _Records = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class SnapshotId(Message):
        end_offset: int
        epoch: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            end_offset: int = ...,
            epoch: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class LeaderIdAndEpoch(Message):
        leader_id: int
        leader_epoch: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            leader_id: int = ...,
            leader_epoch: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class NodeEndpoint(Message):
        node_id: int
        host: str
        port: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            node_id: int = ...,
            host: str = ...,
            port: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class DescribeClusterRequest(Message):
    include_cluster_authorized_operations: bool
    endpoint_type: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        include_cluster_authorized_operations: bool = ...,
        endpoint_type: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class DescribeClusterResponse(Message):
    throttle_time_ms: int
    error_code: int
    error_message: str | None
    endpoint_type: int
    cluster_id: str
    controller_id: int
    brokers: list[DescribeClusterResponse.DescribeClusterBroker]
    cluster_authorized_operations: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        error_message: str | None = ...,
        endpoint_type: int = ...,
        cluster_id: str = ...,
        controller_id: int = ...,
        brokers: list[DescribeClusterResponse.DescribeClusterBroker] = ...,
        cluster_authorized_operations: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class DescribeClusterBroker(Message):
        broker_id: int
        host: str
        port: int
        rack: str | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            broker_id: int = ...,
            host: str = ...,
            port: int = ...,
            rack: str | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class DescribeProducersRequest(Message):
    topics: list[DescribeProducersRequest.TopicRequest]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        topics: list[DescribeProducersRequest.TopicRequest] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class TopicRequest(Message):
        name: str
        partition_indexes: list[int]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partition_indexes: list[int] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class DescribeProducersResponse(Message):
    throttle_time_ms: int
    topics: list[DescribeProducersResponse.TopicResponse]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        topics: list[DescribeProducersResponse.TopicResponse] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class TopicResponse(Message):
        name: str
        partitions: list[DescribeProducersResponse.PartitionResponse]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            partitions: list[DescribeProducersResponse.PartitionResponse] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class PartitionResponse(Message):
        partition_index: int
        error_code: int
        error_message: str | None
        active_producers: list[DescribeProducersResponse.ProducerState]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            partition_index: int = ...,
            error_code: int = ...,
            error_message: str | None = ...,
            active_producers: list[DescribeProducersResponse.ProducerState] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class ProducerState(Message):
        producer_id: int
        producer_epoch: int
        last_sequence: int
        last_timestamp: int
        coordinator_epoch: int
        current_txn_start_offset: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            producer_id: int = ...,
            producer_epoch: int = ...,
            last_sequence: int = ...,
            last_timestamp: int = ...,
            coordinator_epoch: int = ...,
            current_txn_start_offset: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class BrokerRegistrationRequest(Message):
    broker_id: int
    cluster_id: str
    incarnation_id: bytes
    listeners: list[BrokerRegistrationRequest.Listener]
    features: list[BrokerRegistrationRequest.Feature]
    rack: str | None
    is_migrating_zk_broker: bool
    log_dirs: list[bytes]
    previous_broker_epoch: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        broker_id: int = ...,
        cluster_id: str = ...,
        incarnation_id: bytes = ...,
        listeners: list[BrokerRegistrationRequest.Listener] = ...,
        features: list[BrokerRegistrationRequest.Feature] = ...,
        rack: str | None = ...,
        is_migrating_zk_broker: bool = ...,
        log_dirs: list[bytes] = ...,
        previous_broker_epoch: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class Listener(Message):
        name: str
        host: str
        port: int
        security_protocol: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            host: str = ...,
            port: int = ...,
            security_protocol: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class Feature(Message):
        name: str
        min_supported_version: int
        max_supported_version: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            min_supported_version: int = ...,
            max_supported_version: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class BrokerRegistrationResponse(Message):
    throttle_time_ms: int
    error_code: int
    broker_epoch: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        broker_epoch: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class BrokerHeartbeatRequest(Message):
    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool
    want_shut_down: bool
    offline_log_dirs: list[bytes]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        broker_id: int = ...,
        broker_epoch: int = ...,
        current_metadata_offset: int = ...,
        want_fence: bool = ...,
        want_shut_down: bool = ...,
        offline_log_dirs: list[bytes] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class BrokerHeartbeatResponse(Message):
    throttle_time_ms: int
    error_code: int
    is_caught_up: bool
    is_fenced: bool
    should_shut_down: bool
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        is_caught_up: bool = ...,
        is_fenced: bool = ...,
        should_shut_down: bool = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class UnregisterBrokerRequest(Message):
    broker_id: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        broker_id: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class UnregisterBrokerResponse(Message):
    throttle_time_ms: int
    error_code: int
    error_message: str | None
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        error_message: str | None = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class DescribeTransactionsRequest(Message):
    transactional_ids: list[str]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        transactional_ids: list[str] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class DescribeTransactionsResponse(Message):
    throttle_time_ms: int
    transaction_states: list[DescribeTransactionsResponse.TransactionState]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        transaction_states: list[DescribeTransactionsResponse.TransactionState] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class TransactionState(Message):
        error_code: int
        transactional_id: str
        transaction_state: str
        transaction_timeout_ms: int
        transaction_start_time_ms: int
        producer_id: int
        producer_epoch: int
        topics: list[DescribeTransactionsResponse.TopicData]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            error_code: int = ...,
            transactional_id: str = ...,
            transaction_state: str = ...,
            transaction_timeout_ms: int = ...,
            transaction_start_time_ms: int = ...,
            producer_id: int = ...,
            producer_epoch: int = ...,
            topics: list[DescribeTransactionsResponse.TopicData] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class TopicData(Message):
        topic: str
        partitions: list[int]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            topic: str = ...,
            partitions: list[int] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class ListTransactionsRequest(Message):
    state_filters: list[str]
    producer_id_filters: list[int]
    duration_filter: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        state_filters: list[str] = ...,
        producer_id_filters: list[int] = ...,
        duration_filter: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class ListTransactionsResponse(Message):
    throttle_time_ms: int
    error_code: int
    unknown_state_filters: list[str]
    transaction_states: list[ListTransactionsResponse.TransactionState]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        unknown_state_filters: list[str] = ...,
        transaction_states: list[ListTransactionsResponse.TransactionState] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class TransactionState(Message):
        transactional_id: str
        producer_id: int
        transaction_state: str
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            transactional_id: str = ...,
            producer_id: int = ...,
            transaction_state: str = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class AllocateProducerIdsRequest(Message):
    broker_id: int
    broker_epoch: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        broker_id: int = ...,
        broker_epoch: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class AllocateProducerIdsResponse(Message):
    throttle_time_ms: int
    error_code: int
    producer_id_start: int
    producer_id_len: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        producer_id_start: int = ...,
        producer_id_len: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class ControllerRegistrationRequest(Message):
    controller_id: int
    incarnation_id: bytes
    zk_migration_ready: bool
    listeners: list[ControllerRegistrationRequest.Listener]
    features: list[ControllerRegistrationRequest.Feature]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        controller_id: int = ...,
        incarnation_id: bytes = ...,
        zk_migration_ready: bool = ...,
        listeners: list[ControllerRegistrationRequest.Listener] = ...,
        features: list[ControllerRegistrationRequest.Feature] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class Listener(Message):
        name: str
        host: str
        port: int
        security_protocol: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            host: str = ...,
            port: int = ...,
            security_protocol: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class Feature(Message):
        name: str
        min_supported_version: int
        max_supported_version: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            min_supported_version: int = ...,
            max_supported_version: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class ControllerRegistrationResponse(Message):
    throttle_time_ms: int
    error_code: int
    error_message: str | None
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        error_message: str | None = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class AddRaftVoterRequest(Message):
    cluster_id: str | None
    timeout_ms: int
    voter_id: int
    voter_directory_id: bytes
    listeners: list[AddRaftVoterRequest.Listener]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        cluster_id: str | None = ...,
        timeout_ms: int = ...,
        voter_id: int = ...,
        voter_directory_id: bytes = ...,
        listeners: list[AddRaftVoterRequest.Listener] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class Listener(Message):
        name: str
        host: str
        port: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            host: str = ...,
            port: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class AddRaftVoterResponse(Message):
    throttle_time_ms: int
    error_code: int
    error_message: str | None
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        error_message: str | None = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class RemoveRaftVoterRequest(Message):
    cluster_id: str | None
    voter_id: int
    voter_directory_id: bytes
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        cluster_id: str | None = ...,
        voter_id: int = ...,
        voter_directory_id: bytes = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class RemoveRaftVoterResponse(Message):
    throttle_time_ms: int
    error_code: int
    error_message: str | None
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        error_message: str | None = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class UpdateRaftVoterRequest(Message):
    cluster_id: str | None
    current_leader_epoch: int
    voter_id: int
    voter_directory_id: bytes
    listeners: list[UpdateRaftVoterRequest.Listener]
    k_raft_version_feature: UpdateRaftVoterRequest.KRaftVersionFeature
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        cluster_id: str | None = ...,
        current_leader_epoch: int = ...,
        voter_id: int = ...,
        voter_directory_id: bytes = ...,
        listeners: list[UpdateRaftVoterRequest.Listener] = ...,
        k_raft_version_feature: UpdateRaftVoterRequest.KRaftVersionFeature = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class Listener(Message):
        name: str
        host: str
        port: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            host: str = ...,
            port: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class KRaftVersionFeature(Message):
        min_supported_version: int
        max_supported_version: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            min_supported_version: int = ...,
            max_supported_version: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class UpdateRaftVoterResponse(Message):
    throttle_time_ms: int
    error_code: int
    current_leader: UpdateRaftVoterResponse.CurrentLeader
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        current_leader: UpdateRaftVoterResponse.CurrentLeader = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class CurrentLeader(Message):
        leader_id: int
        leader_epoch: int
        host: str
        port: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            leader_id: int = ...,
            leader_epoch: int = ...,
            host: str = ...,
            port: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

# --------------------------------------------------------------------------- headers

class RequestHeader(Message):
    request_api_key: int
    request_api_version: int
    correlation_id: int
    client_id: str | None
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        request_api_key: int = ...,
        request_api_version: int = ...,
        correlation_id: int = ...,
        client_id: str | None = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class ResponseHeader(Message):
    correlation_id: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        correlation_id: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

# --------------------------------------------------------------------------- data structs (DATA)

class ConsumerProtocolAssignment(Message):
    assigned_partitions: list[ConsumerProtocolAssignment.TopicPartition]
    user_data: bytes | None
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        assigned_partitions: list[ConsumerProtocolAssignment.TopicPartition] = ...,
        user_data: bytes | None = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class TopicPartition(Message):
        topic: str
        partitions: list[int]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            topic: str = ...,
            partitions: list[int] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class ConsumerProtocolSubscription(Message):
    topics: list[str]
    user_data: bytes | None
    owned_partitions: list[ConsumerProtocolSubscription.TopicPartition]
    generation_id: int
    rack_id: str | None
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        topics: list[str] = ...,
        user_data: bytes | None = ...,
        owned_partitions: list[ConsumerProtocolSubscription.TopicPartition] = ...,
        generation_id: int = ...,
        rack_id: str | None = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class TopicPartition(Message):
        topic: str
        partitions: list[int]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            topic: str = ...,
            partitions: list[int] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class DefaultPrincipalData(Message):
    type: str
    name: str
    token_authenticated: bool
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        type: str = ...,
        name: str = ...,
        token_authenticated: bool = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class GroupMetadataKey(Message):
    group: str
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        group: str = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class GroupMetadataValue(Message):
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: list[GroupMetadataValue.MemberMetadata]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        protocol_type: str = ...,
        generation: int = ...,
        protocol: str | None = ...,
        leader: str | None = ...,
        current_state_timestamp: int = ...,
        members: list[GroupMetadataValue.MemberMetadata] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class MemberMetadata(Message):
        member_id: str
        group_instance_id: str | None
        client_id: str
        client_host: str
        rebalance_timeout: int
        session_timeout: int
        subscription: bytes
        assignment: bytes
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            member_id: str = ...,
            group_instance_id: str | None = ...,
            client_id: str = ...,
            client_host: str = ...,
            rebalance_timeout: int = ...,
            session_timeout: int = ...,
            subscription: bytes = ...,
            assignment: bytes = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class KRaftVersionRecord(Message):
    version: int
    k_raft_version: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        version: int = ...,
        k_raft_version: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class LeaderChangeMessage(Message):
    version: int
    leader_id: int
    voters: list[LeaderChangeMessage.Voter]
    granting_voters: list[LeaderChangeMessage.Voter]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        version: int = ...,
        leader_id: int = ...,
        voters: list[LeaderChangeMessage.Voter] = ...,
        granting_voters: list[LeaderChangeMessage.Voter] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class Voter(Message):
        voter_id: int
        voter_directory_id: bytes
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            voter_id: int = ...,
            voter_directory_id: bytes = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class OffsetCommitKey(Message):
    group: str
    topic: str
    partition: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        group: str = ...,
        topic: str = ...,
        partition: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class OffsetCommitValue(Message):
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        offset: int = ...,
        leader_epoch: int = ...,
        metadata: str = ...,
        commit_timestamp: int = ...,
        expire_timestamp: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class SnapshotFooterRecord(Message):
    version: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        version: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class SnapshotHeaderRecord(Message):
    version: int
    last_contained_log_timestamp: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        version: int = ...,
        last_contained_log_timestamp: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class TransactionLogKey(Message):
    transactional_id: str
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        transactional_id: str = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class TransactionLogValue(Message):
    producer_id: int
    previous_producer_id: int
    next_producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: int
    transaction_partitions: list[TransactionLogValue.PartitionsSchema] | None
    transaction_last_update_timestamp_ms: int
    transaction_start_timestamp_ms: int
    client_transaction_version: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        producer_id: int = ...,
        previous_producer_id: int = ...,
        next_producer_id: int = ...,
        producer_epoch: int = ...,
        transaction_timeout_ms: int = ...,
        transaction_status: int = ...,
        transaction_partitions: list[TransactionLogValue.PartitionsSchema] | None = ...,
        transaction_last_update_timestamp_ms: int = ...,
        transaction_start_timestamp_ms: int = ...,
        client_transaction_version: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class PartitionsSchema(Message):
        topic: str
        partition_ids: list[int]
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            topic: str = ...,
            partition_ids: list[int] = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class VotersRecord(Message):
    version: int
    voters: list[VotersRecord.Voter]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        version: int = ...,
        voters: list[VotersRecord.Voter] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class Voter(Message):
        voter_id: int
        voter_directory_id: bytes
        endpoints: list[VotersRecord.Endpoint]
        k_raft_version_feature: VotersRecord.KRaftVersionFeature
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            voter_id: int = ...,
            voter_directory_id: bytes = ...,
            endpoints: list[VotersRecord.Endpoint] = ...,
            k_raft_version_feature: VotersRecord.KRaftVersionFeature = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class Endpoint(Message):
        name: str
        host: str
        port: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            host: str = ...,
            port: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class KRaftVersionFeature(Message):
        min_supported_version: int
        max_supported_version: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            min_supported_version: int = ...,
            max_supported_version: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

# --------------------------------------------------------------------------- metadata records (METADATA_RECORDS)

class RegisterBrokerRecord(Message):
    broker_id: int
    is_migrating_zk_broker: bool
    incarnation_id: bytes
    broker_epoch: int
    end_points: list[RegisterBrokerRecord.BrokerEndpoint]
    features: list[RegisterBrokerRecord.BrokerFeature]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    log_dirs: list[bytes]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        broker_id: int = ...,
        is_migrating_zk_broker: bool = ...,
        incarnation_id: bytes = ...,
        broker_epoch: int = ...,
        end_points: list[RegisterBrokerRecord.BrokerEndpoint] = ...,
        features: list[RegisterBrokerRecord.BrokerFeature] = ...,
        rack: str | None = ...,
        fenced: bool = ...,
        in_controlled_shutdown: bool = ...,
        log_dirs: list[bytes] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class BrokerEndpoint(Message):
        name: str
        host: str
        port: int
        security_protocol: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            host: str = ...,
            port: int = ...,
            security_protocol: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class BrokerFeature(Message):
        name: str
        min_supported_version: int
        max_supported_version: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            min_supported_version: int = ...,
            max_supported_version: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class UnregisterBrokerRecord(Message):
    broker_id: int
    broker_epoch: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        broker_id: int = ...,
        broker_epoch: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class TopicRecord(Message):
    name: str
    topic_id: bytes
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        name: str = ...,
        topic_id: bytes = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class PartitionRecord(Message):
    partition_id: int
    topic_id: bytes
    replicas: list[int]
    isr: list[int]
    removing_replicas: list[int]
    adding_replicas: list[int]
    leader: int
    leader_recovery_state: int
    leader_epoch: int
    partition_epoch: int
    directories: list[bytes]
    eligible_leader_replicas: list[int] | None
    last_known_elr: list[int] | None
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        partition_id: int = ...,
        topic_id: bytes = ...,
        replicas: list[int] = ...,
        isr: list[int] = ...,
        removing_replicas: list[int] = ...,
        adding_replicas: list[int] = ...,
        leader: int = ...,
        leader_recovery_state: int = ...,
        leader_epoch: int = ...,
        partition_epoch: int = ...,
        directories: list[bytes] = ...,
        eligible_leader_replicas: list[int] | None = ...,
        last_known_elr: list[int] | None = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class ConfigRecord(Message):
    resource_type: int
    resource_name: str
    name: str
    value: str | None
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        resource_type: int = ...,
        resource_name: str = ...,
        name: str = ...,
        value: str | None = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class PartitionChangeRecord(Message):
    partition_id: int
    topic_id: bytes
    isr: list[int] | None
    leader: int
    replicas: list[int] | None
    removing_replicas: list[int] | None
    adding_replicas: list[int] | None
    leader_recovery_state: int
    directories: list[bytes] | None
    eligible_leader_replicas: list[int] | None
    last_known_elr: list[int] | None
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        partition_id: int = ...,
        topic_id: bytes = ...,
        isr: list[int] | None = ...,
        leader: int = ...,
        replicas: list[int] | None = ...,
        removing_replicas: list[int] | None = ...,
        adding_replicas: list[int] | None = ...,
        leader_recovery_state: int = ...,
        directories: list[bytes] | None = ...,
        eligible_leader_replicas: list[int] | None = ...,
        last_known_elr: list[int] | None = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class FenceBrokerRecord(Message):
    id: int
    epoch: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        id: int = ...,
        epoch: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class UnfenceBrokerRecord(Message):
    id: int
    epoch: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        id: int = ...,
        epoch: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class RemoveTopicRecord(Message):
    topic_id: bytes
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        topic_id: bytes = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class DelegationTokenRecord(Message):
    owner: str
    requester: str
    renewers: list[str]
    issue_timestamp: int
    max_timestamp: int
    expiration_timestamp: int
    token_id: str
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        owner: str = ...,
        requester: str = ...,
        renewers: list[str] = ...,
        issue_timestamp: int = ...,
        max_timestamp: int = ...,
        expiration_timestamp: int = ...,
        token_id: str = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class UserScramCredentialRecord(Message):
    name: str
    mechanism: int
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        name: str = ...,
        mechanism: int = ...,
        salt: bytes = ...,
        stored_key: bytes = ...,
        server_key: bytes = ...,
        iterations: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class FeatureLevelRecord(Message):
    name: str
    feature_level: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        name: str = ...,
        feature_level: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class ClientQuotaRecord(Message):
    entity: list[ClientQuotaRecord.EntityData]
    key: str
    value: float
    remove: bool
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        entity: list[ClientQuotaRecord.EntityData] = ...,
        key: str = ...,
        value: float = ...,
        remove: bool = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class EntityData(Message):
        entity_type: str
        entity_name: str | None
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            entity_type: str = ...,
            entity_name: str | None = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

class ProducerIdsRecord(Message):
    broker_id: int
    broker_epoch: int
    next_producer_id: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        broker_id: int = ...,
        broker_epoch: int = ...,
        next_producer_id: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class BrokerRegistrationChangeRecord(Message):
    broker_id: int
    broker_epoch: int
    fenced: int
    in_controlled_shutdown: int
    log_dirs: list[bytes]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        broker_id: int = ...,
        broker_epoch: int = ...,
        fenced: int = ...,
        in_controlled_shutdown: int = ...,
        log_dirs: list[bytes] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class AccessControlEntryRecord(Message):
    id: bytes
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        id: bytes = ...,
        resource_type: int = ...,
        resource_name: str = ...,
        pattern_type: int = ...,
        principal: str = ...,
        host: str = ...,
        operation: int = ...,
        permission_type: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class RemoveAccessControlEntryRecord(Message):
    id: bytes
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        id: bytes = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class NoOpRecord(Message):
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class ZkMigrationStateRecord(Message):
    zk_migration_state: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        zk_migration_state: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class RemoveUserScramCredentialRecord(Message):
    name: str
    mechanism: int
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        name: str = ...,
        mechanism: int = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class BeginTransactionRecord(Message):
    name: str | None
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        name: str | None = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class EndTransactionRecord(Message):
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class AbortTransactionRecord(Message):
    reason: str | None
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        reason: str | None = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class RemoveDelegationTokenRecord(Message):
    token_id: str
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        token_id: str = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

class RegisterControllerRecord(Message):
    controller_id: int
    incarnation_id: bytes
    zk_migration_ready: bool
    end_points: list[RegisterControllerRecord.ControllerEndpoint]
    features: list[RegisterControllerRecord.ControllerFeature]
    unknown_tags: dict[int, bytes] | None
    def __init__(
        self,
        *,
        controller_id: int = ...,
        incarnation_id: bytes = ...,
        zk_migration_ready: bool = ...,
        end_points: list[RegisterControllerRecord.ControllerEndpoint] = ...,
        features: list[RegisterControllerRecord.ControllerFeature] = ...,
        unknown_tags: dict[int, bytes] | None = None,
    ) -> None: ...

    class ControllerEndpoint(Message):
        name: str
        host: str
        port: int
        security_protocol: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            host: str = ...,
            port: int = ...,
            security_protocol: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...

    class ControllerFeature(Message):
        name: str
        min_supported_version: int
        max_supported_version: int
        unknown_tags: dict[int, bytes] | None
        def __init__(
            self,
            *,
            name: str = ...,
            min_supported_version: int = ...,
            max_supported_version: int = ...,
            unknown_tags: dict[int, bytes] | None = None,
        ) -> None: ...
