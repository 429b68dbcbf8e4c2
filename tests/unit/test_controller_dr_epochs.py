"""The cluster's half of DR fencing (core/controller/dr_epochs.py): taking an epoch is a
compare-and-set, and a role change below the cluster's epoch is refused, whoever asks."""
from __future__ import annotations

import pytest

from core.controller import ControllerConfig
from core.protocol import messages as m
from core.protocol.dr import DR_EPOCH, DR_STATE_TOPIC, REPLICA_OF
from core.protocol.errors import ErrorCode as E

from tests.support.controller_harness import Harness

SET, DELETE = 0, 1
TOPIC = 2
IAC = m.IncrementalAlterConfigsRequest
A = m.AlterConfigsRequest


@pytest.fixture
def h():
    harness = Harness(ControllerConfig(controller_ids=frozenset({100})))
    harness.add_brokers({1: None})
    harness.create_topic(DR_STATE_TOPIC, configs={"cleanup.policy": "compact"})
    harness.create_topic("orders", configs={REPLICA_OF: "eu-west-1"})
    return harness


def alter(h, name, *ops, commit=True):
    """(error code, message) of one IncrementalAlterConfigs of topic `name`."""
    request = IAC(resources=[IAC.AlterConfigsResource(
        resource_type=TOPIC, resource_name=name,
        configs=[IAC.AlterableConfig(name=k, config_operation=SET if v is not None else DELETE, value=v)
                 for k, v in ops])], validate_only=False)
    r = h.call("incremental_alter_configs", request, 1, commit=commit).response.responses[0]
    return r.error_code, r.error_message


def take(h, epoch, commit=True):
    return alter(h, DR_STATE_TOPIC, (DR_EPOCH, str(epoch)), commit=commit)[0]


# Each row: the state topic's epoch steps in order, and what each request gets.
@pytest.mark.parametrize("steps, codes", [
    ([1], [E.NONE]),
    ([1, 2, 3], [E.NONE, E.NONE, E.NONE]),
    ([1, 1], [E.NONE, E.STALE_CONTROLLER_EPOCH]),     # two controllers ask for the same epoch
    ([3, 2], [E.NONE, E.STALE_CONTROLLER_EPOCH]),     # a stale one asks for a lower epoch
    ([0], [E.STALE_CONTROLLER_EPOCH]),                # 0 is where every cluster starts
    ([5, 9], [E.NONE, E.NONE]),                       # gaps are fine: only up
])
def test_state_topic_epoch_only_grows_strictly(h, steps, codes):
    assert [take(h, e) for e in steps] == codes


def test_a_racing_controller_loses_before_the_winner_commits(h):
    # The second request is checked against the pending image, which has the first in it.
    assert take(h, 1, commit=False) == E.NONE
    assert take(h, 1, commit=False) == E.STALE_CONTROLLER_EPOCH
    h.commit()
    assert dict(h.image.topic_config(DR_STATE_TOPIC))[DR_EPOCH] == "1"


def test_the_state_topic_epoch_cannot_be_deleted_or_replaced_away(h):
    assert take(h, 4) == E.NONE
    assert alter(h, DR_STATE_TOPIC, (DR_EPOCH, None))[0] == E.STALE_CONTROLLER_EPOCH
    legacy = A(resources=[A.AlterConfigsResource(resource_type=TOPIC, resource_name=DR_STATE_TOPIC,
                                                 configs=[])], validate_only=False)
    answer = h.call("alter_configs", legacy, 2).response.responses[0]
    assert answer.error_code == E.STALE_CONTROLLER_EPOCH
    # Its other configs change freely.
    assert alter(h, DR_STATE_TOPIC, ("retention.ms", "1000"))[0] == E.NONE
    assert dict(h.image.topic_config(DR_STATE_TOPIC))[DR_EPOCH] == "4"


# Each row: the cluster's epoch, the topic's epoch, the request's changes -> its answer.
@pytest.mark.parametrize("cluster, topic_epoch, ops, code", [
    # No controller has ever run: the operator's escape hatch, kafka-configs --delete-config.
    (0, None, [(REPLICA_OF, None)], E.NONE),
    (3, None, [(REPLICA_OF, None)], E.STALE_CONTROLLER_EPOCH),
    (3, None, [(REPLICA_OF, None), (DR_EPOCH, "2")], E.STALE_CONTROLLER_EPOCH),
    (3, None, [(REPLICA_OF, None), (DR_EPOCH, "3")], E.NONE),
    (3, None, [(REPLICA_OF, "us-east-1"), (DR_EPOCH, "4")], E.NONE),   # ahead is fine
    (3, "3", [(REPLICA_OF, "us-east-1"), (DR_EPOCH, "3")], E.NONE),     # a retry at the same epoch
    (3, "3", [(DR_EPOCH, "2")], E.STALE_CONTROLLER_EPOCH),              # never down
    (3, "5", [(REPLICA_OF, None), (DR_EPOCH, "4")], E.STALE_CONTROLLER_EPOCH),
    (3, "3", [(REPLICA_OF, None)], E.NONE),        # the topic keeps epoch 3: at the cluster's
    (3, None, [("retention.ms", "5")], E.NONE),    # not a role change
])
def test_role_changes_carry_an_epoch_at_or_above_the_clusters(h, cluster, topic_epoch, ops, code):
    if cluster:
        assert take(h, cluster) == E.NONE
    if topic_epoch is not None:
        assert alter(h, "orders", (DR_EPOCH, topic_epoch))[0] == E.NONE
    before = dict(h.image.topic_config("orders"))
    error, message = alter(h, "orders", *ops)
    assert error == code, message
    if code:
        assert "epoch" in message
        assert dict(h.image.topic_config("orders")) == before      # nothing changed


def test_a_stale_controller_cannot_change_roles_behind_the_winner(h):
    # Controller A took epoch 1 and promoted orders; B, which took 2, fences it again. A wakes
    # up and tries to carry on at epoch 1: refused, and B's decision stands.
    assert take(h, 1) == E.NONE
    assert alter(h, "orders", (REPLICA_OF, None), (DR_EPOCH, "1"))[0] == E.NONE
    assert take(h, 2) == E.NONE
    assert alter(h, "orders", (REPLICA_OF, "us-east-1"), (DR_EPOCH, "2"))[0] == E.NONE
    assert alter(h, "orders", (REPLICA_OF, None), (DR_EPOCH, "1"))[0] == E.STALE_CONTROLLER_EPOCH
    assert dict(h.image.topic_config("orders"))[REPLICA_OF] == "us-east-1"


@pytest.mark.parametrize("value", ["eu west", "a/b", "x" * 65])
def test_replica_of_names_a_cluster(h, value):
    error, message = alter(h, "orders", (REPLICA_OF, value))
    assert error == E.INVALID_CONFIG and REPLICA_OF in message
