"""The generic half of a deterministic, seeded simulation, shared by every state machine that
runs under one (tests/raft, tests/replication, and the next: groups, the mirror's offsets).

A simulation of a state machine subclasses EventLoop and adds what is particular to it: the
nodes and their disks, the driver that carries out the machine's actions, the faults, the
invariants. What is shared lives here:

- EventLoop: one virtual clock and one random generator seeded from the seed, so a seed replays
  exactly; a queue of events ordered by (time, the order they were scheduled), each dispatched
  to the simulation's `_on_<kind>(*args)`; a hostile network (drops, duplicates, delays whose
  long tail reorders messages, links blocked both ways or one way); an optional trace; a
  Counter of what happened (`stats`), so a test can demand that a path was exercised;
  `_settle`, to demand progress once the chaos is over.
- SeededSimulation: how a test module runs a simulation over many seeds. The seeds are cut into
  chunks (one test item each, for progress and to stay far below the test timeout), read from
  `<PREFIX>_SEEDS` and `<PREFIX>_SEED_START`; each CI chunk must exercise `must_happen`; a
  failing seed is run again with its trace and reported with the command that replays it
  (`<PREFIX>_SEED=N python -m pytest -q <tests> -k replay -s`); the replay test runs one seed
  twice and demands the same run.
- assert_mutation_caught: the simulation has teeth. With a known bug planted (a context
  manager that patches one rule of the implementation out), some seed must fail.
"""
from __future__ import annotations

import heapq
import os
import random
import traceback
from collections import Counter
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Sequence

import pytest

Link = tuple[Hashable, Hashable]


class InvariantViolation(AssertionError):
    """A simulation's safety or liveness check failed."""


# --- the event loop ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Network:
    """How long a message takes: `delay_ms` (randrange bounds), plus `slow_ms` for the share of
    messages the faults make slow (which reorders them). `duplicates`: the faults may deliver a
    message twice (they then have a `duplicate` share)."""
    delay_ms: tuple[int, int]
    slow_ms: tuple[int, int]
    duplicates: bool = False


class EventLoop:
    """A virtual clock, a seeded random generator and a queue of events; see the module doc.

    Subclasses set `network` and `faults` (with `drop`, `slow`, and `duplicate` if the network
    duplicates), schedule events with `_push(at, kind, *args)` and handle them in
    `_on_<kind>(*args)`. While `chaos` is on, the network misbehaves and `blocked` links lose
    what is sent on them.
    """
    network: Network
    faults: Any

    def __init__(self, seed: int, trace: bool = False):
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0
        self._queue: list[tuple] = []
        self._seq = 0
        self.blocked: set[Link] = set()
        self.chaos = True
        self.trace_lines: list[str] | None = [] if trace else None
        self.stats: Counter[str] = Counter()   # what happened, to see what a run exercised
        self.events = 0

    def _clock(self) -> int:
        return self.now

    def _push(self, at: int, kind: str, *args) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (at, self._seq, kind, args))

    def _run_until(self, end_ms: int) -> None:
        queue = self._queue
        while queue and queue[0][0] <= end_ms:
            at, _, kind, args = heapq.heappop(queue)
            self.now = at
            self.events += 1
            getattr(self, "_on_" + kind)(*args)
        self.now = max(self.now, end_ms)

    def _settle(self, bound_ms: int, step_ms: int, done: Callable[[], bool]) -> bool:
        """Run in steps of `step_ms` until `done()` says so (True), or for `bound_ms` (False)."""
        deadline = self.now + bound_ms
        while self.now < deadline:
            self._run_until(min(deadline, self.now + step_ms))
            if done():
                return True
        return False

    def _trace(self, line: str) -> None:
        if self.trace_lines is not None:
            self.trace_lines.append(f"{self.now:>7} {line}")

    # --- the network ----------------------------------------------------------------------------

    def _transit(self, source: Hashable, destination: Hashable) -> tuple[int, ...]:
        """The delays of the copies of a message sent now from `source` to `destination`:
        none if it is lost, two if it is duplicated."""
        if not self.chaos:
            return (self.rng.randrange(*self.network.delay_ms),)
        faults = self.faults
        if (source, destination) in self.blocked or self.rng.random() < faults.drop:
            return ()
        if self.network.duplicates and self.rng.random() < faults.duplicate:
            return self._chaos_delay(), self._chaos_delay()
        return (self._chaos_delay(),)

    def _chaos_delay(self) -> int:
        rng, network = self.rng, self.network
        delay = rng.randrange(*network.delay_ms)
        if rng.random() < self.faults.slow:
            delay += rng.randrange(*network.slow_ms)
        return delay

    def _cut_links(self, ids: Sequence[Hashable]) -> set[Link]:
        """A partition: half the time a group cut off from the rest both ways, else some links
        that fail one way only."""
        rng = self.rng
        if rng.random() < 0.5:
            group = set(rng.sample(ids, rng.randrange(1, len(ids))))
            return {(a, b) for a in ids for b in ids if (a in group) != (b in group)}
        pairs = [(a, b) for a in ids for b in ids if a != b]
        return set(rng.sample(pairs, rng.randrange(1, len(pairs) // 2 + 1)))

    def _on_heal(self) -> None:
        self.blocked = set()


# --- many seeds -------------------------------------------------------------------------------

@dataclass(frozen=True)
class SeededSimulation:
    """A simulation run over many seeds by a test module; see the module doc.

    `build(seed, trace)` makes a simulation whose `run()` raises on a violated invariant.
    `describe(sim)` says how the seed drew the run (faults, sizes); `summary(sim)` what the run
    did; `outcome(sim)` is what must be equal when a seed runs twice.
    """
    env_prefix: str                          # SEAWAY_RAFT: SEAWAY_RAFT_SEED, _SEEDS, _SEED_START
    tests: str                               # the test directory, for the replay command
    build: Callable[[int, bool], Any]
    describe: Callable[[Any], str]
    summary: Callable[[Any], str]
    outcome: Callable[[Any], Any]
    default_seeds: int
    must_happen: tuple[str, ...] = ()        # what each CI chunk must exercise (in `stats`)
    chunk: int = 250
    trace_tail: int = 80
    replay_default: int = 7

    def run_seed(self, seed: int, trace: bool = False):
        simulation = self.build(seed, trace)
        simulation.run()
        return simulation

    def replay_command(self, seed: int) -> str:
        return f"{self.env_prefix}_SEED={seed} python -m pytest -q {self.tests} -k replay -s"

    def failure_report(self, seed: int, error: BaseException) -> str:
        # Runs are deterministic: run the seed again with tracing on to show how it got there.
        simulation = self.build(seed, True)
        try:
            simulation.run()
        except BaseException:  # noqa: BLE001 - the same failure, expected
            pass
        tail = "\n".join((simulation.trace_lines or [])[-self.trace_tail:])
        detail = "".join(traceback.format_exception_only(type(error), error)).strip()
        return (f"seed {seed} failed: {detail}\n{self.describe(simulation)}\n"
                f"last {self.trace_tail} events:\n{tail}\n\n"
                f"replay it with:\n    {self.replay_command(seed)}")

    def seed_chunks(self) -> list[tuple[int, int]]:
        start = int(os.environ.get(f"{self.env_prefix}_SEED_START", "0"))
        count = int(os.environ.get(f"{self.env_prefix}_SEEDS", str(self.default_seeds)))
        return [(first, min(first + self.chunk, start + count))
                for first in range(start, start + count, self.chunk)]

    def parametrize_chunks(self):
        """The decorator of a test taking (first, end): one item per chunk of seeds."""
        chunks = self.seed_chunks()
        return pytest.mark.parametrize("first, end", chunks,
                                       ids=[f"seeds-{a}-{b - 1}" for a, b in chunks])

    def check_seeds(self, first: int, end: int) -> None:
        """Run seeds [first, end); fail with the first failing seed's report."""
        exercised: Counter[str] = Counter()
        for seed in range(first, end):
            try:
                simulation = self.run_seed(seed)
            except Exception as error:  # noqa: BLE001 - every failure is reported with its seed
                pytest.fail(self.failure_report(seed, error), pytrace=False)
            exercised.update(simulation.stats)
        if end - first == self.chunk and end <= self.default_seeds:
            # The CI seeds are fixed, so are these counts: a zero means a path went untested.
            missing = [what for what in self.must_happen if not exercised[what]]
            assert not missing, f"seeds {first}-{end - 1} never exercised: {missing}"

    def check_replay(self) -> None:
        """Replays <PREFIX>_SEED with its trace (printed when the variable is set), twice: a
        seed that does not replay event for event could not be debugged from its command."""
        variable = f"{self.env_prefix}_SEED"
        seed = int(os.environ.get(variable, str(self.replay_default)))
        runs = []
        for _ in range(2):
            simulation = self.build(seed, True)
            try:
                simulation.run()
            finally:
                if variable in os.environ:
                    print("\n".join(simulation.trace_lines or []))
                    print(f"seed {seed}: {self.describe(simulation)}, events "
                          f"{simulation.events}, {self.summary(simulation)}")
            runs.append((simulation.trace_lines, self.outcome(simulation)))
        assert runs[0] == runs[1], f"seed {seed} does not replay identically"


# --- mutations --------------------------------------------------------------------------------

def assert_mutation_caught(name: str, plant: Callable[[], AbstractContextManager],
                           run_seed: Callable[[int], Any], seeds: Iterable[int]) -> int:
    """With the bug `plant()` plants, some seed must fail (any exception counts: the bug was
    seen); returns that seed. A mutation that survives every seed means the simulation no
    longer looks where that bug would show."""
    seeds = list(seeds)
    with plant():
        for seed in seeds:
            try:
                run_seed(seed)
            except Exception:  # noqa: BLE001 - any failure means the bug was seen
                return seed
    pytest.fail(f"the simulation did not notice '{name}' in {len(seeds)} seeds")
