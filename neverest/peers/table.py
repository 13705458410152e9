"""The peer table: who this memory gossips with, where they are, and how they behaved.

A *peer* is an origin (``peers``: source, last seen, score); an *address* is a URL
where some peer answers (``peer_addresses``).  An address is known before its
origin: ``neverestctl peer add URL`` works while the peer is offline, and the
address learns its origin from the peer's signed hello at the first exchange.  A
URL that later answers with another origin is re-keyed to it (the machine at that
address changed) and logged by the caller.

Scoring: each exchange that completes adds ``SUCCESS``; a failure subtracts a
penalty chosen by its kind (``PENALTY``).  An address whose consecutive failures
reach ``IGNORE_AFTER``, or a peer whose score falls below ``IGNORE_BELOW``, is
ignored for a back-off that doubles with each further failure (capped at a day),
so a hostile or broken peer costs little and a peer that comes back is tried again.

Every function runs inside the caller's write transaction, or reads.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final
from urllib.parse import urlsplit

from neverest.clock import iso

SOURCES: Final = ("manual", "mdns", "directory")
SUCCESS: Final = 1.0
PENALTY: Final = {"timeout": 2.0, "unreachable": 1.0, "invalid-records": 5.0, "oversize": 5.0,
                  "too-many": 5.0, "protocol": 5.0, "identity": 10.0}
IGNORE_AFTER: Final = 3
IGNORE_BELOW: Final = -20.0
BACKOFF_BASE: Final = timedelta(minutes=5)
BACKOFF_MAX: Final = timedelta(days=1)
SCORE_RANGE: Final = (-100.0, 100.0)


class PeerError(ValueError):
    """A peer address or name the user gave cannot be used."""


def normalise_url(url: str) -> str:
    """``http://host:port`` (no path, query or fragment); raises PeerError otherwise."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PeerError(f"{url!r} is not an http:// or https:// URL with a host")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise PeerError(f"{url!r}: give only scheme, host and port, like http://192.0.2.7:7428")
    try:
        port = parts.port
    except ValueError:
        raise PeerError(f"{url!r} has an invalid port") from None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}" + (f":{port}" if port else "")


@dataclass(frozen=True)
class Address:
    url: str
    origin: str | None
    source: str
    last_seen: str | None
    last_error: str | None
    failures: int
    ignored_until: str | None
    score: float


def add(db: sqlite3.Connection, url: str, *, source: str, now: datetime, origin: str | None = None) -> str:
    """Add (or refresh) an address; returns its normal form."""
    if source not in SOURCES:
        raise PeerError(f"unknown peer source {source!r}")
    url = normalise_url(url)
    db.execute("INSERT INTO peer_addresses (url, origin, source, added) VALUES (?, ?, ?, ?) "
               "ON CONFLICT(url) DO UPDATE SET origin = COALESCE(excluded.origin, origin)",
               (url, origin, source, iso(now)))
    if origin is not None:
        _ensure_peer(db, origin, source)
    return url


def _ensure_peer(db: sqlite3.Connection, origin: str, source: str) -> None:
    db.execute("INSERT INTO peers (origin, source) VALUES (?, ?) ON CONFLICT(origin) DO NOTHING", (origin, source))


def remove(db: sqlite3.Connection, url_or_origin: str) -> int:
    """Forget an address, or a peer and all its addresses; returns how many rows went."""
    try:
        url = normalise_url(url_or_origin)
    except PeerError:
        url = None
    if url is not None:
        return db.execute("DELETE FROM peer_addresses WHERE url = ?", (url,)).rowcount
    gone = db.execute("DELETE FROM peer_addresses WHERE origin = ?", (url_or_origin,)).rowcount
    return gone + db.execute("DELETE FROM peers WHERE origin = ?", (url_or_origin,)).rowcount


def listing(db: sqlite3.Connection) -> list[Address]:
    return [Address(*row) for row in db.execute(
        "SELECT a.url, a.origin, a.source, a.last_seen, a.last_error, a.failures, a.ignored_until, "
        "COALESCE(p.score, 0) FROM peer_addresses a LEFT JOIN peers p ON p.origin = a.origin ORDER BY a.url")]


def healthy(db: sqlite3.Connection, now: datetime) -> list[Address]:
    """Addresses worth trying now: not in back-off."""
    stamp = iso(now)
    return [a for a in listing(db) if a.ignored_until is None or a.ignored_until <= stamp]


def succeeded(db: sqlite3.Connection, url: str, origin: str, now: datetime) -> str | None:
    """An exchange with ``url`` completed and the peer proved it is ``origin``.

    Returns the origin the address had before when it changed (for the caller to log).
    """
    row = db.execute("SELECT origin, source FROM peer_addresses WHERE url = ?", (url,)).fetchone()
    before = row[0] if row else None
    db.execute("UPDATE peer_addresses SET origin = ?, last_seen = ?, last_error = NULL, failures = 0, "
               "ignored_until = NULL WHERE url = ?", (origin, iso(now), url))
    _ensure_peer(db, origin, row[1] if row else "manual")
    db.execute("UPDATE peers SET last_seen = ?, score = min(score + ?, ?) WHERE origin = ?",
               (iso(now), SUCCESS, SCORE_RANGE[1], origin))
    return before if before not in (None, origin) else None


def failed(db: sqlite3.Connection, url: str, kind: str, detail: str, now: datetime) -> None:
    """An exchange with ``url`` failed for a reason of ``kind`` (a key of PENALTY)."""
    penalty = PENALTY[kind]
    row = db.execute("SELECT origin, failures FROM peer_addresses WHERE url = ?", (url,)).fetchone()
    if row is None:
        return
    origin, failures = row[0], row[1] + 1
    score = None
    if origin is not None:
        db.execute("UPDATE peers SET score = max(score - ?, ?) WHERE origin = ?", (penalty, SCORE_RANGE[0], origin))
        score = db.execute("SELECT score FROM peers WHERE origin = ?", (origin,)).fetchone()[0]
    ignored_until = None
    if failures >= IGNORE_AFTER or (score is not None and score < IGNORE_BELOW):
        backoff = min(BACKOFF_BASE * 2 ** max(failures - IGNORE_AFTER, 0), BACKOFF_MAX)
        ignored_until = iso(now + backoff)
    db.execute("UPDATE peer_addresses SET failures = ?, last_error = ?, ignored_until = ? WHERE url = ?",
               (failures, json.dumps({"kind": kind, "detail": detail[:300], "at": iso(now)}), ignored_until, url))
