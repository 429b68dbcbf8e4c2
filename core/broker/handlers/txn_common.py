"""What the transaction handlers share: the PRODUCER_FENCED a client too old to know it gets
as INVALID_PRODUCER_EPOCH (Kafka's KafkaApis does the same, per API and version)."""
from __future__ import annotations

from core.protocol.errors import ErrorCode


def for_version(code: ErrorCode, version: int, first_with_fenced: int) -> ErrorCode:
    """PRODUCER_FENCED (KIP-588) is understood from `first_with_fenced` on; before, the
    client handles INVALID_PRODUCER_EPOCH the same way (fatal)."""
    if code == ErrorCode.PRODUCER_FENCED and version < first_with_fenced:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code
