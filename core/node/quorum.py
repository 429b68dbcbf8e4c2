"""A node's membership in the metadata quorum, and the controller role built on it.

`QuorumMember` is what every KRaft node runs: a Raft driver on the __cluster_metadata log
(a voter if the node is a controller, an observer otherwise) and the MetadataLoader that keeps
the committed image. `ControllerServer` is the controller role: it owns the connections of the
controller listeners and answers their requests (controller_apis.py).

The controller role lives on the raft thread (core/raft/thread.py), beside the driver, so that
no data-plane work delays a vote, a heartbeat answer or a broker's session: it has a loader of
its own there (a local listener of the driver, which keeps no image), and uses the RaftDriver
directly. The main loop's loader is the broker's.
"""
from __future__ import annotations

import logging

from core.broker.open_connections import OpenConnections
from core.config import BrokerConfig
from core.config.defs import ConfigError
from core.raft.config import QuorumConfig
from core.raft.driver import RaftDriver
from core.raft.thread import RaftThread

from .controller_runner import ControllerRunner
from .loader import MetadataLoader, snapshot_bytes

log = logging.getLogger(__name__)


class QuorumMember:
    def __init__(self, config: BrokerConfig, cluster_id: str):
        self.config = config
        self.cluster_id = cluster_id
        self.loader = MetadataLoader()
        try:
            quorum_config = QuorumConfig.from_properties(config.values)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        # The quorum runs on a loop of its own (core/raft/thread.py), so that a busy data plane
        # never delays its heartbeats, fetches and elections.
        self.driver = RaftThread(RaftDriver(config.node_id, config.quorum_voters, config.metadata_log_dir,
                                            cluster_id=cluster_id, listener=self.loader, config=quorum_config,
                                            ssl_context=config.controller_client_tls,
                                            sasl=config.controller_client_sasl))

    async def run_snapshots(self) -> None:
        """After metadata.log.max.record.bytes.between.snapshots bytes of new records, write
        the image as a snapshot so the log before it can go and a restart replays only what
        came after (every node, for its own copy of the log, as Kafka's SnapshotGenerator)."""
        loader = self.loader
        limit = self.config["metadata.log.max.record.bytes.between.snapshots"]
        while True:
            await loader.wait_for(lambda: loader.bytes_since_snapshot >= limit, timeout_s=60)
            if loader.bytes_since_snapshot < limit:
                continue
            end, image, epoch = loader.next_offset, loader.image, loader.last_epoch
            loader.bytes_since_snapshot = 0
            try:
                snapshot_id = await self.driver.create_snapshot(end, snapshot_bytes(image, epoch))
            except Exception:   # a failed snapshot costs restart time, not correctness
                log.exception("writing a metadata snapshot at offset %d failed", end)
                continue
            log.info("wrote metadata snapshot %s", snapshot_id)

    @property
    def leader_id(self) -> int:
        return self.driver.leader.leader_id


class ControllerServer:
    def __init__(self, config: BrokerConfig, quorum: QuorumMember, metrics, *, bootstrap=()):
        self.config = config
        self.quorum = quorum
        self.metrics = metrics
        self.connections = OpenConnections()   # touched on the raft thread only
        self.draining = False
        self.driver = quorum.driver.driver   # the RaftDriver: this role runs on its thread
        self.loader = MetadataLoader(keep_image=False)
        quorum.driver.add_local_listener(self.loader)
        self.runner = ControllerRunner(config, cluster_id=quorum.cluster_id, driver=self.driver,
                                       loader=self.loader, bootstrap=bootstrap)
