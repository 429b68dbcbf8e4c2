"""ElectLeaders (43): an operator moves leadership back to preferred replicas, or gives a
leaderless partition an unclean leader (Kafka's ReplicationControlManager.electLeaders; KIP-183,
KIP-460).

Election type: PREFERRED (0; the only one in v0) or UNCLEAN (1). Any other is INVALID_REQUEST
for the whole request: the top-level error (v1+) and every partition listed.

Partitions: the ones listed, each answered in request order, or, when the list is null, every
partition of every topic, answered only where an election happened or failed (Kafka leaves out
ELECTION_NOT_NEEDED then; each topic is still listed, possibly with no partitions). An empty
list elects nothing.

Per partition:

* unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION;
* PREFERRED when the first replica already leads, UNCLEAN when the partition has a leader:
  ELECTION_NOT_NEEDED;
* otherwise the election (election.py): PREFERRED elects the first replica if it is in the ISR
  and active, else keeps a leader that still can lead, else the next replica that can;
  UNCLEAN elects a clean leader if there is one, else the first active replica outside the ISR
  (the ISR becomes that replica and the leader RECOVERING), whatever the topic's
  unclean.leader.election.enable says: the operator asked for it. No change:
  PREFERRED_LEADER_NOT_AVAILABLE or ELIGIBLE_LEADERS_NOT_AVAILABLE.

Records: one PartitionChangeRecord per election; a request that would write more than
MAX_RECORDS_PER_USER_OP fails as a whole with POLICY_VIOLATION (Kafka's BoundedList).
A partition named twice is elected once: the second sees the first's result.
"""
from __future__ import annotations

from core.protocol import messages as m
from core.protocol.codegen import Message
from core.protocol.errors import ErrorCode, KafkaError

from .common import TOO_LARGE_MESSAGE, Working
from .election import Election, is_active, partition_change
from .image import NO_LEADER, MetadataImage, PartitionRegistration

R = m.ElectLeadersResponse
PREFERRED, UNCLEAN = 0, 1

NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."


class _Elections:
    """Elections against one image; partitions already changed by this request are read from
    `changed`, so the image is not rebuilt per partition."""

    def __init__(self, image: MetadataImage, election_type: int):
        self.image = image
        self.election_type = election_type
        self.records: list[Message] = []
        self.changed: dict[tuple[bytes, int], PartitionRegistration] = {}

    def elect(self, name: str, partition_id: int) -> KafkaError | None:
        """None when a leader was elected, else why not."""
        image = self.image
        topic = image.topic(name)
        if topic is None:
            return KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {name}")
        key = (topic.id, partition_id)
        part = self.changed.get(key) or topic.partitions.get(partition_id)
        if part is None:
            return KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            f"No such partition as {name}-{partition_id}")
        preferred = self.election_type == PREFERRED
        if preferred:
            if part.leader == (part.replicas[0] if part.replicas else NO_LEADER):
                return KafkaError(ErrorCode.ELECTION_NOT_NEEDED, NOT_NEEDED_MESSAGE)
        elif part.leader != NO_LEADER:
            return KafkaError(ErrorCode.ELECTION_NOT_NEEDED, NOT_NEEDED_MESSAGE)
        record = partition_change(topic.id, partition_id, part, lambda r: is_active(image, r),
                                  election=Election.PREFERRED if preferred else Election.UNCLEAN)
        if record is None:
            if preferred:
                return KafkaError(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                                "The preferred leader was not available.")
            return KafkaError(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                            "Eligible topic partition leaders are not available.")
        self.records.append(record)
        self.changed[key] = part.merge(record)
        return None


def _result(partition_id: int, error: KafkaError | None) -> m.ElectLeadersResponse.PartitionResult:
    if error is None:
        return R.PartitionResult(partition_id=partition_id, error_code=0, error_message=None)
    return R.PartitionResult(partition_id=partition_id, error_code=error.code,
                             error_message=error.message)


def elect_leaders(w: Working, request: m.ElectLeadersRequest, version: int) -> m.ElectLeadersResponse:
    """Answer an ElectLeaders; adds its PartitionChangeRecords to `w`."""
    election_type = PREFERRED if version == 0 else request.election_type
    if election_type not in (PREFERRED, UNCLEAN):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}")
    image = w.image
    elections = _Elections(image, election_type)
    results = []
    if request.topic_partitions is None:
        for name, topic_id in sorted(image.topic_ids.items()):
            parts = []
            for partition_id in sorted(image.topics[topic_id].partitions):
                error = elections.elect(name, partition_id)
                if error is None or error.code != ErrorCode.ELECTION_NOT_NEEDED:
                    parts.append(_result(partition_id, error))
            results.append(R.ReplicaElectionResult(topic=name, partition_result=parts))
    else:
        for t in request.topic_partitions:
            results.append(R.ReplicaElectionResult(topic=t.topic, partition_result=[
                _result(p, elections.elect(t.topic, p)) for p in t.partitions]))
    if len(elections.records) > w.room():
        raise KafkaError(ErrorCode.POLICY_VIOLATION, TOO_LARGE_MESSAGE)
    w.add(elections.records)
    return R(throttle_time_ms=0, error_code=0, replica_election_results=results)


def error_response(request: m.ElectLeadersRequest, code: ErrorCode,
                   message: str | None) -> m.ElectLeadersResponse:
    """The whole request failed: the top-level error (v1+) and each partition listed (Kafka's
    ElectLeadersRequest.getErrorResponse)."""
    return R(throttle_time_ms=0, error_code=code, replica_election_results=[
        R.ReplicaElectionResult(topic=t.topic, partition_result=[
            R.PartitionResult(partition_id=p, error_code=code, error_message=message)
            for p in t.partitions])
        for t in request.topic_partitions or ()])
