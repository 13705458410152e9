"""The ``sleeps`` table (one row per night, with its report as JSON) and ``aliases`` (what merges left)."""

from __future__ import annotations

import sqlite3
from typing import NamedTuple


def begin(db: sqlite3.Connection, started: str) -> int:
    return int(db.execute("INSERT INTO sleeps (started) VALUES (?)", (started,)).lastrowid or 0)


def finish(db: sqlite3.Connection, sleep_id: int, finished: str, report_json: str) -> None:
    db.execute("UPDATE sleeps SET finished = ?, report = ? WHERE id = ?", (finished, report_json, sleep_id))


class Finished(NamedTuple):
    started: str
    finished: str
    report: str  # JSON


def last_finished(db: sqlite3.Connection) -> Finished | None:
    """The last sleep that finished, if any."""
    row = db.execute("SELECT started, finished, report FROM sleeps WHERE finished IS NOT NULL "
                     "ORDER BY id DESC LIMIT 1").fetchone()
    return None if row is None else Finished(*row)


def alias(db: sqlite3.Connection, old: int, new: int, at: str, created: str) -> None:
    db.execute("INSERT INTO aliases (old, new, at, created) VALUES (?, ?, ?, ?)", (old, new, at, created))
