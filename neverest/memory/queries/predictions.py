"""The ``predictions`` table: one open prediction per lesson, resolved confirmed, failed, refuted or merged."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any, Final, NamedTuple


class Open(NamedTuple):
    id: int
    lesson_id: int
    made: str
    embedding: bytes
    kind: str  # the lesson's
    text: str
    hash: str  # the lesson's
    origin: str  # the lesson's: '' for this memory's own, else the origin it was received from


def open_in(db: sqlite3.Connection, space: str) -> list[Open]:
    """Open predictions whose vector is in ``space``, with their lesson's kind, sentence, hash and origin."""
    return [Open(*r) for r in db.execute(
        "SELECT p.id, p.lesson_id, p.made, p.embedding, l.kind, l.text, l.hash, l.origin FROM predictions p "
        "JOIN lessons l ON l.id = p.lesson_id WHERE p.resolved IS NULL AND p.space = ?", (space,))]


def make(db: sqlite3.Connection, lesson_id: int, text: str, made: str, space: str, embedding: bytes) -> None:
    db.execute("INSERT INTO predictions (lesson_id, text, made, space, embedding) VALUES (?, ?, ?, ?, ?)",
               (lesson_id, text, made, space, embedding))


def confirm(db: sqlite3.Connection, prediction_id: int, episode_id: str, now: str) -> None:
    db.execute("UPDATE predictions SET resolved = ?, outcome = 'confirmed', episode_id = ? WHERE id = ?",
               (now, episode_id, prediction_id))


def refute(db: sqlite3.Connection, prediction_id: int, episode_id: str, now: str) -> None:
    """The lesson's situation arose here and it did not hold: ``episode_id`` is the surprise that says so."""
    db.execute("UPDATE predictions SET resolved = ?, outcome = 'refuted', episode_id = ? WHERE id = ?",
               (now, episode_id, prediction_id))


def fail(db: sqlite3.Connection, prediction_id: int, now: str) -> None:
    db.execute("UPDATE predictions SET resolved = ?, outcome = 'failed' WHERE id = ?", (now, prediction_id))


def close_merged(db: sqlite3.Connection, lesson_id: int, now: str) -> None:
    """The lesson was merged into another: its open prediction ends with it."""
    db.execute("UPDATE predictions SET resolved = ?, outcome = 'merged' WHERE lesson_id = ? AND resolved IS NULL",
               (now, lesson_id))


def outcomes_by_hash(db: sqlite3.Connection) -> dict[str, set[str]]:
    """For each lesson hash, the outcomes its resolved predictions had.  A refuted prediction is a
    failure with evidence: it is reported as both ``refuted`` and ``failed``, so that what reads
    failures (the ``vouched`` policy: "failed and never came true") counts it as before."""
    out: dict[str, set[str]] = {}
    for digest, outcome in db.execute(
            "SELECT l.hash, p.outcome FROM predictions p JOIN lessons l ON l.id = p.lesson_id "
            "WHERE p.outcome IS NOT NULL"):
        seen = out.setdefault(str(digest), set())
        seen.add(str(outcome))
        if outcome == "refuted":
            seen.add("failed")
    return out


def own_tests(db: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """(lesson hash, outcome, when resolved) of every resolved prediction: what this memory's own
    sessions showed, the first-hand row of the trust policy ``earned``."""
    return [(str(h), str(o), str(r)) for h, o, r in db.execute(
        "SELECT l.hash, p.outcome, p.resolved FROM predictions p JOIN lessons l ON l.id = p.lesson_id "
        "WHERE p.outcome IS NOT NULL AND p.resolved IS NOT NULL")]


def delete_resolved_by(db: sqlite3.Connection, episode_ids: Sequence[str]) -> int:
    """Delete the predictions these episodes resolved (forget: nothing may point at them)."""
    return int(db.executemany("DELETE FROM predictions WHERE episode_id = ?",
                              [(e,) for e in episode_ids]).rowcount)


EXPORTED: Final = ("id", "lesson_id", "text", "made", "resolved", "outcome", "episode_id")


def export_rows(db: sqlite3.Connection) -> Iterator[dict[str, Any]]:
    cursor = db.execute(f"SELECT {', '.join(EXPORTED)} FROM predictions ORDER BY id")
    try:
        for row in cursor:
            yield dict(zip(EXPORTED, row, strict=True))
    finally:
        cursor.close()
