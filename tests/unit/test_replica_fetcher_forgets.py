"""The replica fetcher forgets everything it knew of a partition that stops fetching from its
leader: topics created and deleted for months must not grow a follower's memory."""
from __future__ import annotations

from types import SimpleNamespace

from core.broker.replication.fetcher import ReplicaFetcher
from core.broker.replication.messages import FollowerFetch, SendFetch


def fetcher_with(topics: dict):
    broker = SimpleNamespace(topics=topics)
    manager = SimpleNamespace(config={}, broker=broker, node_id=2)
    return ReplicaFetcher(manager, leader_id=1)


def fetch(offset: int) -> SendFetch:
    return SendFetch(request_id=1, leader_id=1,
                     fetch=FollowerFetch(replica_id=2, broker_epoch=5, current_leader_epoch=1,
                                         fetch_offset=offset, last_fetched_epoch=-1))


def test_a_deleted_topic_leaves_nothing_behind_in_the_fetcher():
    topics = {"t": SimpleNamespace(topic_id=b"\x01" * 16), "u": SimpleNamespace(topic_id=b"\x02" * 16)}
    f = fetcher_with(topics)
    parts = [SimpleNamespace(topic="t", index=i) for i in range(3)] + [SimpleNamespace(topic="u", index=0)]
    for p in parts:
        f.add(p, fetch(0))
        f._caught_up[(p.topic, p.index)] = True
    plan = f._session.build()            # the leader's session now holds all four
    assert len(plan.partitions) == 4
    assert f._session.handle_response(plan, 0, session_id=77)
    del topics["t"]                      # deleted: the broker forgets its id first
    for p in parts[:2]:
        f.remove(p)
    assert f._names[b"\x01" * 16] == "t"   # a partition of t still fetches
    f.remove(parts[2])
    assert f._names == {b"\x02" * 16: "u"}
    assert set(f._keys) == {("u", 0)} and set(f._caught_up) == {("u", 0)}
    # ... and the next request tells the leader to forget t under the id it joined with.
    forgotten = f._session.build().forgotten
    assert sorted(k[2] for k in forgotten) == [0, 1, 2] and {k[1] for k in forgotten} == {b"\x01" * 16}
