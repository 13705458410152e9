"""Key terms: the words of a query that say what it is about, and the rows that share them (BM25).

A query such as "fastapi module not found" is about fastapi and a module; "not found" is how half of
all failures read.  Recall and the hook rank a row that shares a key term above one that shares none,
and among rows that share some, by BM25 over the full-text indexes (``episodes_fts``, ``lessons_fts``,
FTS5 with the trigram tokenizer, so "module" is found inside ModuleNotFoundError).

Standard library only (the hook imports it).
"""

from __future__ import annotations

import re
import sqlite3
from typing import Final

from neverest.memory.queries import fulltext

MAX_TERMS: Final = 12
MAX_ROWS: Final = 2000
_WORD: Final = re.compile(r"[A-Za-z0-9_][\w.+-]*[A-Za-z0-9_]|[A-Za-z0-9_]")
# Words too common, or too generic to failures, to say what a query is about.
GENERIC: Final = frozenset(
    "a an the and or but if then else of to in on at by for with from into onto as is are was were be been being "
    "it its this that these those there here i you he she we they me my your our their them us do does did done "
    "not no yes can could should would will shall may might must have has had so than too very just also again "
    "what which who whom whose when where why how all any some each every more most other such only own same "
    "please now up down out over under about after before while get got make made use used using run runs ran "
    "error errors fail fails failed failing failure found cannot can't unable missing invalid issue problem "
    "broken doesn't don't didn't isn't work works working wrong still fix fixed try tried".split())


def key_terms(text: str) -> list[str]:
    """The query's key terms, lower-cased, in order, at most ``MAX_TERMS`` (three characters or more:
    the trigram index finds nothing shorter)."""
    out: list[str] = []
    for word in _WORD.findall(text.lower()):
        if len(word) >= 3 and word not in GENERIC and word not in out:
            out.append(word)
        if len(out) == MAX_TERMS:
            break
    return out


def matches(db: sqlite3.Connection, table: str, terms: list[str]) -> dict[int, float]:
    """Rowid → BM25 weight in (0, 1] (1 for the best) of the rows of ``table`` ("episodes" or "lessons")
    that hold one of ``terms``; {} without terms, or when the index is not there (a store not migrated)."""
    if not terms:
        return {}
    expression = " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
    try:
        rows = fulltext.bm25(db, table, expression, MAX_ROWS)
    except sqlite3.OperationalError:
        return {}
    if not rows:
        return {}
    best = max(-float(score) for _, score in rows) or 1.0
    return {int(rowid): max(-float(score), 0.0) / best if best > 0 else 1.0 for rowid, score in rows}
