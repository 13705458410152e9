"""The origins the owner named (table ``trusted``, schema v9), written by ``neverestctl trust``.

Named origins count as support under every trust policy and are pre-trusted under ``earned``
(memory/states.py reads them with the config's ``trust_allow``); the storage budget never
refuses or evicts their records (memory/admission.py).
"""

from __future__ import annotations

import sqlite3
from typing import NamedTuple


class Named(NamedTuple):
    origin: str
    note: str
    added: str  # when the owner named it


def named(db: sqlite3.Connection) -> list[Named]:
    return [Named(str(o), str(n), str(a)) for o, n, a in
            db.execute("SELECT origin, note, added FROM trusted ORDER BY added, origin")]


def named_origins(db: sqlite3.Connection) -> set[str]:
    return {str(r[0]) for r in db.execute("SELECT origin FROM trusted")}


def name(db: sqlite3.Connection, origin: str, *, note: str | None, added: str) -> bool:
    """Name ``origin`` (inside a write transaction); True when it was not named yet.  Naming it again
    keeps when it was first named and replaces the note only when one is given."""
    new = db.execute("SELECT 1 FROM trusted WHERE origin = ?", (origin,)).fetchone() is None
    if new:
        db.execute("INSERT INTO trusted (origin, note, added) VALUES (?, ?, ?)", (origin, note or "", added))
    elif note is not None:
        db.execute("UPDATE trusted SET note = ? WHERE origin = ?", (note, origin))
    return new


def unname(db: sqlite3.Connection, origin: str) -> bool:
    """Forget ``origin`` (inside a write transaction); False when it was not named here."""
    return db.execute("DELETE FROM trusted WHERE origin = ?", (origin,)).rowcount > 0
