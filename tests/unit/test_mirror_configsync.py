"""The topic config sync rule (mirror/configsync.py), as a table: a source topic's configs, its
target copy's, and the changes the mirror makes to the target (value: SET, None: DELETE).
What must never change on the target: its DR role (seaway.replica.of), what MM2 never
copies, sensitive configs, and anything that is not the topic's own setting."""
from __future__ import annotations

import pytest

from core.client.admin import ConfigEntry
from mirror.configsync import config_changes, copyable

TOPIC, STATIC, DEFAULT = 1, 4, 5      # ConfigSource: the topic's own, the broker's file, built in


def entry(name, value, source=TOPIC, sensitive=False):
    return ConfigEntry(name, value, False, source, sensitive, source == DEFAULT)


def configs(*entries):
    return {e.name: e for e in entries}


RETENTION = "retention.ms"
CASES = [
    ("nothing set on either side",
     configs(), configs(), {}),
    ("the same values: nothing to do",
     configs(entry(RETENTION, "1000"), entry("cleanup.policy", "compact")),
     configs(entry(RETENTION, "1000"), entry("cleanup.policy", "compact")), {}),
    ("a changed value is set",
     configs(entry(RETENTION, "2000")), configs(entry(RETENTION, "1000")), {RETENTION: "2000"}),
    ("a config added upstream is set",
     configs(entry(RETENTION, "1000"), entry("max.message.bytes", "2097152")),
     configs(entry(RETENTION, "1000")), {"max.message.bytes": "2097152"}),
    ("a config the source no longer sets is deleted",
     configs(), configs(entry(RETENTION, "1000")), {RETENTION: None}),
    ("set upstream over the target's default: set as the topic's own",
     configs(entry(RETENTION, "604800000")), configs(entry(RETENTION, "604800000", DEFAULT)),
     {RETENTION: "604800000"}),
    ("the source's defaults and broker settings are not copied",
     configs(entry(RETENTION, "86400000", STATIC), entry("cleanup.policy", "delete", DEFAULT)),
     configs(), {}),
    ("the target's defaults and broker settings are not deleted",
     configs(), configs(entry(RETENTION, "86400000", STATIC), entry("segment.bytes", "1024", DEFAULT)), {}),
    ("the target's DR role survives",
     configs(entry(RETENTION, "5")), configs(entry("seaway.replica.of", "eu"), entry(RETENTION, "4")),
     {RETENTION: "5"}),
    ("a source that is itself a replica does not pass its role on",
     configs(entry("seaway.replica.of", "us"), entry("seaway.dr.epoch", "3")), configs(), {}),
    ("roles on both sides: neither copied nor deleted",
     configs(entry("seaway.replica.of", "(fenced)")), configs(entry("seaway.replica.of", "eu")), {}),
    ("what MM2 never copies is neither set nor deleted",
     configs(entry("min.insync.replicas", "2"), entry("unclean.leader.election.enable", "true"),
             entry("message.timestamp.type", "LogAppendTime")),
     configs(entry("min.insync.replicas", "1"), entry("leader.replication.throttled.replicas", "*"),
             entry("message.timestamp.difference.max.ms", "1000")), {}),
    ("a sensitive config upstream is not copied",
     configs(entry("secret.thing", None, sensitive=True)), configs(), {}),
    ("a sensitive config on the target is not deleted or overwritten",
     configs(entry("odd.config", "shown")), configs(entry("odd.config", None, sensitive=True)), {}),
    ("a dynamic config without a value upstream is not copied, and the target's goes",
     configs(entry(RETENTION, None)), configs(entry(RETENTION, "1000")), {RETENTION: None}),
    ("all at once",
     configs(entry(RETENTION, "2000"), entry("cleanup.policy", "compact,delete"), entry("min.insync.replicas", "2"),
             entry("seaway.replica.of", "")),
     configs(entry(RETENTION, "1000"), entry("max.message.bytes", "2097152"), entry("seaway.replica.of", "eu"),
             entry("min.insync.replicas", "1")),
     {"cleanup.policy": "compact,delete", "max.message.bytes": None, RETENTION: "2000"}),
]


@pytest.mark.parametrize("what, source, target, expected", CASES, ids=[c[0] for c in CASES])
def test_the_changes_that_bring_the_target_in_line(what, source, target, expected):
    assert config_changes(source, target) == expected


@pytest.mark.parametrize("what, source, target, expected", CASES, ids=[c[0] for c in CASES])
def test_after_the_changes_the_target_has_exactly_the_sources_copyable_configs(what, source, target, expected):
    after = dict(target)
    for name, value in config_changes(source, target).items():
        if value is None:
            del after[name]
        else:
            after[name] = entry(name, value)
    kept_secret = {name for name, e in target.items() if e.sensitive}    # left alone, whatever the source says
    assert copyable(after) == {k: v for k, v in copyable(source).items() if k not in kept_secret}
    assert config_changes(source, after) == {}
    for name, e in target.items():        # what the rule must not touch is where it was
        if name.startswith("seaway.") or e.sensitive or name in (
                "min.insync.replicas", "leader.replication.throttled.replicas", "message.timestamp.difference.max.ms"):
            assert after[name] == e
        elif e.source != TOPIC:           # a default is overridden at most, never deleted
            assert name in after


def test_what_a_new_target_topic_gets_is_what_the_sync_keeps():
    """Creation (mirror/link.py) copies `copyable`: a topic created from these configs is
    already in sync."""
    source = configs(entry(RETENTION, "2000"), entry("min.insync.replicas", "2"), entry("seaway.replica.of", "us"),
                     entry("segment.bytes", "1024", DEFAULT))
    created = configs(*(entry(name, value) for name, value in copyable(source).items()),
                      entry("seaway.replica.of", "eu"))
    assert copyable(source) == {RETENTION: "2000"}
    assert config_changes(source, created) == {}
