"""Counts for status reports (``neverestctl status``, the daemon's status and metrics)."""

# No `from __future__ import annotations`: typing.NamedTuple would compile a ForwardRef for each field
# spelled as a string, at every command's start (the rows below).
import sqlite3
from typing import NamedTuple


class Counts(NamedTuple):
    episodes: int
    lessons: int  # not archived
    records: int
    forks: int
    tombstones: int

    def to_json(self) -> dict[str, int]:
        return self._asdict()


def counts(db: sqlite3.Connection) -> Counts:
    row = db.execute(
        "SELECT (SELECT count(*) FROM episodes), (SELECT count(*) FROM lessons WHERE archived = 0), "
        "(SELECT count(*) FROM records), (SELECT count(*) FROM forks), (SELECT count(*) FROM tombstones)").fetchone()
    return Counts(*(int(n) for n in row))


def refutations(db: sqlite3.Connection) -> int:
    """Refutation records held."""
    return int(db.execute("SELECT count(*) FROM records WHERE type = 'refute'").fetchone()[0])


def known_peer_origins(db: sqlite3.Connection) -> set[str]:
    """Every origin in the peer table (the ``peers`` trust policy counts them).  Belongs with
    peers/table.py; it is here until that module offers it."""
    return {str(r[0]) for r in db.execute("SELECT origin FROM peers")}
