"""The roles a node can be in (Kafka's EpochState kinds)."""
from __future__ import annotations

import enum


class Role(enum.Enum):
    UNATTACHED = "Unattached"
    PROSPECTIVE = "Prospective"
    CANDIDATE = "Candidate"
    LEADER = "Leader"
    FOLLOWER = "Follower"
    RESIGNED = "Resigned"
