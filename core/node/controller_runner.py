"""ControllerRunner: the active-controller loop around the pure QuorumController.

The QuorumController (core/controller) decides; this does the waiting and the I/O:

* It is fed every committed metadata record by the MetadataLoader (replay per run of records,
  and the loaded snapshot), on every controller, active or not.
* It activates the controller once this node leads the quorum *and* has applied the
  LeaderChange entry that opened its epoch (so it has everything committed before), with the
  log end offset, where the controller starts counting the offsets of its own records.
  It deactivates it as soon as the leader changes.
* A request (controller_apis.py) becomes records under one lock, so records reach the log in
  the order the controller generated them and its offset count stays true. The records are
  proposed to Raft; the response leaves once the loader has applied the last of them. A
  request that writes nothing was still answered from the controller's pending state, so it
  waits for the last write proposed before it, if that has not committed yet (Kafka's
  read-only operations wait in the purgatory the same way). If the epoch changes first, the
  answer is NOT_CONTROLLER, as Kafka's controller gives when its write may not have made it:
  the client retries against the new controller.
* Timers: tick() when the controller's next deadline passes (broker session expiry, periodic
  elections); its records are proposed like a request's.
"""
from __future__ import annotations

import logging
import os
import time

import anyio

from core.controller.controller import QuorumController
from core.controller.settings import ControllerConfig
from core.protocol.errors import ErrorCode
from core.protocol.metadata_records import encode_record
from core.raft.errors import NotLeaderError


log = logging.getLogger(__name__)

COMMIT_TIMEOUT_S = 30.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class ControllerRunner:
    """Runs on the raft thread (core/raft/thread.py): `driver` is the RaftDriver itself and
    `loader` the controller's own MetadataLoader, a local listener of that driver."""

    def __init__(self, config, *, cluster_id: str, driver, loader, bootstrap=()):
        self.config = config
        self.driver = driver
        self.loader = loader
        self.node_id = config.node_id
        self.controller = QuorumController(config.node_id, cluster_id,
                                           ControllerConfig.from_broker_config(config), clock=now_ms,
                                           bootstrap_records=bootstrap)
        loader.record_listeners.append(self._on_records)
        loader.snapshot_listeners.append(self.controller.load_snapshot)
        loader.leader_listeners.append(self._on_leader)
        self._lock = anyio.Lock()
        self._wake = anyio.Event()
        self._active_epoch = -1
        self._last_end = None   # OffsetAndEpoch after the last records proposed

    # ------------------------------------------------------------------ loader callbacks

    def _on_records(self, records, last_offset: int) -> None:
        self.controller.replay(records, last_offset)
        self._wake.set()

    def _on_leader(self, leader) -> None:
        if self.controller.is_active and leader.leader_id != self.node_id:
            log.info("controller %d is no longer active (leader %d, epoch %d)", self.node_id,
                     leader.leader_id, leader.leader_epoch)
            self.controller.deactivate()
            self._active_epoch = -1
        self._wake.set()

    def _should_activate(self) -> bool:
        leader = self.driver.leader
        return (leader.leader_id == self.node_id and not self.controller.is_active
                and self.loader.last_epoch == leader.leader_epoch)

    # ------------------------------------------------------------------ the loop

    async def run(self) -> None:
        while True:
            try:
                await self._step()
            except NotLeaderError:
                # Leadership went while we were writing (a pause, a partition): _append has
                # deactivated the controller; the new leader's controller takes over.
                log.info("controller %d lost leadership while writing; standing by", self.node_id)

    async def _step(self) -> None:
        """Activate if due, wait for news or the controller's next deadline, tick if due."""
        if self._should_activate():
            await self._activate()
        deadline = self.controller.next_deadline_ms()
        wait = None if deadline is None else max(0.0, (deadline - now_ms()) / 1000)
        with anyio.move_on_after(wait):
            await self._wake.wait()
        self._wake = anyio.Event()
        deadline = self.controller.next_deadline_ms()
        if deadline is not None and now_ms() >= deadline:
            async with self._lock:
                records = self.controller.tick()
                if records:
                    await self._append(records)

    async def _activate(self) -> None:
        async with self._lock:
            epoch = self.driver.leader.leader_epoch
            end = await self.driver.log_end_offset()
            records = self.controller.activate(end)
            self._active_epoch = epoch
            log.info("controller %d is active in epoch %d from offset %d", self.node_id, epoch, end)
            if records:
                await self._append(records)

    async def _append(self, records):
        """Propose records (under the lock); returns the OffsetAndEpoch after the last one."""
        try:
            self._last_end = await self.driver.propose([encode_record(r) for r in records])
            return self._last_end
        except NotLeaderError:
            self.controller.deactivate()
            self._active_epoch = -1
            raise

    # ------------------------------------------------------------------ requests

    async def handle(self, api_key: int, version: int, request):
        """Answer a controller request once its records are committed."""
        controller = self.controller
        async with self._lock:
            result = controller.handle(api_key, request, version)
            if result.records:
                try:
                    end = await self._append(result.records)
                except NotLeaderError:
                    return self._not_controller(api_key, version, request)
            elif controller.has_uncommitted and self._last_end is not None:
                end = self._last_end
            else:
                return result.response
        loader = self.loader
        driver = self.driver
        committed = await loader.wait_for(
            lambda: loader.next_offset >= end.offset or driver.leader.leader_epoch != end.epoch,
            COMMIT_TIMEOUT_S)
        if not committed or loader.next_offset < end.offset:
            return self._not_controller(api_key, version, request)
        maybe_exit_after_commit(api_key)
        return result.response

    @staticmethod
    def _not_controller(api_key: int, version: int, request):
        return QuorumController._error_response(api_key, request, version, ErrorCode.NOT_CONTROLLER,
                                                "The active controller changed before the write committed.")


FAULT_EXIT_AFTER_COMMIT = "SEAWAY_FAULT_EXIT_AFTER_COMMIT"


def maybe_exit_after_commit(api_key: int) -> None:
    """Fault injection for the tests (as kfake's hooks): when the environment variable names
    a file that holds this API key, delete the file and die at once, after the request's
    records committed and before it is answered. The caller then cannot know whether its
    request was applied: the case a resend must get right (handlers/forwarded.py)."""
    path = os.environ.get(FAULT_EXIT_AFTER_COMMIT)
    if not path:
        return
    try:
        wanted = open(path).read().strip()
    except OSError:
        return
    if wanted == str(api_key):
        os.unlink(path)
        log.error("fault injection: exiting after committing API %d, before answering", api_key)
        os._exit(86)
