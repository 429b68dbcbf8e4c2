"""A driver for the pure transaction coordinator in tests: it plays the log (every write
lands unless told otherwise), the producer id allocator and the marker sender."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from core.broker.transactions.coordinator import TxnConfig, TxnCoordinator
from core.broker.transactions.events import (AddPartitions, EndTxn, InitProducerId, LogWritten, MarkersWritten,
                                             NeedProducerId, Respond, SendMarkers, WriteTxnLog)
from core.broker.transactions.state import TxnMetadata
from core.protocol.errors import ErrorCode as E


@dataclass
class TxnHarness:
    coordinator: TxnCoordinator
    now: int = 1_000
    auto_write: bool = True           # answer each WriteTxnLog with success at once
    auto_markers: bool = True         # and each SendMarkers
    log: list[tuple[str, TxnMetadata | None]] = field(default_factory=list)
    unwritten: list[WriteTxnLog] = field(default_factory=list)
    markers: list[SendMarkers] = field(default_factory=list)
    responses: dict = field(default_factory=dict)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    _pids: itertools.count = field(default_factory=lambda: itertools.count(4000))

    @classmethod
    def new(cls, config: TxnConfig = TxnConfig(), **kw) -> "TxnHarness":
        c = TxnCoordinator(config, num_partitions=1)
        h = cls(c, **kw)
        h.run(c.load_partition(0, coordinator_epoch=1, records={}, now_ms=h.now))
        return h

    def run(self, actions) -> None:
        queue = list(actions)
        while queue:
            a = queue.pop(0)
            if isinstance(a, Respond):
                assert a.request_id not in self.responses, f"answered twice: {a}"
                self.responses[a.request_id] = a.result
            elif isinstance(a, NeedProducerId):
                ev = a.event
                queue += self.coordinator.handle(InitProducerId(
                    ev.request_id, ev.now_ms, ev.transactional_id, ev.timeout_ms, ev.producer_id,
                    ev.producer_epoch, fresh_producer_id=next(self._pids)))
            elif isinstance(a, WriteTxnLog):
                if self.auto_write:
                    queue += self.land(a)
                else:
                    self.unwritten.append(a)
            elif isinstance(a, SendMarkers):
                self.markers.append(a)
                if self.auto_markers:
                    queue += self.coordinator.handle(MarkersWritten(
                        a.transactional_id, a.producer_id, a.producer_epoch, a.coordinator_epoch, self.now))
            else:
                raise AssertionError(f"unexpected action {a}")

    def land(self, w: WriteTxnLog, error: E = E.NONE):
        if not error:
            self.log.extend((w.transactional_id, md) for md in w.records)
        return self.coordinator.handle(LogWritten(w.transactional_id, w.token, self.now, error))

    def finish_writes(self, error: E = E.NONE) -> None:
        pending, self.unwritten = self.unwritten, []
        for w in pending:
            self.run(self.land(w, error))

    def ask(self, event):
        self.run(self.coordinator.handle(event))
        return self.responses.get(event.request_id)

    # ---------------------------------------------------------------- client calls

    def init(self, tid: str, timeout_ms: int = 60_000, pid: int = -1, epoch: int = -1):
        return self.ask(InitProducerId(next(self._ids), self.now, tid, timeout_ms, pid, epoch))

    def add(self, tid: str, pid: int, epoch: int, *tps, verify_only: bool = False):
        return self.ask(AddPartitions(next(self._ids), self.now, tid, pid, epoch, frozenset(tps), verify_only))

    def end(self, tid: str, pid: int, epoch: int, commit: bool):
        return self.ask(EndTxn(next(self._ids), self.now, tid, pid, epoch, commit))

    def tick(self, advance_ms: int = 0, expire_ids: bool = False) -> None:
        self.now += advance_ms
        self.run(self.coordinator.tick(self.now, expire_ids=expire_ids))

    def meta(self, tid: str) -> TxnMetadata:
        return self.coordinator.entries[tid].meta
