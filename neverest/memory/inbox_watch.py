"""Whether draining the inbox can find anything, told from the file system alone (``InboxWatch``).

The daemon polls it every ``inbox_every_s`` and drains (``memory/inbox.py``) only when it says so: an
idle daemon's poll is one ``scandir`` of its home, with no store opened and without the drainer and the
events' module loaded (about 0.13 MB resident; docs/figures.md).  ``memory.inbox`` re-exports it.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Final

from neverest.paths import INBOX_FILE

# A draining file unmodified for this long is complete; a last line without its newline this quiet is too.
QUIET_S: Final = 2.0


Signature = tuple[tuple[str, int, int, int], ...]


def signature(home: Path) -> Signature:
    """What a drain would read, as the file system says without opening a file: the name, inode,
    size and mtime of ``inbox.jsonl`` and of every ``.draining`` file beside it."""
    found = []
    try:
        with os.scandir(home) as entries:
            for entry in entries:
                if entry.name == INBOX_FILE or (entry.name.startswith(INBOX_FILE + ".")
                                                and entry.name.endswith(".draining")):
                    with contextlib.suppress(FileNotFoundError):
                        st = entry.stat(follow_symlinks=False)
                        found.append((entry.name, st.st_ino, st.st_size, st.st_mtime_ns))
    except FileNotFoundError:
        pass
    return tuple(sorted(found))


class InboxWatch:
    """Whether a drain can find anything, so that a daemon polling an untouched inbox opens no store.

    A drain that began when no file was younger than ``quiet_s`` and no ``.draining`` file
    existed left nothing behind: every complete line was read, a last line without its newline
    too (it was quiet), and a due rotation renamed the file (which changes the signature).  Until
    the signature moves, another drain would find nothing.  Anything else (a fresh line, a
    draining file, a failed drain) keeps the drains coming at every poll, as before.

    No inbox and no draining file is never due, at start either: there is no line a drain could read.
    (What a drain would do then is forget a cursor whose file is gone, which the next drain does as
    well.)  So an idle daemon whose inbox was never used opens no store for it, nor loads the events'
    module (docs/figures.md).
    """

    def __init__(self, home: Path, *, quiet_s: float = QUIET_S) -> None:
        self.home, self.quiet_s = home, quiet_s
        self._drained: Signature | None = None  # what the last complete drain left nothing of
        self._pending: tuple[Signature, float] | None = None

    def due(self) -> bool:
        """Whether to drain now (and if so, remember what the drain starts from)."""
        seen = signature(self.home)
        if seen == self._drained or not seen:
            return False
        self._pending = (seen, time.time())
        self._drained = None
        return True

    def drained(self) -> None:
        """The drain that ``due`` allowed completed."""
        if self._pending is None:
            return
        seen, began = self._pending
        self._pending = None
        if all(not name.endswith(".draining") and began - mtime_ns / 1e9 >= self.quiet_s
               for name, _, _, mtime_ns in seen):
            self._drained = seen


