"""Verifying PUT bodies off the event loop: in worker processes once the work pays for the trip.

Why processes (measured, NOTES-commons.md): PyNaCl releases the GIL inside Ed25519, but the
rest of a record's check (JSON, the fields, the lesson hash, the phrasing rule: a fifth of
the work) holds it, so two threads verify 1.5 × what one does and two processes 2.0 ×; and
every verifying thread also competes with the event loop for the GIL.  So a body with many
lines to verify goes to a pool of worker processes (one per CPU by default), while a few
lines (an update: a memory's new version repeats its previous one but for a line or two) are
verified in the calling thread, where a trip to another process would cost more than the work.

The pool is started on first use, all its workers at once (a server that only ever takes
updates never starts it).
Its workers are spawned, not forked: a fork would copy the event loop's threads mid-flight
and the descriptor that locks the data folder.  They ignore SIGINT (Ctrl-C reaches the whole
process group; the server stops them itself), and each exits by itself once the server
process is gone, so a server killed with -9 leaves no worker behind.  ``close`` stops them.
A worker that dies (killed, out of memory) costs the PUTs in flight a 500; the next PUT
starts a fresh pool.

Everything here blocks: ``Verifier.check`` is called from the app's worker threads.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Sequence
from concurrent.futures import CancelledError, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Final

from neverest.transports.commons_protocol import bad_record, first_bad_line

# Below this many lines to verify, the calling thread verifies them: sending them to a worker
# and back costs about as much as verifying a few (a few hundred µs against ~52 µs a line).
PROCESS_MIN_LINES: Final = 16
# How often a worker looks whether the server that started it is still there.
PARENT_CHECK_S: Final = 1.0

log = logging.getLogger("neverest.commons")

Lines = Sequence[tuple[int, bytes | None]]


def default_processes() -> int:
    return os.cpu_count() or 1


class VerifierError(RuntimeError):
    """Verification could not be done on our side (a worker died, the server is stopping)."""


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(PARENT_CHECK_S)
        if os.getppid() != parent:
            os._exit(0)  # the server is gone (kill -9): nobody will ever send work again


def _ready() -> None:
    """A job that does nothing: submitted once per worker, so that all start at once."""


def _worker_init(parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(parent,), name="watch-parent", daemon=True).start()


class Verifier:
    """Checks the lines of PUT bodies: in ``processes`` worker processes when there are at least
    ``min_lines`` of them, else in the calling thread (``processes`` 0: always there).

    Threads that verify in-process are bounded to one per CPU: more would only queue for the
    GIL, and each Ed25519 call that gives it back then waits to get it again.
    """

    def __init__(self, processes: int, min_lines: int = PROCESS_MIN_LINES) -> None:
        self.processes = max(0, processes)
        self.min_lines = max(1, min_lines)
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        self._closed = False
        self._in_thread = threading.BoundedSemaphore(os.cpu_count() or 2)

    @property
    def started(self) -> bool:
        """Whether the worker processes have been started (they are, on first use)."""
        return self._pool is not None

    def check(self, origin: str, lines: Lines) -> None:
        """Raise the Refusal of the first of ``lines`` that is not a valid record of ``origin``
        (``commons_protocol.bad_record``); VerifierError when the check could not be made."""
        if self.processes and len(lines) >= self.min_lines:
            bad = self._in_process(origin, lines)
        else:
            with self._in_thread:
                bad = first_bad_line(origin, lines)
        if bad is not None:
            raise bad_record(bad)

    def _get_pool(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._closed:
                raise VerifierError("the server is stopping")
            if self._pool is None:
                self._pool = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_worker_init, initargs=(os.getpid(),))
                # The executor spawns a worker whenever a job finds none idle: one no-op job per
                # worker starts them all now, rather than one by one in the middle of a burst.
                for _ in range(self.processes):
                    self._pool.submit(_ready)
                log.info("started %d verifying process(es)", self.processes)
            return self._pool

    def _in_process(self, origin: str, lines: Lines) -> tuple[int, str, str] | None:
        pool = self._get_pool()
        try:
            return pool.submit(first_bad_line, origin, lines).result()
        except BrokenProcessPool:
            with self._lock:
                if self._pool is pool:
                    self._pool = None  # the next PUT starts a fresh pool
            pool.shutdown(wait=False, cancel_futures=True)
            raise VerifierError("a verifying process died") from None
        except CancelledError:
            raise VerifierError("the server is stopping") from None

    def close(self) -> None:
        """Stop the worker processes (waiting for the work they hold); later checks fail."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
