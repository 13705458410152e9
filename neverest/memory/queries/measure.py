"""What ``neverestctl measure`` reads: corrections and errors with their vectors, the lessons'
vectors with when each was made, resolved predictions, and (when the hooks have made the table)
which sessions got lessons injected and which were held out."""

from __future__ import annotations

import sqlite3
from typing import NamedTuple


class Said(NamedTuple):
    id: str
    session: str
    at: str
    gist: str
    space: str | None
    embedding: bytes | None


def episodes_of(db: sqlite3.Connection, kind: str) -> list[Said]:
    """Every episode of ``kind`` (archived ones too: they happened), oldest first."""
    return [Said(*r) for r in db.execute(
        "SELECT id, session, at, gist, space, embedding FROM episodes WHERE kind = ? ORDER BY at, id", (kind,))]


class LessonVector(NamedTuple):
    created: str
    space: str
    vector: bytes  # the centroid of its sources, else its sentence's vector


def lesson_vectors(db: sqlite3.Connection) -> list[LessonVector]:
    """Every lesson ever held (archived too), with the vector an episode joins it by."""
    return [LessonVector(*r) for r in db.execute(
        "SELECT created, space, COALESCE(centroid, embedding) FROM lessons WHERE space IS NOT NULL "
        "AND COALESCE(centroid, embedding) IS NOT NULL")]


def resolved_predictions(db: sqlite3.Connection, since: str) -> list[tuple[str, str]]:
    """(resolved, outcome) of the predictions resolved confirmed, failed or refuted since ``since``."""
    return [(str(r[0]), str(r[1])) for r in db.execute(
        "SELECT resolved, outcome FROM predictions WHERE resolved >= ? "
        "AND outcome IN ('confirmed', 'failed', 'refuted')",
        (since,))]


def injection_sessions(db: sqlite3.Connection) -> tuple[set[str], set[str]] | None:
    """(sessions the hook gave lessons to, sessions it held out), from the hook's ``hook_sessions`` log;
    None when no session was seen by the hook yet (nothing to compare)."""
    injected: set[str] = set()
    held_out: set[str] = set()
    for session, held in db.execute("SELECT session, held_out FROM hook_sessions"):
        (held_out if held else injected).add(str(session))
    if not injected and not held_out:
        return None
    return injected, held_out
