"""The ``episodes`` table: events as stored, and what recall, sleep and forget read and write."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any, Final, NamedTuple

_INSERT: Final = (
    "INSERT OR IGNORE INTO episodes (id, kind, agent, session, cwd, title, said, agent_did, expected,"
    " happened, text, worked, reaction, gist, at, created, strength, pending, space, embedding)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1.0, 1, ?, ?)"
)
# An error first stored without what worked learns it when the fix is read later in the session
# (the same event again, with ``worked``): the one field an event sent again may fill in.
_FILL_WORKED: Final = "UPDATE episodes SET worked = ? WHERE id = ? AND worked = ''"
EXPORTED: Final = ("id", "kind", "agent", "session", "cwd", "title", "said", "agent_did", "expected", "happened",
                   "text", "worked", "reaction", "gist", "at", "created", "strength", "recalls", "last_touched",
                   "archived", "pending", "lesson_id")


class NewEpisode(NamedTuple):
    id: str
    kind: str
    agent: str
    session: str
    cwd: str
    title: str
    said: str
    agent_did: str
    expected: str
    happened: str
    text: str
    worked: str
    reaction: str
    gist: str
    at: str
    created: str
    space: str | None
    embedding: bytes | None


def insert(db: sqlite3.Connection, episodes: Sequence[NewEpisode]) -> int:
    """Insert inside a write transaction; an id already stored is ignored (but for an empty
    ``worked``, which it fills in).  The number inserted."""
    inserted = db.executemany(_INSERT, [
        (e.id, e.kind, e.agent, e.session, e.cwd, e.title, e.said, e.agent_did, e.expected, e.happened, e.text,
         e.worked, e.reaction, e.gist, e.at, e.created, e.space, e.embedding) for e in episodes]).rowcount
    fills = [(e.worked, e.id) for e in episodes if e.worked]
    if fills:
        db.executemany(_FILL_WORKED, fills)
    return inserted


def count(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT count(*) FROM episodes").fetchone()[0])


def exists(db: sqlite3.Connection, episode_id: str) -> bool:
    return db.execute("SELECT 1 FROM episodes WHERE id = ?", (episode_id,)).fetchone() is not None


# -- recall ---------------------------------------------------------------------------


class Scored(NamedTuple):
    """Recall's narrow view of many rows, by column (one tuple per column, not an object per row:
    recall scans every row on every query, and 10 000 row objects cost more than the scoring)."""

    keys: list[int | str]  # an episode's rowid, a lesson's id
    strengths: list[float]
    age_days: list[float]
    embeddings: list[bytes]

    @classmethod
    def of(cls, rows: list[tuple[int | str, float, float, bytes]]) -> Scored:
        return cls([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows])


def recall_scan(db: sqlite3.Connection, now: str, space: str) -> Scored:
    # Ages in days are computed by SQLite (julianday), far faster than parsing 10 000 strings in Python;
    # the columns read are those of the covering index episodes_recall.
    return Scored.of(db.execute(
        "SELECT rowid, strength, max(julianday(?) - julianday(at), 0), embedding FROM episodes "
        "WHERE archived = 0 AND space = ? AND embedding IS NOT NULL", (now, space)).fetchall())


def any_unembedded(db: sqlite3.Connection) -> bool:
    """Whether an episode was stored without a vector (an index look-up: recall asks on every query)."""
    return db.execute("SELECT 1 FROM episodes WHERE space IS NULL LIMIT 1").fetchone() is not None


class Shown(NamedTuple):
    id: str
    kind: str
    gist: str
    at: str


def shown(db: sqlite3.Connection, rowid: int | str) -> Shown:
    return Shown(*db.execute("SELECT id, kind, gist, at FROM episodes WHERE rowid = ?", (rowid,)).fetchone())


def touch(db: sqlite3.Connection, ids: Sequence[str], step: float, now: str) -> None:
    """Recalled episodes are used: stronger, and counted."""
    db.executemany("UPDATE episodes SET strength = strength + ?, recalls = recalls + 1, last_touched = ? "
                   "WHERE id = ?", [(step, now, i) for i in ids])


# -- sleep ----------------------------------------------------------------------------


def decay(db: sqlite3.Connection, factor: float, archive_below: float) -> int:
    """Scale unarchived strengths by ``factor``; archive those now below the line.  How many were archived."""
    db.execute("UPDATE episodes SET strength = strength * ? WHERE archived = 0", (factor,))
    return int(db.execute("UPDATE episodes SET archived = 1 WHERE archived = 0 AND strength < ?",
                          (archive_below,)).rowcount)


class Pending(NamedTuple):
    id: str
    kind: str
    embedding: bytes
    title: str
    said: str
    expected: str
    happened: str
    text: str
    cwd: str
    agent_did: str
    worked: str
    reaction: str


def pending(db: sqlite3.Connection, space: str, limit: int) -> list[Pending]:
    """Episodes the consolidation pass has not considered yet, oldest first."""
    return [Pending(*r) for r in db.execute(
        "SELECT id, kind, embedding, title, said, expected, happened, text, cwd, agent_did, worked, reaction"
        " FROM episodes "
        "WHERE pending = 1 AND space = ? ORDER BY at, id LIMIT ?", (space, limit))]


def phrasing_rows(db: sqlite3.Connection, episode_ids: Sequence[str]) -> list[Pending]:
    """The episodes ``episode_ids`` with what phrasing reads (a lesson's sentence is written from
    the one of its sources that says the most: the one that knows what worked)."""
    if not episode_ids:
        return []
    marks = ",".join("?" * len(episode_ids))
    return [Pending(*r) for r in db.execute(
        "SELECT id, kind, embedding, title, said, expected, happened, text, cwd, agent_did, worked, reaction"
        f" FROM episodes WHERE id IN ({marks}) ORDER BY at DESC, id", list(episode_ids))]


class Vectored(NamedTuple):
    id: str
    kind: str
    embedding: bytes


def waiting(db: sqlite3.Connection, space: str, kinds: Sequence[str]) -> list[Vectored]:
    """Episodes already considered that still wait for a repeat to become a lesson."""
    return [Vectored(*r) for r in db.execute(
        "SELECT id, kind, embedding FROM episodes WHERE pending = 0 AND lesson_id IS NULL AND archived = 0 "
        f"AND kind IN ({','.join('?' * len(kinds))}) AND space = ?", (*kinds, space))]


def considered(db: sqlite3.Connection, episode_ids: Sequence[str]) -> None:
    db.executemany("UPDATE episodes SET pending = 0 WHERE id = ?", [(i,) for i in episode_ids])


def assign(db: sqlite3.Connection, lesson_id: int, episode_ids: Sequence[str]) -> None:
    db.executemany("UPDATE episodes SET lesson_id = ? WHERE id = ?", [(lesson_id, i) for i in episode_ids])


def reassign(db: sqlite3.Connection, old_lesson: int, new_lesson: int) -> None:
    db.execute("UPDATE episodes SET lesson_id = ? WHERE lesson_id = ?", (new_lesson, old_lesson))


def vectors_of(db: sqlite3.Connection, episode_ids: Sequence[str], space: str) -> list[bytes]:
    if not episode_ids:
        return []
    return [bytes(r[0]) for r in db.execute(
        f"SELECT embedding FROM episodes WHERE space = ? AND id IN ({','.join('?' * len(episode_ids))})",
        (space, *episode_ids))]


def happened_since(db: sqlite3.Connection, kind: str, since: str, space: str) -> list[tuple[str, str, bytes]]:
    """(id, at, embedding) of the episodes of ``kind`` after ``since``, in order: what verifies a prediction."""
    return [(str(r[0]), str(r[1]), bytes(r[2])) for r in db.execute(
        "SELECT id, at, embedding FROM episodes WHERE kind = ? AND at > ? AND space = ? ORDER BY at, id",
        (kind, since, space))]


class Surprise(NamedTuple):
    id: str
    at: str
    expected: str
    happened: str


def surprises_after_injection(db: sqlite3.Connection, lesson: str, since: str) -> list[Surprise]:
    """The surprise episodes after ``since`` of the sessions the hook brought lesson hash ``lesson`` into
    (given, or withheld from a held-out session: table ``injections``), each after the lesson was, in
    order: where the verify pass looks for a refutation of it."""
    return [Surprise(str(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in db.execute(
        "SELECT e.id, e.at, e.expected, e.happened FROM episodes e "
        "JOIN injections i ON i.session = e.session AND i.lesson = ? "
        "WHERE e.kind = 'surprise' AND e.session != '' AND e.at > i.at AND e.at > ? ORDER BY e.at, e.id",
        (lesson, since))]


# -- forget and export ----------------------------------------------------------------


def select_ids(db: sqlite3.Connection, *, episode: str | None = None, session: str | None = None,
               before: str | None = None) -> list[str]:
    """The ids of the episodes one selector names: an id, a session, or ``at`` before a time."""
    if episode is not None:
        rows = db.execute("SELECT id FROM episodes WHERE id = ?", (episode,))
    elif session is not None:
        rows = db.execute("SELECT id FROM episodes WHERE session = ?", (session,))
    elif before is not None:
        rows = db.execute("SELECT id FROM episodes WHERE at < ?", (before,))
    else:
        raise ValueError("select_ids needs one of episode, session, before")
    return [str(r[0]) for r in rows]


def delete(db: sqlite3.Connection, episode_ids: Sequence[str]) -> int:
    """Delete the episodes (and with them their vectors, stored in the same row)."""
    return int(db.executemany("DELETE FROM episodes WHERE id = ?", [(i,) for i in episode_ids]).rowcount)


def export_rows(db: sqlite3.Connection) -> Iterator[dict[str, Any]]:
    cursor = db.execute(f"SELECT {', '.join(EXPORTED)} FROM episodes ORDER BY at, id")
    try:
        for row in cursor:
            yield dict(zip(EXPORTED, row, strict=True))
    finally:
        cursor.close()


def vectors(db: sqlite3.Connection, space: str) -> list[tuple[str, str, bytes]]:
    """(id, kind, embedding) of the unarchived episodes with a vector in ``space``."""
    return [(str(r[0]), str(r[1]), bytes(r[2])) for r in db.execute(
        "SELECT id, kind, embedding FROM episodes WHERE archived = 0 AND space = ? AND embedding IS NOT NULL",
        (space,))]


def correction_fields(db: sqlite3.Connection) -> list[tuple[int, str, str, str]]:
    """(lesson id, said, agent_did, reaction) of each source of every unarchived correction lesson of this memory,
    by lesson id (one scan of the correction episodes, as ``error_fields``)."""
    return [(int(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in db.execute(
        "SELECT e.lesson_id, e.said, e.agent_did, e.reaction FROM episodes e JOIN lessons l ON l.id = e.lesson_id "
        "WHERE e.kind = 'correction' AND l.archived = 0 AND l.origin = '' ORDER BY e.lesson_id, e.at, e.id")]


def error_fields(db: sqlite3.Connection) -> list[tuple[str | int, str, str]]:
    """(key, title, happened) of every error episode waiting for a repeat (key: its id) and, for every
    unarchived lesson of this memory learned from errors, of its newest source (key: the lesson's id)."""
    waiting = [(str(r[0]), str(r[1]), str(r[2])) for r in db.execute(
        "SELECT id, title, happened FROM episodes WHERE kind = 'error' AND pending = 0 AND lesson_id IS NULL "
        "AND archived = 0")]
    # One scan of the error episodes in time order (no index on lesson_id: a correlated look-up per row
    # would cost a scan each); the newest source of each lesson wins.
    newest: dict[int, tuple[int, str, str]] = {}
    for r in db.execute(
            "SELECT e.lesson_id, e.title, e.happened FROM episodes e JOIN lessons l ON l.id = e.lesson_id "
            "WHERE e.kind = 'error' AND l.archived = 0 AND l.origin = '' ORDER BY e.at, e.id"):
        newest[int(r[0])] = (int(r[0]), str(r[1]), str(r[2]))
    return [*waiting, *newest.values()]
