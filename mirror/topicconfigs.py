"""Keeps the configs of a link's target topics in line with their sources' (MirrorMaker 2's
sync.topic.configs.enabled and sync.topic.configs.interval.seconds): the driver of the rule
in mirror/configsync.py.

A topic gets its source's copyable configs when the link creates it (mirror/link.py); every
`interval_s` after that, and once as the link starts, the syncer reads the configs of every
topic the link copies at that moment, in one DescribeConfigs per side, and applies what
differs with one IncrementalAlterConfigs to the target. So a retention.ms changed upstream
reaches the target within an interval, and a DR failover does not promote stale configs.

For a DR pair the roles are read again in the same two requests (`seaway.replica.of` of each
copy), and a topic the link no longer copies by them is left alone: the partition copiers
notice a promotion only at the next discovery, and the config sync must not touch a copy
that was promoted since.

A refusal (the target rejects a value, the mirror may not alter configs there) or a side that
cannot be read never stops the link: it is logged once per topic and per distinct failure,
counted (`failed`), and the topic counts as unsynced until a later round succeeds; the next
round tries again.
"""
from __future__ import annotations

import logging

import anyio

from core.client import Admin
from core.client.admin import ConfigResource
from core.client.errors import KafkaError
from core.protocol.dr import REPLICA_OF, link_copies

from .configsync import config_changes

log = logging.getLogger("mirror.topicconfigs")
_ROUND = ("round",)     # a topic unsynced because a whole round failed (logged once, not per topic)


class TopicConfigSync:
    def __init__(self, link, *, interval_s: float):
        self.link = link
        self.interval_s = interval_s
        self.applied = 0          # topics whose target configs were changed
        self.failed = 0           # topic syncs that failed (counted every round they fail)
        # topic -> the failure last logged for it; a topic is here while it is unsynced.
        self._failures: dict[str, tuple] = {}
        self._round_failure: tuple | None = None

    @property
    def unsynced(self) -> int:
        return len(self._failures)

    async def run(self) -> None:
        while True:
            try:
                await self.sync_once()
            except Exception as exc:   # noqa: BLE001 — a surprise (an odd answer) must not stop the copying
                self._round_failed(self._copied(), exc)
            await anyio.sleep(self.interval_s)

    def _copied(self) -> dict[str, str]:
        """source topic -> target topic, of every topic a copier copies now."""
        link = self.link
        return {topic: link.policy.format_remote_topic(link.config.source_alias, topic)
                for topic, _ in list(link.copiers)}

    async def sync_once(self) -> None:
        copied = self._copied()
        # Topics no longer copied (retired, deleted) are no longer unsynced either.
        for topic in [t for t in self._failures if t not in copied]:
            del self._failures[topic]
        if not copied:
            return
        try:
            source_found = await Admin(self.link.source).describe_configs(
                [ConfigResource.topic(t) for t in copied])
            target_found = await Admin(self.link.target).describe_configs(
                [ConfigResource.topic(r) for r in copied.values()])
        except (KafkaError, OSError) as exc:
            self._round_failed(copied, exc)
            return
        if self._round_failure is not None:
            log.info("%s: topic configs can be read again", self.link.name)
            self._round_failure = None
        changes: dict[ConfigResource, dict[str, str | None]] = {}
        for topic, remote in copied.items():
            source = source_found.get(ConfigResource.topic(topic))
            target = target_found.get(ConfigResource.topic(remote))
            if not isinstance(source, dict) or not isinstance(target, dict):
                side, error = ("source", source) if not isinstance(source, dict) else ("target", target)
                self._failed(topic, ("read", side, _what(error)),
                             f"cannot read the configs of the {side} copy: {_what(error)}")
                continue
            if self.link.config.dr_pair and not link_copies(
                    self.link.config.source_alias, self.link.config.target_alias,
                    _role(source), _role(target)):
                self._failures.pop(topic, None)     # not ours now: discovery retires it
                continue
            change = config_changes(source, target)
            if change:
                changes[ConfigResource.topic(remote)] = change
            else:
                self._synced(topic)
        if changes:
            await self._apply(changes, {remote: topic for topic, remote in copied.items()})

    async def _apply(self, changes: dict[ConfigResource, dict[str, str | None]], topic_of: dict[str, str]) -> None:
        results: dict[ConfigResource, Exception | None]
        try:
            results = dict(await Admin(self.link.target).incremental_alter_configs(changes))
        except (KafkaError, OSError) as exc:
            results = dict.fromkeys(changes, exc)
        for resource, change in changes.items():
            topic = topic_of[resource.name]
            error = results.get(resource)
            if error is None:
                self.applied += 1
                log.info("%s: topic configs of %s synced to %s: %s", self.link.name, topic,
                         resource.name, _describe(change))
                self._synced(topic)
            else:
                self._failed(topic, ("alter", tuple(change.items()), _what(error)),
                             f"the target refused {_describe(change)}: {_what(error)}")

    def _synced(self, topic: str) -> None:
        if self._failures.pop(topic, None) not in (None, _ROUND):    # the round's end was logged
            log.info("%s: topic configs of %s are in sync again", self.link.name, topic)

    def _failed(self, topic: str, key: tuple, message: str) -> None:
        """Counted every time, logged only when the failure differs from the topic's last one."""
        self.failed += 1
        if self._failures.get(topic) != key:
            log.warning("%s: topic configs of %s not synced (retrying every %gs): %s",
                        self.link.name, topic, self.interval_s, message)
        self._failures[topic] = key

    def _round_failed(self, copied: dict[str, str], exc: Exception) -> None:
        self.failed += len(copied)
        key = (type(exc).__name__, _what(exc))
        if self._round_failure != key:
            log.warning("%s: topic configs not synced (retrying every %gs): %s", self.link.name,
                        self.interval_s, _what(exc))
        self._round_failure = key
        for topic in copied:      # unknown, so counted unsynced; not logged once per topic
            self._failures.setdefault(topic, _ROUND)


def _role(entries: dict) -> str:
    """A copy's seaway.replica.of, "" when unset (as mirror/link.py reads it)."""
    entry = entries.get(REPLICA_OF)
    return "" if entry is None or entry.value is None else entry.value


def _what(error) -> str:
    """A KafkaError reads "CODE_NAME: message"; an OSError may have no text of its own."""
    return str(error) or type(error).__name__


def _describe(change: dict[str, str | None]) -> str:
    return ", ".join(f"{name}={value}" if value is not None else f"delete {name}"
                     for name, value in change.items())
