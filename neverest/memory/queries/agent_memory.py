"""What the render into an agent's own memory file keeps per file (in ``meta``, key
``agent_memory:<path>``): the hashes last written, the veto list, and whether the owner opted the
file out (deleted it) and when.  The lessons it writes come from ``neverest.memory.views``."""

from __future__ import annotations

import json
import sqlite3
from typing import NamedTuple

from neverest.memory.store import Store, meta_value

_META_PREFIX = "agent_memory:"


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
