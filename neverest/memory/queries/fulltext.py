"""The full-text indexes (``episodes_fts``, ``lessons_fts``, schema version 8; a new lesson is indexed by
``lessons.create`` since version 11): BM25 of the rows that hold any of some terms.  Standard library
only: the hook reads it."""

from __future__ import annotations

import sqlite3
from typing import Final

_INDEXES: Final = {"episodes": "episodes_fts", "lessons": "lessons_fts"}


def bm25(db: sqlite3.Connection, table: str, expression: str, limit: int) -> list[tuple[int, float]]:
    """(rowid, bm25) of the rows of ``table`` ("episodes" or "lessons") matching the FTS5 ``expression``
    (lower bm25 is better); raises sqlite3.OperationalError when the index is not there."""
    fts = _INDEXES[table]
    return [(int(r[0]), float(r[1])) for r in db.execute(
        f"SELECT rowid, bm25({fts}) FROM {fts} WHERE {fts} MATCH ? LIMIT ?", (expression, limit))]
