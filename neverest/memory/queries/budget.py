"""The storage budget's SQL (the rule is memory/budget.py, the glue memory/admission.py).

``received_usage`` (schema v5; added to by ``holdings.put``, taken from by a delete trigger) holds
the bytes by origin and peer.
``declined`` (schema v5) remembers origins this memory chose not to hold, with the head it
was offered or held of them: gossip's digest shows that head (gossip/view.py), so peers do not
send the origin again until the row expires.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Iterable
from typing import NamedTuple

# Where a peer address came from when the owner chose it (peers/table.py's sources).
_CHOSEN = ("manual", "config")


class PeerBytes(NamedTuple):
    origin: str
    peer: str
    size: int
    last: str  # when the last of these records arrived


_USAGE = "SELECT origin, peer, bytes, last FROM received_usage WHERE origin != ?"


def usage(db: sqlite3.Connection, own_origin: str, *, origins: Collection[str] | None = None,
          peers: Collection[str] = ()) -> list[PeerBytes]:
    """Bytes of records held from other origins, by origin and delivering peer (``received_usage``,
    kept by ``holdings.put`` and a delete trigger on ``records``): every row, or only those of
    ``origins`` or ``peers``."""
    if origins is None:
        rows = db.execute(_USAGE, (own_origin,))
    else:
        rows = db.execute(f"{_USAGE} AND (origin IN (SELECT value FROM json_each(?)) "
                          "OR peer IN (SELECT value FROM json_each(?)))",
                          (own_origin, json.dumps(sorted(origins)), json.dumps(sorted(peers))))
    return [PeerBytes(str(o), str(p), int(n), str(t)) for o, p, n, t in rows]


def received_bytes(db: sqlite3.Connection, own_origin: str) -> tuple[int, int]:
    """(records, bytes) held from other origins."""
    n, size = db.execute("SELECT coalesce(sum(records), 0), coalesce(sum(bytes), 0) FROM received_usage "
                         "WHERE origin != ?", (own_origin,)).fetchone()
    return int(n), int(size)


def received_split(db: sqlite3.Connection, own_origin: str, trusted: Collection[str]) -> tuple[int, int]:
    """(bytes held from other origins, of those the bytes of origins not in ``trusted``), in one pass."""
    total, untrusted = db.execute(
        "SELECT coalesce(sum(bytes), 0), coalesce(sum(CASE WHEN origin IN (SELECT value FROM json_each(?)) "
        "THEN 0 ELSE bytes END), 0) FROM received_usage WHERE origin != ?",
        (json.dumps(sorted(trusted)), own_origin)).fetchone()
    return int(total), int(untrusted)


def report(db: sqlite3.Connection, own_origin: str, budget_bytes: int) -> dict[str, int]:
    """What status shows of the budget: records and bytes held from others, the budget, origins declined."""
    n, size = received_bytes(db, own_origin)
    declined_n = int(db.execute("SELECT count(*) FROM declined").fetchone()[0])
    return {"records": n, "bytes": size, "budget_bytes": budget_bytes, "declined_origins": declined_n}


def chosen_peer_origins(db: sqlite3.Connection) -> set[str]:
    """Origins of the peers the owner added by hand or in the config."""
    marks = ",".join("?" * len(_CHOSEN))
    return {str(r[0]) for r in db.execute(
        f"SELECT origin FROM peer_addresses WHERE source IN ({marks}) AND origin IS NOT NULL "
        f"UNION SELECT origin FROM peers WHERE source IN ({marks})", _CHOSEN + _CHOSEN)}


def peer_origins(db: sqlite3.Connection) -> set[str]:
    return {str(r[0]) for r in db.execute("SELECT origin FROM peers")}


def verified_supporters(db: sqlite3.Connection, min_lessons: int) -> set[str]:
    """Origins that signed (a lesson or a confirmation) at least ``min_lessons`` lessons whose
    predictions came true in this memory's own sessions."""
    return {str(r[0]) for r in db.execute(
        "SELECT origin FROM records WHERE type IN ('lesson', 'confirm') AND target IN ("
        "  SELECT l.hash FROM predictions p JOIN lessons l ON l.id = p.lesson_id WHERE p.outcome = 'confirmed') "
        "GROUP BY origin HAVING count(DISTINCT target) >= ?", (min_lessons,))}


class Head(NamedTuple):
    seq: int
    digest: str


def held_head(db: sqlite3.Connection, origin: str) -> Head | None:
    """The origin's highest seq held and that record's digest."""
    row = db.execute("SELECT seq, digest FROM records WHERE origin = ? AND seq IS NOT NULL "
                     "ORDER BY seq DESC LIMIT 1", (origin,)).fetchone()
    return None if row is None or row[1] is None else Head(int(row[0]), str(row[1]))


def declined(db: sqlite3.Connection) -> dict[str, Head]:
    """Every declined origin with the head this memory shows for it."""
    return {str(o): Head(int(s), str(d)) for o, s, d in db.execute("SELECT origin, seq, digest FROM declined")}


def declined_seqs(db: sqlite3.Connection, *, after: str) -> dict[str, int]:
    """The origins declined until after ``after``, with the seq shown for them."""
    return {str(o): int(s) for o, s in db.execute("SELECT origin, seq FROM declined WHERE until > ?", (after,))}


def declined_head(db: sqlite3.Connection, origin: str) -> Head | None:
    row = db.execute("SELECT seq, digest FROM declined WHERE origin = ?", (origin,)).fetchone()
    return None if row is None else Head(int(row[0]), str(row[1]))


def decline(db: sqlite3.Connection, origin: str, head: Head, *, until: str) -> None:
    """Decline ``origin`` until ``until``, showing ``head`` (or the higher one already declined)."""
    # Every right-hand side reads the row as it was, so ``seq`` in the CASE is the old one.
    db.execute("INSERT INTO declined (origin, seq, digest, until) VALUES (?, ?, ?, ?) ON CONFLICT(origin) "
               "DO UPDATE SET until = excluded.until, seq = max(seq, excluded.seq), "
               "digest = CASE WHEN excluded.seq > seq THEN excluded.digest ELSE digest END",
               (origin, head.seq, head.digest, until))


def undecline(db: sqlite3.Connection, *, expired_at: str, origins: Iterable[str] = ()) -> list[str]:
    """Forget declines that expired by ``expired_at``, and those of ``origins``; the origins forgotten."""
    gone = [str(r[0]) for r in db.execute("DELETE FROM declined WHERE until <= ? RETURNING origin", (expired_at,))]
    for origin in origins:
        gone += [str(r[0]) for r in db.execute("DELETE FROM declined WHERE origin = ? RETURNING origin", (origin,))]
    return gone


def evict(db: sqlite3.Connection, origin: str) -> tuple[int, int]:
    """Remove what this memory holds only because of ``origin``; (records, lessons) removed.

    Gone: the origin's records, except revocations of a lesson still held here (they keep
    applying: a lesson revoked by its publisher must not come back by a slower path); and the
    candidate lessons received from it that no other origin supports, with their predictions.
    Staying: fork evidence (against the origin), tombstones, and the origin's count in other
    lessons' support (so that it is not counted twice if its records come back).
    """
    alone = [int(r[0]) for r in db.execute(
        "SELECT id FROM lessons WHERE origin = ? AND layer != 'personal' AND id NOT IN "
        "(SELECT lesson_id FROM lesson_origins WHERE origin != ?) AND id NOT IN (SELECT lesson_id FROM lesson_sources)",
        (origin, origin))]
    for lesson_id in alone:
        db.execute("DELETE FROM predictions WHERE lesson_id = ?", (lesson_id,))
        db.execute("DELETE FROM lesson_origins WHERE lesson_id = ?", (lesson_id,))
        db.execute("DELETE FROM lessons WHERE id = ?", (lesson_id,))
    records = db.execute(
        "DELETE FROM records WHERE origin = ? AND NOT (type = 'revoke' AND ("
        "  target IN (SELECT hash FROM lessons) OR target IN (SELECT target FROM records WHERE origin != ?)))",
        (origin, origin)).rowcount
    return records, len(alone)
