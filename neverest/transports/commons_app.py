"""The commons as an ASGI app: authentication, rate limits, routing, reads and writes.

``CommonsApp`` ties the parts together: the tokens and limits of ``commons_auth``, the
protocol of ``commons_protocol``, the files of ``commons_storage`` and the directory of
``commons_directory``.  ``serve`` opens one and serves it with hypercorn's trio worker.
The contract (endpoints, status codes, guarantees) is in the docstring of
``neverest.transports.commons_server``.
"""

from __future__ import annotations

import errno
import functools
import ipaddress
import json
import logging
import math
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import trio

from neverest.clock import Clock, SystemClock
from neverest.files import atomic_write
from neverest.serving import BodyRefused, ClientGone, handled_by_server, read_body, serve_asgi
from neverest.transports.commons_auth import (
    CommonsServerError,
    FailureLimiter,
    RateLimiter,
    Tokens,
    address_key,
)
from neverest.transports.commons_directory import DIRECTORY_FILE, Directory, check_announcement
from neverest.transports.commons_protocol import (
    ANNOUNCE_PATH,
    DIRECTORY_PATH,
    FILE_PATH,
    INDEX_PATH,
    JSON_CONTENT_TYPE,
    MAX_ANNOUNCE_BYTES,
    MAX_FILE_BYTES,
    RECORDS_CONTENT_TYPE,
    Headers,
    Refusal,
    check_preconditions,
    etag_of,
    not_modified,
)
from neverest.transports.commons_storage import (
    COMMONS_FOLDER,
    Entry,
    check_and_write,
    entry_of,
    lock_folder,
    read_file,
    scan,
)
from neverest.transports.commons_verify import PROCESS_MIN_LINES, Verifier, default_processes

MAX_ORIGINS: Final = 10_000
DEFAULT_RATE_PER_S: Final = 100.0
# A full pull of 1 000 changed files plus the index fits in one burst.
DEFAULT_BURST: Final = 1100.0
DEFAULT_BODY_TIMEOUT_S: Final = 30.0
# Failed authentications per client address: 20 at once, then one every 6 s.  A client
# with a mistyped token sees its 403s; a guesser gets 10 tries a minute.
DEFAULT_AUTH_FAILURE_RATE_PER_S: Final = 1 / 6
DEFAULT_AUTH_FAILURE_BURST: Final = 20.0
WORKER_THREADS: Final = 16

log = logging.getLogger("neverest.commons")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class Limits:
    """The server's tunable bounds (the per-file limits are the protocol's and are fixed)."""

    rate_per_s: float = DEFAULT_RATE_PER_S  # per token; 0 or less disables the limiter
    burst: float = DEFAULT_BURST
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    max_origins: int = MAX_ORIGINS
    # Failed authentications per client address; 0 or less disables that limit.
    auth_failure_rate_per_s: float = DEFAULT_AUTH_FAILURE_RATE_PER_S
    auth_failure_burst: float = DEFAULT_AUTH_FAILURE_BURST
    # Addresses of reverse proxies whose X-Forwarded-For names the client (its last entry).
    trusted_proxies: frozenset[str] = frozenset()
    # Worker processes that verify PUT bodies of at least ``verify_min_lines`` lines to check
    # (``commons_verify``); 0: verify in the server's own threads.
    verify_processes: int = field(default_factory=default_processes)
    verify_min_lines: int = PROCESS_MIN_LINES


def client_address(scope: Scope, headers: Mapping[bytes, bytes], trusted_proxies: frozenset[str]) -> str:
    """The address a request comes from: the peer's, or, from a trusted proxy, the last
    address of its X-Forwarded-For (the one the proxy itself saw)."""
    client = scope.get("client")
    host = str(client[0]) if client else "-"
    if host in trusted_proxies:
        forwarded = headers.get(b"x-forwarded-for")
        if forwarded:
            last = forwarded.rsplit(b",", 1)[-1].strip().decode("latin-1")
            try:
                host = str(ipaddress.ip_address(last))
            except ValueError:
                pass  # a proxy that sends garbage: count the proxy
    return host


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
        self.failures = FailureLimiter(limits.auth_failure_rate_per_s, limits.auth_failure_burst, monotonic)
        self.entries = entries
        self.directory = directory
        self._lock_fd: int | None = lock_fd
        self._index: tuple[bytes, str] | None = None
        self._origin_locks: dict[str, trio.Lock] = {}
        self._creating = 0  # new origins being written: they count against max_origins already
        self._directory_write = trio.Lock()
        # Threads that check and write PUT bodies (the verification itself mostly in the
        # verifier's processes).  Enough for writes to different origins to overlap their fsync
        # waits and to keep every verifying process busy; few enough that bodies held at once
        # stay bounded (16 × 256 KiB).
        self._workers = trio.CapacityLimiter(WORKER_THREADS)
        self.verifier = Verifier(limits.verify_processes, limits.verify_min_lines)
        self._tokens_generation = tokens.generation

    @classmethod
    def open(cls, data_dir: Path, tokens_file: Path, *, limits: Limits | None = None, clock: Clock | None = None,
             monotonic: Callable[[], float] | None = None) -> CommonsApp:
        """Lock the data folder, read the tokens, rebuild the index.  Raises CommonsServerError."""
        limits = limits or Limits()
        lock_fd = lock_folder(data_dir)
        try:
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
        """Stop the verifying processes and release the data folder's lock (another server may
        then use it)."""
        self.verifier.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- ASGI entry --------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if await handled_by_server(scope, receive, send):
            return
        headers = _headers(scope)
        host = client_address(scope, headers, self.limits.trusted_proxies)
        address = address_key(host)  # what failures are counted against (an IPv6 /64)
        who = "-"
        try:
            # An address that failed too often is refused before its credentials are looked at:
            # otherwise a guesser would only have to ignore the refusals to keep guessing.
            wait = self.failures.wait(address)
            if wait > 0:
                raise Refusal(429, "rate-limited", "too many failed authentications from this address; "
                              f"retry in {wait:.2f} s", headers=_retry_after(wait))
            try:
                who = self._authenticate(headers)
            except Refusal:
                self.failures.failed(address)
                raise
            wait = self.limiter.take(who)
            if wait > 0:
                raise Refusal(429, "rate-limited", f"too many requests with this token; retry in {wait:.2f} s",
                              headers=_retry_after(wait))
            await self._route(scope, headers, receive, send)
        except Refusal as exc:
            self._log_refusal(scope, host, address, who, exc)
            await _error(send, exc)
        except ClientGone:
            return
        except Exception:
            log.exception("%s %r failed on our side", scope["method"], scope["path"][:200])
            try:
                await _error(send, Refusal(500, "internal", "the server failed; the failure is logged"))
            except Exception:
                pass  # the response had started or the client is gone: hypercorn closes the stream

    def _log_refusal(self, scope: Scope, host: str, address: str, who: str, exc: Refusal) -> None:
        """Log a refusal; those of unauthenticated requests at most once a minute per address."""
        unlogged = 0
        if who == "-":
            wanted, unlogged = self.failures.should_log(address)
            if not wanted:
                return
        log.info("refused %s %r from %s (token %s): %d %s%s", scope["method"], scope["path"][:200], host, who,
                 exc.status, exc.message, f" ({unlogged} more from this address not logged)" if unlogged else "")

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
        elif (match := FILE_PATH.fullmatch(path)) is not None:
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
        data = await trio.to_thread.run_sync(read_file, self.folder / f"{origin}.jsonl")
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
        try:
            return await read_body(headers.items(), receive, limit=limit, timeout_s=self.limits.body_timeout_s)
        except BodyRefused as exc:
            raise Refusal(exc.status, exc.code, exc.message) from None

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
                    check_and_write, origin, path, body, held.etag if held else None, self.verifier,
                    limiter=self._workers)
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
                entry = entry_of(origin, body, st, records=count, etag=etag)
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


def _retry_after(wait_s: float) -> Headers:
    return [(b"retry-after", str(max(1, math.ceil(wait_s))).encode())]


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
