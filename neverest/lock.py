"""One daemon per home: an exclusive lock on ``home/daemon.lock``, held for the daemon's life.

Two daemons on one home would write one store, answer on one control socket (the
second one to stop deletes the first one's socket file) and gossip as one origin
from two places.  The lock is a ``flock`` on an open file: the kernel releases it
when the process ends however it ends, kill -9 included, so a crash never leaves
a stale lock to clean up and the lock file is never deleted (deleting it would
let two processes lock two different files of one name).

After locking, the holder writes one JSON line into the file: its pid, since
when, and a short description (where it listens), so the next one can say who
holds the home.  The file is only informative; the lock is the ``flock``.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from neverest.paths import LOCK_FILE

MAX_HOLDER_BYTES: Final = 4096  # what is read of another holder's description
LISTENING: Final = "listening on "  # the daemon's description once it listens: + its addresses, comma-separated


class AlreadyRunning(Exception):
    """Another process holds this home's daemon lock; the message names it."""


@dataclass(frozen=True)
class Holder:
    """What the lock file says about the process holding it (every field may be missing)."""

    pid: int | None
    since: str | None
    about: str

    def describe(self) -> str:
        parts = [f"pid {self.pid}" if self.pid is not None else "pid unknown"]
        if self.since:
            parts.append(f"since {self.since}")
        if self.about:
            parts.append(self.about)
        return ", ".join(parts)


def read_holder(home: Path) -> Holder | None:
    """The description in ``home/daemon.lock``, or None when there is none.  It names the process that
    holds the lock, or one killed before it could release it: only ``DaemonLock.acquire`` can tell."""
    try:
        with open(home / LOCK_FILE, "rb") as f:
            data = f.read(MAX_HOLDER_BYTES)
    except FileNotFoundError:
        return None
    return _parse(data)


def _parse(data: bytes) -> Holder | None:
    try:
        value = json.loads(data.decode("utf-8", errors="replace").split("\n", 1)[0])
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    pid, since, about = value.get("pid"), value.get("since"), value.get("about")
    return Holder(pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
                  since[:64] if isinstance(since, str) else None,
                  about[:300] if isinstance(about, str) else "")


class DaemonLock:
    """``with DaemonLock(home) as lock:`` or ``acquire()`` / ``release()``; not reentrant."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.path = home / LOCK_FILE
        self._fd: int | None = None
        self._since = ""

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, about: str = "") -> None:
        """Take the lock without waiting, or raise AlreadyRunning naming the process that holds it."""
        if self._fd is not None:
            raise RuntimeError("this DaemonLock is already held")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            data = os.pread(fd, MAX_HOLDER_BYTES, 0)
            os.close(fd)
            holder = _parse(data)
            who = holder.describe() if holder else "pid unknown"
            raise AlreadyRunning(f"a Neverest daemon already runs on {self.home} ({who}); "
                                 "stop it first, or give this one another --home") from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._since = datetime.fromtimestamp(time.time(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.describe(about)

    def describe(self, about: str) -> None:
        """Rewrite what the lock file says about this holder (e.g. the listen address once it is known)."""
        if self._fd is None:
            raise RuntimeError("describe() needs the lock held")
        line = json.dumps({"pid": os.getpid(), "since": self._since, "about": about}, ensure_ascii=False)
        data = (line + "\n").encode("utf-8")[:MAX_HOLDER_BYTES]
        # Write over the old text, then cut what is left of it: a reader never sees an empty file.
        os.pwrite(self._fd, data, 0)
        os.ftruncate(self._fd, len(data))

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.ftruncate(fd, 0)  # a clean stop leaves no description of a process that is gone
            finally:
                os.close(fd)  # closing the only descriptor releases the flock

    def __enter__(self) -> DaemonLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
