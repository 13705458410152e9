"""The commons server's storage: one file per origin, written atomically and durably.

- ``DIR/commons/<origin>.jsonl`` holds exactly the bytes accepted, replaced with
  ``neverest.files.atomic_write`` (a temporary file flushed, renamed, the folder flushed),
  so a server killed at any point leaves the previous version or the new one, never a mix.
- ``DIR/.lock`` is locked while a server runs, so two servers never share a folder.
- The index is rebuilt from the files at start (``scan``), removing what interrupted writes
  left behind; there is no metadata file that could disagree with the data.

Everything here blocks (disk and signature work): the app runs it in worker threads.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from neverest.clock import iso
from neverest.files import atomic_write
from neverest.transports.commons_auth import CommonsServerError
from neverest.transports.commons_protocol import etag_of, file_lines, fresh_lines, record_lines
from neverest.transports.commons_verify import Verifier

COMMONS_FOLDER: Final = "commons"
LOCK_FILE: Final = ".lock"

_FILE_NAME = re.compile(r"[0-9a-f]{16}\.jsonl")
_TEMP_NAME = re.compile(r"\.[0-9a-f]{16}\.jsonl\..*\.tmp")

log = logging.getLogger("neverest.commons")


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


def entry_of(origin: str, data: bytes, st: os.stat_result, records: int | None = None, etag: str | None = None
             ) -> Entry:
    """The index entry of a file holding ``data``, stored with stat ``st``."""
    return Entry(origin=origin, updated=iso(datetime.fromtimestamp(st.st_mtime_ns / 1e9, UTC)),
                 records=len(record_lines(data)) if records is None else records,
                 etag=etag_of(data) if etag is None else etag, size=len(data))


def lock_folder(data_dir: Path) -> int:
    """Create ``data_dir`` and lock it for this server: the lock's descriptor (close it to release).

    Raises CommonsServerError when the folder cannot be used or another server holds it.
    """
    try:
        (data_dir / COMMONS_FOLDER).mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise CommonsServerError(f"cannot use the data folder {data_dir}: {exc.strerror}") from None
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock_fd)
        raise CommonsServerError(f"another commons server is using {data_dir}") from None
    except OSError as exc:  # a file system without locks, say
        os.close(lock_fd)
        raise CommonsServerError(f"cannot lock the data folder {data_dir}: {exc.strerror}") from None
    return lock_fd


def _known_lines(path: Path) -> set[bytes]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return set()
    return {line for _, line in record_lines(data) if line is not None}


def read_file(path: Path) -> bytes | None:
    """A stored file's bytes, or None when there is none."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _write(path: Path, data: bytes) -> os.stat_result:
    atomic_write(path, data, mode=0o644)
    return os.stat(path)


def check_and_write(origin: str, path: Path, body: bytes, held_etag: str | None, verifier: Verifier
                    ) -> tuple[int, str, os.stat_result] | None:
    """Check a PUT body and store it: (records, ETag, the file's stat), or None when these very
    bytes are stored already (nothing to write).  Raises Refusal.  Blocking: run it in a thread,
    under the origin's lock."""
    etag = etag_of(body)  # hashlib releases the GIL on large buffers: cheap here, not in the event loop
    if etag == held_etag:
        return None
    lines = file_lines(body)
    verifier.check(origin, fresh_lines(lines, _known_lines(path)) if held_etag is not None else lines)
    return len(lines), etag, _write(path, body)


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
        entries[name[:16]] = entry_of(name[:16], data, path.stat())
    return entries
