"""The vector columns (``space``, ``embedding``) of episodes, lessons and predictions.

A row's vector is "in" a space when its ``space`` column names it; ``space IS NULL``
means not embedded yet.  What each table embeds: an episode its gist, a lesson its
sentence, a prediction its sentence.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Final, Literal, NamedTuple

Table = Literal["episodes", "lessons", "predictions"]
_TEXT: Final[dict[str, str]] = {"episodes": "gist", "lessons": "text", "predictions": "text"}
_KEY: Final[dict[str, str]] = {"episodes": "id", "lessons": "id", "predictions": "id"}


class ToEmbed(NamedTuple):
    id: str | int
    text: str


def needing(db: sqlite3.Connection, table: Table, space: str, limit: int, *, unembedded_only: bool = False,
            unarchived_only: bool = False) -> list[ToEmbed]:
    """Rows of ``table`` whose vector is not in ``space``: never embedded, or (unless
    ``unembedded_only``) embedded in another space.  A row with a space but no vector is
    not embedded: releases before 0.2 stored their own lessons so (centroid only)."""
    sql = f"SELECT {_KEY[table]}, {_TEXT[table]} FROM {table} WHERE "
    sql += "(space IS NULL OR embedding IS NULL)" if unembedded_only else \
        "(space IS NULL OR space != ? OR embedding IS NULL)"
    args: tuple[object, ...] = () if unembedded_only else (space,)
    if unarchived_only and table != "predictions":
        sql += " AND archived = 0"
    return [ToEmbed(r[0], r[1]) for r in db.execute(sql + " LIMIT ?", (*args, limit))]


def store(db: sqlite3.Connection, table: Table, rows: Sequence[tuple[str, bytes, str | int]]) -> None:
    """Set ``(space, embedding blob, id)`` for each row, inside a write transaction."""
    db.executemany(f"UPDATE {table} SET space = ?, embedding = ? WHERE {_KEY[table]} = ?", rows)


def spaces(db: sqlite3.Connection, table: Table) -> dict[str, int]:
    """How many rows of ``table`` hold a vector in each space."""
    return {str(r[0]): int(r[1]) for r in db.execute(
        f"SELECT space, count(*) FROM {table} WHERE space IS NOT NULL AND embedding IS NOT NULL GROUP BY space")}
