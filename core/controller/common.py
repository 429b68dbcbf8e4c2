"""What the controller's parts share: results, request errors, per-item answers, topic naming
rules, and the working image an operation builds its records against."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable, Protocol, TypeVar

from core.protocol.codegen import Message
from core.protocol.errors import ErrorCode, KafkaError

from .image import MetadataDelta, MetadataImage

CLUSTER_METADATA_TOPIC = "__cluster_metadata"
MAX_TOPIC_NAME = 249
# Kafka's internal topics: only their coordinators write them; they are never auto-created and
# never deleted.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
_LEGAL_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")

# Kafka's QuorumController.MAX_RECORDS_PER_USER_OP: one request may not make a larger batch.
MAX_RECORDS_PER_USER_OP = 10_000
TOO_LARGE_MESSAGE = "Unable to perform excessively large batch operation."


@dataclass
class ControllerResult:
    """Records to append to the metadata log, and the response to send once they commit
    (or at once when there are none). `response` is the wire response object of the API that
    was asked, built for the version asked."""
    records: list[Message] = field(default_factory=list)
    response: Message | None = None


class ItemResult(Protocol):
    """A per-item result of a response: every one carries an error code and message."""
    error_code: int
    error_message: str | None


Item = TypeVar("Item")
R = TypeVar("R", bound=ItemResult)


def answer_each(items: Iterable[Item], key: Callable[[Item], Hashable], duplicate: str,
                result: Callable[[Item], R], act: Callable[[Item, R], None], *,
                duplicates_once: bool = False) -> list[R]:
    """One result per request item, in request order. An item whose key appears more than
    once fails with INVALID_REQUEST (`duplicate` is the message): every occurrence, or with
    `duplicates_once` the first alone, as Kafka's controller answers CreateTopics, DeleteTopics
    and CreatePartitions (one result per duplicated name; librdkafka cannot parse a response
    that names a topic twice). Otherwise `act(item, result)` fills in the result or raises
    KafkaError, whose code and message the result gets."""
    items = list(items)
    seen = Counter(key(item) for item in items)
    answered: set[Hashable] = set()
    out = []
    for item in items:
        k = key(item)
        if duplicates_once and seen[k] > 1 and k in answered:
            continue
        answered.add(k)
        res = result(item)
        try:
            if seen[k] > 1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, duplicate)
            act(item, res)
        except KafkaError as exc:
            res.error_code, res.error_message = exc.code, exc.message
        out.append(res)
    return out


def topic_name_error(name: str) -> str | None:
    """Why `name` is not a legal topic name (Kafka's Topic.validate wording), or None."""
    if name == "":
        reason = "the empty string is not allowed"
    elif name in (".", ".."):
        reason = f"'{name}' is not allowed"
    elif len(name) > MAX_TOPIC_NAME:
        reason = f"the length of '{name}' is longer than the max allowed length {MAX_TOPIC_NAME}"
    elif not _LEGAL_TOPIC_CHARS.issuperset(name):
        reason = (f"'{name}' contains one or more characters other than ASCII alphanumerics, "
                  "'.', '_' and '-'")
    else:
        return None
    return f"Topic name is invalid: {reason}"


class Working:
    """The records one operation has generated so far and the image they lead to.

    Records are replayed into one MetadataDelta as they are added, so generating N records
    costs O(N) and the image is only rebuilt when someone reads it after a change. Add only
    records that are final: a record that fails to replay means a controller bug, and the
    whole operation is then discarded.
    """

    def __init__(self, base: MetadataImage):
        self._delta = MetadataDelta(base)
        self._image = base
        self._stale = False
        self.records: list[Message] = []

    @property
    def image(self) -> MetadataImage:
        if self._stale:
            self._image = self._delta.image()
            self._stale = False
        return self._image

    def add(self, records: Iterable[Message]) -> None:
        for record in records:
            self._delta.replay(record)
            self.records.append(record)
            self._stale = True

    def room(self) -> int:
        """How many more records this operation may add."""
        return MAX_RECORDS_PER_USER_OP - len(self.records)
