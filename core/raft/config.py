"""Quorum timing and sizing settings, under Kafka's `controller.quorum.*` names.

Only the numbers the pure state machine needs live here; addresses (`controller.quorum.voters`,
`controller.quorum.bootstrap.servers`) belong to the driver, which hands the node its voter ids.
The exception is `client.local.address`, the IP the driver binds its outbound connections to:
it rides here because this config is what a node hands its driver; the state machine ignores it.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Mapping

# Kafka's property names for the settings a node's configuration may carry.
PROPERTY_NAMES = {
    "controller.quorum.election.timeout.ms": "election_timeout_ms",
    "controller.quorum.election.backoff.max.ms": "election_backoff_max_ms",
    "controller.quorum.fetch.timeout.ms": "fetch_timeout_ms",
    "controller.quorum.request.timeout.ms": "request_timeout_ms",
    "controller.quorum.retry.backoff.ms": "retry_backoff_ms",
}


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    # controller.quorum.election.timeout.ms: how long a voter without a leader waits before it
    # campaigns. Each wait adds a random jitter in [0, election_timeout_ms) so that voters do
    # not all campaign at once.
    election_timeout_ms: int = 1000
    # controller.quorum.election.backoff.max.ms: the cap of the exponential backoff a candidate
    # waits after losing an election, and the scale of a resigning leader's successor ranking.
    election_backoff_max_ms: int = 1000
    # controller.quorum.fetch.timeout.ms: a follower that has not heard from its leader for
    # this long starts an election; a leader that has not heard from a majority for 1.5 times
    # this long resigns (check quorum).
    fetch_timeout_ms: int = 2000
    # controller.quorum.request.timeout.ms: an unanswered request is given up and re-sent.
    request_timeout_ms: int = 2000
    # controller.quorum.retry.backoff.ms: pause before re-sending after an error response.
    retry_backoff_ms: int = 20
    # How long a leader parks a Fetch that found no new records (Kafka's raft client uses 500).
    fetch_max_wait_ms: int = 500
    # Fetch.MaxBytes / FetchSnapshot.MaxBytes a follower asks for (Kafka: 8 MiB for both).
    fetch_max_bytes: int = 8 * 1024 * 1024
    fetch_snapshot_max_bytes: int = 8 * 1024 * 1024
    # Kafka's raft client starts each binary-exponential backoff step at 50 ms.
    retry_backoff_base_ms: int = 50
    # client.local.address (the driver's, not the state machine's): None lets the kernel pick.
    local_address: str | None = None

    def __post_init__(self) -> None:
        must_be_positive = ("election_timeout_ms", "fetch_timeout_ms", "request_timeout_ms",
                            "fetch_max_bytes", "fetch_snapshot_max_bytes")
        kafka_names = {field_name: name for name, field_name in PROPERTY_NAMES.items()}
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int):
                continue
            low = 1 if f.name in must_be_positive else 0
            if value < low:
                name = kafka_names.get(f.name, f.name)
                raise ValueError(f"{name} must be at least {low}, got {value}")

    @classmethod
    def from_properties(cls, properties: Mapping[str, object]) -> QuorumConfig:
        """The quorum settings among a node's properties (others are ignored)."""
        values = {}
        for name, field_name in PROPERTY_NAMES.items():
            if name in properties:
                try:
                    # Any object: int() raises TypeError for those it cannot take, answered below.
                    values[field_name] = int(properties[name])  # type: ignore[call-overload]
                except (TypeError, ValueError):
                    raise ValueError(f"{name} must be an integer, got {properties[name]!r}") \
                        from None
        if properties.get("client.local.address"):
            values["local_address"] = str(properties["client.local.address"])
        return cls(**values)

    @property
    def check_quorum_timeout_ms(self) -> int:
        # Kafka's LeaderState uses 1.5 x the fetch timeout: long enough that a healthy follower
        # that just missed one fetch round does not cost the leader its leadership.
        return self.fetch_timeout_ms * 3 // 2

    @property
    def begin_quorum_epoch_resend_ms(self) -> int:
        # A voter that has not acknowledged BeginQuorumEpoch hears it again at half the fetch
        # timeout, so it learns the leader before it would time out and campaign itself.
        return max(1, self.fetch_timeout_ms // 2)
