"""Record batch codecs (core/protocol/compression.py) against the formats other clients write.

A batch compressed by Seaway is read by Java, librdkafka, kafka-python and Go clients, and
Seaway reads theirs; so every codec is checked against the format's magic numbers and against
an independent implementation in both directions: gzip (stdlib), lz4 frame (`lz4.frame`), zstd
(`zstandard`) and snappy (`python-snappy`, raw; xerial framing parsed by hand here).
Decompression must be bounded (`max_size`) and anything malformed must surface as DecodeError.
"""
from __future__ import annotations

import gzip
import random
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import cramjam
import lz4.frame
import pytest
import snappy
import zstandard
from hypothesis import given, settings, strategies as st

from core.protocol.compression import Compression, compress, decompress
from core.protocol.errors import DecodeError

CODECS = list(Compression)
COMPRESSED = [c for c in Compression if c != Compression.NONE]
REPO = Path(__file__).resolve().parents[2]
MiB = 1 << 20
XERIAL_MAGIC = b"\x82SNAPPY\x00"

_rng = random.Random(1234)
RANDOM_1MIB = _rng.randbytes(MiB)  # incompressible
TEXT_1MIB = (b"".join(b"record-%08d,value=%s;" % (i, b"x" * (i % 17)) for i in range(40000)))[:MiB]
assert len(TEXT_1MIB) == MiB

SAMPLES = {
    "empty": b"",
    "one-byte": b"\x00",
    "short": b"hello kafka",
    "random-1k": _rng.randbytes(1000),
    "random-1mib": RANDOM_1MIB,
    "text-1mib": TEXT_1MIB,
    "zeros-1mib": bytes(MiB),
}


# --------------------------------------------------------------------------- names and ids


def test_codec_ids_are_kafkas():
    # The low three bits of a batch's attributes (KIP-110 added zstd as 4).
    assert [(c.name, int(c)) for c in Compression] == [
        ("NONE", 0), ("GZIP", 1), ("SNAPPY", 2), ("LZ4", 3), ("ZSTD", 4)]


@pytest.mark.parametrize("name, expected", [
    # producer compression.type values
    ("none", Compression.NONE), ("gzip", Compression.GZIP), ("snappy", Compression.SNAPPY),
    ("lz4", Compression.LZ4), ("zstd", Compression.ZSTD),
    # topic compression.type spelling of "no codec"
    ("uncompressed", Compression.NONE),
    # case and surrounding space do not matter
    ("GZIP", Compression.GZIP), ("  Zstd ", Compression.ZSTD), ("LZ4", Compression.LZ4),
    ("", Compression.NONE), (None, Compression.NONE),
    # numeric ids
    (0, Compression.NONE), (2, Compression.SNAPPY), (4, Compression.ZSTD),
])
def test_parse_accepts_kafka_names(name, expected):
    assert Compression.parse(name) is expected


@pytest.mark.parametrize("name", ["brotli", "lzma", "deflate", "zlib", "lz4hc", "zstandard", "gz", "none?", 5, 7, -1])
def test_parse_rejects_unknown(name):
    with pytest.raises(ValueError):
        Compression.parse(name)


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("sample", list(SAMPLES), ids=str)
def test_round_trip(codec, sample):
    data = SAMPLES[sample]
    packed = compress(codec, data)
    assert isinstance(packed, bytes)
    assert decompress(codec, packed) == data
    # the bound is inclusive: exactly the output size passes
    assert decompress(codec, packed, max_size=len(data)) == data
    if codec != Compression.NONE and sample in ("text-1mib", "zeros-1mib"):
        assert len(packed) < len(data) // 4  # it really compressed


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_accepts_bytearray_and_memoryview(codec):
    data = SAMPLES["random-1k"] * 3
    packed = compress(codec, bytearray(data))
    assert decompress(codec, memoryview(bytearray(packed))) == data
    assert decompress(codec, bytearray(packed)) == data


@settings(max_examples=60, deadline=None, database=None)
@given(codec=st.sampled_from(CODECS),
       data=st.binary(max_size=3000) | st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=20),
                                                 st.integers(1, 5000)))
def test_round_trip_hypothesis(codec, data):
    assert decompress(codec, compress(codec, data)) == data


# --------------------------------------------------------------------------- wire formats


@pytest.mark.parametrize("sample", ["empty", "short", "text-1mib"])
def test_gzip_is_gzip(sample):
    packed = compress(Compression.GZIP, SAMPLES[sample])
    assert packed[:2] == b"\x1f\x8b"
    assert packed[2] == 8  # deflate


@pytest.mark.parametrize("sample", ["empty", "short", "random-1mib", "text-1mib"])
def test_lz4_is_the_frame_format_kafka_reads(sample):
    packed = compress(Compression.LZ4, SAMPLES[sample])
    assert struct.unpack_from("<I", packed)[0] == 0x184D2204
    flg = packed[4]
    assert flg >> 6 == 0b01, "frame format version 01"
    assert flg & 0b11 == 0, "reserved bits"
    # Kafka's Java client (Lz4BlockInputStream / KafkaLZ4BlockInputStream, FLG.validate) throws
    # "Dependent block stream is unsupported" unless BLOCK_INDEPENDENCE is set; librdkafka
    # writes LZ4F_blockIndependent for the same reason.
    assert flg & 0x20, f"FLG {flg:#04x}: blocks must be independent for Java consumers"
    info = lz4.frame.get_frame_info(packed)
    assert info["block_linked"] is False
    # BD: block max size id 4..7 (64 KB..4 MB), the ids Java accepts
    assert 4 <= (packed[5] >> 4) & 0x7 <= 7


@pytest.mark.parametrize("sample", ["empty", "short", "text-1mib"])
def test_zstd_is_a_zstd_frame(sample):
    packed = compress(Compression.ZSTD, SAMPLES[sample])
    assert struct.unpack_from("<I", packed)[0] == 0xFD2FB528
    assert packed[:4] == b"\x28\xb5\x2f\xfd"


def _xerial_blocks(packed: bytes) -> list[bytes]:
    """Split xerial snappy framing (what the Java client writes) into its raw blocks."""
    assert packed[:8] == XERIAL_MAGIC
    version, compatible = struct.unpack_from(">ii", packed, 8)
    assert (version, compatible) == (1, 1)
    pos, blocks = 16, []
    while pos < len(packed):
        (size,) = struct.unpack_from(">i", packed, pos)
        pos += 4
        assert 0 < size <= len(packed) - pos
        blocks.append(packed[pos:pos + size])
        pos += size
    assert pos == len(packed)
    return blocks


@pytest.mark.parametrize("sample", ["empty", "short", "random-1k", "random-1mib", "text-1mib"])
def test_snappy_is_xerial_framed_raw_blocks(sample):
    data = SAMPLES[sample]
    packed = compress(Compression.SNAPPY, data)
    blocks = _xerial_blocks(packed)
    if data:
        assert blocks
    # each block is plain (raw) snappy: cramjam's raw decoder and python-snappy both read it
    assert b"".join(bytes(cramjam.snappy.decompress_raw(b)) for b in blocks) == data
    assert b"".join(snappy.uncompress(b) for b in blocks) == data
    if len(data) == MiB:
        assert len(blocks) > 1  # blocked, not one giant block


@pytest.mark.parametrize("sample", ["empty", "short", "random-1k", "text-1mib"])
def test_raw_snappy_decompresses(sample):
    # librdkafka (and sarama) write raw, unframed snappy
    data = SAMPLES[sample]
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data
    assert decompress(Compression.SNAPPY, snappy.compress(data)) == data


def test_xerial_written_by_hand_decompresses():
    # the Java client's layout: magic, version 1, compatible 1, then (int32 length, raw block)*
    data = TEXT_1MIB[:100_000]
    out = bytearray(XERIAL_MAGIC + struct.pack(">ii", 1, 1))
    for start in range(0, len(data), 7000):  # odd block size: nothing assumes 32 KiB
        block = snappy.compress(data[start:start + 7000])
        out += struct.pack(">i", len(block)) + block
    assert decompress(Compression.SNAPPY, bytes(out)) == data


# --------------------------------------------------------------------------- interop


INTEROP_DATA = [SAMPLES["empty"], SAMPLES["short"], SAMPLES["random-1k"], TEXT_1MIB]


@pytest.mark.parametrize("data", INTEROP_DATA, ids=["empty", "short", "random", "text-1mib"])
def test_gzip_interop(data):
    assert decompress(Compression.GZIP, gzip.compress(data)) == data
    assert decompress(Compression.GZIP, gzip.compress(data, compresslevel=1, mtime=0)) == data
    assert gzip.decompress(compress(Compression.GZIP, data)) == data
    # Java's GZIPInputStream reads concatenated members; so do we
    assert decompress(Compression.GZIP, gzip.compress(data) + gzip.compress(b"tail")) == data + b"tail"


@pytest.mark.parametrize("data", INTEROP_DATA, ids=["empty", "short", "random", "text-1mib"])
def test_lz4_interop(data):
    for kwargs in ({}, {"block_linked": False}, {"content_checksum": True, "block_checksum": True},
                   {"store_size": True, "block_size": lz4.frame.BLOCKSIZE_MAX4MB}):
        assert decompress(Compression.LZ4, lz4.frame.compress(data, **kwargs)) == data, kwargs
    assert lz4.frame.decompress(compress(Compression.LZ4, data)) == data


@pytest.mark.parametrize("data", INTEROP_DATA, ids=["empty", "short", "random", "text-1mib"])
def test_zstd_interop(data):
    # one-shot (content size in the frame header) and streaming (no content size, like zstd-jni)
    assert decompress(Compression.ZSTD, zstandard.ZstdCompressor().compress(data)) == data
    cobj = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
    assert decompress(Compression.ZSTD, cobj.compress(data) + cobj.flush()) == data
    ours = compress(Compression.ZSTD, data)
    assert zstandard.ZstdDecompressor().decompressobj().decompress(ours) == data


@pytest.mark.parametrize("data", INTEROP_DATA, ids=["empty", "short", "random", "text-1mib"])
def test_snappy_interop(data):
    assert decompress(Compression.SNAPPY, snappy.compress(data)) == data
    assert b"".join(snappy.uncompress(b) for b in _xerial_blocks(compress(Compression.SNAPPY, data))) == data


# --------------------------------------------------------------------------- hostile input


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_max_size_bounds_output(codec):
    data = TEXT_1MIB
    packed = compress(codec, data)
    with pytest.raises(DecodeError):
        decompress(codec, packed, max_size=len(data) - 1)
    with pytest.raises(DecodeError):
        decompress(codec, packed, max_size=0)
    assert decompress(codec, compress(codec, b""), max_size=0) == b""


def test_none_codec_is_bounded_too():
    with pytest.raises(DecodeError):
        decompress(Compression.NONE, b"12345", max_size=4)


BOMB_SIZE = 100 * MiB


def _bomb(codec: Compression) -> bytes:
    zeros = bytes(BOMB_SIZE)
    if codec == Compression.SNAPPY:  # raw, one block: the cheapest snappy bomb
        return bytes(cramjam.snappy.compress_raw(zeros))
    return compress(codec, zeros)


@pytest.fixture(scope="module")
def bombs():
    return {codec: _bomb(codec) for codec in COMPRESSED}


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_decompression_bomb_is_refused(codec, bombs):
    bomb = bombs[codec]
    assert len(bomb) < 5 * MiB  # 100 MB of zeros shrinks to little (3 KB with zstd)
    start = time.perf_counter()
    with pytest.raises(DecodeError, match="exceeds"):
        decompress(codec, bomb, max_size=MiB)
    assert time.perf_counter() - start < 5


_PEAK_SCRIPT = textwrap.dedent("""
    import sys
    from core.protocol.compression import decompress
    from core.protocol.errors import DecodeError

    def peak_kib():
        # VmHWM is this process's own high-water mark; ru_maxrss is not usable here because
        # Linux carries the parent's peak over into a child across fork+exec.
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))

    bomb = open(sys.argv[2], "rb").read()
    before = peak_kib()
    try:
        decompress(int(sys.argv[1]), bomb, max_size=1 << 20)
    except DecodeError:
        pass
    else:
        raise SystemExit("no DecodeError")
    print(peak_kib() - before)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads VmHWM from /proc/self/status")
@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_decompression_bomb_peak_memory(codec, bombs, tmp_path):
    """Refusing a 100 MB bomb with max_size=1 MiB should not cost 100 MB of memory."""
    path = tmp_path / "bomb"
    path.write_bytes(bombs[codec])
    proc = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT, str(int(codec)), str(path)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    peak_kib = int(proc.stdout.strip())
    assert peak_kib < 16 * 1024, f"{codec.name}: peak grew by {peak_kib / 1024:.0f} MiB"


GARBAGE = [
    b"definitely not compressed",
    b"\x00" * 64,
    b"\xff" * 64,
    bytes(range(256)),
]


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
@pytest.mark.parametrize("garbage", GARBAGE, ids=["text", "zeros", "ones", "ramp"])
def test_garbage_raises_decode_error(codec, garbage):
    with pytest.raises(DecodeError):
        decompress(codec, garbage)


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_truncated_output_raises_decode_error(codec):
    packed = compress(codec, TEXT_1MIB[:200_000])
    for cut in (1, 5, len(packed) // 2, len(packed) - 1):
        with pytest.raises(DecodeError):
            decompress(codec, packed[:cut])


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_flipped_bytes_never_escape_as_other_errors(codec):
    packed = compress(codec, TEXT_1MIB[:50_000])
    rng = random.Random(int(codec))
    for _ in range(200):
        mutated = bytearray(packed)
        for _ in range(rng.randint(1, 4)):
            mutated[rng.randrange(len(mutated))] ^= 1 << rng.randrange(8)
        try:
            decompress(codec, bytes(mutated), max_size=MiB)
        except DecodeError:
            pass


@pytest.mark.parametrize("tail", [
    b"\x00\x00",                              # block header cut short
    struct.pack(">i", -1) + b"abc",           # negative block length
    struct.pack(">i", 100) + b"abc",          # block runs past the end
    struct.pack(">i", 3) + b"\xff\xff\xff",   # a block that is not snappy
], ids=["short-header", "negative", "past-end", "bad-block"])
def test_broken_xerial_framing_raises_decode_error(tail):
    good = compress(Compression.SNAPPY, b"some data")
    with pytest.raises(DecodeError):
        decompress(Compression.SNAPPY, good + tail)


@settings(max_examples=150, deadline=None, database=None)
@given(codec=st.sampled_from(COMPRESSED), data=st.binary(max_size=200))
def test_random_bytes_only_raise_decode_error(codec, data):
    try:
        decompress(codec, data, max_size=MiB)
    except DecodeError:
        pass


@pytest.mark.parametrize("codec", [5, 6, 7, -1])
def test_unknown_codec(codec):
    with pytest.raises(DecodeError):
        decompress(codec, b"abc")
    with pytest.raises(ValueError):
        compress(codec, b"abc")
