"""The ``projects`` table: the projects whose lessons the owner chose to publish."""

from __future__ import annotations

import sqlite3
from typing import NamedTuple


class Project(NamedTuple):
    path: str
    corrections: bool  # corrections (lessons about the person) are published too
    since: str


def opt_in(db: sqlite3.Connection, path: str, corrections: bool, now: str) -> None:
    db.execute("INSERT INTO projects (path, corrections, since) VALUES (?, ?, ?) ON CONFLICT(path) DO UPDATE "
               "SET corrections = excluded.corrections", (path, int(corrections), now))


def opt_out(db: sqlite3.Connection, path: str) -> bool:
    return int(db.execute("DELETE FROM projects WHERE path = ?", (path,)).rowcount) > 0


def listing(db: sqlite3.Connection) -> list[Project]:
    return [Project(str(p), bool(c), str(s)) for p, c, s in db.execute(
        "SELECT path, corrections, since FROM projects ORDER BY path")]
