"""The ``lessons`` table and its sets: ``lesson_origins`` (the origins counted once each as
support) and ``lesson_sources`` (the episodes a lesson was learned from).

``origin`` is '' for this memory's own lessons, else the publishing origin.  ``centroid``
is the mean of the source episodes' vectors, so the mean cosine of an episode with a
lesson's sources is one dot product.
"""

# No `from __future__ import annotations`: typing.NamedTuple would compile a ForwardRef for each field
# spelled as a string, at every command's start (the rows below).
import json
import sqlite3
from collections.abc import Collection, Iterator, Sequence
from typing import Any, Final, NamedTuple

from neverest.memory.queries.episodes import Scored
from neverest.memory.space import DIM

_SOURCE_COUNT: Final = "(SELECT count(*) FROM lesson_sources s WHERE s.lesson_id = lessons.id)"


class NewLesson(NamedTuple):
    hash: str
    kind: str
    text: str
    cwd: str
    strength: float
    seen: int
    created: str
    origin: str
    layer: str
    space: str | None
    embedding: bytes | None
    centroid: bytes | None
    sources: Sequence[str] = ()
    origins: Sequence[str] = ()


def create(db: sqlite3.Connection, lesson: NewLesson) -> int:
    """Insert a lesson with its sets; its id."""
    cursor = db.execute(
        "INSERT INTO lessons (hash, kind, text, cwd, strength, seen, created, updated, origin, layer, space, "
        "embedding, centroid) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (lesson.hash, lesson.kind, lesson.text, lesson.cwd, lesson.strength, lesson.seen, lesson.created,
         lesson.created, lesson.origin, lesson.layer, lesson.space, lesson.embedding, lesson.centroid))
    lesson_id = int(cursor.lastrowid or 0)
    # The full-text index, here and not by a trigger (store.py, schema version 11).
    db.execute("INSERT INTO lessons_fts (rowid, text) VALUES (?, ?)", (lesson_id, lesson.text))
    # A received lesson has no sources and one origin: an executemany costs 2 µs even over nothing, and more
    # than an execute for one row (16.3 µs a lesson with both, 11.7 without, measured).
    if lesson.sources:
        add_sources(db, lesson_id, lesson.sources)
    if len(lesson.origins) == 1:
        db.execute("INSERT OR IGNORE INTO lesson_origins (lesson_id, origin) VALUES (?, ?)",
                   (lesson_id, lesson.origins[0]))
    elif lesson.origins:
        db.executemany("INSERT OR IGNORE INTO lesson_origins (lesson_id, origin) VALUES (?, ?)",
                       [(lesson_id, o) for o in lesson.origins])
    return lesson_id


def add_sources(db: sqlite3.Connection, lesson_id: int, episode_ids: Sequence[str]) -> None:
    db.executemany("INSERT OR IGNORE INTO lesson_sources (lesson_id, episode_id) VALUES (?, ?)",
                   [(lesson_id, e) for e in episode_ids])


def sources(db: sqlite3.Connection, lesson_id: int) -> list[str]:
    return [str(r[0]) for r in db.execute(
        "SELECT episode_id FROM lesson_sources WHERE lesson_id = ? ORDER BY episode_id", (lesson_id,))]


def origins(db: sqlite3.Connection, lesson_id: int) -> list[str]:
    return [str(r[0]) for r in db.execute(
        "SELECT origin FROM lesson_origins WHERE lesson_id = ? ORDER BY origin", (lesson_id,))]


def count_origin(db: sqlite3.Connection, lesson_id: int, origin: str, *, step: float, cap: float, now: str) -> bool:
    """Count ``origin`` once as support for the lesson (+``step`` strength, capped); True when it was new."""
    if not db.execute("INSERT OR IGNORE INTO lesson_origins (lesson_id, origin) VALUES (?, ?)",
                      (lesson_id, origin)).rowcount:
        return False
    db.execute("UPDATE lessons SET strength = min(strength + ?, ?), updated = ? WHERE id = ?",
               (step, cap, now, lesson_id))
    return True


def count(db: sqlite3.Connection) -> int:
    """Lessons not archived."""
    return int(db.execute("SELECT count(*) FROM lessons WHERE archived = 0").fetchone()[0])


# -- what is shown --------------------------------------------------------------------


class LessonRow(NamedTuple):
    id: int
    hash: str
    kind: str
    text: str
    seen: int
    strength: float
    updated: str
    created: str
    origin: str
    sources: int  # how many episodes it was learned from
    project: str
    layer: str
    archived: bool
    projects: tuple[str, ...]  # the distinct working folders of its source episodes, else its own (project)


def rows(db: sqlite3.Connection, *, kind: str | None = None, include_archived: bool = False,
         target: str | None = None, ids: Collection[int] | None = None) -> list[LessonRow]:
    """Lessons (of ``kind``, about ``target``, with one of ``ids``), strongest first."""
    sql = (f"SELECT id, hash, kind, text, seen, strength, updated, created, origin, {_SOURCE_COUNT}, cwd, layer, "
           "archived, (SELECT json_group_array(DISTINCT e.cwd) FROM lesson_sources s JOIN episodes e "
           "ON e.id = s.episode_id WHERE s.lesson_id = lessons.id AND e.cwd != '') FROM lessons WHERE 1 = 1")
    args: list[Any] = []
    if not include_archived:
        sql += " AND archived = 0"
    if kind:
        sql += " AND kind = ?"
        args.append(kind)
    if target:
        sql += " AND hash = ?"
        args.append(target)
    if ids is not None:
        wanted = sorted({int(i) for i in ids})
        sql += f" AND id IN ({','.join('?' * len(wanted))})"
        args.extend(wanted)
    sql += " ORDER BY strength DESC, id"
    return [LessonRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], bool(r[12]),
                      _projects(r[13], r[10])) for r in db.execute(sql, args)]


def _projects(cwds: str | None, own_cwd: str) -> tuple[str, ...]:
    projects = tuple(sorted(json.loads(cwds))) if cwds else ()
    return projects or ((own_cwd,) if own_cwd else ())


def recall_scan(db: sqlite3.Connection, now: str, space: str) -> Scored:
    return Scored.of(db.execute(
        "SELECT id, strength, max(julianday(?) - julianday(updated), 0), embedding FROM lessons "
        "WHERE archived = 0 AND space = ? AND embedding IS NOT NULL", (now, space)).fetchall())


def shown(db: sqlite3.Connection, lesson_id: int | str) -> tuple[str, str, str]:
    """(kind, text, updated) of a lesson."""
    kind, text, updated = db.execute("SELECT kind, text, updated FROM lessons WHERE id = ?",
                                     (lesson_id,)).fetchone()
    return str(kind), str(text), str(updated)


def find_by_prefix(db: sqlite3.Connection, prefix: str) -> set[str]:
    """Lesson hashes starting with ``prefix`` (lowercase hex), held as lessons or named by records."""
    pattern = prefix.replace("\\", "").replace("%", "").replace("_", "") + "%"
    return {str(r[0]) for r in db.execute(
        "SELECT hash FROM lessons WHERE hash LIKE ? UNION SELECT target FROM records WHERE target LIKE ?",
        (pattern, pattern))}


def is_own_lesson(db: sqlite3.Connection, target: str, origin: str) -> bool:
    """Whether ``target`` is a lesson of this memory: learned here, or signed by ``origin`` (this memory)."""
    return db.execute(
        "SELECT 1 FROM lessons WHERE hash = ? AND origin = '' UNION "
        "SELECT 1 FROM records WHERE target = ? AND origin = ? AND type = 'lesson'",
        (target, target, origin)).fetchone() is not None


def own_hashes(db: sqlite3.Connection) -> set[str]:
    return {str(r[0]) for r in db.execute("SELECT hash FROM lessons WHERE origin = ''")}


def own_learned(db: sqlite3.Connection) -> list[tuple[str, str]]:
    """(hash, created) of the lessons this memory learned from its own sessions."""
    return [(str(h), str(c)) for h, c in db.execute("SELECT hash, MIN(created) FROM lessons WHERE origin = '' "
                                                    "GROUP BY hash")]


# -- sleep ----------------------------------------------------------------------------


def decay(db: sqlite3.Connection, factor: float, archive_below: float, now: str) -> int:
    db.execute("UPDATE lessons SET strength = strength * ? WHERE archived = 0", (factor,))
    return int(db.execute("UPDATE lessons SET archived = 1, updated = ? WHERE archived = 0 AND strength < ?",
                          (now, archive_below)).rowcount)


class Centroid(NamedTuple):
    id: int
    kind: str
    centroid: bytes
    sources: int


def own_centroids(db: sqlite3.Connection, space: str) -> list[Centroid]:
    """This memory's unarchived lessons with a centroid in ``space``, and how many sources each has."""
    return [Centroid(*r) for r in db.execute(
        f"SELECT id, kind, centroid, {_SOURCE_COUNT} FROM lessons WHERE archived = 0 AND origin = '' "
        "AND centroid IS NOT NULL AND space = ?", (space,))]


def own_by_hash(db: sqlite3.Connection, digest: str) -> int | None:
    row = db.execute("SELECT id FROM lessons WHERE hash = ? AND origin = '' AND archived = 0", (digest,)).fetchone()
    return None if row is None else int(row[0])


def joined(db: sqlite3.Connection, lesson_id: int, episode_id: str, centroid: bytes, *, step: float, cap: float,
           now: str) -> None:
    """An episode joined the lesson: one more source, seen once more, stronger."""
    db.execute("UPDATE lessons SET centroid = ?, seen = seen + 1, strength = min(strength + ?, ?), updated = ? "
               "WHERE id = ?", (centroid, step, cap, now, lesson_id))
    add_sources(db, lesson_id, [episode_id])


def _dim(column: str) -> str:
    """SQL for the dimension of a stored vector (embed.to_blob: dense float32, or sparse 5-byte
    entries over the hashed space's 256 dimensions, whose length is never a multiple of 4)."""
    return f"(CASE WHEN length({column}) % 4 = 0 THEN length({column}) / 4 ELSE {DIM} END)"


def needing_centroid(db: sqlite3.Connection, space: str) -> list[int]:
    """Lessons with sources whose centroid is missing, in another space than ``space``, or of
    another dimension than the lesson's sentence vector (a space changed under it)."""
    return [int(r[0]) for r in db.execute(
        "SELECT id FROM lessons WHERE archived = 0 AND EXISTS (SELECT 1 FROM lesson_sources s WHERE "
        "s.lesson_id = lessons.id) AND (centroid IS NULL OR space IS NULL OR space != ? OR "
        f"{_dim('centroid')} != {_dim('embedding')})", (space,))]


def space_of(db: sqlite3.Connection, lesson_id: int) -> str | None:
    """The space of the lesson's vectors (its centroid's and its sentence's)."""
    row = db.execute("SELECT space FROM lessons WHERE id = ?", (lesson_id,)).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def text_of(db: sqlite3.Connection, lesson_id: int) -> str | None:
    """The lesson's sentence (None if no lesson has the id)."""
    row = db.execute("SELECT text FROM lessons WHERE id = ?", (lesson_id,)).fetchone()
    return None if row is None else str(row[0])


def set_centroid(db: sqlite3.Connection, lesson_id: int, centroid: bytes | None) -> None:
    db.execute("UPDATE lessons SET centroid = ? WHERE id = ?", (centroid, lesson_id))


class MergeFacts(NamedTuple):
    kind: str
    centroid: bytes | None
    archived: bool
    seen: int
    strength: float
    created: str
    sources: int


def merge_facts(db: sqlite3.Connection, lesson_id: int, space: str) -> MergeFacts | None:
    row = db.execute(f"SELECT kind, centroid, archived, seen, strength, created, {_SOURCE_COUNT} FROM lessons "
                     "WHERE id = ? AND space = ?", (lesson_id, space)).fetchone()
    return None if row is None else MergeFacts(row[0], row[1], bool(row[2]), row[3], row[4], row[5], row[6])


def merge_candidates(db: sqlite3.Connection, kind: str, lesson_id: int, space: str) -> list[tuple[int, bytes]]:
    """(id, centroid) of this memory's other unarchived lessons of ``kind`` in ``space``."""
    return [(int(r[0]), bytes(r[1])) for r in db.execute(
        "SELECT id, centroid FROM lessons WHERE kind = ? AND archived = 0 AND origin = '' AND id != ? "
        "AND space = ? AND centroid IS NOT NULL", (kind, lesson_id, space))]


def merge(db: sqlite3.Connection, theme_id: int, old_id: int, *, seen: int, strength: float, centroid: bytes,
          now: str) -> None:
    """Fold lesson ``old_id`` into ``theme_id``: the theme takes its sources; the old one is archived."""
    db.execute("INSERT OR IGNORE INTO lesson_sources (lesson_id, episode_id) "
               "SELECT ?, episode_id FROM lesson_sources WHERE lesson_id = ?", (theme_id, old_id))
    db.execute("UPDATE lessons SET seen = ?, strength = ?, centroid = ?, updated = ? WHERE id = ?",
               (seen, strength, centroid, now, theme_id))
    db.execute("UPDATE lessons SET archived = 1, updated = ? WHERE id = ?", (now, old_id))


def strengthen(db: sqlite3.Connection, lesson_id: int, step: float, cap: float, now: str) -> None:
    """+``step`` strength (capped at ``cap``); a negative step weakens, floored at 0."""
    db.execute("UPDATE lessons SET strength = max(min(strength + ?, ?), 0), updated = ? WHERE id = ?",
               (step, cap, now, lesson_id))


class ToPredict(NamedTuple):
    id: int
    text: str
    centroid: bytes | None
    embedding: bytes | None


def to_predict(db: sqlite3.Connection, min_strength: float, space: str) -> list[ToPredict]:
    """Lessons in ``space`` strong enough to predict (a received candidate always is) with no open prediction."""
    return [ToPredict(*r) for r in db.execute(
        "SELECT l.id, l.text, l.centroid, l.embedding FROM lessons l WHERE l.archived = 0 "
        "AND (l.strength >= ? OR l.origin != '') "
        "AND l.space = ? AND NOT EXISTS (SELECT 1 FROM predictions p WHERE p.lesson_id = l.id "
        "AND p.resolved IS NULL)", (min_strength, space))]


# -- receive --------------------------------------------------------------------------


def meaning_vectors(db: sqlite3.Connection, space: str) -> list[tuple[int, str, bytes]]:
    """(id, kind, centroid or else sentence vector) of every unarchived lesson in ``space``."""
    # The rows as SQLite gives them (INTEGER, TEXT, BLOB: int, str, bytes already): a receive reads them all.
    rows: list[tuple[int, str, bytes]] = db.execute(
        f"SELECT id, kind, COALESCE(centroid, embedding) FROM lessons WHERE {_MEANING_ROWS} ORDER BY id",
        (space,)).fetchall()
    return rows


def texts_of_kind(db: sqlite3.Connection, kind: str, space: str) -> dict[int, str]:
    """id -> sentence of the lessons of ``kind`` that ``meaning_vectors`` would read."""
    return {int(r[0]): str(r[1]) for r in db.execute(
        f"SELECT id, text FROM lessons WHERE {_MEANING_ROWS} AND kind = ?", (space, kind))}


def meaning_count(db: sqlite3.Connection, space: str) -> int:
    """How many lessons ``meaning_vectors`` would read."""
    return int(db.execute(f"SELECT count(*) FROM lessons WHERE {_MEANING_ROWS}", (space,)).fetchone()[0])


_MEANING_ROWS: Final = "archived = 0 AND space = ? AND COALESCE(centroid, embedding) IS NOT NULL"


class Arrival(NamedTuple):
    """What a received lesson record meets here."""

    buried: bool  # its hash is tombstoned
    revoked: bool  # its origin already revoked it
    held_id: int | None  # the lesson here with its hash (this memory's own first)
    held_origin: str | None


def arrival(db: sqlite3.Connection, digest: str, origin: str) -> Arrival:
    # One round trip: this runs once for every lesson record received.
    row = db.execute(
        "SELECT EXISTS (SELECT 1 FROM tombstones WHERE hash = :h), "
        "EXISTS (SELECT 1 FROM records WHERE type = 'revoke' AND origin = :o AND target = :h), "
        "id, origin FROM (SELECT 1) LEFT JOIN (SELECT id, origin FROM lessons WHERE hash = :h AND archived = 0 "
        "ORDER BY origin != '', id LIMIT 1)", {"h": digest, "o": origin}).fetchone()
    return Arrival(bool(row[0]), bool(row[1]), row[2], row[3])


def set_seen(db: sqlite3.Connection, lesson_id: int, seen: int) -> None:
    db.execute("UPDATE lessons SET seen = ? WHERE id = ?", (seen, lesson_id))


def held(db: sqlite3.Connection, digest: str) -> list[tuple[int, str]]:
    """(id, origin) of the unarchived lessons with hash ``digest``."""
    return [(int(r[0]), str(r[1])) for r in db.execute(
        "SELECT id, origin FROM lessons WHERE hash = ? AND archived = 0", (digest,))]


def identity(db: sqlite3.Connection, lesson_id: int) -> tuple[str, str] | None:
    """(hash, origin) of a lesson."""
    row = db.execute("SELECT hash, origin FROM lessons WHERE id = ?", (lesson_id,)).fetchone()
    return None if row is None else (str(row[0]), str(row[1]))


def archive(db: sqlite3.Connection, digest: str, *, origin: str, now: str) -> int:
    """Archive the unarchived lesson ``digest`` of ``origin`` ('' for this memory's own); how many."""
    return int(db.execute("UPDATE lessons SET archived = 1, updated = ? WHERE hash = ? AND origin = ? "
                          "AND archived = 0", (now, digest, origin)).rowcount)


def archive_received(db: sqlite3.Connection, digest: str) -> int:
    """Archive every copy of ``digest`` received from other memories (never this memory's own)."""
    return int(db.execute("UPDATE lessons SET archived = 1 WHERE hash = ? AND origin != '' AND archived = 0",
                          (digest,)).rowcount)


# -- publish --------------------------------------------------------------------------


class Publishable(NamedTuple):
    hash: str
    kind: str
    text: str
    seen: int
    strength: float
    cwd: str


def own_untombstoned(db: sqlite3.Connection) -> list[Publishable]:
    """This memory's unarchived lessons whose hash is not tombstoned, with the folder they were learned in."""
    return [Publishable(*r) for r in db.execute(
        "SELECT hash, kind, text, seen, strength, cwd FROM lessons WHERE origin = '' AND archived = 0 "
        "AND hash NOT IN (SELECT hash FROM tombstones)")]


# -- forget and export ----------------------------------------------------------------


def of_sources(db: sqlite3.Connection, episode_ids: Sequence[str]) -> set[int]:
    """The lessons that have any of ``episode_ids`` among their sources."""
    found: set[int] = set()
    for start in range(0, len(episode_ids), 500):
        chunk = episode_ids[start:start + 500]
        found.update(int(r[0]) for r in db.execute(
            f"SELECT DISTINCT lesson_id FROM lesson_sources WHERE episode_id IN ({','.join('?' * len(chunk))})",
            chunk))
    return found


def drop_sources(db: sqlite3.Connection, episode_ids: Sequence[str]) -> int:
    return int(db.executemany("DELETE FROM lesson_sources WHERE episode_id = ?",
                              [(e,) for e in episode_ids]).rowcount)


EXPORTED: Final = ("id", "hash", "kind", "text", "cwd", "strength", "seen", "created", "updated", "origin", "layer",
                   "archived")


def export_rows(db: sqlite3.Connection) -> Iterator[dict[str, Any]]:
    """Each lesson with its ``origins`` and ``sources`` as lists."""
    for row in db.execute(f"SELECT {', '.join(EXPORTED)} FROM lessons ORDER BY id").fetchall():
        item = dict(zip(EXPORTED, row, strict=True))
        item["archived"] = bool(item["archived"])
        item["origins"] = origins(db, item["id"])
        item["sources"] = sources(db, item["id"])
        yield item


def own_hashed_centroids(db: sqlite3.Connection, space: str) -> list[tuple[int, str, str, str, bytes]]:
    """(id, hash, kind, text, centroid) of this memory's unarchived lessons with a centroid in ``space``."""
    return [(int(r[0]), str(r[1]), str(r[2]), str(r[3]), bytes(r[4])) for r in db.execute(
        "SELECT id, hash, kind, text, centroid FROM lessons WHERE origin = '' AND archived = 0 AND centroid IS NOT NULL"
        " AND space = ?", (space,))]


def own_count(db: sqlite3.Connection) -> int:
    """How many lessons this memory learned, archived ones included."""
    return int(db.execute("SELECT count(*) FROM lessons WHERE origin = ''").fetchone()[0])
