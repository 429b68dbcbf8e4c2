"""core/log descriptors, flush-thread safety and I/O errors."""
from __future__ import annotations

import errno
import os
import struct
import threading
from pathlib import Path

import pytest

from core.log import Log, LogConfig
from core.protocol.records import build_batch, iter_batch_headers

needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")


def batch(size: int = 50, ts: int = 1_000, tag: int = 0) -> bytes:
    return build_batch([(None, bytes([tag % 256]) * size, [], ts)])


def stored(data: bytes, base: int) -> bytes:
    return struct.pack(">q", base) + data[8:]


def read_everything(log: Log) -> list[bytes]:
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        res = log.read(offset, 1 << 20)
        assert res.data, f"no data at {offset}"
        data = bytes(res.data)
        out += [data[h.position:h.position + h.size] for h in iter_batch_headers(data)]
        offset = res.next_offset
    return out


def open_fds(under: Path) -> int:
    """This process's descriptors of files under `under`: the log's own, whatever other
    threads of a shared test worker open meanwhile (a process-wide count read 3 too many
    once in a full parallel run)."""
    prefix = os.path.realpath(under) + os.sep
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:         # closed since listed (the listing's own descriptor, say)
            continue
        count += target.startswith(prefix)
    return count


def index_points_at_batches(index_path, log_path) -> bool:
    raw = log_path.read_bytes()
    for rel, pos in struct.iter_unpack(">ii", index_path.read_bytes()):
        h = next(iter_batch_headers(raw[pos:]))
        if h.last_offset != int(log_path.stem) + rel:
            return False
    return True


# ------------------------------------------------------------- descriptors


@needs_proc
def test_closed_segments_hold_only_their_log_descriptor(tmp_path):
    d = tmp_path / "t-0"
    one = len(batch())
    cfg = LogConfig(segment_bytes=2 * one, index_interval_bytes=0)   # index every batch
    before = open_fds(d)
    assert before == 0
    log = Log.open(d, cfg)
    batches = [stored(batch(tag=i, ts=1_000 + i), log.append(batch(tag=i, ts=1_000 + i)).base_offset)
               for i in range(100)]
    assert len(log.segments) == 50
    assert 50 <= open_fds(d) - before <= 50 + 2   # a log each, and the active segment's index writers
    assert read_everything(log) == batches
    assert log.maybe_flush()               # rolled segments fsynced
    log.flush()
    assert open_fds(d) - before <= 50 + 2
    log.close()
    assert open_fds(d) == before

    # Reopened with the closed segments' indexes gone: reads rebuild them, keeping no writer.
    for seg_path in sorted(d.glob("*.index"))[:-1]:
        seg_path.unlink()
    log = Log.open(d, cfg)
    assert open_fds(d) - before <= 50 + 2
    assert read_everything(log) == batches
    for offset in range(0, 100, 7):
        assert bytes(log.read(offset, 1).data) == batches[offset]
    assert open_fds(d) - before <= 50 + 2
    for index_path in sorted(d.glob("*.index"))[:-1]:
        assert index_path.stat().st_size == 8      # rebuilt: one entry, for the second batch
        assert index_points_at_batches(index_path, index_path.with_suffix(".log"))
    log.close()
    assert open_fds(d) == before


# ---------------------------------------------------------------- threads


@needs_proc
def test_read_side_index_rebuild_is_safe_against_the_flush_thread(tmp_path, monkeypatch):
    """A read rebuilding a stale index while a flush thread closes that index's descriptor
    must neither use the closed descriptor number (another file may have it by then) nor
    fail; the segment lock makes the rebuild wait for the flush."""
    d = tmp_path / "t-0"
    one = len(batch())
    log = Log.open(d, LogConfig(segment_bytes=4 * one, index_interval_bytes=0))
    batches = [stored(batch(tag=i), log.append(batch(tag=i), apply_flush_policy=False).base_offset)
               for i in range(5)]
    seg = log._segments[0]
    assert [s.base_offset for s in log.segments] == [0, 4] and len(seg.index) == 3
    struct.pack_into(">ii", seg.index._buf, 16, 3, 0)   # the entry for offset 3: wrong batch
    index_path = os.path.realpath(seg.index.path)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")

    real_close = os.close
    closed, read_done = threading.Event(), threading.Event()
    victim_fds = []
    flusher = threading.Thread(target=log.maybe_flush)

    def close(fd):
        target = False
        if threading.current_thread() is flusher and not closed.is_set():
            try:
                target = os.path.realpath(os.readlink(f"/proc/self/fd/{fd}")) == index_path
            except OSError:
                pass
        real_close(fd)
        if target:
            # Another thread opening a file right now gets the number just freed.
            victim_fds.append(os.open(victim, os.O_RDWR))
            closed.set()
            read_done.wait(0.3)   # give a racing read the window; a lock makes it wait

    monkeypatch.setattr(os, "close", close)
    flusher.start()
    try:
        assert closed.wait(10), "the flush thread never closed the index"
        res = log.read(3, 1)      # finds the stale entry and rebuilds the index
        read_done.set()
    finally:
        read_done.set()
        flusher.join(10)
        monkeypatch.undo()
        for fd in victim_fds:
            os.close(fd)
    assert victim.read_bytes() == b"precious"
    assert bytes(res.data) == batches[3]
    assert log.flushed_offset == 4 and not log.failed
    assert index_points_at_batches(seg.index.path, seg.log_path)
    assert len(seg.index.path.read_bytes()) == 3 * 8
    log.close()
    log = Log.open(d, LogConfig(segment_bytes=4 * one, index_interval_bytes=0))
    assert read_everything(log) == batches


# --------------------------------------------------------------- I/O errors


def failing_writes(monkeypatch, fail_call: int, *, partial_before: bool = False):
    """os.write raising ENOSPC on its fail_call-th call (1-based); with partial_before the
    call before writes only half of what it is given."""
    real_write = os.write
    calls = []

    def write(fd, data):
        calls.append(fd)
        n = len(calls)
        if n == fail_call:
            raise OSError(errno.ENOSPC, "No space left on device")
        if partial_before and n == fail_call - 1:
            return real_write(fd, memoryview(data)[:len(data) // 2])
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    return calls


@pytest.mark.parametrize("fail_call,partial", [
    (2, True),     # the .log write, after half of it went through
    (2, False),    # the .index write, after the .log write succeeded
    (3, False),    # the .timeindex write, after the .log and .index writes
])
def test_failed_append_leaves_nothing_behind(tmp_path, monkeypatch, fail_call, partial):
    d = tmp_path / "t-0"
    cfg = LogConfig(index_interval_bytes=0)
    log = Log.open(d, cfg)
    first, second = batch(tag=1, ts=1_000), batch(tag=2, ts=2_000)
    log.append(first)
    log_file = d / f"{0:020d}.log"
    sizes = [(d / f"{0:020d}{s}").stat().st_size for s in (".log", ".index", ".timeindex")]
    calls = failing_writes(monkeypatch, fail_call, partial_before=partial)
    with pytest.raises(OSError, match="No space"):
        log.append(second)
    monkeypatch.undo()
    assert len(calls) == fail_call
    assert log.log_end_offset == 1 and not log.failed
    assert [(d / f"{0:020d}{s}").stat().st_size
            for s in (".log", ".index", ".timeindex")] == sizes
    assert log_file.read_bytes() == stored(first, 0)
    # A retry gets the same offset, and a crash then recovers exactly what was acknowledged.
    assert log.append(second).base_offset == 1
    assert read_everything(log) == [stored(first, 0), stored(second, 1)]
    assert log.offset_for_timestamp(1_500) == (1, 2_000)
    log._abandon()
    log = Log.open(d, cfg)
    assert log.recovered_truncated_bytes == 0 and log.log_end_offset == 2
    assert read_everything(log) == [stored(first, 0), stored(second, 1)]


def test_failed_roll_leaves_the_old_segment_active(tmp_path, monkeypatch):
    d = tmp_path / "t-0"
    one = len(batch())
    cfg = LogConfig(segment_bytes=2 * one)
    log = Log.open(d, cfg)
    log.append(batch(tag=0))
    log.append(batch(tag=1))
    real_open = os.open

    def open_(path, *args, **kwargs):
        if str(path).endswith(f"{2:020d}.log"):
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    with pytest.raises(OSError, match="Too many"):
        log.append(batch(tag=2))
    monkeypatch.undo()
    assert not log.failed and log.log_end_offset == 2
    assert [s.base_offset for s in log.segments] == [0]
    assert log.append(batch(tag=2)).base_offset == 2
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert read_everything(log) == [stored(batch(tag=i), i) for i in range(3)]


@pytest.fixture
def failing_fsync(monkeypatch):
    def boom(fd):
        raise OSError(errno.EIO, "Input/output error")

    def install():
        monkeypatch.setattr(os, "fdatasync", boom)
        monkeypatch.setattr(os, "fsync", boom)

    return install


def check_failed(log: Log, flushed: int) -> None:
    assert log.failed and log.flushed_offset == flushed
    with pytest.raises(OSError, match="log failed: .*Input/output"):
        log.append(batch())
    with pytest.raises(OSError, match="log failed"):
        log.flush()
    with pytest.raises(OSError, match="log failed"):
        log.maybe_flush()
    with pytest.raises(OSError, match="log failed"):
        log.roll()
    assert not log.flush_due() and not log.flush_pending()
    assert log.flushed_offset == flushed


def test_failed_fsync_fails_the_log_until_reopened(tmp_path, monkeypatch, failing_fsync):
    d = tmp_path / "t-0"
    log = Log.open(d, LogConfig())
    data = batch()
    log.append(data)
    failing_fsync()
    with pytest.raises(OSError, match="Input/output"):
        log.flush()
    monkeypatch.undo()                     # fsync works again; the log stays failed
    check_failed(log, 0)
    assert bytes(log.read(0, 100).data) == stored(data, 0)   # reads go on
    log.close()
    assert not (d / ".kafka_cleanshutdown").exists()          # the next open recovers
    log = Log.open(d, LogConfig())
    assert not log.failed and log.log_end_offset == 1
    assert log.append(batch()).base_offset == 1
    log.flush()
    assert log.flushed_offset == 2


def test_failed_fsync_of_a_rolled_segment_keeps_the_recovery_point(tmp_path, monkeypatch,
                                                                   failing_fsync):
    d = tmp_path / "t-0"
    one = len(batch())
    log = Log.open(d, LogConfig(segment_bytes=2 * one))
    for _ in range(3):
        log.append(batch(), apply_flush_policy=False)
    assert log.flush_pending()
    failing_fsync()
    with pytest.raises(OSError, match="Input/output"):
        log.maybe_flush()
    monkeypatch.undo()
    check_failed(log, 0)
    assert (d / "recovery-point-offset").read_text().split() == ["0", "0"]


def test_failed_fsync_in_append_flush_policy(tmp_path, monkeypatch, failing_fsync):
    log = Log.open(tmp_path / "t-0", LogConfig(flush_messages=1))
    failing_fsync()
    with pytest.raises(OSError, match="Input/output"):
        log.append(batch())
    monkeypatch.undo()
    check_failed(log, 0)
