"""Transcript cursors (kept in ``meta`` under one key prefix) and the episodes listing."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, Final

CURSOR_PREFIX: Final = "transcript:"
LISTED: Final = ("id", "kind", "agent", "session", "cwd", "at", "title", "said", "happened", "expected", "text", "gist")


def cursors(db: sqlite3.Connection) -> dict[str, str]:
    """Every transcript cursor, by file path."""
    # '\x7f' sorts after every character a path key can start with after the prefix's ':'.
    rows = db.execute("SELECT key, value FROM meta WHERE key >= ? AND key < ?",
                      (CURSOR_PREFIX, CURSOR_PREFIX[:-1] + ";"))
    return {str(key)[len(CURSOR_PREFIX):]: str(value) for key, value in rows}


def save_cursors(db: sqlite3.Connection, values: dict[str, str]) -> None:
    db.executemany("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                   [(CURSOR_PREFIX + path, value) for path, value in values.items()])


def drop_cursors(db: sqlite3.Connection, paths: Sequence[str]) -> None:
    db.executemany("DELETE FROM meta WHERE key = ?", [(CURSOR_PREFIX + path,) for path in paths])


def list_episodes(db: sqlite3.Connection, *, kind: str | None, session: str | None, since: str | None,
                  limit: int) -> list[dict[str, Any]]:
    """Stored episodes, newest first, filtered by kind, session and ``at >= since``."""
    where: list[str] = []
    params: list[object] = []
    for column, op, value in (("kind", "=", kind), ("session", "=", session), ("at", ">=", since)):
        if value is not None:
            where.append(f"{column} {op} ?")
            params.append(value)
    sql = f"SELECT {', '.join(LISTED)} FROM episodes"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY at DESC, id LIMIT ?"
    params.append(limit)
    return [dict(zip(LISTED, row, strict=True)) for row in db.execute(sql, params)]
