"""The hook's reads and writes: lessons to choose from, sessions held out, lessons injected.

Tables (schema version 4, ``memory/store.py``):

- ``hook_sessions(session, held_out, cwd, first)``: a session the hook saw, and whether it is held out;
- ``injections(session, lesson, event, at, held_out)``: a lesson hash given to a session (held_out 0), or
  withheld from a held-out session (held_out 1), once per (session, lesson);
- ``lesson_states(hash, state, support, judged)``: the commons state last judged for the hook;
- ``meta`` keys ``hook_pending:<session>``: lessons a Stop hook chose (and logged) for a session, to be
  given with its next prompt (Claude Code adds no context from a Stop hook).

This module imports nothing but the standard library: the hook runs on every prompt and tool call.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import NamedTuple


class Candidate(NamedTuple):
    """One unarchived lesson row.  Several rows can share a hash (this memory's own and copies received)."""

    hash: str
    kind: str
    text: str
    cwd: str
    strength: float
    origin: str  # '' for this memory's own lesson
    space: str
    embedding: bytes | None


def candidates(db: sqlite3.Connection, *, kind: str | None = None) -> list[Candidate]:
    """The unarchived lessons (of ``kind`` when given), strongest first."""
    sql = ("SELECT hash, kind, text, cwd, strength, origin, COALESCE(space, ''), embedding FROM lessons "
           "WHERE archived = 0")
    params: tuple[str, ...] = ()
    if kind is not None:
        sql += " AND kind = ?"
        params = (kind,)
    rows = db.execute(sql + " ORDER BY strength DESC, id", params).fetchall()
    return [Candidate(str(r[0]), str(r[1]), str(r[2]), str(r[3]), float(r[4]), str(r[5]), str(r[6]),
                      None if r[7] is None else bytes(r[7])) for r in rows]


def published(db: sqlite3.Connection, hashes: Iterable[str]) -> set[str]:
    """The hashes among ``hashes`` that some record is about (a lesson without one is local)."""
    found: set[str] = set()
    for digest in set(hashes):
        if db.execute("SELECT 1 FROM records WHERE target = ? LIMIT 1", (digest,)).fetchone():
            found.add(digest)
    return found


def other_origins(db: sqlite3.Connection, digest: str) -> int:
    """How many other memories hold the lesson: origins of received copies and of records about it."""
    row = db.execute(
        "SELECT count(DISTINCT origin) FROM (SELECT origin FROM lessons WHERE hash = :h AND origin != '' "
        "UNION SELECT origin FROM records WHERE target = :h AND type IN ('lesson', 'confirm'))",
        {"h": digest}).fetchone()
    return int(row[0])


def cached_states(db: sqlite3.Connection, hashes: Iterable[str], *, since: str) -> dict[str, tuple[str, int]]:
    """The states judged at or after ``since`` for ``hashes``: hash -> (state, support)."""
    out: dict[str, tuple[str, int]] = {}
    for digest in set(hashes):
        row = db.execute("SELECT state, support FROM lesson_states WHERE hash = ? AND judged >= ?",
                         (digest, since)).fetchone()
        if row is not None:
            out[digest] = (str(row[0]), int(row[1]))
    return out


def save_states(db: sqlite3.Connection, states: dict[str, tuple[str, int]], judged: str) -> None:
    db.executemany(
        "INSERT INTO lesson_states (hash, state, support, judged) VALUES (?, ?, ?, ?) ON CONFLICT(hash) DO UPDATE "
        "SET state = excluded.state, support = excluded.support, judged = excluded.judged",
        [(digest, state, support, judged) for digest, (state, support) in states.items()])


def session_held_out(db: sqlite3.Connection, session: str) -> bool | None:
    """Whether ``session`` was recorded as held out; None when the hook has not seen it."""
    row = db.execute("SELECT held_out FROM hook_sessions WHERE session = ?", (session,)).fetchone()
    return None if row is None else bool(row[0])


def add_session(db: sqlite3.Connection, session: str, *, held_out: bool, cwd: str, at: str) -> None:
    db.execute("INSERT OR IGNORE INTO hook_sessions (session, held_out, cwd, first) VALUES (?, ?, ?, ?)",
               (session, int(held_out), cwd, at))


def already_given(db: sqlite3.Connection, session: str) -> set[str]:
    """The lesson hashes injected into (or withheld from) ``session`` so far."""
    return {str(r[0]) for r in db.execute("SELECT lesson FROM injections WHERE session = ?", (session,))}


def log(db: sqlite3.Connection, session: str, lessons: Sequence[str], *, event: str, at: str,
        held_out: bool) -> list[str]:
    """Record ``lessons`` as given to (or withheld from) ``session``; returns those not recorded before."""
    new: list[str] = []
    for digest in lessons:
        cursor = db.execute("INSERT OR IGNORE INTO injections (session, lesson, event, at, held_out) "
                            "VALUES (?, ?, ?, ?, ?)", (session, digest, event, at, int(held_out)))
        if cursor.rowcount:
            new.append(digest)
    return new


_PENDING: str = "hook_pending:"
_PENDING_END: str = "hook_pending;"  # the first key after every "hook_pending:..." one


def pending(db: sqlite3.Connection, session: str) -> list[str]:
    """The lesson hashes kept for ``session``'s next prompt, in order."""
    row = db.execute("SELECT value FROM meta WHERE key = ?", (_PENDING + session,)).fetchone()
    if row is None:
        return []
    try:
        lessons = json.loads(row[0]).get("lessons", [])
    except (ValueError, AttributeError):
        return []
    return [str(h) for h in lessons] if isinstance(lessons, list) else []


def set_pending(db: sqlite3.Connection, session: str, lessons: Sequence[str], *, at: str, stale_before: str) -> None:
    """Keep ``lessons`` for ``session``'s next prompt ([] clears); what was kept for sessions that never sent
    another prompt is dropped once older than ``stale_before``.  Inside a write transaction."""
    db.execute("DELETE FROM meta WHERE key >= ? AND key < ? AND coalesce(json_extract(value, '$.at'), '') < ?",
               (_PENDING, _PENDING_END, stale_before))
    if lessons:
        db.execute("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                   (_PENDING + session, json.dumps({"at": at, "lessons": list(lessons)})))
    else:
        db.execute("DELETE FROM meta WHERE key = ?", (_PENDING + session,))


class Injection(NamedTuple):
    session: str
    lesson: str
    event: str
    at: str
    held_out: bool


def injections(db: sqlite3.Connection, *, session: str | None = None) -> list[Injection]:
    """Every logged injection (of ``session`` when given), oldest first: what ``measure`` compares."""
    sql = "SELECT session, lesson, event, at, held_out FROM injections"
    params: tuple[str, ...] = ()
    if session is not None:
        sql += " WHERE session = ?"
        params = (session,)
    return [Injection(str(r[0]), str(r[1]), str(r[2]), str(r[3]), bool(r[4]))
            for r in db.execute(sql + " ORDER BY at, session, lesson", params)]


class HookSession(NamedTuple):
    session: str
    held_out: bool
    cwd: str
    first: str


def sessions(db: sqlite3.Connection) -> list[HookSession]:
    """Every session the hook saw, with whether it was held out, oldest first."""
    return [HookSession(str(r[0]), bool(r[1]), str(r[2]), str(r[3]))
            for r in db.execute("SELECT session, held_out, cwd, first FROM hook_sessions ORDER BY first, session")]


def holdout_summary(db: sqlite3.Connection, *, recent: int = 5) -> dict[str, object]:
    """Sessions the hook saw and how many were held out, with the most recent held-out ones (what
    ``neverestctl status`` shows)."""
    seen, held = db.execute("SELECT count(*), coalesce(sum(held_out), 0) FROM hook_sessions").fetchone()
    rows = db.execute("SELECT s.session, s.first, s.cwd, "
                      "(SELECT count(*) FROM injections i WHERE i.session = s.session) FROM hook_sessions s "
                      "WHERE s.held_out = 1 ORDER BY s.first DESC, s.session LIMIT ?",
                      (recent,)).fetchall()
    return {"sessions": int(seen), "held_out": int(held),
            "recent_held_out": [{"session": str(r[0]), "first": str(r[1]), "cwd": str(r[2]), "withheld": int(r[3])}
                                for r in rows]}
