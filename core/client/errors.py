"""Errors our client raises that do not come from a broker's error code.

They subclass KafkaError and carry the Kafka code a Java client would map them to, so that
retry logic can branch on `.retriable` alone: a dropped connection is NETWORK_EXCEPTION and a
request that got no answer in time is REQUEST_TIMED_OUT (both retriable), a version neither
side can speak is UNSUPPORTED_VERSION (fatal).
"""
from __future__ import annotations

from core.protocol.errors import ErrorCode, KafkaError

__all__ = ["KafkaError", "ErrorCode", "KafkaConnectionError", "RequestTimedOutError",
           "UnsupportedVersionError", "ClientClosedError", "ProtocolError", "raise_for_code"]


class KafkaConnectionError(KafkaError):
    """The connection failed, was closed, or the peer sent bytes we cannot frame."""

    def __init__(self, message: str):
        super().__init__(ErrorCode.NETWORK_EXCEPTION, message)


class RequestTimedOutError(KafkaError):
    def __init__(self, message: str):
        super().__init__(ErrorCode.REQUEST_TIMED_OUT, message)


class UnsupportedVersionError(KafkaError):
    def __init__(self, message: str):
        super().__init__(ErrorCode.UNSUPPORTED_VERSION, message)


class ClientClosedError(KafkaError):
    """The producer, consumer or client was closed while the operation was pending.

    Not retriable: retrying cannot succeed once the caller has shut the object down.
    """

    def __init__(self, message: str = "client closed"):
        super().__init__(ErrorCode.UNKNOWN_SERVER_ERROR, message)

    @property
    def retriable(self) -> bool:
        return False


def raise_for_code(code: int, message: str | None = None) -> None:
    """Raise KafkaError for a non-zero error code; do nothing for NONE."""
    if code:
        raise KafkaError(code, message)


class ProtocolError(KafkaError):
    """The broker sent a response we cannot parse, or one that breaks the protocol's rules
    (an unknown correlation id). Not retriable: the same request would get the same answer."""

    def __init__(self, message: str):
        super().__init__(ErrorCode.UNKNOWN_SERVER_ERROR, message)

    @property
    def retriable(self) -> bool:
        return False
