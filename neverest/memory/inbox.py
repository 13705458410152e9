"""The inbox: ``inbox.jsonl`` in the home folder, the door any process can use without a daemon.

Protocol for writers (agents, hooks, scripts)
---------------------------------------------
- Append one event per line: one JSON object (PROTOCOL.md §6), UTF-8, ending in ``\\n``,
  at most ``MAX_EVENT_BYTES`` (1 MiB) including nothing but the object.
- Open the file by path with ``O_WRONLY | O_APPEND | O_CREAT`` (mode 0600) and write each
  whole line, newline included, with ONE ``write()`` call; then close it.  O_APPEND makes
  every write land at the end, so several processes can append at once without mixing
  their lines.  In Python::

      fd = os.open(home / "inbox.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
      try:
          os.write(fd, json.dumps(event).encode() + b"\\n")
      finally:
          os.close(fd)

- Do not keep the file open between events: the drainer renames it away when it grows
  (below) and deletes the renamed file once nobody has written to it for ``QUIET_S``
  seconds; a line written through a descriptor held longer than that may be lost.

How the drainer reads it
------------------------
For each file it reads, the drainer keeps a cursor in the store's ``meta`` table: the
file's inode, the byte offset consumed so far, the line number reached, and a hash of the
file's first bytes.  Every step is one write transaction that reads the cursor, reads at
most a batch of lines after it, inserts their episodes and moves the cursor, so the
episodes and the cursor commit together: a drainer killed at any point has either stored
a batch and moved past it, or neither, and nothing is lost or read twice.  The write lock
also serialises two drainers (the daemon and a ``neverestctl`` run).

Only complete lines are read, up to the last newline: a line being written is left for
the next drain.  Bytes after the last newline that have not changed for ``QUIET_S``
seconds are a line whose writer died or forgot its newline; they are read as a last line,
so the next writer's line still starts on a line of its own.  A file with another inode, a
different first-bytes hash, or fewer bytes than the cursor is a new file (replaced,
recreated or truncated by hand) and is read from its start.

Rotation: when ``inbox.jsonl`` is fully consumed and at least ``rotate_bytes`` long, it is
renamed to ``inbox.jsonl.<inode>.draining`` and its cursor moves with it.  Writers that
open the file afterwards create a fresh ``inbox.jsonl``; a writer that had the old one open
appends to the renamed file, which is drained like the inbox until it is fully consumed and
unmodified for ``QUIET_S`` seconds, then deleted.  The name carries the inode so that a
drainer killed between the rename and the commit that records it finds the file again:
its cursor still names that inode.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, Final

from neverest.lines import read_lines
from neverest.memory.events import (
    BATCH_CHARS,
    BATCH_EVENTS,
    MAX_EVENT_BYTES,
    Event,
    EventError,
    IngestResult,
    insert_events,
    parse_line,
)

# The watch (whether a drain is due) is a module of its own, light enough for an idle daemon's poll;
# re-exported here beside the drain it guards.
from neverest.memory.inbox_watch import QUIET_S as QUIET_S
from neverest.memory.inbox_watch import InboxWatch as InboxWatch
from neverest.memory.inbox_watch import Signature as Signature
from neverest.memory.inbox_watch import signature as signature
from neverest.memory.store import Store, meta_value
from neverest.paths import INBOX_FILE

ROTATE_BYTES: Final = 1024 * 1024

_INBOX_KEY: Final = "inbox.cursor"
_DRAINING_KEY: Final = "inbox.draining"
# The cursor hashes at most this many of the file's first bytes: enough to tell a file
# recreated under a reused inode number from the one the cursor was made for.
_PREFIX_BYTES: Final = 4096
_SCAN_BLOCK: Final = 64 * 1024


@dataclass(frozen=True)
class _Cursor:
    ino: int
    offset: int = 0
    line: int = 0
    prefix: str = hashlib.blake2b(b"", digest_size=16).hexdigest()

    def to_meta(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def _load(db: sqlite3.Connection, key: str) -> _Cursor | None:
    value = meta_value(db, key)
    try:
        fields = json.loads(value) if value is not None else None
        if fields is None:
            return None
        return _Cursor(ino=int(fields["ino"]), offset=int(fields["offset"]), line=int(fields["line"]),
                       prefix=str(fields["prefix"]))
    except (ValueError, TypeError, KeyError):
        # A cursor mangled by hand: reading the file again from its start only produces
        # duplicates, which are recognised and not stored twice.
        return None


def _save(db: sqlite3.Connection, key: str, cursor: _Cursor | None) -> None:
    Store.set_meta(db, key, "null" if cursor is None else cursor.to_meta())


def _prefix(fd: int, length: int) -> str:
    return hashlib.blake2b(os.pread(fd, length, 0), digest_size=16).hexdigest()


def _complete_end(fd: int, start: int, size: int) -> int:
    """The offset just past the last newline in [start, size), or ``start`` when there is none."""
    pos = size
    while pos > start:
        block_start = max(start, pos - _SCAN_BLOCK)
        newline = os.pread(fd, pos - block_start, block_start).rfind(b"\n")
        if newline >= 0:
            return block_start + newline + 1
        pos = block_start
    return start


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except FileNotFoundError:
        return None


def _sync_dir(home: Path) -> None:
    # A rename or unlink is durable only once its directory is: without this, a power
    # loss could undo a rotation the store has already recorded.
    fd = os.open(home, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _draining_path(home: Path, ino: int) -> Path:
    return home / f"{INBOX_FILE}.{ino}.draining"


def _quiet(mtime: float, quiet_s: float) -> bool:
    # The file's mtime comes from the kernel's clock, so it is compared with that clock,
    # not with the injected ``now`` (which may be pinned to another day).
    return time.time() - mtime >= quiet_s


def _consumed(path: Path, cursor: _Cursor, *, quiet_s: float) -> bool:
    """Whether ``path`` is the cursor's file, read to its end, and unmodified for ``quiet_s``."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    return st.st_ino == cursor.ino and st.st_size == cursor.offset and _quiet(st.st_mtime, quiet_s)


class _Batch:
    """The events and refusals of one step, with the file's name for reasons."""

    def __init__(self, label: str, now: datetime, result: IngestResult) -> None:
        self.label = label
        self.now = now
        self.result = result
        self.events: list[Event] = []

    def take(self, line: int, raw: bytes | None) -> None:
        try:
            event = parse_line(raw, now=self.now)
        except EventError as exc:
            self.result.refused.append((line, f"{self.label} line {line}: {exc}"))
            return
        if event is not None:
            self.events.append(event)

    def store(self, db: sqlite3.Connection) -> None:
        stored = insert_events(db, self.events, now=self.now)
        self.result.stored += stored
        self.result.duplicates += len(self.events) - stored


def _read_lines(f: BinaryIO, cursor: _Cursor, end: int, batch: _Batch) -> tuple[int, int]:
    """Read complete lines from the cursor up to ``end`` (at most one batch); the new offset and line."""
    offset, line = cursor.offset, cursor.line
    if end <= offset:
        return offset, line
    f.seek(offset)
    # ``end`` follows a newline, so no line read here runs past it, whatever has been appended since.
    for number, raw in read_lines(f, MAX_EVENT_BYTES):
        line = cursor.line + number
        batch.take(line, raw)
        offset = f.tell()
        if offset >= end or len(batch.events) >= BATCH_EVENTS or offset - cursor.offset >= BATCH_CHARS:
            break
    return offset, line


def _advance(db: sqlite3.Connection, path: Path, cursor: _Cursor | None, *, now: datetime,
             quiet_s: float, result: IngestResult) -> _Cursor | None:
    """Drain one batch of ``path`` after ``cursor``; the new cursor, or None if there is no such file."""
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return None
    with f:
        fd = f.fileno()
        st = os.fstat(fd)
        if (cursor is None or cursor.ino != st.st_ino or st.st_size < cursor.offset
                or cursor.prefix != _prefix(fd, min(cursor.offset, _PREFIX_BYTES))):
            cursor = _Cursor(ino=st.st_ino)
        batch = _Batch(path.name, now, result)
        end = _complete_end(fd, cursor.offset, st.st_size)
        offset, line = _read_lines(f, cursor, end, batch)
        if offset == end < st.st_size and _quiet(st.st_mtime, quiet_s):
            # Read exactly the bytes seen by fstat: a line appended since starts after them.
            tail = st.st_size - end
            line += 1
            batch.take(line, os.pread(fd, tail, end) if tail <= MAX_EVENT_BYTES else None)
            offset = st.st_size
        batch.store(db)
        prefix = cursor.prefix if cursor.offset >= _PREFIX_BYTES else _prefix(fd, min(offset, _PREFIX_BYTES))
        return _Cursor(ino=cursor.ino, offset=offset, line=line, prefix=prefix)


def _step(db: sqlite3.Connection, home: Path, *, now: datetime, result: IngestResult,
          rotate_bytes: int, quiet_s: float) -> bool:
    """One unit of draining inside a write transaction; False when there was nothing to do."""
    inbox = home / INBOX_FILE
    current = _load(db, _INBOX_KEY)
    draining = _load(db, _DRAINING_KEY)

    if (draining is None and current is not None and _inode(inbox) != current.ino
            and _inode(_draining_path(home, current.ino)) == current.ino):
        # A drainer was killed after renaming the inbox but before recording it.
        _save(db, _DRAINING_KEY, current)
        _save(db, _INBOX_KEY, None)
        return True

    if draining is not None:
        path = _draining_path(home, draining.ino)
        moved = _advance(db, path, draining, now=now, quiet_s=quiet_s, result=result)
        if moved is None:  # deleted by a drainer killed before it could record so
            _save(db, _DRAINING_KEY, None)
            return True
        if moved != draining:
            _save(db, _DRAINING_KEY, moved)
            return True
        # Deleted only when everything in it is already committed (no move in this step).
        if _consumed(path, moved, quiet_s=quiet_s):
            path.unlink(missing_ok=True)
            _sync_dir(home)
            _save(db, _DRAINING_KEY, None)
            return True

    moved = _advance(db, inbox, current, now=now, quiet_s=quiet_s, result=result)
    if moved is None:
        return False
    if moved != current:
        _save(db, _INBOX_KEY, moved)
        return True
    if draining is None and moved.offset >= rotate_bytes and _consumed(inbox, moved, quiet_s=0.0):
        # Lines appended between that check and the rename land in the renamed file,
        # past the cursor, and are drained from there.
        os.rename(inbox, _draining_path(home, moved.ino))
        _sync_dir(home)
        _save(db, _DRAINING_KEY, moved)
        _save(db, _INBOX_KEY, None)
        return True
    return False


def drain_inbox(store: Store, home: Path, *, now: datetime, rotate_bytes: int = ROTATE_BYTES,
                quiet_s: float = QUIET_S) -> IngestResult:
    """Ingest every complete line appended to ``home/inbox.jsonl`` since the last drain.

    Refusals are ``(line, "<file> line N: reason")``.  Returns once everything read is
    committed; safe to kill at any point and to run from several processes at once.
    """
    result = IngestResult()
    while True:
        with store.write() as db:
            progressed = _step(db, home, now=now, result=result, rotate_bytes=rotate_bytes, quiet_s=quiet_s)
        if not progressed:
            return result
