"""Election arithmetic: who is up to date, vote tallies, randomized timeouts and backoffs."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from core.raft.config import QuorumConfig
from core.raft.entries import OffsetAndEpoch


def majority(voter_count: int) -> int:
    return voter_count // 2 + 1


def log_is_up_to_date(candidate: OffsetAndEpoch, local: OffsetAndEpoch) -> bool:
    """Raft's election restriction: vote only for a log at least as up to date as ours.

    The last epoch decides first: the leader of a later epoch held every committed entry, so a
    log ending in it is ahead of a longer log ending in an older epoch.
    """
    return (candidate.epoch, candidate.offset) >= (local.epoch, local.offset)


def random_election_timeout_ms(config: QuorumConfig, rng: random.Random) -> int:
    # The jitter spreads voters' timeouts so one of them usually campaigns alone and wins.
    return config.election_timeout_ms + rng.randrange(config.election_timeout_ms)


def binary_exponential_backoff_ms(config: QuorumConfig, rng: random.Random, retries: int) -> int:
    """How long a candidate that lost waits before it tries again: a random number of base steps
    in [0, 2^retries), capped at quorum.election.backoff.max.ms. Rivals that keep splitting the
    vote draw from ever wider ranges until one of them gets ahead."""
    steps = rng.randrange(1 << min(20, max(1, retries)))
    return min(config.retry_backoff_base_ms * steps, config.election_backoff_max_ms)


def strict_exponential_backoff_ms(config: QuorumConfig, position: int, successors: int) -> int:
    """How long a voter waits after its leader resigned, by its rank among the preferred
    successors: the first campaigns at once, each later one waits twice as long as the one
    before, the last waits quorum.election.backoff.max.ms. Voters not on the list wait the
    maximum too. The most up-to-date voter thus usually wins without a contest."""
    if position == 0:
        return 0
    if position < 0 or position >= successors:
        return config.election_backoff_max_ms
    base = config.election_backoff_max_ms >> (successors - 1)
    return min(config.election_backoff_max_ms, base << (position - 1))


@dataclass(slots=True)
class EpochElection:
    """The votes a prospective (pre-vote) or a candidate has heard back in one attempt."""
    voters: frozenset[int]
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)

    def record(self, voter_id: int, granted: bool) -> None:
        if voter_id not in self.voters:
            return
        # A voter's latest answer stands; a duplicate or late one must not count twice.
        (self.granted if granted else self.rejected).add(voter_id)
        (self.rejected if granted else self.granted).discard(voter_id)

    @property
    def is_vote_granted(self) -> bool:
        return len(self.granted) >= majority(len(self.voters))

    @property
    def is_vote_rejected(self) -> bool:
        """So many voters said no that a majority of yes is out of reach."""
        return len(self.rejected) > len(self.voters) - majority(len(self.voters))
