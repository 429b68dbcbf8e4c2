"""regions/port_ledger.py: ports another platform picked moments ago are not picked again;
old and excess entries drop out; a broken ledger never stops a start."""
from __future__ import annotations

import json
import threading

from regions.layout import plan
from regions.port_ledger import HOLD_S, MOST_HELD, recent_picks
from regions.topology import load_topology

TOPOLOGY = """
regions:
  eu-west:
    clusters:
      solo:
        nodes:
          - {id: 1, roles: [broker, controller], zone: a}
"""


def test_picks_are_held_for_a_while_then_dropped(tmp_path):
    ledger = tmp_path / "ledger.json"
    with recent_picks(ledger, now=1000.0) as (recent, mine):
        assert recent == set()
        mine.update({62001, 62002})
    with recent_picks(ledger, now=1000.0 + HOLD_S - 1) as (recent, mine):
        assert recent == {62001, 62002}
        mine.add(62003)
    with recent_picks(ledger, now=1000.0 + HOLD_S + 1) as (recent, _):
        assert recent == {62003}                      # the first two aged out


def test_at_most_the_newest_are_held(tmp_path):
    ledger = tmp_path / "ledger.json"
    ledger.write_text(json.dumps({str(60000 + i): 1000.0 + i / 100 for i in range(MOST_HELD + 50)}))
    with recent_picks(ledger, now=1000.0 + MOST_HELD / 100) as (recent, _):
        assert len(recent) == MOST_HELD and min(recent) == 60050


def test_a_broken_ledger_is_left_out(tmp_path):
    ledger = tmp_path / "ledger.json"
    ledger.write_text("{not json")
    with recent_picks(ledger) as (recent, mine):
        assert recent == set()
        mine.add(62010)
    with recent_picks(ledger) as (recent, _):
        assert recent == {62010}
    with recent_picks(tmp_path / "no-such-dir" / "ledger.json") as (recent, mine):
        assert recent == set()
        mine.add(1)                                   # nowhere to record it, and no error


def test_two_platforms_planned_at_once_share_no_port(tmp_path, monkeypatch):
    """The race the ledger closes: both pick before either binds."""
    import regions.layout as layout
    import regions.port_ledger as port_ledger
    monkeypatch.setattr(port_ledger, "LEDGER", tmp_path / "ledger.json")
    monkeypatch.setattr(layout, "recent_picks", lambda: port_ledger.recent_picks(tmp_path / "ledger.json"))
    # A narrow range makes a collision near certain without the ledger.
    monkeypatch.setattr(layout, "pick_range", lambda: range(62000, 62012))
    (tmp_path / "t.yaml").write_text(TOPOLOGY)
    topology = load_topology(tmp_path / "t.yaml")
    found = {}

    def start(name):
        found[name] = plan(topology, tmp_path / name).picked_ports
    threads = [threading.Thread(target=start, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert found["a"] and found["b"] and not found["a"] & found["b"], found
