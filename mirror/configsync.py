"""Which topic configs a mirror carries from a source topic to its target copy, and what to
change on the target to bring them in line (MirrorMaker 2's sync.topic.configs). Pure: it
takes DescribeConfigs entries (anything with name, value, source and sensitive) and returns
the changes, in the form Admin.incremental_alter_configs takes.

The rule. A config is *copyable* when it is set on the topic itself (a dynamic topic config,
not a broker default), has a value, is not sensitive, and is not one of NOT_COPIED: those
describe a cluster's brokers and replication rather than the data, and `seaway.*` holds each
copy's own DR role, which no mirror may change. Then, for each copyable config of the source:
SET it on the target if the target's value differs or it has none; and for each config that
would be copyable on the target but is not set on the source: DELETE it, so that it falls
back to the target's default as it did on the source. Nothing else of the target is touched:
not its NOT_COPIED ones, not `seaway.replica.of`, not a sensitive one, not its broker defaults.

Creating a target topic copies the same set (mirror/link.py), so a topic created and then kept
in sync has exactly the source's copyable configs.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

# Topic configs MM2 never copies (DefaultConfigPropertyFilter): they describe the source
# cluster's brokers or replication, not the data.
NOT_COPIED = re.compile(r"follower\.replication\.throttled\.replicas|leader\.replication\.throttled\.replicas"
                        r"|message\.timestamp\.difference\.max\.ms|message\.timestamp\.type"
                        r"|unclean\.leader\.election\.enable|min\.insync\.replicas"
                        r"|seaway\..*")      # DR roles: each copy has its own
DYNAMIC_TOPIC_CONFIG = 1     # Kafka's ConfigSource of a topic's own setting

Entries = Mapping[str, Any]     # name -> ConfigEntry (core.client.admin), as DescribeConfigs gives


def _ours(name: str, entry) -> bool:
    """Set on the topic itself, not sensitive, and a name mirrors copy."""
    return entry.source == DYNAMIC_TOPIC_CONFIG and not entry.sensitive and not NOT_COPIED.fullmatch(name)


def copyable(entries: Entries) -> dict[str, str]:
    """name -> value of the configs of a source topic that its target copy should have."""
    return {name: e.value for name, e in entries.items() if _ours(name, e) and e.value is not None}


def config_changes(source: Entries, target: Entries) -> dict[str, str | None]:
    """What to change on the target topic (name -> value to SET, or None to DELETE) so that its
    copyable configs are the source's; {} when they already are."""
    wanted = copyable(source)
    present = {name: e.value for name, e in target.items() if _ours(name, e)}
    # A name sensitive on the target is left alone even if the source shows it in the clear.
    untouchable = {name for name, e in target.items() if e.sensitive}
    changes: dict[str, str | None] = {name: value for name, value in wanted.items()
                                      if name not in untouchable and present.get(name) != value}
    changes.update((name, None) for name in present if name not in wanted)
    return dict(sorted(changes.items()))
