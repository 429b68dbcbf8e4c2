"""The DR controller's history, in SQLite (sqlite-utils) in its state directory: every
failover, failback and drill with its steps and measured figures. A failover's row is
written before its first step and after every step, with what the steps captured (the
epoch, the offsets where the promoted side stood), so a controller that died midway finds
where it was and finishes.

    failovers     id, pair, kind, source, target, epoch, controller, state (running, done,
                  failed, rolled-back), started_at, finished_at, rpo_records, rpo_seconds,
                  rpo_exact (1 once a failback has counted an unplanned failover's stranded
                  records), rto_writes_s, error, context (JSON: the plan, what the steps captured)
    steps         failover_id, name, started_at, finished_at, state, detail
    observations  pair, at, active, lag: the latest lag seen, which an unplanned failover
                  reports as its expected loss once the active region cannot be asked
    drills        id, pair, region, mode, run_id, state (running, passed, failed), started_at,
                  finished_at, rpo_records, rto_writes_s, rto_reads_s (the failover phase's, as
                  the canary clients saw them), report (the Markdown file), error, summary
                  (JSON: the whole report, dr/drill.py)

A database that cannot be read is one line (HistoryError) naming the file, and nothing is
written to it.
"""
from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import sqlite_utils


class HistoryError(Exception):
    """One line: the history database cannot be used."""


class History:
    def __init__(self, state_dir: Path):
        self.path = Path(state_dir) / "history.db"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite_utils.Database(self.path)
            self._create()
        except (sqlite3.DatabaseError, OSError) as exc:
            raise HistoryError(f"the DR history {self.path} cannot be used ({exc}); move it aside "
                               f"to start a new one") from None

    def _create(self) -> None:
        # Reading the schema is what finds a corrupt file.
        tables = set(self.db.table_names())
        if "failovers" not in tables:
            self.db["failovers"].create({
                "id": int, "pair": str, "kind": str, "source": str, "target": str, "epoch": int,
                "controller": str, "state": str, "started_at": float, "finished_at": float,
                "rpo_records": int, "rpo_seconds": float, "rpo_exact": int, "rto_writes_s": float, "error": str,
                "context": str}, pk="id")
        if "observations" not in tables:
            self.db["observations"].create({"pair": str, "at": float, "active": str,
                                            "lag": str}, pk="pair")
        if "drills" not in tables:
            self.db["drills"].create({"id": int, "pair": str, "region": str, "mode": str, "run_id": str,
                                      "state": str, "started_at": float, "finished_at": float,
                                      "rpo_records": int, "rto_writes_s": float, "rto_reads_s": float,
                                      "report": str, "error": str, "summary": str}, pk="id")
        if "steps" not in tables:
            self.db["steps"].create({"failover_id": int, "name": str, "started_at": float,
                                     "finished_at": float, "state": str, "detail": str})

    def _write(self, fn):
        """Run a read or a write of the database; HistoryError (one line) if it fails."""
        try:
            return fn()
        except (sqlite3.DatabaseError, ValueError) as exc:     # ValueError: a row's JSON
            raise HistoryError(f"the DR history {self.path} cannot be used ({exc})") from None

    def begin(self, *, pair: str, kind: str, source: str, target: str, epoch: int,
              controller: str, context: dict) -> int:
        row = {"pair": pair, "kind": kind, "source": source, "target": target, "epoch": epoch,
               "controller": controller, "state": "running", "started_at": time.time(),
               "context": json.dumps(context)}
        return self._write(lambda: self.db["failovers"].insert(row).last_pk)

    def running(self, pair: str) -> dict | None:
        rows = self._write(lambda: list(self.db["failovers"].rows_where(
            "pair = ? and state = 'running'", [pair], order_by="id desc", limit=1)))
        return _decoded(rows[0]) if rows else None

    def update(self, failover_id: int, **fields: Any) -> None:
        if "context" in fields:
            fields["context"] = json.dumps(fields["context"])
        self._write(lambda: self.db["failovers"].update(failover_id, fields, alter=True))

    def step_started(self, failover_id: int, name: str) -> None:
        self._write(lambda: self.db["steps"].insert({"failover_id": failover_id, "name": name,
                                                     "started_at": time.time(), "state": "running"}))

    def step_finished(self, failover_id: int, name: str, detail: str, state: str = "done") -> None:
        def update() -> None:
            self.db.execute("update steps set finished_at = ?, state = ?, detail = ? where failover_id = ? "
                            "and name = ? and state = 'running'", [time.time(), state, detail, failover_id, name])
            self.db.conn.commit()
        self._write(update)

    def steps(self, failover_id: int) -> list[dict]:
        return self._write(lambda: list(self.db["steps"].rows_where("failover_id = ?", [failover_id],
                                                                    order_by="rowid")))

    def observed(self, pair: str, active: str | None, lag: dict) -> None:
        """The latest lag seen of the pair's active link ({"topic/partition": [records,
        seconds]}): what an unplanned failover expects to lose if the region is gone next."""
        self._write(lambda: self.db["observations"].upsert(
            {"pair": pair, "at": time.time(), "active": active or "", "lag": json.dumps(lag)}, pk="pair"))

    def last_observation(self, pair: str) -> dict | None:
        rows = self._write(lambda: list(self.db["observations"].rows_where("pair = ?", [pair])))
        if not rows:
            return None
        row = dict(rows[0])
        row["lag"] = json.loads(row["lag"])
        return row

    def last_unplanned(self, pair: str, source: str) -> dict | None:
        """The latest finished unplanned failover of `pair` away from `source`, whose stranded
        records no failback has settled yet."""
        for row in self.failovers(limit=1000):
            if row["pair"] != pair:
                continue
            if row["kind"] == "failback" and row["source"] == source and row["state"] == "done":
                return None         # settled since
            if row["kind"] == "unplanned" and row["source"] == source and row["state"] == "done":
                return row
        return None

    def drill_started(self, *, pair: str, region: str, mode: str, run_id: str) -> int:
        row = {"pair": pair, "region": region, "mode": mode, "run_id": run_id, "state": "running",
               "started_at": time.time()}
        return self._write(lambda: self.db["drills"].insert(row).last_pk)

    def drill_finished(self, drill_id: int, *, summary: dict, **fields: Any) -> None:
        fields = {**fields, "summary": json.dumps(summary), "finished_at": time.time()}
        self._write(lambda: self.db["drills"].update(drill_id, fields))

    def drills(self, limit: int = 50) -> list[dict]:
        def read() -> list[dict]:
            rows = [dict(r) for r in self.db["drills"].rows_where(order_by="id desc", limit=limit)]
            for row in rows:
                row["summary"] = json.loads(row["summary"] or "{}")
            return rows
        return self._write(read)

    def failovers(self, limit: int = 50) -> list[dict]:
        return self._write(lambda: [_decoded(r) for r in self.db["failovers"].rows_where(
            order_by="id desc", limit=limit)])


def _decoded(row: dict) -> dict:
    row = dict(row)
    row["context"] = json.loads(row["context"] or "{}")
    return row
