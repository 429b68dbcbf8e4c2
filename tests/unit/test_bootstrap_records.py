"""`storage format --add-scram`'s file: what is written reads back, and any damage is one line."""
from __future__ import annotations

import pytest

from core.config.defs import ConfigError
from core.node.bootstrap import BOOTSTRAP_FILE, parse_add_scram, read_bootstrap, write_bootstrap
from core.security.scram import make_credential


def test_credentials_read_back_and_authenticate(tmp_path):
    records = [parse_add_scram("SCRAM-SHA-256=[name=alice,password=alice-secret]"),
               parse_add_scram('scram-sha-512=[name="bob",iterations=8192,password="bob-secret"]')]
    write_bootstrap(tmp_path, records)
    back = read_bootstrap(tmp_path)
    assert [(r.name, r.mechanism, r.iterations) for r in back] == [("alice", 1, 4096), ("bob", 2, 8192)]
    assert (tmp_path / BOOTSTRAP_FILE).stat().st_mode & 0o777 == 0o600
    alice = back[0]
    expected = make_credential("SCRAM-SHA-256", "alice-secret", salt=alice.salt, iterations=4096)
    assert (alice.stored_key, alice.server_key) == (expected.stored_key, expected.server_key)


def test_no_file_is_no_records(tmp_path):
    assert read_bootstrap(tmp_path) == []


@pytest.mark.parametrize("damage", [
    lambda data: data[:-1],                                # cut short
    lambda data: data[:40] + bytes([data[40] ^ 1]) + data[41:],   # one bit flipped
    lambda data: b"something else entirely" + data,       # not ours
    lambda data: b"",                                      # empty
])
def test_a_damaged_file_stops_the_node_with_one_line(tmp_path, damage):
    path = write_bootstrap(tmp_path, [parse_add_scram("SCRAM-SHA-256=[name=a,password=b]")])
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ConfigError, match=r"^metadata\.log\.dir: .*bootstrap\.records is damaged"):
        read_bootstrap(tmp_path)
