"""Sleep: the passes that turn episodes into lessons, in order (seeds/001, DESIGN §6).

1. embed        every episode, lesson and open prediction not yet in the current space
2. decay        strength × 2^(−days/45) for the whole days since decay last ran (each day
                counted once however often sleep runs); below 0.15 → archived
3. consolidate  each new episode joins the lesson of its kind whose sources it resembles
                (mean cosine ≥ 0.55 hashed, 0.62 in a model's space), or waits for a
                repeat: one correction makes a lesson, an error or stated surprise must
                occur twice, environment episodes and notes never consolidate
4. merge        lessons of one kind whose sources mean the same (average linkage ≥ the
                same threshold) become one theme; the others become its aliases
5. verify       open predictions come true when an episode of the lesson's kind happens
                after they were made at cosine ≥ 0.5; they fail after 14 days
6. predict      one open prediction per lesson with strength ≥ 1

Each pass commits its own transactions, and every pass is idempotent, so a sleep
killed at any point leaves a consistent store and the next sleep completes the
work.  Consolidation looks only at pending (new) episodes and merging only at the
lessons that changed, so a sleep after 100 new episodes does work in proportion
to the 100, not to the size of the store.

The strength steps (a join +0.5, a confirmation +0.5, a failure −0.5, cap 5) are
this implementation's choice; the thresholds come from the sources.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from neverest.clock import iso, parse_time
from neverest.config import Config
from neverest.memory.embed import VERIFY_COSINE, Embedder, VectorRows, from_blob, join_threshold, to_blob
from neverest.memory.model import Writer
from neverest.memory.phrasing import observation
from neverest.memory.store import Store
from neverest.records import lesson_hash
from neverest.safety import imperative_reason

Vector = npt.NDArray[np.float32]
CONSOLIDATING_KINDS = ("correction", "error", "surprise")
_BATCH = 500


@dataclass
class SleepReport:
    started: str
    finished: str = ""
    space: str = ""
    embedded: int = 0
    decay_days: int = 0
    archived_episodes: int = 0
    archived_lessons: int = 0
    considered: int = 0
    learned: list[dict[str, Any]] = field(default_factory=list)
    joined: int = 0
    waiting: int = 0
    unphrased: int = 0
    merged: list[dict[str, Any]] = field(default_factory=list)
    confirmed: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    predicted: int = 0
    signed_confirmations: int = 0  # filled by the caller that holds the key (service.py)
    signed_lessons: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# -- 1. embed -------------------------------------------------------------------------


def _embed_table(store: Store, embedder: Embedder, table: str, text_col: str) -> int:
    done = 0
    while True:
        rows = store.db.execute(
            f"SELECT id, {text_col} FROM {table} WHERE space IS NULL OR space != ? LIMIT ?",
            (embedder.space, _BATCH),
        ).fetchall()
        if not rows:
            return done
        # A model that fails mid-run answers from the hashed space from then on; each
        # batch is tagged with the space its vectors are really in.
        space, vectors = embedder.embed_with_space([r[1] for r in rows])
        with store.write() as db:
            db.executemany(
                f"UPDATE {table} SET space = ?, embedding = ? WHERE id = ?",
                [(space, to_blob(v), r[0]) for r, v in zip(rows, vectors, strict=True)],
            )
        done += len(rows)


def _recentre_lessons(store: Store, embedder: Embedder) -> None:
    """Recompute lesson centroids whose sources moved to another space."""
    rows = store.db.execute(
        "SELECT id, sources FROM lessons WHERE archived = 0 AND sources != '[]' AND "
        "(centroid IS NULL OR space IS NULL OR space != ? OR length(centroid) != length(embedding))",
        (embedder.space,),
    ).fetchall()
    for lesson_id, sources in rows:
        centroid = _mean_of(store.db, json.loads(sources), embedder.space)
        if centroid is not None:
            with store.write() as db:
                db.execute("UPDATE lessons SET centroid = ? WHERE id = ?", (to_blob(centroid), lesson_id))


def _mean_of(db: sqlite3.Connection, episode_ids: list[str], space: str) -> Vector | None:
    vectors = [from_blob(row[0]) for row in db.execute(
        f"SELECT embedding FROM episodes WHERE space = ? AND id IN ({','.join('?' * len(episode_ids))})",
        (space, *episode_ids),
    )]
    return np.mean(vectors, axis=0).astype(np.float32) if vectors else None


def embed_pass(store: Store, embedder: Embedder) -> int:
    done = _embed_table(store, embedder, "episodes", "gist")
    done += _embed_table(store, embedder, "lessons", "text")
    done += _embed_table(store, embedder, "predictions", "text")
    _recentre_lessons(store, embedder)
    return done


# -- 2. decay -------------------------------------------------------------------------


def decay_pass(store: Store, now: datetime, config: Config, report: SleepReport) -> None:
    today = now.date()
    last = store.get_meta("last_decay_day")
    with store.write() as db:
        if last is None:
            Store.set_meta(db, "last_decay_day", today.isoformat())
            return
        days = (today - datetime.fromisoformat(last).date()).days
        if days <= 0:  # the same day, or a clock that went back: nothing to count
            return
        factor = 2.0 ** (-days / config.decay_half_life_days)
        db.execute("UPDATE episodes SET strength = strength * ? WHERE archived = 0", (factor,))
        db.execute("UPDATE lessons SET strength = strength * ? WHERE archived = 0", (factor,))
        report.archived_episodes = db.execute(
            "UPDATE episodes SET archived = 1 WHERE archived = 0 AND strength < ?", (config.archive_below,)
        ).rowcount
        report.archived_lessons = db.execute(
            "UPDATE lessons SET archived = 1, updated = ? WHERE archived = 0 AND strength < ?",
            (iso(now), config.archive_below),
        ).rowcount
        Store.set_meta(db, "last_decay_day", today.isoformat())
        report.decay_days = days


# -- 3. consolidate -------------------------------------------------------------------


@dataclass
class _Lesson:
    id: int
    sources: list[str]
    centroid: Vector


class _Consolidator:
    def __init__(self, store: Store, space: str, now: datetime, config: Config, writer: Writer | None,
                 report: SleepReport) -> None:
        self.store, self.space, self.now, self.config = store, space, now, config
        self.writer, self.report = writer, report
        self.threshold = join_threshold(space)
        self.lessons: dict[str, VectorRows] = {}
        self.lesson_info: dict[int, _Lesson] = {}
        self.waiting: dict[str, VectorRows] = {}
        self.changed: set[int] = set()
        self.new_waiting: set[str] = set()  # tonight's episodes still waiting for a repeat

    def _load(self, dim: int) -> None:
        db = self.store.db
        for kind in CONSOLIDATING_KINDS:
            self.lessons[kind] = VectorRows(dim)
            self.waiting[kind] = VectorRows(dim)
        for lesson_id, kind, sources, blob in db.execute(
            "SELECT id, kind, sources, centroid FROM lessons WHERE archived = 0 AND origin = '' "
            "AND centroid IS NOT NULL AND space = ?", (self.space,)
        ):
            centroid = from_blob(blob)
            if kind in self.lessons and centroid.shape == (dim,):
                info = _Lesson(lesson_id, json.loads(sources), centroid)
                self.lesson_info[lesson_id] = info
                self.lessons[kind].add(lesson_id, info.centroid)
        # Episodes already considered that wait for a repeat (errors, surprises).
        for ep_id, kind, blob in db.execute(
            "SELECT id, kind, embedding FROM episodes WHERE pending = 0 AND lesson_id IS NULL AND archived = 0 "
            "AND kind IN ('error', 'surprise', 'correction') AND space = ?", (self.space,)
        ):
            vector = from_blob(blob)
            if vector.shape == (dim,):
                self.waiting[kind].add(ep_id, vector)

    def run(self) -> set[int]:
        db = self.store.db
        while True:
            rows = db.execute(
                "SELECT id, kind, embedding, title, said, expected, happened, text, cwd FROM episodes "
                "WHERE pending = 1 AND space = ? ORDER BY at, id LIMIT ?", (self.space, _BATCH),
            ).fetchall()
            if not rows:
                self.report.waiting = len(self.new_waiting)
                return self.changed
            if not self.lessons:
                self._load(from_blob(rows[0][2]).shape[0])
            with self.store.write() as wdb:
                for row in rows:
                    self._consider(wdb, row)

    def _consider(self, db: sqlite3.Connection, row: tuple[Any, ...]) -> None:
        ep_id, kind, blob = row[0], row[1], row[2]
        self.report.considered += 1
        db.execute("UPDATE episodes SET pending = 0 WHERE id = ?", (ep_id,))
        if kind not in CONSOLIDATING_KINDS:
            return  # environment episodes and notes never consolidate
        vector = from_blob(blob)
        lessons = self.lessons[kind]
        if len(lessons):
            # Mean cosine with a lesson's sources = dot product with their centroid.
            scores = lessons.matrix @ vector
            best = int(np.argmax(scores))
            if scores[best] >= self.threshold:
                self._join(db, lessons.ids[best], best, ep_id, vector, kind)
                return
        waiting = self.waiting[kind]
        partners: list[int] = []
        if len(waiting):
            scores = waiting.matrix @ vector
            partners = [int(i) for i in np.flatnonzero(scores >= self.threshold)]
        if kind == "correction" or partners:
            self._learn(db, row, vector, [(waiting.ids[i], waiting.matrix[i].copy()) for i in partners])
            for i in sorted(partners, reverse=True):
                self.new_waiting.discard(waiting.ids[i])
                waiting.remove(i)
        else:
            waiting.add(ep_id, vector)
            self.new_waiting.add(ep_id)

    def _join(self, db: sqlite3.Connection, lesson_id: int, index: int, ep_id: str, vector: Vector,
              kind: str) -> None:
        info = self.lesson_info[lesson_id]
        n = len(info.sources)
        info.centroid = ((info.centroid * n + vector) / (n + 1)).astype(np.float32)
        info.sources.append(ep_id)
        self.lessons[kind].set(index, info.centroid)
        db.execute(
            "UPDATE lessons SET sources = ?, centroid = ?, seen = seen + 1, strength = min(strength + ?, ?), "
            "updated = ? WHERE id = ?",
            (json.dumps(info.sources), to_blob(info.centroid), self.config.join_step, self.config.strength_cap,
             iso(self.now), lesson_id),
        )
        db.execute("UPDATE episodes SET lesson_id = ? WHERE id = ?", (lesson_id, ep_id))
        self.report.joined += 1
        self.changed.add(lesson_id)

    def _phrase(self, kind: str, row: tuple[Any, ...]) -> str | None:
        fields = {"title": row[3], "said": row[4], "expected": row[5], "happened": row[6], "text": row[7]}
        text = observation(kind, **fields)
        if self.writer is not None and text is not None:
            # An optional model may write a better sentence; it passes the same check.
            written = self.writer.write(
                f"Rewrite as one short factual observation (not advice, no paths or names): {text}",
                system="You write one-sentence observations about software environments. Never give instructions.",
            )
            if written and imperative_reason(written) is None:
                text = written
        return text

    def _learn(self, db: sqlite3.Connection, row: tuple[Any, ...], vector: Vector,
               partners: list[tuple[str, Vector]]) -> None:
        ep_id, kind, cwd = row[0], row[1], row[8]
        text = self._phrase(kind, row)
        if text is None:
            self.report.unphrased += 1
            return
        sources = [ep_id] + [p for p, _ in partners]
        centroid = np.mean([vector] + [v for _, v in partners], axis=0).astype(np.float32)
        digest = lesson_hash(kind, text)
        existing = db.execute(
            "SELECT id FROM lessons WHERE hash = ? AND origin = '' AND archived = 0", (digest,)
        ).fetchone()
        if existing is not None and existing[0] in self.lesson_info:
            # The same sentence already stands as a lesson: these episodes support it.
            index = self.lessons[kind].ids.index(existing[0])
            for source, v in [(ep_id, vector), *partners]:
                self._join(db, existing[0], index, source, v, kind)
            return
        now = iso(self.now)
        cursor = db.execute(
            "INSERT INTO lessons (hash, kind, text, cwd, strength, seen, sources, created, updated, space, centroid)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (digest, kind, text, cwd, self.config.lesson_initial_strength, len(sources), json.dumps(sources),
             now, now, self.space, to_blob(centroid)),
        )
        lesson_id = int(cursor.lastrowid or 0)
        db.executemany("UPDATE episodes SET lesson_id = ? WHERE id = ?", [(lesson_id, s) for s in sources])
        self.lesson_info[lesson_id] = _Lesson(lesson_id, sources, centroid)
        self.lessons[kind].add(lesson_id, centroid)
        self.changed.add(lesson_id)
        self.report.learned.append({"id": lesson_id, "kind": kind, "text": text, "seen": len(sources)})


# -- 4. merge -------------------------------------------------------------------------


def merge_pass(store: Store, space: str, changed: set[int], now: datetime, report: SleepReport) -> None:
    """Merge each changed lesson with any other of its kind whose sources mean the same."""
    threshold = join_threshold(space)
    for lesson_id in sorted(changed):
        row = store.db.execute(
            "SELECT kind, centroid, archived FROM lessons WHERE id = ? AND space = ?", (lesson_id, space)
        ).fetchone()
        if row is None or row[2] or row[1] is None:
            continue
        kind, centroid = row[0], from_blob(row[1])
        others = store.db.execute(
            "SELECT id, centroid, sources, seen, strength, created FROM lessons WHERE kind = ? AND archived = 0 "
            "AND origin = '' AND id != ? AND space = ? AND centroid IS NOT NULL", (kind, lesson_id, space),
        ).fetchall()
        if not others:
            continue
        scores = np.stack([from_blob(o[1]) for o in others]) @ centroid
        best = int(np.argmax(scores))
        if scores[best] < threshold:
            continue
        other = others[best]
        # The older lesson is the theme: its text, and so its hash, stay stable.
        theme_id, old_id = (other[0], lesson_id) if other[0] < lesson_id else (lesson_id, other[0])
        _merge(store, theme_id, old_id, now)
        report.merged.append({"theme": theme_id, "alias": old_id})


def _merge(store: Store, theme_id: int, old_id: int, now: datetime) -> None:
    db = store.db
    theme = db.execute("SELECT sources, seen, strength, centroid, created FROM lessons WHERE id = ?",
                       (theme_id,)).fetchone()
    old = db.execute("SELECT sources, seen, strength, centroid, created FROM lessons WHERE id = ?",
                     (old_id,)).fetchone()
    sources = json.loads(theme[0]) + json.loads(old[0])
    n_t, n_o = len(json.loads(theme[0])), len(json.loads(old[0]))
    centroid = ((from_blob(theme[3]) * n_t + from_blob(old[3]) * n_o) / max(n_t + n_o, 1)).astype(np.float32)
    with store.write() as w:
        w.execute(
            "UPDATE lessons SET sources = ?, seen = ?, strength = ?, centroid = ?, updated = ? WHERE id = ?",
            (json.dumps(sources), theme[1] + old[1], max(theme[2], old[2]), to_blob(centroid), iso(now), theme_id),
        )
        w.execute("UPDATE lessons SET archived = 1, updated = ? WHERE id = ?", (iso(now), old_id))
        w.execute("UPDATE episodes SET lesson_id = ? WHERE lesson_id = ?", (theme_id, old_id))
        w.execute("UPDATE predictions SET resolved = ?, outcome = 'merged' WHERE lesson_id = ? AND resolved IS NULL",
                  (iso(now), old_id))
        w.execute("INSERT INTO aliases (old, new, at, created) VALUES (?, ?, ?, ?)",
                  (old_id, theme_id, iso(now), old[4]))


# -- 5. verify ------------------------------------------------------------------------


def verify_pass(store: Store, space: str, now: datetime, config: Config, report: SleepReport) -> None:
    db = store.db
    open_predictions = db.execute(
        "SELECT p.id, p.lesson_id, p.made, p.embedding, l.kind, l.text FROM predictions p "
        "JOIN lessons l ON l.id = p.lesson_id WHERE p.resolved IS NULL AND p.space = ?", (space,),
    ).fetchall()
    window = timedelta(days=config.prediction_window_days)
    for pred_id, lesson_id, made, blob, kind, text in open_predictions:
        vector = from_blob(blob)
        # Episodes of the lesson's kind that happened since the prediction was made.
        candidates = db.execute(
            "SELECT id, embedding FROM episodes WHERE kind = ? AND at > ? AND space = ? ORDER BY at, id",
            (kind, made, space),
        ).fetchall()
        hit = next((ep for ep, eb in candidates if float(from_blob(eb) @ vector) >= VERIFY_COSINE), None)
        entry = {"prediction": pred_id, "lesson": lesson_id, "text": text}
        with store.write() as w:
            if hit is not None:
                w.execute("UPDATE predictions SET resolved = ?, outcome = 'confirmed', episode_id = ? WHERE id = ?",
                          (iso(now), hit, pred_id))
                w.execute("UPDATE lessons SET strength = min(strength + ?, ?), updated = ? WHERE id = ?",
                          (config.confirm_step, config.strength_cap, iso(now), lesson_id))
                report.confirmed.append(entry | {"episode": hit})
            elif now - parse_time(made) >= window:
                w.execute("UPDATE predictions SET resolved = ?, outcome = 'failed' WHERE id = ?", (iso(now), pred_id))
                w.execute("UPDATE lessons SET strength = max(strength - ?, 0), updated = ? WHERE id = ?",
                          (config.fail_step, iso(now), lesson_id))
                report.failed.append(entry)


# -- 6. predict -----------------------------------------------------------------------


def predict_pass(store: Store, space: str, now: datetime, config: Config, report: SleepReport) -> None:
    rows = store.db.execute(
        "SELECT l.id, l.text, l.centroid, l.embedding FROM lessons l WHERE l.archived = 0 "
        "AND (l.strength >= ? OR l.origin != '') "  # a received candidate always predicts
        "AND l.space = ? AND NOT EXISTS (SELECT 1 FROM predictions p WHERE p.lesson_id = l.id "
        "AND p.resolved IS NULL)", (config.predict_min_strength, space),
    ).fetchall()
    with store.write() as db:
        for lesson_id, text, centroid, embedding in rows:
            # Predict from what the sources mean when there are sources (a closer match to
            # future episodes than the sentence), else from the sentence itself.
            blob = centroid if centroid is not None else embedding
            vector = from_blob(blob)
            norm = float(np.linalg.norm(vector))
            if norm == 0:
                continue
            db.execute(
                "INSERT INTO predictions (lesson_id, text, made, space, embedding) VALUES (?, ?, ?, ?, ?)",
                (lesson_id, text, iso(now), space, to_blob((vector / norm).astype(np.float32))),
            )
            report.predicted += 1


# -- the whole night ------------------------------------------------------------------


def sleep(store: Store, *, now: datetime, embedder: Embedder, config: Config,
          writer: Writer | None = None) -> SleepReport:
    """Run every pass in order and record the report; returns it."""
    report = SleepReport(started=iso(now))
    with store.write() as db:
        sleep_id = db.execute("INSERT INTO sleeps (started) VALUES (?)", (iso(now),)).lastrowid
    embedder.probe()  # a model that answers now is this night's space; else the hashed one
    report.embedded = embed_pass(store, embedder)
    space = report.space = embedder.space  # after the pass: a model may have failed during it
    decay_pass(store, now, config, report)
    changed = _Consolidator(store, space, now, config, writer, report).run()
    merge_pass(store, space, changed, now, report)
    _embed_table(store, embedder, "lessons", "text")  # the sentences of tonight's new lessons
    verify_pass(store, space, now, config, report)
    predict_pass(store, space, now, config, report)
    report.finished = iso(now)
    with store.write() as db:
        db.execute("UPDATE sleeps SET finished = ?, report = ? WHERE id = ?",
                   (report.finished, json.dumps(report.to_json()), sleep_id))
    return report
