"""The HTTP commons server: one signed file per memory, on a server that only checks who wrote it.

The commons is the protocol's second alternate transport (after the shared folder).
Every memory keeps one file of its own signed records on the server; every other
memory pulls the files that changed.  The server checks that each line of a file was
signed by the memory the file is named after, so a token holder cannot put words in
another memory's mouth; receivers still verify every record themselves (the server
is a carrier, never a source of trust).

Run it with ``neverestd commons --listen HOST:PORT --data DIR --tokens FILE`` or
``python -m neverest.transports.commons_server`` with the same options (``main``).
It is an ASGI app (``CommonsApp``) served by hypercorn's trio worker (``serve``);
SIGINT and SIGTERM stop it cleanly with exit status 0.

Options: ``--listen HOST:PORT`` (default ``127.0.0.1:7429``; give ``0.0.0.0:7429`` to
serve other machines; port 0 picks a free port), ``--data DIR`` (required, created if
missing), ``--tokens FILE`` (required), ``--rate R`` (requests per second per token,
default 100; 0 disables the limiter), ``--burst B`` (default 1 100), ``--body-timeout S``
(default 30), ``--max-origins N`` (default 10 000).  Exit status: 0 after a signal,
1 when the server cannot start (the message says why), 2 for a usage error.  Once
listening it logs ``commons server listening on http://HOST:PORT`` to standard error.
The server speaks plain HTTP: bearer tokens travel in the clear, so across untrusted
networks put a TLS-terminating proxy in front of it.

Endpoints
---------

Only these paths exist; anything else is 404.  The query string is ignored.  A path
with any percent-encoding is 404, and an origin is matched with the strict pattern
``[0-9a-f]{16}`` before it is used to name a file, so no request can reach a file
outside ``DIR/commons`` (``..%2F``, encoded slashes, upper-case hex, 15 or 17 digits:
all 404).

- ``GET|HEAD /commons/index``: a JSON array ``[{"origin", "updated", "records", "etag"}]``
  sorted by origin.  ``updated`` is when the server stored the file (ISO 8601 UTC with
  microseconds, ``Z``), ``records`` its number of records, ``etag`` exactly the ETag
  header a GET of the file answers (quotes included), so a client remembers one
  string per origin.  The index has an ETag of its own and honours
  ``If-None-Match``: a client that is up to date pays one request answered 304.
- ``GET|HEAD /commons/<origin>.jsonl``: the file as stored, byte for byte,
  ``Content-Type: application/x-ndjson``, with its ETag; ``If-None-Match`` → 304;
  404 when the server has no file for the origin.
- ``PUT /commons/<origin>.jsonl``: replace (or create) the origin's file.  Accepted
  only when every non-blank line is a valid record (``neverest.records.parse``: the
  full check, signature included) whose ``origin`` is the path's origin.  Lines are
  split as every reader splits them (``neverest.lines.read_lines``: ``\\n`` or
  ``\\r\\n``; lines holding only whitespace are skipped, as receivers skip them and do
  not count).  An empty body is accepted: a memory with no records yet (the client
  pushes one).  At most 1 000 records and 262 144 bytes (256 KiB) per file.  201 when
  the file is new, 200 when it replaced one (or was already exactly these bytes: then
  nothing is written and ``updated`` does not move); the answer carries the new ETag
  and a JSON body ``{"origin", "updated", "records", "etag"}``.
- ``POST /directory/announce``: a daemon says where it listens.  The body (at most
  4 096 bytes) is a JSON object with exactly the fields ``origin``, ``key`` (64 hex
  digits, the Ed25519 public key), ``url`` (``http(s)://host[:port]`` in the normal
  form of ``neverest.peers.table.normalise_url``), ``at`` (ISO 8601 with a zone) and
  ``sig``: 128 hex digits, Ed25519 by ``key`` over the UTF-8 bytes of
  ``json.dumps(the other four fields, sort_keys=True, separators=(",", ":"),
  ensure_ascii=False)``.  ``neverest.transports.announce.sign_announcement`` builds such a body.  ``origin`` must be
  the fingerprint of ``key``, the signature must verify, ``at`` must be within 10
  minutes of the server's clock, and an announcement signed earlier than the one
  stored for the same origin is refused (409), so a replay cannot move an origin
  back to an old address.  The exact field set keeps an announcement from ever being
  mistaken for a record (records always carry ``v``).  Answer: 200
  ``{"origin", "url", "at"}``.
- ``GET|HEAD /directory``: a JSON array ``[{"url", "origin", "at", "key", "sig"}]``,
  newest announcement first, at most 1 000 entries (what a daemon's directory reader
  keeps, ``neverest.peers.directory.parse`` reads it as is: point a daemon's
  ``directory`` setting at ``http://HOST:PORT/directory``).  ``key`` and ``sig`` let a
  reader check each entry itself.  ETag and ``If-None-Match`` as for the index.

Authentication and rate limits
------------------------------

Every endpoint, reads included, needs ``Authorization: Bearer <token>``: without
bearer credentials the answer is 401 with ``WWW-Authenticate: Bearer
realm="neverest-commons"``; with a token that is not in the tokens file, 403.
Authentication comes before routing, so a client without a valid token learns
nothing, not even which paths exist.  Tokens are compared with
``hmac.compare_digest`` against every configured token (no early exit).

The tokens file holds one token per line; blank lines and lines starting with ``#``
are ignored, surrounding whitespace is stripped.  A token is 16 to 512 characters of
``A-Z a-z 0-9 - . _ ~ + /`` optionally followed by ``=`` (RFC 6750), e.g. the output
of ``openssl rand -hex 32``.  The file is read at start (a file that cannot be read,
holds a malformed token or no token at all stops the server) and read again when its
modification time, size or inode changes (checked at most once a second), so tokens
are added and revoked without a restart; if the new version cannot be used, the
previous tokens stay in force and the error is logged.  Logs name a token by the
first 8 hex digits of its SHA-256, never by the token; a warning is logged at start
when the tokens file can be read by group or others.

Each token has a token bucket: ``rate`` requests per second, bursts of ``burst``
(defaults 100/s and 1 100, so that a full pull of 1 000 files fits in one burst).
Past it: 429 with ``Retry-After`` (whole seconds).  Every request costs 1, whatever
its kind.

Conditional requests
--------------------

ETags are strong: ``"<BLAKE2b-128 of the bytes, hex>"`` for a file, the same over the
served JSON for the index and the directory, so they survive restarts.

- Reads: ``If-None-Match`` (a list, ``*``, weak comparison) → 304 with the ETag and no body.
- Writes: ``If-Match: <etag>`` must name the current file's ETag (strong comparison);
  ``If-Match: *`` means the file must exist; ``If-None-Match: *`` means it must not
  exist yet (a first push); ``If-None-Match: <etag>`` means it must not be that
  version.  Otherwise 412, with the current ETag in the answer when there is a file.
  A PUT without a condition is accepted (last writer wins); the Neverest client
  always sends one, so two writers of one origin never silently overwrite each other.
  The check and the replacement are atomic with respect to every other PUT: writes
  to one origin are serialised, so of two PUTs with the same ``If-Match`` exactly one
  succeeds and the other gets 412.

Status codes and errors
-----------------------

Every error has a JSON body ``{"error": code, "message": text}`` (plus fields named
below) that says who is at fault.

======  ==========================  ===================================================
status  ``error``                   when
======  ==========================  ===================================================
400     ``bad-request``             a malformed ``Content-Length``
400     ``bad-encoding``            the body is not UTF-8 (``message`` gives the byte)
400     ``bad-announcement``        the announcement is not a JSON object with the
                                    exact fields, or a field has the wrong shape;
                                    ``reason`` is ``not-json``, ``bad-field`` or ``bad-url``
401     ``unauthorized``            no bearer token
403     ``forbidden``               a token that is not in the tokens file
404     ``not-found``               no such path, or no file for that origin
405     ``method-not-allowed``      with an ``Allow`` header
408     ``body-timeout``            the body did not arrive within the body timeout
409     ``superseded``              an announcement older than the one stored
412     ``precondition-failed``     ``If-Match`` / ``If-None-Match`` not met
413     ``too-large``               a body over 256 KiB (a file) or 4 KiB (an
                                    announcement), refused on ``Content-Length``
                                    before reading or as soon as that much arrived
413     ``too-many-records``        more than 1 000 records
422     ``bad-record``              a line is not a valid record of this origin;
                                    ``line`` (from 1) and ``reason``: a refusal code of
                                    ``neverest.records.REASONS`` or ``other-origin``
422     ``bad-announcement``        ``reason``: ``origin-mismatch``, ``bad-signature``
                                    or ``clock-skew``
429     ``rate-limited``            with ``Retry-After``
500     ``internal``                the server failed (logged, no details sent)
507     ``too-many-origins``        a new origin past ``max_origins`` (default 10 000)
507     ``no-space``                the disk is full
======  ==========================  ===================================================

A refused request changes nothing stored: a body is checked completely before any
write begins.  A client that is slow to send its body is cut off with 408 after the
body timeout (30 s by default) while other clients are served; one that disconnects
before its body is complete gets no answer, and nothing changes.  Hypercorn bounds
the request line and headers (16 KiB), idle connections (60 s before a first request,
30 s keep-alive), and answers a request it cannot parse (a raw non-ASCII byte in the
path, say) with its own 400 before the app sees it.  A refusal is logged at INFO with
its method, path, client address and token id.

Storage and durability
----------------------

- ``DIR/commons/<origin>.jsonl``: the file of one origin, exactly the bytes accepted,
  mode 0644 (signed records are public).  It is replaced with
  ``neverest.files.atomic_write``: a temporary file ``.<origin>.jsonl.*.tmp`` in the same
  folder, flushed to disk, renamed over the old one, then the folder flushed.  A
  server killed at any point (kill -9 during a PUT) leaves the previous version or
  the complete new one, never a mix; a leftover temporary file is deleted at the
  next start (so are those of the directory).  A PUT is answered only after the new
  version is on disk.
- ``DIR/directory.json``: the directory, a JSON array of the signed announcements,
  written the same way after each accepted announcement (announcements arriving
  while a write is under way share the next one) and answered only once on disk.
  At most 10 000 origins; past that, the oldest announcement is dropped.
- ``DIR/.lock``: locked (``flock``) while a server runs, so that two servers never
  share one data folder.
- The index lives in memory, rebuilt at start by reading every file (its size, its
  number of records, its ETag, and its modification time as ``updated``); there is no
  separate metadata file that could disagree with the data.  The server trusts its
  own data folder: files are not verified again at start, and lines of the stored
  file are not verified again when a PUT repeats them byte for byte (a memory's new
  version mostly repeats its previous one, so an update costs the verification of
  its new lines only).
- Work per PUT: the body (at most 256 KiB) is held in memory, then hashed, verified and
  written in one worker thread, at most 16 at once (so writes to different origins
  overlap their fsync waits) and at most one verifying per CPU (more would only queue
  for the GIL).

Limits of what the server can promise: a token holder can replace an origin's file
with an older file of that origin, or with fewer of its records, or an empty one (the
lines are signed, the set of lines is not).  Receivers lose nothing by it: they keep
the records they already hold, and the owner's next push restores the file.  Tokens
are for writers you trust not to do that; signatures are what every receiver checks.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import functools
import hashlib
import io
import json
import logging
import math
import os
import re
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import nacl.exceptions
import nacl.signing
import trio

from neverest.clock import Clock, SystemClock, iso
from neverest.files import atomic_write
from neverest.lines import read_lines
from neverest.peers import directory as peer_directory
from neverest.peers.table import PeerError, normalise_url
from neverest.records import MAX_RECORD_BYTES, RecordError, origin_of, parse_many
from neverest.serving import lifespan, serve_asgi, stop_on_signals
from neverest.transports.announce import announcement_bytes
from neverest.transports.commons_auth import (
    CommonsServerError,
    RateLimiter,
    Tokens,
)

INDEX_PATH: Final = "/commons/index"
DIRECTORY_PATH: Final = "/directory"
ANNOUNCE_PATH: Final = "/directory/announce"
RECORDS_CONTENT_TYPE: Final = "application/x-ndjson"
JSON_CONTENT_TYPE: Final = "application/json"

MAX_RECORDS: Final = 1000
MAX_FILE_BYTES: Final = 256 * 1024
MAX_ORIGINS: Final = 10_000
MAX_ANNOUNCE_BYTES: Final = 4 * 1024
MAX_DIRECTORY_ENTRIES: Final = 10_000
# What GET /directory serves: no more than a daemon's directory reader keeps.
DIRECTORY_SERVED: Final = peer_directory.MAX_PEERS
ANNOUNCE_SKEW_S: Final = 600.0
DEFAULT_RATE_PER_S: Final = 100.0
# A full pull of 1 000 changed files plus the index fits in one burst.
DEFAULT_BURST: Final = 1100.0
DEFAULT_BODY_TIMEOUT_S: Final = 30.0
DEFAULT_LISTEN: Final = "127.0.0.1:7429"
WORKER_THREADS: Final = 16

COMMONS_FOLDER: Final = "commons"
DIRECTORY_FILE: Final = "directory.json"
LOCK_FILE: Final = ".lock"

ANNOUNCEMENT_FIELDS: Final = frozenset({"origin", "key", "url", "at", "sig"})

_FILE_PATH = re.compile(r"/commons/([0-9a-f]{16})\.jsonl")
_FILE_NAME = re.compile(r"[0-9a-f]{16}\.jsonl")
_TEMP_NAME = re.compile(r"\.[0-9a-f]{16}\.jsonl\..*\.tmp")
_HEX = frozenset("0123456789abcdef")

log = logging.getLogger("neverest.commons")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]




class Refusal(Exception):
    """A request is refused; everything in it is safe to send back to the client."""

    def __init__(self, status: int, code: str, message: str, *, headers: Headers | None = None,
                 extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or []
        self.extra = dict(extra or {})


class _ClientGone(Exception):
    """The client disconnected before its request was complete: there is nobody to answer."""


@dataclass(frozen=True)
class Limits:
    """The server's tunable bounds (the per-file limits are the protocol's and are fixed)."""

    rate_per_s: float = DEFAULT_RATE_PER_S  # per token; 0 or less disables the limiter
    burst: float = DEFAULT_BURST
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    max_origins: int = MAX_ORIGINS


# -- small pure helpers ---------------------------------------------------------------


def etag_of(data: bytes) -> str:
    """The strong ETag of some bytes: BLAKE2b-128 in hex, quoted, as it appears in headers."""
    return '"' + hashlib.blake2b(data, digest_size=16).hexdigest() + '"'


def _is_hex(value: object, length: int) -> bool:
    return isinstance(value, str) and len(value) == length and set(value) <= _HEX


def _etag_list(value: bytes) -> list[str] | None:
    """The entity tags of an If-Match / If-None-Match header; None stands for ``*``."""
    text = value.decode("latin-1").strip()
    if text == "*":
        return None
    return [item.strip() for item in text.split(",") if item.strip()]


def _strong_match(tags: list[str], etag: str) -> bool:
    return etag in tags  # a weak tag (W/"…") never equals a strong one


def _weak_match(tags: list[str], etag: str) -> bool:
    return any(tag.removeprefix("W/") == etag for tag in tags)


def check_preconditions(headers: Mapping[bytes, bytes], current: str | None) -> None:
    """Raise 412 unless the write's conditions hold for the current ETag (None: no file).

    Evaluated in the order of RFC 9110 §13.2.2: If-Match, then If-None-Match.
    """
    extra = {"etag": current} if current is not None else {}
    if_match = headers.get(b"if-match")
    if if_match is not None:
        tags = _etag_list(if_match)
        if current is None:
            raise Refusal(412, "precondition-failed", "If-Match: there is no file for this origin yet", extra=extra)
        if tags is not None and not _strong_match(tags, current):
            raise Refusal(412, "precondition-failed",
                          f"If-Match: the file has changed; its current ETag is {current}", extra=extra)
    if_none_match = headers.get(b"if-none-match")
    if if_none_match is not None and current is not None:
        tags = _etag_list(if_none_match)
        if tags is None:
            raise Refusal(412, "precondition-failed",
                          f"If-None-Match: *: a file for this origin exists (ETag {current})", extra=extra)
        if _weak_match(tags, current):
            raise Refusal(412, "precondition-failed", f"If-None-Match: the file is {current}", extra=extra)


def not_modified(headers: Mapping[bytes, bytes], etag: str) -> bool:
    """Whether a read's If-None-Match names ``etag`` (weak comparison, ``*`` included)."""
    value = headers.get(b"if-none-match")
    if value is None:
        return False
    tags = _etag_list(value)
    return tags is None or _weak_match(tags, etag)


# -- the files -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    """One origin's file as the index describes it."""

    origin: str
    updated: str
    records: int
    etag: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"origin": self.origin, "updated": self.updated, "records": self.records, "etag": self.etag}


def _lines(data: bytes) -> list[tuple[int, bytes | None]]:
    """The record lines of a file as receivers read them: numbered, blank ones skipped."""
    return [(n, line) for n, line in read_lines(io.BytesIO(data), MAX_RECORD_BYTES)
            if line is None or line.strip()]


def _entry(origin: str, data: bytes, st: os.stat_result) -> Entry:
    return Entry(origin=origin, updated=iso(datetime.fromtimestamp(st.st_mtime_ns / 1e9, UTC)),
                 records=len(_lines(data)), etag=etag_of(data), size=len(data))


def check_file(origin: str, body: bytes, known: Iterable[bytes] = ()) -> int:
    """Check a PUT body for ``origin``; the number of records, or a Refusal.

    ``known`` are lines already verified for this origin (those of the stored file): a
    line repeated byte for byte is not verified again, since the verdict is a function
    of the bytes alone.  Blocking (it verifies signatures): run it in a thread.
    """
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Refusal(400, "bad-encoding", f"the body is not UTF-8 (byte {exc.start})") from None
    lines = _lines(body)
    if len(lines) > MAX_RECORDS:
        raise Refusal(413, "too-many-records", f"{len(lines)} records; a file holds at most {MAX_RECORDS}")
    verified = set(known)
    fresh = [(n, line) for n, line in lines if line is None or line not in verified]
    for number, result in parse_many(fresh):
        if isinstance(result, RecordError):
            raise Refusal(422, "bad-record", f"line {number}: {result}",
                          extra={"line": number, "reason": result.code})
        if result.origin != origin:
            raise Refusal(422, "bad-record",
                          f"line {number}: other-origin: the record is signed by {result.origin}, "
                          f"and this file is {origin}'s", extra={"line": number, "reason": "other-origin"})
    return len(lines)


def _known_lines(path: Path) -> set[bytes]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return set()
    return {line for _, line in _lines(data) if line is not None}


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _write(path: Path, data: bytes) -> os.stat_result:
    atomic_write(path, data, mode=0o644)
    return os.stat(path)


# Verification is CPU work; PyNaCl releases the GIL for the Ed25519 part only.  More verifying
# threads than CPUs only queue for the GIL, and each Ed25519 call that gives it back then waits
# a switch interval to get it again: one verifier per CPU is the fastest (measured).
_VERIFIERS = threading.BoundedSemaphore(os.cpu_count() or 2)


def _check_and_write(origin: str, path: Path, body: bytes, held_etag: str | None
                     ) -> tuple[int, str, os.stat_result] | None:
    """Check a PUT body and store it: (records, ETag, the file's stat), or None when these very
    bytes are stored already (nothing to write).  Raises Refusal.  Blocking: run it in a thread,
    under the origin's lock."""
    etag = etag_of(body)  # hashlib releases the GIL on large buffers: cheap here, not in the event loop
    if etag == held_etag:
        return None
    with _VERIFIERS:
        count = check_file(origin, body, _known_lines(path))
    return count, etag, _write(path, body)


def scan(folder: Path) -> dict[str, Entry]:
    """The index of a commons folder, rebuilt from the files; leftover temporary files removed."""
    entries: dict[str, Entry] = {}
    for path in folder.iterdir():
        name = path.name
        if _TEMP_NAME.fullmatch(name):
            # What a write interrupted before its rename left behind: never a version of anything.
            path.unlink(missing_ok=True)
            log.info("removed %s, left by an interrupted write", path)
            continue
        if not _FILE_NAME.fullmatch(name) or not path.is_file():
            continue
        data = path.read_bytes()
        entries[name[:16]] = _entry(name[:16], data, path.stat())
    return entries


# -- the directory ---------------------------------------------------------------------


def _announcement_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        # The signature covers a re-serialisation: two values for one key would be ambiguous.
        raise ValueError("the same key twice")
    return obj


def check_announcement(body: bytes, now: datetime) -> dict[str, str]:
    """A verified announcement (the five fields), or a Refusal saying what is wrong."""

    def bad(reason: str, message: str, status: int = 400) -> Refusal:
        return Refusal(status, "bad-announcement", message, extra={"reason": reason})

    try:
        obj = json.loads(body.decode("utf-8"), object_pairs_hook=_announcement_pairs)
    except UnicodeDecodeError as exc:
        raise Refusal(400, "bad-encoding", f"the body is not UTF-8 (byte {exc.start})") from None
    except (ValueError, RecursionError) as exc:
        raise bad("not-json", f"the body is not a JSON object: {exc}") from None
    if not isinstance(obj, dict):
        raise bad("not-json", "the body is not a JSON object")
    if set(obj) != ANNOUNCEMENT_FIELDS:
        raise bad("bad-field", "an announcement has exactly the fields " + ", ".join(sorted(ANNOUNCEMENT_FIELDS)))
    if not all(isinstance(value, str) for value in obj.values()):
        raise bad("bad-field", "every field of an announcement is a string")
    if not _is_hex(obj["origin"], 16):
        raise bad("bad-field", "origin must be 16 lower-case hex digits")
    if not _is_hex(obj["key"], 64):
        raise bad("bad-field", "key must be 64 lower-case hex digits")
    if not _is_hex(obj["sig"], 128):
        raise bad("bad-field", "sig must be 128 lower-case hex digits")
    try:
        at = datetime.fromisoformat(obj["at"]) if len(obj["at"]) <= 64 else None
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        raise bad("bad-field", "at must be an ISO 8601 time with a zone, like 2026-11-21T03:00:00.000000Z")
    try:
        if len(obj["url"]) > 512 or normalise_url(obj["url"]) != obj["url"]:
            raise PeerError("not in normal form")
    except PeerError:
        raise bad("bad-url", "url must be http(s)://host:port in normal form (no path, no trailing slash), "
                             "as signed") from None
    if origin_of(bytes.fromhex(obj["key"])) != obj["origin"]:
        raise bad("origin-mismatch", "origin is not the fingerprint of key", 422)
    unsigned = {name: value for name, value in obj.items() if name != "sig"}
    try:
        nacl.signing.VerifyKey(bytes.fromhex(obj["key"])).verify(announcement_bytes(unsigned),
                                                                 bytes.fromhex(obj["sig"]))
    except (nacl.exceptions.BadSignatureError, ValueError):
        raise bad("bad-signature", "sig does not verify over the announcement", 422) from None
    skew = abs((at - now).total_seconds())
    if skew > ANNOUNCE_SKEW_S:
        raise bad("clock-skew", f"at is {skew:.0f} s away from the server's clock ({iso(now)}); "
                                f"the limit is {ANNOUNCE_SKEW_S:.0f} s", 422)
    return {name: obj[name] for name in ("origin", "key", "url", "at", "sig")}


def _at(entry: Mapping[str, str]) -> float:
    return datetime.fromisoformat(entry["at"]).timestamp()


@dataclass
class Directory:
    """The announcements held, one per origin (the latest signed wins)."""

    entries: dict[str, dict[str, str]] = field(default_factory=dict)
    generation: int = 0  # bumped by every change; what is on disk is ``written``
    written: int = 0
    _listing: tuple[bytes, str] | None = None

    @classmethod
    def load(cls, path: Path) -> Directory:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return cls()
        try:
            items = json.loads(data)
            if not isinstance(items, list):
                raise ValueError("not a JSON array")
            entries = {}
            for item in items:
                if not isinstance(item, dict) or set(item) != ANNOUNCEMENT_FIELDS:
                    raise ValueError("an entry is not an announcement")
                _at(item)
                entries[item["origin"]] = {name: str(item[name]) for name in ANNOUNCEMENT_FIELDS}
        except (ValueError, TypeError) as exc:
            # Only this server writes the file, atomically: damage is someone else's doing,
            # and starting empty would overwrite what may still be recovered.
            raise CommonsServerError(f"{path} cannot be read ({exc}); move it away to start with an empty "
                                     "directory") from None
        return cls(entries)

    def add(self, entry: dict[str, str]) -> None:
        held = self.entries.get(entry["origin"])
        if held is not None and _at(held) > _at(entry):
            raise Refusal(409, "superseded", f"an announcement of {entry['origin']} signed later ({held['at']}) "
                                             "is already held")
        self.entries[entry["origin"]] = entry
        if len(self.entries) > MAX_DIRECTORY_ENTRIES:
            oldest = min(self.entries.values(), key=_at)
            del self.entries[oldest["origin"]]
        self.generation += 1
        self._listing = None

    def serialise(self) -> bytes:
        return json.dumps(sorted(self.entries.values(), key=lambda e: e["origin"]),
                          separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def listing(self) -> tuple[bytes, str]:
        if self._listing is None:
            newest = sorted(self.entries.values(), key=_at, reverse=True)[:DIRECTORY_SERVED]
            body = json.dumps([{"url": e["url"], "origin": e["origin"], "at": e["at"], "key": e["key"],
                                "sig": e["sig"]} for e in newest], separators=(",", ":"), ensure_ascii=False)
            data = body.encode("utf-8")
            self._listing = (data, etag_of(data))
        return self._listing


# -- the ASGI app ----------------------------------------------------------------------


def _headers(scope: Scope) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for name, value in scope.get("headers", []):
        # Repeated fields combine into one list, as RFC 9110 §5.3 says they may.
        out[name] = out[name] + b", " + value if name in out else value
    return out


class CommonsApp:
    """The commons as an ASGI app.  ``open`` it (blocking I/O), serve it, ``close`` it."""

    def __init__(self, data_dir: Path, tokens: Tokens, *, limits: Limits, clock: Clock,
                 monotonic: Callable[[], float], lock_fd: int, entries: dict[str, Entry],
                 directory: Directory) -> None:
        self.data_dir = data_dir
        self.folder = data_dir / COMMONS_FOLDER
        self.directory_path = data_dir / DIRECTORY_FILE
        self.tokens = tokens
        self.limits = limits
        self.clock = clock
        self.limiter = RateLimiter(limits.rate_per_s, limits.burst, monotonic)
        self.entries = entries
        self.directory = directory
        self._lock_fd: int | None = lock_fd
        self._index: tuple[bytes, str] | None = None
        self._origin_locks: dict[str, trio.Lock] = {}
        self._creating = 0  # new origins being written: they count against max_origins already
        self._directory_write = trio.Lock()
        # Threads that verify and write PUT bodies.  Enough for writes to different origins to
        # overlap their fsync waits; few enough that verifiers do not crowd the event loop out
        # of the GIL, and that bodies held at once stay bounded (16 × 256 KiB).
        self._workers = trio.CapacityLimiter(WORKER_THREADS)
        self._tokens_generation = tokens.generation

    @classmethod
    def open(cls, data_dir: Path, tokens_file: Path, *, limits: Limits | None = None, clock: Clock | None = None,
             monotonic: Callable[[], float] | None = None) -> CommonsApp:
        """Lock the data folder, read the tokens, rebuild the index.  Raises CommonsServerError."""
        limits = limits or Limits()
        try:
            (data_dir / COMMONS_FOLDER).mkdir(parents=True, exist_ok=True)
            lock_fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise CommonsServerError(f"cannot use the data folder {data_dir}: {exc.strerror}") from None
        try:
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise CommonsServerError(f"another commons server is using {data_dir}") from None
            monotonic = monotonic or trio.current_time
            tokens = Tokens(tokens_file, monotonic)
            try:
                entries = scan(data_dir / COMMONS_FOLDER)
            except OSError as exc:
                raise CommonsServerError(f"cannot read {data_dir / COMMONS_FOLDER}: {exc}") from None
            for leftover in data_dir.glob(f".{DIRECTORY_FILE}.*.tmp"):
                leftover.unlink(missing_ok=True)  # an interrupted write of the directory: never a version of it
            directory = Directory.load(data_dir / DIRECTORY_FILE)
        except BaseException:
            os.close(lock_fd)
            raise
        st = tokens_file.stat()
        if st.st_mode & 0o077:
            log.warning("the tokens file %s can be read by other users (mode %04o)", tokens_file, st.st_mode & 0o777)
        log.info("commons data in %s: %d file(s), %d directory entr%s", data_dir, len(entries),
                 len(directory.entries), "y" if len(directory.entries) == 1 else "ies")
        return cls(data_dir, tokens, limits=limits, clock=clock or SystemClock(), monotonic=monotonic,
                   lock_fd=lock_fd, entries=entries, directory=directory)

    def close(self) -> None:
        """Release the data folder's lock (another server may then use it)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- ASGI entry --------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        headers = _headers(scope)
        who = "-"
        try:
            who = self._authenticate(headers)
            wait = self.limiter.take(who)
            if wait > 0:
                raise Refusal(429, "rate-limited", f"too many requests with this token; retry in {wait:.2f} s",
                              headers=[(b"retry-after", str(max(1, math.ceil(wait))).encode())])
            await self._route(scope, headers, receive, send)
        except Refusal as exc:
            client = scope.get("client") or ("?", 0)
            log.info("refused %s %r from %s (token %s): %d %s", scope["method"], scope["path"][:200], client[0],
                     who, exc.status, exc.message)
            await _error(send, exc)
        except _ClientGone:
            return
        except Exception:
            log.exception("%s %r failed on our side", scope["method"], scope["path"][:200])
            try:
                await _error(send, Refusal(500, "internal", "the server failed; the failure is logged"))
            except Exception:
                pass  # the response had started or the client is gone: hypercorn closes the stream

    def _authenticate(self, headers: Mapping[bytes, bytes]) -> str:
        challenge = [(b"www-authenticate", b'Bearer realm="neverest-commons"')]
        value = headers.get(b"authorization")
        if value is None:
            raise Refusal(401, "unauthorized", "send Authorization: Bearer <token>", headers=challenge)
        scheme, _, credentials = value.partition(b" ")
        if scheme.lower() != b"bearer" or not credentials.strip():
            raise Refusal(401, "unauthorized", "send Authorization: Bearer <token>", headers=challenge)
        who = self.tokens.identify(credentials.strip())
        if who is None:
            raise Refusal(403, "forbidden", "this token is not accepted here")
        if self.tokens.generation != self._tokens_generation:
            # The tokens file changed: forget the buckets of revoked tokens.
            self._tokens_generation = self.tokens.generation
            self.limiter.keep_only(self.tokens.ids())
        return who

    async def _route(self, scope: Scope, headers: dict[bytes, bytes], receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        raw = scope.get("raw_path")
        # A percent-encoded byte anywhere means the client's path is not one of ours, spelled
        # plainly; refusing it outright leaves no decoding trick to reason about.
        if raw is not None and raw != path.encode("utf-8", "replace"):
            raise Refusal(404, "not-found", "no such path")
        method: str = scope["method"]
        head = method == "HEAD"
        if path == INDEX_PATH:
            _allow(method, ("GET", "HEAD"))
            await self._send_json_view(send, headers, self._index_view(), head)
        elif path == DIRECTORY_PATH:
            _allow(method, ("GET", "HEAD"))
            await self._send_json_view(send, headers, self.directory.listing(), head)
        elif path == ANNOUNCE_PATH:
            _allow(method, ("POST",))
            await self._announce(headers, receive, send)
        elif (match := _FILE_PATH.fullmatch(path)) is not None:
            _allow(method, ("GET", "HEAD", "PUT"))
            if method == "PUT":
                await self._put(match.group(1), headers, receive, send)
            else:
                await self._get(match.group(1), headers, send, head)
        else:
            raise Refusal(404, "not-found", "no such path")

    # -- reads -------------------------------------------------------------------------

    def _index_view(self) -> tuple[bytes, str]:
        if self._index is None:
            entries = [self.entries[origin].to_json() for origin in sorted(self.entries)]
            data = json.dumps(entries, separators=(",", ":")).encode("ascii")
            self._index = (data, etag_of(data))
        return self._index

    async def _send_json_view(self, send: Send, headers: Mapping[bytes, bytes], view: tuple[bytes, str],
                              head: bool) -> None:
        data, etag = view
        if not_modified(headers, etag):
            await _not_modified(send, etag)
        else:
            await _respond(send, 200, data, JSON_CONTENT_TYPE, etag=etag, head=head)

    async def _get(self, origin: str, headers: Mapping[bytes, bytes], send: Send, head: bool) -> None:
        entry = self.entries.get(origin)
        if entry is None:
            raise Refusal(404, "not-found", f"no file for {origin}")
        if not_modified(headers, entry.etag):
            await _not_modified(send, entry.etag)
            return
        data = await trio.to_thread.run_sync(_read, self.folder / f"{origin}.jsonl")
        if data is None:
            raise Refusal(404, "not-found", f"no file for {origin}")
        # The tag of the bytes read, not the index's: a PUT may have replaced the file in between.
        await _respond(send, 200, data, RECORDS_CONTENT_TYPE, etag=etag_of(data), head=head)

    # -- writes ------------------------------------------------------------------------

    @asynccontextmanager
    async def _origin_lock(self, origin: str) -> AsyncIterator[None]:
        lock = self._origin_locks.setdefault(origin, trio.Lock())
        try:
            async with lock:
                yield
        finally:
            # Locks exist only while someone holds or awaits them: their number stays bounded
            # by the requests in flight, not by every origin ever written.
            stats = lock.statistics()
            if not stats.locked and stats.tasks_waiting == 0 and self._origin_locks.get(origin) is lock:
                del self._origin_locks[origin]

    async def _read_body(self, headers: Mapping[bytes, bytes], receive: Receive, limit: int) -> bytes:
        declared = headers.get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                raise Refusal(400, "bad-request", "Content-Length is not a number")
            if int(declared) > limit:
                raise Refusal(413, "too-large", f"the body is {int(declared)} bytes; the limit is {limit}")
        body = bytearray()
        try:
            with trio.fail_after(self.limits.body_timeout_s):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise _ClientGone
                    body += message.get("body", b"")
                    if len(body) > limit:
                        raise Refusal(413, "too-large", f"the body is over {limit} bytes")
                    if not message.get("more_body", False):
                        return bytes(body)
        except trio.TooSlowError:
            raise Refusal(408, "body-timeout",
                          f"the body did not arrive within {self.limits.body_timeout_s:g} s") from None

    async def _put(self, origin: str, headers: Mapping[bytes, bytes], receive: Receive, send: Send) -> None:
        body = await self._read_body(headers, receive, MAX_FILE_BYTES)
        path = self.folder / f"{origin}.jsonl"
        held = self.entries.get(origin)
        # A cheap look first, so that a doomed PUT costs no verification; the check that
        # counts is the one under the lock.
        check_preconditions(headers, held.etag if held else None)
        async with self._origin_lock(origin):
            held = self.entries.get(origin)
            check_preconditions(headers, held.etag if held else None)
            if held is None:
                if len(self.entries) + self._creating >= self.limits.max_origins:
                    raise Refusal(507, "too-many-origins",
                                  f"the server holds files for {self.limits.max_origins} origins, its limit")
                self._creating += 1  # counts against the limit while it is being written
            try:
                # One trip to a thread for the hash, the verification and the write: each trip
                # costs the event loop a GIL hand-over, and a PUT is on the hot path.
                outcome = await trio.to_thread.run_sync(
                    _check_and_write, origin, path, body, held.etag if held else None, limiter=self._workers)
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise Refusal(507, "no-space", "the server's disk is full") from None
                raise
            finally:
                if held is None:
                    self._creating -= 1
            if outcome is None:
                assert held is not None  # only a stored file can have the same bytes
                entry, status = held, 200
            else:
                count, etag, st = outcome
                entry = Entry(origin=origin, updated=iso(datetime.fromtimestamp(st.st_mtime_ns / 1e9, UTC)),
                              records=count, etag=etag, size=len(body))
                # No checkpoint between the write returning and these lines: the index never
                # lags a completed write, even if this task is being cancelled.
                self.entries[origin] = entry
                self._index = None
                status = 201 if held is None else 200
                log.info("%s: %d record(s), %d bytes stored as %s", origin, count, len(body), etag)
        data = json.dumps(entry.to_json(), separators=(",", ":")).encode("ascii")
        await _respond(send, status, data, JSON_CONTENT_TYPE, etag=entry.etag)

    async def _announce(self, headers: Mapping[bytes, bytes], receive: Receive, send: Send) -> None:
        body = await self._read_body(headers, receive, MAX_ANNOUNCE_BYTES)
        entry = check_announcement(body, self.clock.now())
        self.directory.add(entry)
        await self._persist_directory()
        log.info("directory: %s at %s", entry["origin"], entry["url"])
        data = json.dumps({"origin": entry["origin"], "url": entry["url"], "at": entry["at"]},
                          separators=(",", ":")).encode("utf-8")
        await _respond(send, 200, data, JSON_CONTENT_TYPE)

    async def _persist_directory(self) -> None:
        """Return once the directory, with every change made before the call, is on disk."""
        wanted = self.directory.generation
        async with self._directory_write:
            if self.directory.written >= wanted:
                return  # the write ahead of ours already carried our change (group commit)
            generation = self.directory.generation
            data = self.directory.serialise()
            await trio.to_thread.run_sync(functools.partial(atomic_write, self.directory_path, data, mode=0o644))
            self.directory.written = generation


def _allow(method: str, allowed: Sequence[str]) -> None:
    if method not in allowed:
        raise Refusal(405, "method-not-allowed", f"{method} is not allowed here; use {', '.join(allowed)}",
                      headers=[(b"allow", ", ".join(allowed).encode())])


async def _respond(send: Send, status: int, body: bytes, content_type: str, *, etag: str | None = None,
                   head: bool = False, extra: Headers | None = None, cache: bytes = b"no-cache") -> None:
    headers: Headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode()),
                        (b"cache-control", cache), (b"x-content-type-options", b"nosniff")]
    if etag is not None:
        headers.append((b"etag", etag.encode("ascii")))
    headers.extend(extra or [])
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})


async def _not_modified(send: Send, etag: str) -> None:
    await send({"type": "http.response.start", "status": 304,
                "headers": [(b"etag", etag.encode("ascii")), (b"cache-control", b"no-cache")]})
    await send({"type": "http.response.body", "body": b""})


async def _error(send: Send, refusal: Refusal) -> None:
    payload = {"error": refusal.code, "message": refusal.message, **refusal.extra}
    data = json.dumps(payload, ensure_ascii=False).encode("utf-8") + b"\n"
    await _respond(send, refusal.status, data, JSON_CONTENT_TYPE, extra=refusal.headers, cache=b"no-store")


# -- serving ---------------------------------------------------------------------------


async def serve_app(app: CommonsApp, listen: str, *,
                    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve an opened app on ``listen`` (HOST:PORT) with hypercorn's trio worker until cancelled."""
    await serve_asgi(app, listen, logger="neverest.commons.hypercorn", task_status=task_status)


async def serve(data_dir: Path, tokens_file: Path, listen: str, *, limits: Limits | None = None,
                clock: Clock | None = None, monotonic: Callable[[], float] | None = None,
                task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
    """Open the commons in ``data_dir`` and serve it on ``listen`` until cancelled.

    ``task_status.started`` gets the addresses bound (``http://HOST:PORT``).  Raises
    CommonsServerError before binding when the data folder or the tokens file cannot
    be used.  ``clock`` (the wall clock, for announcements) and ``monotonic`` (seconds,
    for rate limits and the tokens file re-check) are injectable for tests.
    """
    app = await trio.to_thread.run_sync(functools.partial(
        CommonsApp.open, data_dir, tokens_file, limits=limits, clock=clock, monotonic=monotonic))
    try:
        await serve_app(app, listen, task_status=task_status)
    finally:
        app.close()


async def _run(app: CommonsApp, listen: str) -> None:
    async with trio.open_nursery() as nursery:
        # Signals first: from the moment the socket answers, SIGTERM must mean a clean stop.
        await nursery.start(stop_on_signals, nursery.cancel_scope, log)
        binds = await nursery.start(serve_app, app, listen)
        log.info("commons server listening on %s", ", ".join(binds))


def main(argv: Sequence[str] | None = None) -> int:
    """``neverestd commons`` / ``python -m neverest.transports.commons_server``: 0, 1 or 2 (see above)."""
    parser = argparse.ArgumentParser(prog="neverestd commons",
                                     description="Serve an HTTP commons: one signed file per memory.")
    parser.add_argument("--listen", metavar="HOST:PORT", default=DEFAULT_LISTEN,
                        help=f"where to listen (default {DEFAULT_LISTEN}; port 0 picks one)")
    parser.add_argument("--data", metavar="DIR", required=True, help="the folder that holds the files")
    parser.add_argument("--tokens", metavar="FILE", required=True, help="bearer tokens, one per line")
    parser.add_argument("--rate", type=float, default=DEFAULT_RATE_PER_S,
                        help=f"requests per second per token (default {DEFAULT_RATE_PER_S:g}; 0: no limit)")
    parser.add_argument("--burst", type=float, default=DEFAULT_BURST,
                        help=f"requests a token may make at once (default {DEFAULT_BURST:g})")
    parser.add_argument("--body-timeout", type=float, default=DEFAULT_BODY_TIMEOUT_S, metavar="SECONDS",
                        help=f"time allowed for a request body (default {DEFAULT_BODY_TIMEOUT_S:g})")
    parser.add_argument("--max-origins", type=int, default=MAX_ORIGINS,
                        help=f"files the server holds at most (default {MAX_ORIGINS})")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.body_timeout <= 0 or args.max_origins < 1 or args.burst < 1:
        print("neverestd commons: --body-timeout must be > 0, --max-origins and --burst ≥ 1", file=sys.stderr)
        return 2
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    limits = Limits(rate_per_s=args.rate, burst=args.burst, body_timeout_s=args.body_timeout,
                    max_origins=args.max_origins)
    try:
        app = CommonsApp.open(Path(args.data).expanduser(), Path(args.tokens).expanduser(), limits=limits)
    except CommonsServerError as exc:
        print(f"neverestd commons: {exc}", file=sys.stderr)
        return 1
    try:
        trio.run(_run, app, args.listen)
    except (OSError, ExceptionGroup) as exc:
        # Binding failed (the port is taken, the address is not ours): hypercorn raises it
        # from inside the nursery.
        log.error("cannot serve on %s: %s", args.listen, exc, exc_info=isinstance(exc, ExceptionGroup))
        return 1
    finally:
        app.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
