"""Seeded random runs of the controller: brokers come, go, heartbeat, shut down and time out;
topics are created, grown, deleted and reconfigured; ISRs change as AlterPartition would
change them; commits lag behind; the controller fails over. After every step: each partition's
leader is -1 or an unfenced ISR member, the ISR is a non-empty subset of the replicas, the
replicas are distinct; no request is answered UNKNOWN_SERVER_ERROR; every response encodes at
its version; every record goes through the codec. Every few steps (and at the end) the whole
log is replayed from scratch and must give the committed image, and, while active, the pending
one. A failing run names its seed: `pytest tests/unit/test_controller_random.py -k "seed-N"`.
"""
from __future__ import annotations

import random

import pytest

from core.controller import ControllerConfig, QuorumController
from core.protocol import messages as m
from core.protocol.errors import ErrorCode as E

from tests.support.controller_harness import (CLUSTER, Clock, Harness, create_request, new_topic,
                                              registration)

BROKERS = range(1, 7)
RACKS = ["a", "b", "c", None]
NAMES = ["orders", "payments", "pay.ments", "logs", "x", "y.z", "y_z"]
STEPS = 200
SEEDS = range(25)


def error_codes(message) -> list[int]:
    out = []
    for name in getattr(message, "_fields", ()):
        value = getattr(message, name)
        if name == "error_code":
            out.append(value)
        elif isinstance(value, list):
            for item in value:
                out.extend(error_codes(item))
    return out


class Run:
    def __init__(self, seed: int):
        self.rnd = random.Random(seed)
        config = ControllerConfig(broker_session_timeout_ms=3000,
                                  unclean_leader_election_interval_ms=20_000,
                                  leader_imbalance_check_interval_ms=15_000)
        self.h = Harness(config, seed=seed)
        self.h.full_checks = False
        self.generation: dict[int, int] = {}

    # -- steps
    def register(self):
        b = self.rnd.choice(BROKERS)
        if self.rnd.random() < 0.3:
            self.generation[b] = self.generation.get(b, 0) + 1
        return self.h.call("broker_registration", registration(
            b, rack=self.rnd.choice(RACKS), generation=self.generation.get(b, 0)),
            self.rnd.randint(0, 4), commit=False)

    def heartbeat(self):
        h, b = self.h, self.rnd.choice(BROKERS)
        reg = h.image.brokers.get(b)
        epoch = reg.epoch if reg is not None and self.rnd.random() < 0.95 else 12345
        offset = h.replayed if self.rnd.random() < 0.8 else self.rnd.randint(0, h.end_offset)
        r = self.rnd.random()
        return h.call("broker_heartbeat", m.BrokerHeartbeatRequest(
            broker_id=b, broker_epoch=epoch, current_metadata_offset=offset,
            want_fence=r < 0.05, want_shut_down=0.05 <= r < 0.12), self.rnd.randint(0, 1),
            commit=False)

    def pass_time(self):
        self.h.clock.advance(self.rnd.choice([10, 500, 1500, 3500, 16_000]))
        self.h.tick(commit=False)

    def create(self):
        topics = []
        for _ in range(self.rnd.randint(1, 2)):
            name = self.rnd.choice(NAMES)
            configs = {}
            if self.rnd.random() < 0.3:
                configs["unclean.leader.election.enable"] = self.rnd.choice(["true", "false"])
            if self.rnd.random() < 0.2:
                live = list(self.h.image.brokers) or [1]
                rf = self.rnd.randint(1, min(3, len(live)))
                assignments = {p: self.rnd.sample(live, rf) for p in range(self.rnd.randint(1, 3))}
                topics.append(new_topic(name, configs=configs, assignments=assignments))
            else:
                topics.append(new_topic(name, self.rnd.randint(-1, 4), self.rnd.randint(-1, 3),
                                        configs=configs))
        return self.h.call("create_topics", create_request(
            *topics, validate_only=self.rnd.random() < 0.1), self.rnd.randint(0, 7), commit=False)

    def delete(self):
        D = m.DeleteTopicsRequest
        name = self.rnd.choice(NAMES)
        version = self.rnd.randint(0, 6)
        if version >= 6:
            topic = self.h.image.topic(name)
            by_id = topic is not None and self.rnd.random() < 0.5
            request = D(topics=[D.DeleteTopicState(name=None if by_id else name,
                                                   topic_id=topic.id if by_id else bytes(16))],
                        timeout_ms=1)
        else:
            request = D(topic_names=[name], timeout_ms=1)
        return self.h.call("delete_topics", request, version, commit=False)

    def grow(self):
        P = m.CreatePartitionsRequest
        name = self.rnd.choice(NAMES)
        topic = self.h.image.topic(name)
        count = (len(topic.partitions) if topic else 1) + self.rnd.randint(-1, 3)
        return self.h.call("create_partitions", P(topics=[P.CreatePartitionsTopic(
            name=name, count=count, assignments=None)], timeout_ms=1,
            validate_only=self.rnd.random() < 0.1), self.rnd.randint(0, 3), commit=False)

    def configure(self):
        IAC = m.IncrementalAlterConfigsRequest
        rtype, rname = self.rnd.choice([(2, self.rnd.choice(NAMES)), (4, ""), (4, "1")])
        value = self.rnd.choice(["true", "false"])
        op = self.rnd.choice([0, 0, 1])
        return self.h.call("incremental_alter_configs", IAC(resources=[IAC.AlterConfigsResource(
            resource_type=rtype, resource_name=rname, configs=[IAC.AlterableConfig(
                name="unclean.leader.election.enable", config_operation=op, value=value)])]),
            self.rnd.randint(0, 1), commit=False)

    def unregister(self):
        return self.h.call("unregister_broker", m.UnregisterBrokerRequest(
            broker_id=self.rnd.choice(BROKERS)), 0, commit=False)

    def alter_isr(self):
        """What an AlterPartition from a leader could do: drop a follower from the ISR or add
        back a replica whose broker is unfenced."""
        h = self.h
        parts = [(t, p, part) for t in h.image.topics.values() for p, part in t.partitions.items()
                 if part.leader != -1]
        if not parts:
            return None
        topic, pid, part = self.rnd.choice(parts)
        followers = [r for r in part.isr if r != part.leader]
        outside = [r for r in part.replicas if r not in part.isr and r in h.image.brokers
                   and not h.image.brokers[r].fenced]
        if followers and (not outside or self.rnd.random() < 0.5):
            isr = [r for r in part.isr if r != self.rnd.choice(followers)]
        elif outside:
            isr = list(part.isr) + [self.rnd.choice(outside)]
        else:
            return None
        h.inject(m.PartitionChangeRecord(topic_id=topic.id, partition_id=pid, isr=isr),
                 commit=False)
        return None

    def fail_over(self):
        h = self.h
        h.ctl.deactivate()
        del h.log[h.replayed:]          # Raft drops what never committed
        h.clock.advance(self.rnd.randint(0, 4000))
        h.append(h.ctl.activate(h.end_offset))
        return None

    # -- the run
    def step(self) -> None:
        action = self.rnd.choices(
            [self.register, self.heartbeat, self.pass_time, self.create, self.delete,
             self.grow, self.configure, self.unregister, self.alter_isr, self.fail_over],
            weights=[8, 30, 10, 10, 4, 5, 4, 2, 6, 1])[0]
        result = action()
        if result is not None:
            codes = error_codes(result.response)
            assert E.UNKNOWN_SERVER_ERROR not in codes, (action.__name__, result.response)
            assert E.NOT_CONTROLLER not in codes
        if self.rnd.random() < 0.7:
            self.h.commit()
        else:
            self.h.check()


@pytest.mark.parametrize("seed", SEEDS, ids=[f"seed-{s}" for s in SEEDS])
def test_random_operations_keep_the_invariants(seed):
    run = Run(seed)
    for i in range(STEPS):
        run.step()
        if i % 15 == 0:
            run.h.check(full=True)
    h = run.h
    h.commit()
    h.check(full=True)
    assert h.ctl.pending_image == h.ctl.committed_image
    # A standby that replays the same log ends with the same image.
    standby = QuorumController(7, CLUSTER, clock=Clock())
    standby.replay(h.log, len(h.log))
    assert standby.committed_image == h.ctl.committed_image
    # The run did something: brokers registered, topics existed at some point.
    assert any(type(r.message).__name__ == "RegisterBrokerRecord" for r in h.log)
    assert any(type(r.message).__name__ == "TopicRecord" for r in h.log)
