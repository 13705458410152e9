"""The one receive function, for every transport (folder, gossip, commons).

``receive`` takes raw record lines and where they came from, and for each:

1. verifies it (``records.parse_many``); a refusal is counted by source and reason;
2. refuses a record signed more than ``future_tolerance_s`` after now (``future``);
3. stores it as received (``holdings.put``): duplicates change nothing, forks are kept as
   evidence, an older version of an origin's lesson is stored but superseded;
4. applies it to this memory's lessons (the merge rule, PROTOCOL.md §9):
   - a lesson whose hash is tombstoned changes nothing;
   - a lesson revoked by its origin before it arrived is not applied;
   - a lesson with the hash of a lesson held here, or the same meaning (cosine of its
     sentence with a held lesson's sources ≥ the join threshold, hashed space), from an
     origin not yet counted for it, *corroborates* it: +``confirm_step`` strength, once
     per origin, however many records or equivalent sentences it sends;
   - otherwise it becomes a local *candidate* (strength 0.5, layer ``common``, always
     predicting), raised at once by confirmations already held for it;
   - a confirmation raises the lesson it names once per confirming origin, never for
     the lesson's own publisher; one for an unknown hash is kept and counted when the
     lesson arrives;
   - a revocation by a publisher removes that publisher's lesson here (its row is
     archived and a render drops its file); by anyone else it only counts toward the
     commons state (commons.py).

Everything is committed in batches, so a crash loses at most the batch in progress,
and a record is acknowledged (counted as accepted) only once committed.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

import numpy as np

from neverest.clock import iso, parse_time
from neverest.config import Config
from neverest.memory import holdings
from neverest.memory.embed import HASHED_SPACE, from_blob, hashed_vector, join_threshold
from neverest.memory.store import Store
from neverest.records import Record, RecordError, parse_many

CANDIDATE_STRENGTH: Final = 0.5
_BATCH: Final = 500


@dataclass
class ReceiveResult:
    accepted: int = 0
    duplicates: int = 0
    older: int = 0
    forks: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    candidates: int = 0
    corroborated: int = 0
    confirmed: int = 0
    revoked: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "duplicates": self.duplicates, "older": self.older, "forks": self.forks,
                "refused": dict(self.refused), "candidates": self.candidates, "corroborated": self.corroborated,
                "confirmed": self.confirmed, "revoked": self.revoked}

    def add(self, other: ReceiveResult) -> None:
        for name in ("accepted", "duplicates", "older", "forks", "candidates", "corroborated", "confirmed",
                     "revoked"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.refused.update(other.refused)


def _origins(db: sqlite3.Connection, lesson_id: int) -> list[str]:
    return list(json.loads(db.execute("SELECT origins FROM lessons WHERE id = ?", (lesson_id,)).fetchone()[0]))


def _raise(db: sqlite3.Connection, lesson_id: int, origin: str, config: Config, now: datetime) -> bool:
    """Count ``origin`` once for the lesson; True when it was new."""
    origins = _origins(db, lesson_id)
    if origin in origins:
        return False
    origins.append(origin)
    db.execute("UPDATE lessons SET origins = ?, strength = min(strength + ?, ?), updated = ? WHERE id = ?",
               (json.dumps(origins), config.confirm_step, config.strength_cap, iso(now), lesson_id))
    return True


def _same_meaning(db: sqlite3.Connection, kind: str, text: str) -> int | None:
    """A held lesson of ``kind`` whose sources (or sentence) mean what ``text`` says."""
    rows = db.execute(
        "SELECT id, COALESCE(centroid, embedding) FROM lessons WHERE kind = ? AND archived = 0 AND space = ? "
        "AND COALESCE(centroid, embedding) IS NOT NULL", (kind, HASHED_SPACE)).fetchall()
    if not rows:
        return None
    vector = hashed_vector(text)
    scores = np.stack([from_blob(r[1]) for r in rows]) @ vector
    best = int(np.argmax(scores))
    return int(rows[best][0]) if scores[best] >= join_threshold(HASHED_SPACE) else None


def _revoked_by(db: sqlite3.Connection, origin: str, target: str) -> bool:
    return db.execute("SELECT 1 FROM records WHERE type = 'revoke' AND origin = ? AND target = ?",
                      (origin, target)).fetchone() is not None


def _apply_lesson(db: sqlite3.Connection, record: Record, own_origin: str, config: Config, now: datetime,
                  result: ReceiveResult) -> None:
    if record.origin == own_origin or holdings.tombstone(db, record.target) or _revoked_by(
            db, record.origin, record.target):
        return
    fields = record.fields
    held = db.execute("SELECT id, origin FROM lessons WHERE hash = ? AND archived = 0 ORDER BY origin != '', id",
                      (record.target,)).fetchone()
    if held is not None:
        if held[1] != record.origin and _raise(db, held[0], record.origin, config, now):
            result.corroborated += 1
        return
    similar = _same_meaning(db, fields["kind"], fields["text"])
    if similar is not None:
        if _raise(db, similar, record.origin, config, now):
            result.corroborated += 1
        return
    cursor = db.execute(
        "INSERT INTO lessons (hash, kind, text, strength, seen, created, updated, origin, origins, layer) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'common')",
        (record.target, fields["kind"], fields["text"], CANDIDATE_STRENGTH, fields["seen"], iso(now), iso(now),
         record.origin, json.dumps([record.origin])))
    result.candidates += 1
    lesson_id = int(cursor.lastrowid or 0)
    # Confirmations that arrived before the lesson count now.
    for (confirmer,) in db.execute("SELECT DISTINCT origin FROM records WHERE type = 'confirm' AND target = ?",
                                   (record.target,)).fetchall():
        if confirmer not in (record.origin, own_origin) and _raise(db, lesson_id, confirmer, config, now):
            result.confirmed += 1


def _apply_confirm(db: sqlite3.Connection, record: Record, own_origin: str, config: Config, now: datetime,
                   result: ReceiveResult) -> None:
    held = db.execute("SELECT id, origin FROM lessons WHERE hash = ? AND archived = 0", (record.target,)).fetchall()
    for lesson_id, publisher in held:
        # A publisher confirming its own lesson does not count; nor does this memory
        # counting its own confirmations twice.
        if record.origin in (publisher, own_origin):
            continue
        if _raise(db, lesson_id, record.origin, config, now):
            result.confirmed += 1


def _apply_revoke(db: sqlite3.Connection, record: Record, now: datetime, result: ReceiveResult) -> None:
    cursor = db.execute("UPDATE lessons SET archived = 1, updated = ? WHERE hash = ? AND origin = ? AND archived = 0",
                        (iso(now), record.target, record.origin))
    result.revoked += cursor.rowcount


def _apply(db: sqlite3.Connection, record: Record, own_origin: str, config: Config, now: datetime,
           result: ReceiveResult) -> None:
    if record.type == "lesson":
        _apply_lesson(db, record, own_origin, config, now, result)
    elif record.type == "confirm":
        _apply_confirm(db, record, own_origin, config, now, result)
    else:
        _apply_revoke(db, record, now, result)


def _store_batch(store: Store, batch: list[Record | RecordError], source: str, own_origin: str, config: Config,
                 now: datetime, result: ReceiveResult) -> None:
    horizon = now + timedelta(seconds=config.future_tolerance_s)
    with store.write() as db:
        refused: Counter[str] = Counter()
        for item in batch:
            if isinstance(item, RecordError):
                refused[item.code] += 1
                continue
            if parse_time(holdings.signed_time(item)) > horizon:
                refused["future"] += 1
                continue
            outcome = holdings.put(db, item, source=source, now=now)
            if outcome == "duplicate":
                result.duplicates += 1
            elif outcome == "fork":
                result.forks += 1
                refused["fork"] += 1
            elif outcome == "older":
                result.older += 1
            else:
                result.accepted += 1
                _apply(db, item, own_origin, config, now, result)
        for reason, n in refused.items():
            holdings.count_refusal(db, source, reason, now, n)
        result.refused.update(refused)


def receive(store: Store, lines: Iterable[bytes | str | None], *, source: str, own_origin: str, config: Config,
            now: datetime) -> ReceiveResult:
    """Verify, store and apply record lines from ``source``; returns what happened to them."""
    result = ReceiveResult()
    batch: list[Record | RecordError] = []
    for _, item in parse_many((None, line) for line in lines):
        batch.append(item)
        if len(batch) >= _BATCH:
            _store_batch(store, batch, source, own_origin, config, now, result)
            batch = []
    if batch:
        _store_batch(store, batch, source, own_origin, config, now, result)
    return result
