"""Verifying records in worker processes, for every receiver of many records at once.

Why processes (measured; docs/figures.md): PyNaCl releases the GIL
inside Ed25519, but the rest of a record's check (JSON, the fields, the lesson hash, the
phrasing rule) holds it, so two threads verify about 1.5 × what one does and two processes
2.0 ×; and a verifying thread competes for the GIL with whatever else the process does (an
event loop, the SQLite writes of the records verified before).  So a large batch of lines goes
to a worker process (one per CPU by default), while a few lines are verified in the caller,
where a trip to another process costs more than the work.  Both the commons server
(``transports.commons_verify``) and the receive path (``memory.receive``) use this pool.

The workers are ``python -m neverest.verify_pool``, started on first use, all at once (a
process that only ever verifies a few lines at a time never starts them).  Not
``multiprocessing``: its workers would re-import the parent's main module (the whole daemon
under ``neverestd``, 55 MB each) and outlive a parent killed with -9.  These import only what
their jobs need, run in a process group of their own (Ctrl-C in the parent's terminal is the
parent's to handle) at a lower priority than the parent (``WORKER_NICE``), and read their work
from a pipe: when the parent is gone, for whatever reason, they read its end and exit.  Each
holds up to ``PIPELINE`` requests (the next ones wait in the pipe, so it never idles while the
parent stores what it verified).  A worker that dies, answers garbage or stops answering fails
the requests it held (``VerifierError``) and is replaced at the next request.

A job is a function named in ``JOBS``, imported by the worker when first asked for it; the
parent never imports it through this module.  Wire between the parent and its own workers
over a private pipe: frames of a 4-byte big-endian length and a body; a request is msgpack
``[job, [args...]]``, a reply is msgpack of the job's return value.  msgpack both ways, not
pickle: the worker reads hostile bytes (the records it verifies), so what it sends back is
decoded as data only, bounded, and its shape is checked by the caller of its job.

Everything here blocks: call it from a worker thread when an event loop is about.
"""

from __future__ import annotations

import atexit
import collections
import importlib
import logging
import os
import queue
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import IO, Any, Final, TypeVar

import msgpack

from neverest import records
from neverest.records import REASONS, Record, RecordError

T = TypeVar("T")

# Requests a worker holds at once: the one it runs and the next ones, waiting in its pipe.  Enough
# that the workers are still busy when the receiver has stored a whole transaction (2 000 records,
# about 60 ms, while a worker verifies a batch of 128 lines in 11): with 2 a worker, they ran dry
# during each one (pull into an empty store 0.635 x raw verify, 0.682 x with 6; bench_gossip.py).
# At most 6 requests a worker: 128 lines of at most 16 KiB each.
PIPELINE: Final = 6
# What a request or a reply may be: a batch of lines with framing (a commons file is at most
# 256 KiB, the receive path sends 128 lines of at most 16 KiB), and a reply up to the lesson
# vectors of such a batch (128 × 1 KiB) with the refusal messages.
MAX_REQUEST_BYTES: Final = 16 * 1024 * 1024
MAX_REPLY_BYTES: Final = 4 * 1024 * 1024
# Verifying 1 000 records takes ~50 ms: a worker silent this long is stuck, not busy.
DEFAULT_TIMEOUT_S: Final = 60.0

# The functions a worker runs, by name: "module:function", imported in the worker only.
JOBS: Final = {
    "commons-file": "neverest.transports.commons_protocol:first_bad_line",
    "receive-batch": "neverest.memory.verify_job:verify_batch",
    "verify-lines": "neverest.records:verdicts",
}
# Lines per request of ``parse_many``, and the fewest it sends to a worker rather than verify
# itself (measured: benchmarks/bench_receive.py --threshold).
BATCH_LINES: Final = 128
MIN_LINES: Final = 32

_LENGTH = struct.Struct(">I")
# How much nicer than its parent a worker runs.  The parent stores what the workers verified, one
# core at most (its GIL), and answers its peers meanwhile: at an equal share, two busy workers left
# it two thirds of a core, and it was the one the pull waited for (its threads waited 1.0-1.2 s
# for a CPU in a 20 000-record pull, 0.5-0.6 s at +5).  And whatever else runs on the machine
# comes before the verifying of a pull.  Workers stay in their parent's session so this counts:
# Linux's autogroups share the CPU between sessions first, so a worker in a session of its own
# (as they were) competed with the parent as an equal whatever its niceness, and took as large
# a share of the machine as the owner's whole terminal session.
WORKER_NICE: Final = 5

log = logging.getLogger("neverest.verify")


def default_processes() -> int:
    return os.cpu_count() or 1


class VerifierError(RuntimeError):
    """Verification could not be done on our side (a worker died, the pool is closed)."""


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


def _unpack(data: bytes) -> Any:
    # Data only: no extension types, and the frame's size already bounds every container.
    return msgpack.unpackb(data, raw=False, strict_map_key=True, ext_hook=_no_ext)


def _no_ext(code: int, data: bytes) -> Any:
    raise ValueError("an extension type where none is expected")


class _Worker:
    """One worker process, the requests it holds, and the two threads that write them to it
    and read its replies (so that no caller ever blocks on its pipes: a stuck worker costs
    its callers a timeout, never a hang)."""

    def __init__(self, on_free: Callable[[], None]) -> None:
        # The child imports this very copy of neverest, wherever the parent imported it from.
        root = str(Path(__file__).resolve().parents[1])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
        self.proc = subprocess.Popen([sys.executable, "-m", "neverest.verify_pool"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                     process_group=0)
        self.load = 0  # requests handed to it and not yet answered (the pool's lock guards it)
        self.dead = False
        self._on_free = on_free
        # A request's place in ``_waiting`` and in ``_outbox`` go together (the worker answers
        # in the order it is asked); never held across I/O.
        self._lock = threading.Lock()
        self._waiting: collections.deque[Future[Any]] = collections.deque()
        self._outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()  # None: close the pipe
        self._threads = [threading.Thread(target=self._write_requests, name="verify-send", daemon=True),
                         threading.Thread(target=self._read_replies, name="verify-replies", daemon=True)]
        for thread in self._threads:
            thread.start()

    def submit(self, request: bytes) -> Future[Any]:
        future: Future[Any] = Future()
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
                result = _unpack(data)
            except Exception:  # ValueError, msgpack's own errors, a stack too deep...
                break  # our own worker talking nonsense: treat it as dead
            with self._lock:
                future = self._waiting.popleft() if self._waiting else None
            if future is None:
                break  # an answer to nothing: treat it as dead
            future.set_result(result)
            self._on_free()
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
                self._on_free()

    def join(self, timeout_s: float) -> None:
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for thread in self._threads:
            thread.join(timeout=timeout_s)


class Job:
    """A request handed to a worker; ``result`` waits for its answer."""

    def __init__(self, worker: _Worker, future: Future[Any]) -> None:
        self._worker, self._future = worker, future

    def result(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
        """The job's return value (check its shape: it comes from a process that read hostile
        bytes); VerifierError when the worker died or was silent for ``timeout_s``."""
        try:
            return self._future.result(timeout=timeout_s)
        except FutureTimeout:
            log.error("a verifying process did not answer within %g s; killed", timeout_s)
            self._worker.stop(kill=True)
            raise VerifierError("a verifying process did not answer") from None


class VerifyPool:
    """``processes`` worker processes, started at the first ``submit``, replaced when they die."""

    def __init__(self, processes: int) -> None:
        self.processes = max(1, processes)
        self._lock = threading.Condition()
        self._workers: list[_Worker] = []
        self._closed = False

    @property
    def started(self) -> bool:
        """Whether worker processes are running (they start on first use)."""
        return bool(self._workers)

    def pids(self) -> list[int]:
        return [worker.proc.pid for worker in self._workers]

    def submit(self, job: str, *args: Any) -> Job:
        """Hand ``JOBS[job](*args)`` to the least busy worker, waiting while every worker holds
        ``PIPELINE`` requests.  ``args`` are msgpack data (bytes, str, numbers, lists...)."""
        submitted = self._submit(job, args, wait=True)
        assert submitted is not None
        return submitted

    def try_submit(self, job: str, *args: Any) -> Job | None:
        """``submit`` if a worker holds fewer than ``PIPELINE`` requests now; else None, at once."""
        return self._submit(job, args, wait=False)

    def _submit(self, job: str, args: tuple[Any, ...], *, wait: bool) -> Job | None:
        if job not in JOBS:
            raise ValueError(f"no job {job!r}")
        request = msgpack.packb([job, list(args)], use_bin_type=True)
        if len(request) > MAX_REQUEST_BYTES:
            raise ValueError(f"a request of {len(request)} bytes is over {MAX_REQUEST_BYTES}")
        with self._lock:
            while True:
                if self._closed:
                    raise VerifierError("the verifying processes are stopped")
                if not self._workers:
                    self._workers = [_Worker(self._freed) for _ in range(self.processes)]
                    log.info("started %d verifying process(es)", self.processes)
                self._workers = [_Worker(self._freed) if worker.dead else worker for worker in self._workers]
                worker = min(self._workers, key=lambda w: w.load)
                if worker.load < PIPELINE:
                    break
                if not wait:
                    return None
                self._lock.wait()
            worker.load += 1
            try:
                future = worker.submit(request)
            except VerifierError:
                worker.load -= 1
                raise
        return Job(worker, future)

    def _freed(self) -> None:
        # Called by a worker's reader thread (or its stop) once per request answered or failed.
        with self._lock:
            for worker in self._workers:
                worker.load = min(worker.load, len(worker._waiting))
            self._lock.notify_all()

    def close(self) -> None:
        """Stop the worker processes (they finish what they hold); later submits fail."""
        with self._lock:
            self._closed = True
            workers, self._workers = self._workers, []
            self._lock.notify_all()
        for worker in workers:
            worker.stop(kill=False)
        for worker in workers:
            worker.join(timeout_s=10.0)


def refusal(verdict: Any) -> RecordError | None:
    """The RecordError a worker's verdict names (None: the record is valid); VerifierError when
    it is neither (the worker read hostile bytes: what it says is data to check)."""
    if verdict is None:
        return None
    if isinstance(verdict, list) and len(verdict) == 2 and verdict[0] in REASONS and isinstance(verdict[1], str):
        return RecordError(verdict[0], verdict[1])
    raise VerifierError("a verifying process answered something that is not a verdict")


def parse_many(pool: VerifyPool | None, lines: Iterable[tuple[T, bytes | None]], *, min_lines: int = MIN_LINES
               ) -> Iterator[tuple[T, Record | RecordError]]:
    """``records.parse_many`` with the pool's cores: batches of ``BATCH_LINES`` lines go to the
    workers (the last one too when it has at least ``min_lines``), up to two per worker at once,
    and come back in order.  ``pool`` None: all in this process."""
    if pool is None:
        yield from records.parse_many(lines)
        return
    out: collections.deque[tuple[list[tuple[T, bytes | None]], Job | None]] = collections.deque()

    def take() -> Iterator[tuple[T, Record | RecordError]]:
        batch, job = out.popleft()
        if job is None:
            yield from records.parse_many(batch)
            return
        answer = job.result()
        if not isinstance(answer, list) or len(answer) != len(batch):
            raise VerifierError("a verifying process answered something that is not a batch's verdicts")
        for (tag, line), verdict in zip(batch, answer, strict=True):
            error = refusal(verdict)
            if error is None and line is None:
                raise VerifierError("a verifying process accepted a line too large to hold")
            yield tag, error if error is not None else records.verified(line)  # type: ignore[arg-type]

    batch: list[tuple[T, bytes | None]] = []
    for tag, line in lines:
        batch.append((tag, line))
        if len(batch) == BATCH_LINES:
            out.append((batch, pool.submit("verify-lines", [b for _, b in batch])))
            batch = []
            while len(out) > 2 * pool.processes:
                yield from take()
    if batch:
        out.append((batch, pool.submit("verify-lines", [b for _, b in batch]) if len(batch) >= min_lines else None))
    while out:
        yield from take()


_shared: VerifyPool | None = None
_shared_lock = threading.Lock()


def shared(processes: int) -> VerifyPool:
    """This process's pool for receiving (one, whoever receives: folder, gossip, commons pulls),
    stopped when the process exits.  ``processes`` counts the first time only."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = VerifyPool(processes)
            atexit.register(_shared.close)
        return _shared


# -- the worker process ------------------------------------------------------------------------


def serve(requests: IO[bytes], replies: IO[bytes]) -> int:
    """A worker's loop: run each request's job, answer it; 0 at the end of ``requests``."""
    functions: dict[str, Callable[..., Any]] = {}
    while (data := _read_frame(requests, MAX_REQUEST_BYTES)) is not None:
        name, args = msgpack.unpackb(data, raw=False)  # from the parent that started us, over our own pipe
        function = functions.get(name)
        if function is None:
            module, _, attribute = JOBS[name].partition(":")
            function = functions[name] = getattr(importlib.import_module(module), attribute)
        _write_frame(replies, msgpack.packb(function(*args), use_bin_type=True))
    return 0


if __name__ == "__main__":
    # A process group of our own already keeps the terminal's Ctrl-C away; this keeps a stray one
    # (sent to us by pid or to our group) from printing a traceback: the parent decides when we stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.nice(WORKER_NICE)  # raising one's niceness needs no privilege
    sys.exit(serve(sys.stdin.buffer, sys.stdout.buffer))
