"""The records a memory holds: every valid record, kept as the bytes received.

A record is stored once (by a digest of its bytes) and indexed by (origin, seq),
(origin, target) and target.  Rules applied when a record is put:

- the same bytes again: a duplicate, nothing changes;
- another record with the same (origin, seq): a *fork*, which only the origin's key
  can make.  The first one is kept; the other is kept as evidence against the origin
  in ``forks`` and changes nothing else;
- a lesson from an origin that already has a lesson with that hash: the version with
  the higher ``seq`` (or, without seq, the later ``updated``) is current and the other
  is marked superseded.  Superseded records are kept: they fill the origin's seq
  history, so anti-entropy never sees a gap that is not there.

These functions run inside the caller's write transaction.
"""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from neverest.clock import iso
from neverest.records import Record

PutOutcome = Literal["new", "duplicate", "fork", "older"]
OWN_SOURCE: Final = "local"


def digest_of(raw: bytes) -> str:
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def signed_time(record: Record) -> str:
    """The time the origin signed into the record: a lesson's ``updated``, else ``at``."""
    return str(record.fields["updated"] if record.type == "lesson" else record.fields["at"])


@dataclass(frozen=True)
class Held:
    """A stored record's row, without re-verifying it (it was verified when stored)."""

    id: int
    origin: str
    seq: int | None
    type: str
    target: str
    at: str
    source: str
    received: str
    superseded: bool
    raw: bytes


_HELD_COLUMNS: Final = "id, origin, seq, type, target, at, source, received, superseded, raw"


def _held(row: tuple[Any, ...]) -> Held:
    return Held(id=row[0], origin=row[1], seq=row[2], type=row[3], target=row[4], at=row[5], source=row[6],
                received=row[7], superseded=bool(row[8]), raw=bytes(row[9]))


def _newer(record: Record, seq: int | None, at: str) -> bool:
    """Whether ``record`` is a newer version than a held one with ``seq`` and ``at``."""
    if record.seq is not None and seq is not None:
        return record.seq > seq
    return signed_time(record) > at


def put(db: sqlite3.Connection, record: Record, *, source: str, now: datetime) -> PutOutcome:
    digest = digest_of(record.raw)
    superseded = 0
    outcome: PutOutcome = "new"
    if record.type == "lesson":
        current = db.execute(
            "SELECT id, seq, at, digest FROM records WHERE origin = ? AND target = ? AND type = 'lesson' "
            "AND superseded = 0", (record.origin, record.target)).fetchone()
        if current is not None and current[3] != digest:
            if _newer(record, current[1], current[2]):
                superseded = -current[0]  # mark the held one superseded once this one is in
            else:
                superseded, outcome = 1, "older"
    # The unique indexes on digest and on (origin, seq) decide duplicates and forks in
    # the same statement that stores the record: one round trip in the common case.
    inserted = db.execute(
        "INSERT INTO records (origin, seq, type, target, raw, source, received, at, digest, superseded) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        (record.origin, record.seq, record.type, record.target, record.raw, source, iso(now), signed_time(record),
         digest, max(superseded, 0)),
    ).rowcount
    if not inserted:
        if db.execute("SELECT 1 FROM records WHERE digest = ?", (digest,)).fetchone():
            return "duplicate"
        kept = db.execute("SELECT digest FROM records WHERE origin = ? AND seq = ?",
                          (record.origin, record.seq)).fetchone()
        db.execute("INSERT OR IGNORE INTO forks (origin, seq, kept_digest, other_raw, source, received) "
                   "VALUES (?, ?, ?, ?, ?, ?)", (record.origin, record.seq, kept[0], record.raw, source, iso(now)))
        return "fork"
    if superseded < 0:
        db.execute("UPDATE records SET superseded = 1 WHERE id = ?", (-superseded,))
    return outcome


def about(db: sqlite3.Connection, target: str) -> list[Held]:
    """Every record about one lesson hash (lessons, confirmations, revocations), oldest first."""
    return [_held(r) for r in db.execute(
        f"SELECT {_HELD_COLUMNS} FROM records WHERE target = ? ORDER BY at, id", (target,))]


def of_origin(db: sqlite3.Connection, origin: str, *, current_only: bool = True) -> list[Held]:
    """One origin's records in seq order (records without seq last, by time)."""
    sql = f"SELECT {_HELD_COLUMNS} FROM records WHERE origin = ?"
    if current_only:
        sql += " AND superseded = 0"
    sql += " ORDER BY seq IS NULL, seq, at, id"
    return [_held(r) for r in db.execute(sql, (origin,))]


def count_refusal(db: sqlite3.Connection, source: str, reason: str, now: datetime, n: int = 1) -> None:
    db.execute("INSERT INTO refusals (source, reason, count, last) VALUES (?, ?, ?, ?) "
               "ON CONFLICT(source, reason) DO UPDATE SET count = count + excluded.count, last = excluded.last",
               (source, reason, n, iso(now)))


def tombstone(db: sqlite3.Connection, target: str) -> str | None:
    row = db.execute("SELECT state FROM tombstones WHERE hash = ?", (target,)).fetchone()
    return None if row is None else str(row[0])


def bury(db: sqlite3.Connection, target: str, state: str, now: datetime) -> None:
    db.execute("INSERT OR IGNORE INTO tombstones (hash, state, at) VALUES (?, ?, ?)", (target, state, iso(now)))
