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

# No `from __future__ import annotations`: typing.NamedTuple would compile a ForwardRef for each field
# spelled as a string, at every command's start (the rows below).
import sqlite3
from collections.abc import Collection, Generator, Sequence
from datetime import datetime
from typing import Any, Final, Literal, NamedTuple

from neverest.clock import iso
from neverest.hashes import blake2b
from neverest.records import Record

PutOutcome = Literal["new", "duplicate", "fork", "older"]
OWN_SOURCE: Final = "local"
# Refusal codes of the receive function's refutation rules, kept here with the refusals they are counted in
# (``receive`` applies them; a status reads them without loading the receive function).
REFUTE_PUBLISHER: Final = "refute-publisher"  # an origin refuting a lesson it published itself
REFUTE_FLOOD: Final = "refute-flood"  # an origin past refute_origin_max refutations held here


def digest_of(raw: bytes) -> str:
    return blake2b(raw, digest_size=16).hexdigest()


def signed_time(record: Record) -> str:
    """The time the origin signed into the record: a lesson's ``updated``, else ``at``."""
    return str(record.fields["updated"] if record.type == "lesson" else record.fields["at"])


class Held(NamedTuple):
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


class Usage:
    """Bytes and records stored by (origin, delivering peer), to add to ``received_usage`` (schema
    v5, v6) in one statement per pair: ``put`` adds each record it stores here, and the caller
    ``write``s it before its transaction ends, so that the next batch's budget reads exact sums."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str], list[Any]] = {}  # (origin, peer) -> [bytes, records, last]

    def add(self, origin: str, source: str, size: int, received: str) -> None:
        # Every folder file counts as the one peer "folder" (admission.peer_of says why).
        peer = "folder" if source.startswith("folder:") else source
        row = self._rows.get((origin, peer))
        if row is None:
            self._rows[origin, peer] = [size, 1, received]
        else:
            row[0] += size
            row[1] += 1
            row[2] = max(row[2], received)

    def write(self, db: sqlite3.Connection) -> None:
        if self._rows:
            db.executemany(
                "INSERT INTO received_usage (origin, peer, bytes, records, last) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT(origin, peer) DO UPDATE SET bytes = bytes + excluded.bytes, "
                "records = records + excluded.records, last = max(last, excluded.last)",
                [(o, p, size, n, last) for (o, p), (size, n, last) in self._rows.items()])
            self._rows = {}


def unknown_targets(db: sqlite3.Connection, targets: Collection[str]) -> set[str]:
    """The lesson hashes among ``targets`` that nothing here is about yet: no record has them as its
    target, no lesson has them, no tombstone buries them (three queries for a whole batch)."""
    out = set(targets)
    items = list(out)
    for k in range(0, len(items), 500):
        part = items[k:k + 500]
        marks = ",".join("?" * len(part))
        for sql in (f"SELECT DISTINCT target FROM records WHERE target IN ({marks})",
                    f"SELECT DISTINCT hash FROM lessons WHERE hash IN ({marks})",
                    f"SELECT hash FROM tombstones WHERE hash IN ({marks})"):
            out.difference_update(str(r[0]) for r in db.execute(sql, part))
    return out


def put(db: sqlite3.Connection, record: Record, *, source: str, now: datetime, usage: Usage | None = None,
        unknown: bool = False, digest: str | None = None) -> PutOutcome:
    """Store a verified record (the module docstring's rules).  The bytes it adds to ``received_usage``
    go to ``usage`` when one is given (the caller writes it before committing), else at once.
    ``unknown``: the caller knows that nothing here is about the record's target yet
    (``unknown_targets``, and nothing with that target stored since), so no held version is looked for.
    ``digest``: ``digest_of(record.raw)``, when the caller has it already."""
    if digest is None:
        digest = digest_of(record.raw)
    superseded = 0
    outcome: PutOutcome = "new"
    if record.type == "lesson" and not unknown:
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
    received = iso(now)
    inserted = db.execute(
        "INSERT INTO records (origin, seq, type, target, raw, source, received, at, digest, superseded) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        (record.origin, record.seq, record.type, record.target, record.raw, source, received, signed_time(record),
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
    if usage is None:
        usage = Usage()
        usage.add(record.origin, source, len(record.raw), received)
        usage.write(db)
    else:
        usage.add(record.origin, source, len(record.raw), received)
    return outcome


def about(db: sqlite3.Connection, target: str) -> list[Held]:
    """Every record about one lesson hash (lessons, confirmations, revocations, refutations), oldest first."""
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


class Refusal:
    """Records refused from one source for one reason: how many, and when last.  A plain class (a named
    tuple's ``count`` method would clash with the field; ``dataclasses`` costs the read commands ~9 ms)."""

    __slots__ = ("count", "last", "reason", "source")

    def __init__(self, source: str, reason: str, count: int, last: str) -> None:
        self.source = source
        self.reason = reason
        self.count = count
        self.last = last

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "reason": self.reason, "count": self.count, "last": self.last}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Refusal):
            return NotImplemented
        return self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Refusal({self.source!r}, {self.reason!r}, {self.count!r}, {self.last!r})"


def refusals(db: sqlite3.Connection) -> list[Refusal]:
    """What was refused, by source and reason."""
    return [Refusal(*r) for r in db.execute("SELECT source, reason, count, last FROM refusals ORDER BY source, reason")]


def newest_signed_by_others(db: sqlite3.Connection, own_origin: str) -> str | None:
    """The latest signed time of a record held from another origin (for the doctor's clock check)."""
    row = db.execute("SELECT max(at) FROM records WHERE origin != ? AND at != ''", (own_origin,)).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def holds(db: sqlite3.Connection, digest: str) -> bool:
    """Whether a record with these bytes (by ``digest_of``) is held."""
    return db.execute("SELECT 1 FROM records WHERE digest = ?", (digest,)).fetchone() is not None


def held_among(db: sqlite3.Connection, digests: Sequence[str]) -> set[str]:
    """Which of ``digests`` (by ``digest_of``) are held: one query for a batch of lines."""
    if not digests:
        return set()
    marks = ",".join("?" * len(digests))
    return {str(r[0]) for r in db.execute(f"SELECT digest FROM records WHERE digest IN ({marks})", digests)}


def digests(db: sqlite3.Connection) -> list[str]:
    """The digest of every record held."""
    return [str(r[0]) for r in db.execute("SELECT digest FROM records")]


def confirmers(db: sqlite3.Connection, target: str) -> list[str]:
    """The origins that confirmed lesson ``target``."""
    return [str(r[0]) for r in db.execute(
        "SELECT DISTINCT origin FROM records WHERE type = 'confirm' AND target = ?", (target,))]


def current_lesson_raw(db: sqlite3.Connection, origin: str, target: str) -> bytes | None:
    """The bytes of ``origin``'s current (not superseded) lesson record for ``target``."""
    row = db.execute("SELECT raw FROM records WHERE origin = ? AND target = ? AND type = 'lesson' "
                     "AND superseded = 0", (origin, target)).fetchone()
    return None if row is None else bytes(row[0])


def published_by(db: sqlite3.Connection, origin: str, target: str) -> bool:
    """Whether ``origin`` published a lesson record of ``target`` (any version) held here."""
    return db.execute("SELECT 1 FROM records WHERE origin = ? AND target = ? AND type = 'lesson'",
                      (origin, target)).fetchone() is not None


def refuted_by(db: sqlite3.Connection, origin: str, target: str) -> bool:
    """Whether ``origin`` signed a refutation of ``target`` held here."""
    return db.execute("SELECT 1 FROM records WHERE origin = ? AND target = ? AND type = 'refute'",
                      (origin, target)).fetchone() is not None


def refuters(db: sqlite3.Connection, target: str) -> list[str]:
    """The origins that refuted lesson ``target``, sorted."""
    return [str(r[0]) for r in db.execute(
        "SELECT DISTINCT origin FROM records WHERE type = 'refute' AND target = ? ORDER BY origin", (target,))]


def refute_counts(db: sqlite3.Connection, origins: Collection[str]) -> dict[str, int]:
    """How many refutations each of ``origins`` has held here (origins holding none are left out)."""
    out: dict[str, int] = {}
    items = list(set(origins))
    for k in range(0, len(items), 500):
        part = items[k:k + 500]
        marks = ",".join("?" * len(part))
        out.update((str(o), int(n)) for o, n in db.execute(
            f"SELECT origin, count(*) FROM records WHERE type = 'refute' AND origin IN ({marks}) GROUP BY origin",
            part))
    return out


def signed_about(db: sqlite3.Connection, origin: str, target: str) -> bool:
    """Whether ``origin`` signed a lesson or a confirmation of ``target``."""
    return db.execute("SELECT 1 FROM records WHERE origin = ? AND target = ? AND type IN ('lesson', 'confirm')",
                      (origin, target)).fetchone() is not None


def max_seq(db: sqlite3.Connection, origin: str) -> int:
    """The highest seq held for ``origin`` (0 when none)."""
    return int(db.execute("SELECT max(seq) FROM records WHERE origin = ?", (origin,)).fetchone()[0] or 0)


def unburied_targets(db: sqlite3.Connection) -> list[str]:
    """Every lesson hash records name that has no tombstone."""
    return [str(r[0]) for r in db.execute(
        "SELECT DISTINCT target FROM records WHERE target NOT IN (SELECT hash FROM tombstones)")]


def supporters(db: sqlite3.Connection) -> list[tuple[str, str]]:
    """Distinct (origin, target) of lessons and confirmations held."""
    return [(str(o), str(t)) for o, t in db.execute(
        "SELECT DISTINCT origin, target FROM records WHERE type IN ('lesson', 'confirm')")]


def claims(db: sqlite3.Connection) -> list[tuple[str, str, str, str, str]]:
    """(type, origin, target, signed time, time first held here) of every lesson, confirmation and
    refutation held: the evidence of the trust policy ``earned`` (commons.Evidence)."""
    return [(str(t), str(o), str(g), str(a), str(r)) for t, o, g, a, r in db.execute(
        "SELECT type, origin, target, at, received FROM records WHERE type IN ('lesson', 'confirm', 'refute')")]


# -- what gossip reads (gossip/view.py) -------------------------------------------------


class Head(NamedTuple):
    """An origin's highest seq held, the digest of that record's bytes and its row id."""

    origin: str
    seq: int
    digest: str | None  # None for a row stored before the digest column existed (schema v1)
    id: int


def heads(db: sqlite3.Connection) -> list[Head]:
    # With exactly one max(), SQLite takes the bare columns from the row holding the max.
    return [Head(str(o), int(s), d, int(i)) for o, s, d, i in db.execute(
        "SELECT origin, MAX(seq), digest, id FROM records WHERE seq IS NOT NULL GROUP BY origin")]


def raw_of(db: sqlite3.Connection, record_id: int) -> bytes:
    return bytes(db.execute("SELECT raw FROM records WHERE id = ?", (record_id,)).fetchone()[0])


def fork_evidence(db: sqlite3.Connection) -> list[tuple[str, int, bytes]]:
    """(origin, seq, other record's bytes) of every fork held."""
    return [(str(o), int(s), bytes(r)) for o, s, r in db.execute("SELECT origin, seq, other_raw FROM forks")]


def known_at(db: sqlite3.Connection, origin: str, seq: int) -> list[bytes]:
    """The record held at (origin, seq), then any fork evidence for it, oldest first."""
    kept = [bytes(r[0]) for r in db.execute("SELECT raw FROM records WHERE origin = ? AND seq = ?", (origin, seq))]
    return kept + [bytes(r[0]) for r in db.execute(
        "SELECT other_raw FROM forks WHERE origin = ? AND seq = ? ORDER BY received", (origin, seq))]


def run_after(db: sqlite3.Connection, origin: str, after: int) -> Generator[tuple[int, bytes], None, None]:
    """(seq, bytes) of ``origin``'s records after ``after``, in seq order, read lazily: a reader
    that stops early stops the read."""
    cursor = db.execute("SELECT seq, raw FROM records WHERE origin = ? AND seq > ? ORDER BY seq", (origin, after))
    try:
        for seq, raw in cursor:
            yield int(seq), bytes(raw)
    finally:
        cursor.close()


def count(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT count(*) FROM records").fetchone()[0])
