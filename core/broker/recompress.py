"""Re-encode produced batches in a topic's `compression.type`, when it is not `producer`.

This is the one produce path that decodes records, and only for topics whose operator asked
for a codec different from the one the producer used, exactly as Kafka does. Offsets deltas,
timestamps, headers and the producer fields are kept, so the result is the batch the producer
would have sent had it used the topic's codec.
"""
from __future__ import annotations

from core.protocol.compression import Compression
from core.protocol.records import (BatchInfo, Record, RecordTuple, build_batch, decode_batch,
                                   scan_batches)

_TOPIC_CODECS = {"uncompressed": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
                 "lz4": Compression.LZ4, "zstd": Compression.ZSTD}


def target_codec(topic_setting: str) -> Compression | None:
    """None means "keep what the producer sent"."""
    return _TOPIC_CODECS.get(topic_setting)


def recompress(data, batches: list[BatchInfo], target: Compression,
               max_decompressed: int) -> tuple[bytearray, list[BatchInfo]]:
    if all(b.compression == target for b in batches):
        return data, batches
    view = memoryview(data)
    out = bytearray()
    for info in batches:
        if info.compression == target:
            out += view[info.position:info.position + info.size]
            continue
        records: list[RecordTuple] = []
        for r in decode_batch(view, info, max_decompressed=max_decompressed):
            assert isinstance(r, Record), r   # a produced batch holds data records
            records.append((r.key, r.value, r.headers, r.timestamp))
        out += build_batch(records,
                           base_offset=info.base_offset, compression=target,
                           producer_id=info.producer_id, producer_epoch=info.producer_epoch,
                           base_sequence=info.base_sequence,
                           partition_leader_epoch=info.partition_leader_epoch,
                           transactional=info.is_transactional)
    return out, scan_batches(out)
