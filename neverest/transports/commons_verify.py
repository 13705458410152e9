"""Verifying PUT bodies off the event loop: in worker processes once the work pays for the trip.

A body with many lines to verify goes to a worker process of a ``verify_pool.VerifyPool``
(one per CPU by default; the pool says why processes and how they are kept), while a few
lines (an update: a memory's new version repeats its previous one but for a line or two) are
verified in the calling thread, where a trip to another process would cost more than the
work.  The server owns its pool: started at the first big PUT, stopped with the server.

The job is ``commons_protocol.first_bad_line`` (``verify_pool.JOBS["commons-file"]``): the
request is ``origin`` and the ``[line number, line bytes or None]`` pairs, the reply ``None``
or ``[line number, reason, message]``, its shape checked here.

Everything here blocks: ``Verifier.check`` is called from the app's worker threads.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Final

from neverest.transports.commons_protocol import BadLine, bad_record, first_bad_line
from neverest.verify_pool import DEFAULT_TIMEOUT_S, VerifierError, VerifyPool, default_processes

__all__ = ["PROCESS_MIN_LINES", "VERIFY_TIMEOUT_S", "Verifier", "VerifierError", "default_processes"]

# Below this many lines to verify, the calling thread verifies them: sending them to a worker
# and back costs about as much as verifying a few (a few hundred µs against ~52 µs a line).
PROCESS_MIN_LINES: Final = 16
# Verifying 1 000 records takes ~50 ms: a worker silent this long is stuck, not busy.
VERIFY_TIMEOUT_S: float = DEFAULT_TIMEOUT_S

Lines = Sequence[tuple[int, bytes | None]]


def _decode_reply(value: Any) -> BadLine | None:
    if value is None:
        return None
    if (isinstance(value, list) and len(value) == 3 and type(value[0]) is int and isinstance(value[1], str)
            and isinstance(value[2], str)):
        return value[0], value[1], value[2]
    raise VerifierError("a verifying process answered something that is not a verdict")


class Verifier:
    """Checks the lines of PUT bodies: in ``processes`` worker processes when there are at least
    ``min_lines`` of them, else in the calling thread (``processes`` 0: always there).

    Threads that verify in-process are bounded to one per CPU: more would only queue for the
    GIL, and each Ed25519 call that gives it back then waits to get it again.
    """

    def __init__(self, processes: int, min_lines: int = PROCESS_MIN_LINES) -> None:
        self.processes = max(0, processes)
        self.min_lines = max(1, min_lines)
        self._pool = VerifyPool(self.processes) if self.processes else None
        self._closed = False
        self._in_thread = threading.BoundedSemaphore(default_processes() or 2)

    @property
    def started(self) -> bool:
        """Whether worker processes are running (they start on first use)."""
        return self._pool is not None and self._pool.started

    def pids(self) -> list[int]:
        return self._pool.pids() if self._pool is not None else []

    def check(self, origin: str, lines: Lines) -> None:
        """Raise the Refusal of the first of ``lines`` that is not a valid record of ``origin``
        (``commons_protocol.bad_record``); VerifierError when the check could not be made."""
        if self._closed:
            raise VerifierError("the server is stopping")
        if self._pool is not None and len(lines) >= self.min_lines:
            job = self._pool.submit("commons-file", origin, [list(pair) for pair in lines])
            bad = _decode_reply(job.result(VERIFY_TIMEOUT_S))
        else:
            with self._in_thread:
                bad = first_bad_line(origin, lines)
        if bad is not None:
            raise bad_record(bad)

    def close(self) -> None:
        """Stop the worker processes (they finish what they hold); later checks fail."""
        self._closed = True
        if self._pool is not None:
            self._pool.close()
