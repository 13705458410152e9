"""What the render into an agent's own memory file reads: lessons with the folders they were
learned in, and per file (in ``meta``, key ``agent_memory:<path>``) the hashes last written, the
veto list, and whether the owner opted the file out (deleted it) and when."""

from __future__ import annotations

import json
import sqlite3
from typing import NamedTuple

from neverest.memory.store import Store, meta_value

_META_PREFIX = "agent_memory:"


class Shown(NamedTuple):
    hash: str
    kind: str
    text: str
    strength: float
    seen: int
    origin: str  # '' for this memory's own
    sources: int
    projects: tuple[str, ...]  # the working folders of its source episodes (else the lesson's own)


def unarchived(db: sqlite3.Connection) -> list[Shown]:
    """Every unarchived lesson, strongest first, with the distinct cwd of its source episodes."""
    rows = db.execute(
        "SELECT l.hash, l.kind, l.text, l.strength, l.seen, l.origin, l.cwd, "
        "(SELECT count(*) FROM lesson_sources s WHERE s.lesson_id = l.id), "
        "(SELECT json_group_array(DISTINCT e.cwd) FROM lesson_sources s JOIN episodes e ON e.id = s.episode_id "
        " WHERE s.lesson_id = l.id AND e.cwd != '') "
        "FROM lessons l WHERE l.archived = 0 ORDER BY l.strength DESC, l.id").fetchall()
    out = []
    for digest, kind, text, strength, seen, origin, cwd, sources, cwds in rows:
        projects = tuple(sorted(json.loads(cwds))) if cwds else ()
        if not projects and cwd:
            projects = (str(cwd),)
        out.append(Shown(str(digest), str(kind), str(text), float(strength), int(seen), str(origin), int(sources),
                         projects))
    return out


class FileState(NamedTuple):
    written: list[str]  # the hashes written to the file last time
    vetoed: list[str]  # the hashes whose lines the owner deleted: never written again
    opted_out: str  # when the owner deleted the whole file ('' = not opted out): nothing is written to it


def state(db: sqlite3.Connection, path: str) -> FileState:
    """One memory file's record (empty when none)."""
    value = meta_value(db, _META_PREFIX + path)
    if value is None:
        return FileState([], [], "")
    try:
        data = json.loads(value)
        return FileState([str(h) for h in data.get("written", [])], [str(h) for h in data.get("vetoed", [])],
                         str(data.get("opted_out") or ""))
    except (ValueError, AttributeError):
        return FileState([], [], "")


def written(db: sqlite3.Connection, path: str) -> tuple[list[str], list[str]]:
    """(hashes written last time, hashes vetoed) for one memory file."""
    found = state(db, path)
    return found.written, found.vetoed


def set_written(db: sqlite3.Connection, path: str, hashes: list[str], vetoed: list[str], *,
                opted_out: str = "") -> None:
    """Inside a write transaction."""
    data: dict[str, object] = {"written": sorted(hashes), "vetoed": sorted(vetoed)}
    if opted_out:
        data["opted_out"] = opted_out
    Store.set_meta(db, _META_PREFIX + path, json.dumps(data))


def files(db: sqlite3.Connection) -> list[str]:
    """Every memory file a section was ever written to."""
    return [str(r[0])[len(_META_PREFIX):] for r in db.execute(
        "SELECT key FROM meta WHERE substr(key, 1, ?) = ?", (len(_META_PREFIX), _META_PREFIX))]
