"""The peer table: who this memory gossips with, where they are, and how they behaved.

A *peer* is an origin (``peers``: source, last seen, score); an *address* is a URL
where some peer answers (``peer_addresses``).  An address is known before its
origin: ``neverestctl peer add HOST:PORT`` works while the peer is offline, and the
address learns its origin from the peer's signed hello at the first exchange.  A
URL that later answers with another origin is re-keyed to it (the machine at that
address changed) and logged by the caller.

Where an address came from is its ``source``: ``manual`` (``peer add``), ``mdns``,
``directory``, ``peer:<origin>`` (shared by that peer in an exchange: ``learn``),
``inbound`` (a peer that gossiped with us and said which port it listens on:
``inbound``), or ``self`` (an exchange showed this memory answers there: never
picked again, and ``add`` refuses it).  An address a peer shared is only an address:
its origin is learned from its own signed exchange, never from the peer that named it,
and how many a peer can add is bounded (per exchange, per peer, and in all).  An inbound
address is the one exception: the peer named its own address in a request it signed, from
that host, so the address takes that origin at once (``peer list`` shows who it is); the
first exchange with it checks the claim, and re-keys the address if another origin answers.
An address's ``last_seen`` is when an exchange *with it* last completed (what ``shareable``
needs); ``Address.peer_seen`` is when its origin was last heard from, either way.

Scoring: each exchange that completes adds ``SUCCESS``; a failure the peer caused
subtracts a penalty chosen by its kind (``PENALTY``).  A transport failure (``timeout``,
``unreachable``, ``busy``: the network's fault or a peer asking us to come back later)
costs no score, but counts as a failure like the others: an address whose consecutive
failures reach ``IGNORE_AFTER``, or a peer whose score falls below ``IGNORE_BELOW``, is
ignored for a back-off that doubles with each further failure (capped at a day), so a
hostile or broken peer costs little and a peer that comes back is tried again.  The back-off
starts at 5 minutes after a failure the peer caused, at 10 seconds after one of the network's.

Every function runs inside the caller's write transaction, or reads.
"""

from __future__ import annotations

import ipaddress
import json
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from neverest.clock import iso

SOURCES: Final = ("manual", "mdns", "directory", "inbound", "config")
CHOSEN_SOURCES: Final = ("manual", "config")  # the owner's choice (memory.queries.budget's _CHOSEN)
LEARNED_PREFIX: Final = "peer:"  # + the origin of the peer that shared the address
SELF: Final = "self"
DEFAULT_PORT: Final = 7428
SUCCESS: Final = 1.0
# A transport failure costs no score: the network failed, not the peer.
TRANSPORT_KINDS: Final = frozenset({"timeout", "unreachable", "busy"})
PENALTY: Final = {"timeout": 0.0, "unreachable": 0.0, "busy": 0.0, "invalid-records": 5.0, "oversize": 5.0,
                  "too-many": 5.0, "protocol": 5.0, "identity": 10.0, "bad-addresses": 2.0}
IGNORE_AFTER: Final = 3
IGNORE_BELOW: Final = -20.0
BACKOFF_BASE: Final = timedelta(minutes=5)
# A peer that only failed to answer (not listening yet, a machine asleep, a network down) is tried again
# sooner: daemons started together at short periods failed 3 rounds against peers whose listeners were not
# up yet, ignored them for 5 minutes and were reached by no one meanwhile (docs/figures.md, Serf).  Doubling
# from 10 s, a peer that never comes back is still tried only ~20 times in its first day.
TRANSPORT_BACKOFF_BASE: Final = timedelta(seconds=10)
BACKOFF_MAX: Final = timedelta(days=1)
SCORE_RANGE: Final = (-100.0, 100.0)

# Addresses shared in an exchange (PROTOCOL.md, "Peers learned from peers").
MAX_URL_BYTES: Final = 200
SHARE_MAX: Final = 16  # addresses sent per exchange (the wire bound)
LEARN_PER_EXCHANGE: Final = 8  # new addresses taken from one peer in one exchange
LEARN_PER_PEER: Final = 64  # addresses one peer can have added, in all
LEARN_TOTAL: Final = 512  # addresses learned from peers or inbound, in all

_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")


class PeerError(ValueError):
    """A peer address or name the user gave cannot be used."""


def _host(host: str, text: str) -> str:
    """The host part in its normal form, or PeerError."""
    if not host:
        raise PeerError(f"{text!r} has no host; give one like 192.0.2.7:7428")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is not None:
        return f"[{ip.compressed}]" if ip.version == 6 else ip.compressed
    name = host.lower()
    if len(name) > 253 or not name.isascii() or not _HOSTNAME.fullmatch(name):
        raise PeerError(f"{text!r}: {host!r} is not a host name or an IP address")
    return name


def normalise_url(url: str, *, require_scheme: bool = False) -> str:
    """An address in its normal form ``http://host:port``; raises PeerError saying what is wrong.

    Accepted: ``http://host:port`` or ``https://host:port`` (no path, query, fragment or user
    name); and, unless ``require_scheme``, ``host:port``, ``[v6]:port``, a bare IPv6 address or
    ``host``, which mean ``http://`` with the default port 7428 when none is given.
    """
    text = url.strip()
    if not text:
        raise PeerError("the peer address is empty; give host:port, like 192.0.2.7:7428")
    if len(text.encode("utf-8", "replace")) > 2 * MAX_URL_BYTES:
        raise PeerError(f"the peer address {text[:40]!r}... is over {2 * MAX_URL_BYTES} bytes")
    explicit = "://" in text
    if explicit:
        scheme, _, rest = text.partition("://")
        scheme = scheme.lower()
        if scheme not in ("http", "https"):
            raise PeerError(f"{url!r}: peers speak http:// (or https:// behind a proxy), not {scheme}://")
    elif require_scheme:
        raise PeerError(f"{url!r} is not an http:// URL")
    else:
        scheme, rest = "http", text
        try:
            rest = f"[{ipaddress.IPv6Address(rest).compressed}]"  # a bare IPv6 address, without a port
        except ValueError:
            pass
    rest = rest.removesuffix("/")
    if any(c in rest for c in "/?#"):
        raise PeerError(f"{url!r}: give only the host and port, with no path, query or fragment "
                        "(like 192.0.2.7:7428)")
    if "@" in rest:
        raise PeerError(f"{url!r}: a peer address has no user name or password")
    if rest.startswith("["):
        end = rest.find("]")
        if end < 0:
            raise PeerError(f"{url!r}: the IPv6 address has no closing bracket")
        host, after = rest[1:end], rest[end + 1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise PeerError(f"{url!r}: {host!r} in brackets is not an IPv6 address") from None
        if after and not after.startswith(":"):
            raise PeerError(f"{url!r}: only :port may follow the IPv6 address")
        port_text = after[1:] if after else None
    else:
        host, colon, port_text_or = rest.rpartition(":") if ":" in rest else (rest, "", "")
        if ":" in host:
            raise PeerError(f"{url!r}: write an IPv6 address in brackets, like [2001:db8::7]:7428")
        port_text = port_text_or if colon else None
    if port_text is None:
        port = None if explicit else DEFAULT_PORT
    else:
        if not (port_text.isascii() and port_text.isdigit()) or len(port_text) > 5:
            raise PeerError(f"{url!r}: the port {port_text!r} is not a number from 1 to 65535")
        port = int(port_text)
        if not 1 <= port <= 65535:
            raise PeerError(f"{url!r}: the port {port} is out of range (1 to 65535)")
    return f"{scheme}://{_host(host, url)}" + (f":{port}" if port is not None else "")


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
    peer_seen: str | None = None  # when its origin was last heard from (an exchange either way)

    @property
    def heard(self) -> str | None:
        """When this peer was last seen, by an exchange with this address or one it started."""
        return max((t for t in (self.last_seen, self.peer_seen) if t), default=None)


@dataclass
class Learned:
    """What ``learn`` did with the addresses a peer shared."""

    added: int = 0
    known: int = 0  # already in the table (nothing about them changed)
    bad: int = 0  # not an http:// address, or over MAX_URL_BYTES
    dropped: int = 0  # over a bound (per exchange, per peer, in all)


def _valid_source(source: str) -> bool:
    if source in SOURCES:
        return True
    origin = source.removeprefix(LEARNED_PREFIX)
    return source.startswith(LEARNED_PREFIX) and re.fullmatch(r"[0-9a-f]{16}", origin) is not None


def _is_self(db: sqlite3.Connection, url: str, own_origin: str | None) -> bool:
    row = db.execute("SELECT origin, source FROM peer_addresses WHERE url = ?", (url,)).fetchone()
    return row is not None and (row[1] == SELF or (own_origin is not None and row[0] == own_origin))


def add(db: sqlite3.Connection, url: str, *, source: str, now: datetime, origin: str | None = None,
        own_origin: str | None = None) -> str:
    """Add (or refresh) an address; returns its normal form.

    Raises PeerError for an address that is not usable.  An address known to be this
    memory's own (marked by ``mark_self``, or whose origin is ``own_origin``) is refused
    too: with PeerError when a person gave it (``manual``); left as it is otherwise, since
    the directory and zeroconf list this memory among the others, and that is no error.
    """
    if not _valid_source(source):
        raise PeerError(f"unknown peer source {source!r}")
    url = normalise_url(url)
    if (origin is not None and origin == own_origin) or _is_self(db, url, own_origin):
        if source != "manual":
            return url
        raise PeerError(f"{url} is this memory's own address")
    db.execute("INSERT INTO peer_addresses (url, origin, source, added) VALUES (?, ?, ?, ?) "
               "ON CONFLICT(url) DO UPDATE SET origin = COALESCE(excluded.origin, origin)",
               (url, origin, source, iso(now)))
    if origin is not None:
        _ensure_peer(db, origin, source)
    return url


def _ensure_peer(db: sqlite3.Connection, origin: str, source: str) -> None:
    db.execute("INSERT INTO peers (origin, source) VALUES (?, ?) ON CONFLICT(origin) DO NOTHING", (origin, source))


def mark_self(db: sqlite3.Connection, url: str, own_origin: str, now: datetime) -> None:
    """An exchange with ``url`` reached this memory itself: never pick it again, and blame nobody."""
    db.execute("INSERT INTO peer_addresses (url, origin, source, added) VALUES (?, ?, ?, ?) "
               "ON CONFLICT(url) DO UPDATE SET origin = excluded.origin, source = excluded.source, "
               "failures = 0, last_error = NULL, ignored_until = NULL",
               (url, own_origin, SELF, iso(now)))


def remove(db: sqlite3.Connection, url_or_origin: str) -> int:
    """Forget an address, or a peer and all its addresses; returns how many rows went."""
    try:
        url = normalise_url(url_or_origin)
    except PeerError:
        url = None
    if url is not None:
        gone = db.execute("DELETE FROM peer_addresses WHERE url = ?", (url,)).rowcount
        if gone:
            return int(gone)
    gone = db.execute("DELETE FROM peer_addresses WHERE origin = ?", (url_or_origin,)).rowcount
    return int(gone + db.execute("DELETE FROM peers WHERE origin = ?", (url_or_origin,)).rowcount)


def listing(db: sqlite3.Connection) -> list[Address]:
    return [Address(*row) for row in db.execute(
        "SELECT a.url, a.origin, a.source, a.last_seen, a.last_error, a.failures, a.ignored_until, "
        "COALESCE(p.score, 0), p.last_seen FROM peer_addresses a LEFT JOIN peers p ON p.origin = a.origin "
        "ORDER BY a.url")]


def healthy(db: sqlite3.Connection, now: datetime) -> list[Address]:
    """Addresses worth trying now: not this memory's own, not in back-off."""
    stamp = iso(now)
    return [a for a in listing(db) if a.source != SELF and (a.ignored_until is None or a.ignored_until <= stamp)]


def shareable(db: sqlite3.Connection, now: datetime, *, limit: int = SHARE_MAX) -> list[tuple[str, str]]:
    """(url, origin) of the addresses worth telling a peer about: plain http://, an exchange with
    them completed and none failed since, most recently seen first."""
    stamp = iso(now)
    rows = db.execute(
        "SELECT url, origin FROM peer_addresses WHERE source != ? AND origin IS NOT NULL AND last_seen IS NOT NULL "
        "AND failures = 0 AND (ignored_until IS NULL OR ignored_until <= ?) AND url LIKE 'http://%' "
        "AND length(url) <= ? ORDER BY last_seen DESC, url LIMIT ?", (SELF, stamp, MAX_URL_BYTES, limit))
    return [(str(url), str(origin)) for url, origin in rows]


def _learned_count(db: sqlite3.Connection, source: str | None = None) -> int:
    if source is None:
        row = db.execute("SELECT count(*) FROM peer_addresses WHERE source LIKE 'peer:%' OR source = 'inbound'")
    else:
        row = db.execute("SELECT count(*) FROM peer_addresses WHERE source = ?", (source,))
    return int(row.fetchone()[0])


def learn(db: sqlite3.Connection, urls: Iterable[str], *, via: str, now: datetime) -> Learned:
    """Take the addresses peer ``via`` shared, as addresses only (their origin is learned from them).

    Only plain ``http://`` URLs of at most MAX_URL_BYTES count; the rest are ``bad`` (the caller
    penalises the peer).  New ones are bounded per exchange, per peer and in all; beyond a
    bound they are ``dropped``.  Known addresses, this memory's own included, are left as they are.
    """
    source = LEARNED_PREFIX + via
    if not _valid_source(source):
        raise ValueError(f"{via!r} is not an origin")
    out = Learned()
    by_peer, total = _learned_count(db, source), _learned_count(db)
    for raw in urls:
        if len(raw.encode("utf-8", "replace")) > MAX_URL_BYTES or not raw.startswith("http://"):
            out.bad += 1
            continue
        try:
            url = normalise_url(raw, require_scheme=True)
        except PeerError:
            out.bad += 1
            continue
        if db.execute("SELECT 1 FROM peer_addresses WHERE url = ?", (url,)).fetchone() is not None:
            out.known += 1
            continue
        if out.added >= LEARN_PER_EXCHANGE or by_peer >= LEARN_PER_PEER or total >= LEARN_TOTAL:
            out.dropped += 1
            continue
        db.execute("INSERT INTO peer_addresses (url, origin, source, added) VALUES (?, NULL, ?, ?)",
                   (url, source, iso(now)))
        out.added, by_peer, total = out.added + 1, by_peer + 1, total + 1
    return out


def inbound(db: sqlite3.Connection, origin: str, url: str | None, now: datetime) -> bool:
    """A peer proved it is ``origin`` by a signed request; ``url`` is where it said it listens
    (its advertised port at the address the request came from), or None.

    The peer is recorded (source ``inbound`` when it is new) and seen now; the address is
    added with that origin (the peer named it in a request it signed: the first exchange with
    it checks the claim), unless the bound on learned addresses is reached.  A known address
    whose origin is not known yet takes it; one with an origin keeps it (only an exchange with
    it changes that).  Returns whether the address was added.
    """
    _ensure_peer(db, origin, "inbound")
    db.execute("UPDATE peers SET last_seen = ? WHERE origin = ?", (iso(now), origin))
    if url is None:
        return False
    db.execute("UPDATE peer_addresses SET origin = ? WHERE url = ? AND origin IS NULL", (origin, url))
    if _learned_count(db) >= LEARN_TOTAL:
        return False
    cursor = db.execute("INSERT INTO peer_addresses (url, origin, source, added) VALUES (?, ?, 'inbound', ?) "
                        "ON CONFLICT(url) DO NOTHING", (url, origin, iso(now)))
    return bool(cursor.rowcount)


def claim_chosen(db: sqlite3.Connection, url: str, origin: str) -> None:
    """The peer at an address the owner chose (added by hand or in the config) proved, by a signed
    answer, that it is ``origin``: the address takes that origin now, before the records of this first
    exchange are screened, so that they are screened as a chosen peer's and not a stranger's (the
    storage budget's per-peer bound).  An address that already names an origin keeps it: only a
    completed exchange changes that (``succeeded``)."""
    marks = ",".join("?" * len(CHOSEN_SOURCES))
    db.execute(f"UPDATE peer_addresses SET origin = ? WHERE url = ? AND origin IS NULL AND source IN ({marks})",
               (origin, url, *CHOSEN_SOURCES))


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


def penalise(db: sqlite3.Connection, origin: str, kind: str) -> None:
    """Lower a peer's score for what it sent (``kind`` a key of PENALTY), without touching its addresses."""
    db.execute("UPDATE peers SET score = max(score - ?, ?) WHERE origin = ?", (PENALTY[kind], SCORE_RANGE[0], origin))


def failed(db: sqlite3.Connection, url: str, kind: str, detail: str, now: datetime) -> None:
    """An exchange with ``url`` failed for a reason of ``kind`` (a key of PENALTY)."""
    penalty = PENALTY[kind]
    row = db.execute("SELECT origin, failures FROM peer_addresses WHERE url = ?", (url,)).fetchone()
    if row is None:
        return
    origin, failures = row[0], row[1] + 1
    score = None
    if origin is not None:
        if penalty:
            penalise(db, origin, kind)
        score = db.execute("SELECT score FROM peers WHERE origin = ?", (origin,)).fetchone()[0]
    ignored_until = None
    if failures >= IGNORE_AFTER or (score is not None and score < IGNORE_BELOW):
        hostile = score is not None and score < IGNORE_BELOW
        base = TRANSPORT_BACKOFF_BASE if kind in TRANSPORT_KINDS and not hostile else BACKOFF_BASE
        backoff = min(base * 2 ** max(failures - IGNORE_AFTER, 0), BACKOFF_MAX)
        ignored_until = iso(now + backoff)
    db.execute("UPDATE peer_addresses SET failures = ?, last_error = ?, ignored_until = ? WHERE url = ?",
               (failures, json.dumps({"kind": kind, "detail": detail[:300], "at": iso(now)}), ignored_until, url))
