"""The audit log (core/security/audit.py): the lines it writes, its rotation, and that neither a
stalled nor an unwritable disk blocks record() or loses events without saying so."""
from __future__ import annotations

import errno
import json
import logging
import stat
import threading
import time
from pathlib import Path

import pytest

from core.security import audit
from core.security.audit import AuditEvent, AuditLog

FIELDS = ["time", "time_ms", "kind", "principal", "client", "listener", "api", "resource_type",
          "resource_name", "operation", "result", "detail"]


def event(seq: int, **fields) -> AuditEvent:
    """An authorization event whose resource name carries a sequence number."""
    values = dict(time_ms=1_796_432_523_456, kind="authorization", principal="User:alice",
                  client="10.0.0.7:51234", listener="SASL_SSL", api="Produce", resource_type="TOPIC",
                  resource_name=f"orders-{seq}", operation="WRITE", result="DENIED", detail=None)
    values.update(fields)
    return AuditEvent(**values)


def seq_of(line: dict) -> int:
    return int(line["resource_name"].rsplit("-", 1)[1])


def kept_files(path: Path) -> list[Path]:
    """path.N ... path.1, path: oldest first."""
    backups = []
    n = 1
    while path.with_name(f"{path.name}.{n}").exists():
        backups.append(path.with_name(f"{path.name}.{n}"))
        n += 1
    return [*reversed(backups), path]


def read_lines(path: Path) -> list[dict]:
    lines = []
    for file in kept_files(path):
        data = file.read_bytes()
        assert data.endswith(b"\n"), file
        lines += [json.loads(line) for line in data.decode("utf-8").split("\n")[:-1]]
    return lines


def wait_until(condition, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_line_has_every_field_in_a_fixed_order():
    line = event(1, detail="no ACL").to_json_line()
    assert line.endswith("\n") and line.count("\n") == 1
    fields = json.loads(line)
    assert list(fields) == FIELDS
    assert fields == {"time": "2026-12-05T01:02:03.456Z", "time_ms": 1_796_432_523_456, "kind": "authorization",
                      "principal": "User:alice", "client": "10.0.0.7:51234", "listener": "SASL_SSL",
                      "api": "Produce", "resource_type": "TOPIC", "resource_name": "orders-1",
                      "operation": "WRITE", "result": "DENIED", "detail": "no ACL"}
    # milliseconds are zero-padded, detail is present when absent
    fields = json.loads(event(1, time_ms=1_796_432_523_007).to_json_line())
    assert fields["time"] == "2026-12-05T01:02:03.007Z" and fields["detail"] is None


ODD = ['say "hi" \\ back\\slash', "new\nline\r\ncarriage", "NUL\x00 bell\x07 esc\x1b[31m",
       "José 日本 🐟", "separators \u2028 \u2029 \x85 here", "lone \udc80 surrogate", "", "}\n{\"kind\":"]


def test_odd_strings_are_one_line_each_and_read_back_the_same(tmp_path):
    path = tmp_path / "audit.log"
    log = AuditLog(path)
    for i, odd in enumerate(ODD):
        log.record(event(i, principal=f"User:{odd}", client=odd, detail=odd))
    log.close()
    data = path.read_bytes()
    text = data.decode("utf-8")     # strict: no raw surrogate made it to disk
    # every reader's notion of a line: bytes, and str.splitlines (which also breaks at U+2028 and NEL)
    assert len(data.split(b"\n")) - 1 == len(text.splitlines()) == len(ODD)
    lines = read_lines(path)
    assert [(line["principal"], line["client"], line["detail"]) for line in lines] == \
           [(f"User:{odd}", odd, odd) for odd in ODD]
    assert all(list(line) == FIELDS for line in lines)
    assert "José 日本 🐟" in text     # non-ASCII stays readable, not \u-escaped


def test_rotation_keeps_backups_files_each_within_max_bytes_with_no_event_lost_or_doubled(tmp_path):
    path = tmp_path / "audit.log"
    max_bytes, backups, count = 2000, 3, 300
    log = AuditLog(path, max_bytes=max_bytes, backups=backups)
    for i in range(count):
        log.record(event(i))
        if i % 7 == 0:
            time.sleep(0.0005)  # several batches, not one
    log.close()
    files = kept_files(path)
    assert [f.name for f in files] == ["audit.log.3", "audit.log.2", "audit.log.1", "audit.log"]
    assert not path.with_name("audit.log.4").exists()
    line_size = len(event(100).to_json_line().encode())
    for file in files:
        assert file.stat().st_size <= max_bytes
    for file in files[:-1]:     # rotated only when the next line would not fit
        assert file.stat().st_size + line_size > max_bytes
    seqs = [seq_of(line) for line in read_lines(path)]
    # the newest events, in order, each once; the oldest files dropped
    assert seqs == list(range(count - len(seqs), count))
    assert len(seqs) > 3 * (max_bytes // line_size)


def test_a_line_larger_than_max_bytes_is_written_alone_to_a_fresh_file(tmp_path):
    path = tmp_path / "audit.log"
    log = AuditLog(path, max_bytes=600, backups=5)
    log.record(event(0))
    log.record(event(1, detail="x" * 2000))
    log.record(event(2))
    log.close()
    files = kept_files(path)
    assert [[seq_of(line) for line in read_lines_of(f)] for f in files] == [[0], [1], [2]]
    assert files[1].stat().st_size > 2000
    assert files[0].stat().st_size <= 600 and files[2].stat().st_size <= 600


def read_lines_of(file: Path) -> list[dict]:
    return [json.loads(line) for line in file.read_text("utf-8").splitlines()]


def test_record_never_blocks_on_a_stalled_writer_and_the_file_tells_of_the_drops(tmp_path, monkeypatch):
    entered, release = threading.Event(), threading.Event()
    write = audit._write_fully

    def stalled(fd, data):
        entered.set()
        release.wait(10)
        write(fd, data)

    monkeypatch.setattr(audit, "_write_fully", stalled)
    path = tmp_path / "audit.log"
    log = AuditLog(path, queue_size=1000)
    log.record(event(0))
    assert entered.wait(5)  # the writer holds event 0 in a write that does not return
    start = time.perf_counter()
    for i in range(1, 1000 + 100 + 1):
        log.record(event(i))
    assert time.perf_counter() - start < 0.5
    assert log.dropped == 100
    release.set()
    wait_until(lambda: not log._queue)
    for i in range(2000, 2005):     # later batches: the drops are told once
        log.record(event(i))
    log.close()
    lines = read_lines(path)
    assert [seq_of(line) for line in lines if line["kind"] != "audit"] == [*range(1001), *range(2000, 2005)]
    drops = [line for line in lines if line["kind"] == "audit"]
    assert len(drops) == 1 and drops[0]["result"] == "DROPPED" and drops[0]["count"] == 100
    assert list(drops[0]) == ["time", "time_ms", "kind", "result", "count"]
    assert lines[1001] == drops[0]  # after the events queued before the drops
    assert log.dropped == 100


def test_close_writes_everything_queued_and_is_idempotent(tmp_path, monkeypatch):
    entered, release = threading.Event(), threading.Event()
    write = audit._write_fully

    def stalled(fd, data):
        entered.set()
        release.wait(10)
        write(fd, data)

    monkeypatch.setattr(audit, "_write_fully", stalled)
    path = tmp_path / "audit.log"
    log = AuditLog(path)
    log.record(event(0))
    assert entered.wait(5)
    for i in range(1, 10_000):      # all queued behind the stalled write when close() starts
        log.record(event(i))
    release.set()
    log.close()
    assert [seq_of(line) for line in read_lines(path)] == list(range(10_000))
    assert log.dropped == 0
    log.close()
    size = path.stat().st_size
    log.record(event(10_000))
    log.close()
    assert log.dropped == 1 and path.stat().st_size == size


def test_files_are_private_and_their_directory_is_made(tmp_path):
    path = tmp_path / "audit" / "nested" / "audit.log"
    log = AuditLog(path, max_bytes=1000, backups=2)
    for i in range(20):
        log.record(event(i))
    log.close()
    files = kept_files(path)
    assert len(files) == 3
    assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o600}


@pytest.mark.parametrize("in_the_way", ["a directory at the path", "a file as its parent"])
def test_an_unwritable_path_warns_once_counts_drops_and_neither_raises_nor_hangs(tmp_path, caplog, in_the_way):
    if in_the_way == "a directory at the path":
        path = tmp_path / "audit.log"
        path.mkdir()
    else:
        (tmp_path / "file").write_text("")
        path = tmp_path / "file" / "audit.log"
    caplog.set_level(logging.WARNING, logger="core.security.audit")
    log = AuditLog(path)
    for i in range(5):
        log.record(event(i))
    wait_until(lambda: log.dropped == 5)
    for i in range(5, 10):      # a later batch tries again, and fails again, quietly
        log.record(event(i))
    wait_until(lambda: log.dropped == 10)
    start = time.monotonic()
    log.close()
    log.close()
    assert time.monotonic() - start < 2
    assert log.dropped == 10
    warnings = [r for r in caplog.records if r.name == "core.security.audit"]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert str(path) in warnings[0].getMessage()


def test_after_a_full_disk_it_writes_again_and_accounts_for_every_event(tmp_path, monkeypatch, caplog):
    """A disk that fills mid-write: the torn line stays the only unreadable one, and the
    events on disk plus the DROPPED counts are every event recorded."""
    full = threading.Event()
    full.set()
    write = audit._write_fully

    def filling(fd, data):
        if full.is_set() and len(data) > 1:
            write(fd, data[:len(data) // 2 + 7])     # part of the batch lands, mid-line
            raise OSError(errno.ENOSPC, "No space left on device")
        write(fd, data)

    monkeypatch.setattr(audit, "_write_fully", filling)
    caplog.set_level(logging.INFO, logger="core.security.audit")
    path = tmp_path / "audit.log"
    log = AuditLog(path)
    for i in range(10):
        log.record(event(i))
    wait_until(lambda: log.dropped > 0)
    wait_until(lambda: not log._queue)
    full.clear()
    for i in range(10, 20):
        log.record(event(i))
    log.close()
    events, dropped, torn = [], 0, 0
    for raw in path.read_text("utf-8").split("\n")[:-1]:
        try:
            line = json.loads(raw)
        except ValueError:
            torn += 1
            continue
        if line["kind"] == "audit":
            dropped += line["count"]
        else:
            events.append(seq_of(line))
    assert torn >= 1
    assert len(events) == len(set(events)) and 10 <= len(events) < 20
    assert len(events) + dropped == 20 == len(events) + log.dropped
    assert events[-10:] == list(range(10, 20))
    messages = [r for r in caplog.records if r.name == "core.security.audit"]
    assert [r.levelno for r in messages] == [logging.WARNING, logging.INFO]


def test_threads_recording_at_once_lose_nothing(tmp_path):
    path = tmp_path / "audit.log"
    log = AuditLog(path)

    def record(thread: int) -> None:
        for i in range(5000):
            log.record(event(thread * 100_000 + i))

    threads = [threading.Thread(target=record, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.close()
    seqs = [seq_of(line) for line in read_lines(path)]
    assert len(seqs) == 20_000 and set(seqs) == {t * 100_000 + i for t in range(4) for i in range(5000)}
    for t in range(4):          # each thread's events in the order it recorded them
        mine = [s for s in seqs if s // 100_000 == t]
        assert mine == sorted(mine)
    assert log.dropped == 0


def test_null_audit_has_the_interface_and_does_nothing():
    null = audit.NullAudit()
    null.record(event(0))
    null.close()
    assert null.dropped == 0
    assert {"max_bytes", "backups", "queue_size"} == set(audit.DEFAULTS)
    assert AuditLog.__init__.__kwdefaults__ == audit.DEFAULTS
