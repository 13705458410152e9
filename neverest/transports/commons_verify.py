"""Verifying PUT bodies off the event loop: in worker processes once the work pays for the trip.

Why processes (measured, NOTES-commons.md): PyNaCl releases the GIL inside Ed25519, but the
rest of a record's check (JSON, the fields, the lesson hash, the phrasing rule: a fifth of
the work) holds it, so two threads verify 1.5 × what one does and two processes 2.0 ×; and
every verifying thread also competes with the event loop for the GIL.  So a body with many
lines to verify goes to a worker process (one per CPU by default), while a few lines (an
update: a memory's new version repeats its previous one but for a line or two) are verified
in the calling thread, where a trip to another process would cost more than the work.

The workers are ``python -m neverest.transports.commons_verify``, started on first use, all
at once (a server that only ever takes updates never starts them).  Not ``multiprocessing``:
its workers would re-import the server's main module (the whole daemon under ``neverestd``,
55 MB each) and outlive a server killed with -9.  These import only the record checks, run
in a session of their own (Ctrl-C in the server's terminal is the server's to handle), and
read their work from a pipe: when the server is gone, for whatever reason, they read its end
and exit.  Each holds up to ``PIPELINE`` requests (its next one waits in the pipe, so it
never idles while the server hands over results).  A worker that dies or stops answering
costs the PUTs it held a 500 (``VerifierError``), and is replaced at the next PUT.

Wire between the server and its own workers (trusted both ways, over a private pipe): frames
of a 4-byte big-endian length and a body; a request is a pickle of ``(origin, [(line number,
line bytes or None)])``, a reply is JSON: ``null`` or ``[line number, reason, message]``
(``commons_protocol.first_bad_line``).

Everything here blocks: ``Verifier.check`` is called from the app's worker threads.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import pickle
import queue
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import IO, Final

from neverest.transports.commons_protocol import MAX_FILE_BYTES, BadLine, bad_record, first_bad_line

# Below this many lines to verify, the calling thread verifies them: sending them to a worker
# and back costs about as much as verifying a few (a few hundred µs against ~52 µs a line).
PROCESS_MIN_LINES: Final = 16
# Requests a worker holds at once: the one it verifies and the next, waiting in its pipe.
PIPELINE: Final = 2
# A request is at most a body's lines plus their framing; a reply is a short JSON array.
MAX_REQUEST_BYTES: Final = 2 * MAX_FILE_BYTES
MAX_REPLY_BYTES: Final = 64 * 1024
# Verifying 1 000 records takes ~50 ms: a worker silent this long is stuck, not busy.
VERIFY_TIMEOUT_S: Final = 60.0

_LENGTH = struct.Struct(">I")

log = logging.getLogger("neverest.commons")

Lines = Sequence[tuple[int, bytes | None]]


def default_processes() -> int:
    return os.cpu_count() or 1


class VerifierError(RuntimeError):
    """Verification could not be done on our side (a worker died, the server is stopping)."""


def _read_frame(stream: IO[bytes], limit: int) -> bytes | None:
    """One frame's body, or None at the end of the stream (or on a frame over ``limit``)."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (size,) = _LENGTH.unpack(head)
    if size > limit:
        return None
    data = stream.read(size)
    return data if len(data) == size else None


def _write_frame(stream: IO[bytes], data: bytes) -> None:
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def _decode_reply(data: bytes) -> BadLine | None:
    value = json.loads(data)
    if value is None:
        return None
    if (isinstance(value, list) and len(value) == 3 and type(value[0]) is int and isinstance(value[1], str)
            and isinstance(value[2], str)):
        return value[0], value[1], value[2]
    raise ValueError("not a reply")


class _Worker:
    """One worker process, the requests it holds, and the two threads that write them to it
    and read its replies (so that no caller ever blocks on its pipes: a stuck worker costs
    its callers a timeout, never a hang)."""

    def __init__(self) -> None:
        # The child imports this very copy of neverest, wherever the server imported it from.
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
        self.proc = subprocess.Popen([sys.executable, "-m", "neverest.transports.commons_verify"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                     start_new_session=True)
        self.load = 0  # requests handed to it and not yet answered (the Verifier's lock guards it)
        self.dead = False
        # A request's place in ``_waiting`` and in ``_outbox`` go together (the worker answers
        # in the order it is asked); never held across I/O.
        self._lock = threading.Lock()
        self._waiting: collections.deque[Future[BadLine | None]] = collections.deque()
        self._outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()  # None: close the pipe
        self._threads = [threading.Thread(target=self._write_requests, name="commons-verify-send", daemon=True),
                         threading.Thread(target=self._read_replies, name="commons-verify-replies", daemon=True)]
        for thread in self._threads:
            thread.start()

    def submit(self, request: bytes) -> Future[BadLine | None]:
        future: Future[BadLine | None] = Future()
        with self._lock:
            if self.dead:
                raise VerifierError("a verifying process died")
            self._waiting.append(future)
            self._outbox.put(request)
        return future

    def _write_requests(self) -> None:
        assert self.proc.stdin is not None
        try:
            while (request := self._outbox.get()) is not None:
                _write_frame(self.proc.stdin, request)
            self.proc.stdin.close()  # the worker answers what it holds, then exits
        except (OSError, ValueError):  # it is gone (or killed while we wrote)
            self.stop(kill=True)

    def _read_replies(self) -> None:
        assert self.proc.stdout is not None
        while (data := _read_frame(self.proc.stdout, MAX_REPLY_BYTES)) is not None:
            try:
                result = _decode_reply(data)
            except ValueError:
                break  # our own worker talking nonsense: treat it as dead
            with self._lock:
                future = self._waiting.popleft() if self._waiting else None
            if future is None:
                break  # an answer to nothing: treat it as dead
            future.set_result(result)
        self.stop(kill=True)
        self.proc.wait()  # reaped here, whoever replaces it
        self.proc.stdout.close()

    def stop(self, *, kill: bool) -> None:
        """Stop taking requests.  ``kill``: end the process now and fail what it held;
        otherwise close its pipe once what it holds is sent: it answers that, then exits."""
        with self._lock:
            self.dead = True
            self._outbox.put(None)
            failed = list(self._waiting) if kill else []
            if kill:
                self._waiting.clear()
        if kill:
            self.proc.kill()  # nothing if it has exited already; frees a write blocked on it
        for future in failed:
            if not future.done():
                future.set_exception(VerifierError("a verifying process died"))

    def join(self, timeout_s: float) -> None:
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for thread in self._threads:
            thread.join(timeout=timeout_s)


class Verifier:
    """Checks the lines of PUT bodies: in ``processes`` worker processes when there are at least
    ``min_lines`` of them, else in the calling thread (``processes`` 0: always there).

    Threads that verify in-process are bounded to one per CPU: more would only queue for the
    GIL, and each Ed25519 call that gives it back then waits to get it again.
    """

    def __init__(self, processes: int, min_lines: int = PROCESS_MIN_LINES) -> None:
        self.processes = max(0, processes)
        self.min_lines = max(1, min_lines)
        self._lock = threading.Condition()
        self._workers: list[_Worker] = []
        self._closed = False
        self._in_thread = threading.BoundedSemaphore(os.cpu_count() or 2)

    @property
    def started(self) -> bool:
        """Whether worker processes are running (they start on first use)."""
        return bool(self._workers)

    def pids(self) -> list[int]:
        return [worker.proc.pid for worker in self._workers]

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

    def _take_worker(self) -> _Worker:
        with self._lock:
            while True:
                if self._closed:
                    raise VerifierError("the server is stopping")
                if not self._workers:
                    self._workers = [_Worker() for _ in range(self.processes)]
                    log.info("started %d verifying process(es)", self.processes)
                self._workers = [_Worker() if worker.dead else worker for worker in self._workers]
                worker = min(self._workers, key=lambda w: w.load)
                if worker.load < PIPELINE:
                    worker.load += 1
                    return worker
                self._lock.wait()

    def _in_process(self, origin: str, lines: Lines) -> BadLine | None:
        request = pickle.dumps((origin, list(lines)), protocol=pickle.HIGHEST_PROTOCOL)
        worker = self._take_worker()
        try:
            future = worker.submit(request)
            try:
                return future.result(timeout=VERIFY_TIMEOUT_S)
            except FutureTimeout:
                log.error("a verifying process did not answer within %g s; killed", VERIFY_TIMEOUT_S)
                worker.stop(kill=True)
                raise VerifierError("a verifying process did not answer") from None
        finally:
            with self._lock:
                worker.load -= 1
                self._lock.notify()

    def close(self) -> None:
        """Stop the worker processes (they finish what they hold); later checks fail."""
        with self._lock:
            self._closed = True
            workers, self._workers = self._workers, []
            self._lock.notify_all()
        for worker in workers:
            worker.stop(kill=False)
        for worker in workers:
            worker.join(timeout_s=10.0)


# -- the worker process ------------------------------------------------------------------------


def serve(requests: IO[bytes], replies: IO[bytes]) -> int:
    """A worker's loop: check each request, answer it; 0 at the end of ``requests``."""
    while (data := _read_frame(requests, MAX_REQUEST_BYTES)) is not None:
        origin, lines = pickle.loads(data)  # from the server that started us, over our own pipe
        _write_frame(replies, json.dumps(first_bad_line(origin, lines)).encode("utf-8"))
    return 0


if __name__ == "__main__":
    # A session of our own already keeps the terminal's Ctrl-C away; this keeps a stray one
    # (sent to us by pid) from printing a traceback: the server decides when we stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(serve(sys.stdin.buffer, sys.stdout.buffer))
