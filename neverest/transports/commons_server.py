"""The HTTP commons server: one signed file per memory, on a server that only checks who wrote it.

The commons is the protocol's second alternate transport (after the shared folder).
Every memory keeps one file of its own signed records on the server; every other
memory pulls the files that changed.  The server checks that each line of a file was
signed by the memory the file is named after, so a token holder cannot put words in
another memory's mouth; receivers still verify every record themselves (the server
is a carrier, never a source of trust).

Run it with ``neverestd commons --listen HOST:PORT --data DIR --tokens FILE`` or
``python -m neverest.transports.commons_server`` with the same options (``main``, this
module).  It is an ASGI app (``CommonsApp``) served by hypercorn's trio worker
(``serve``); SIGINT and SIGTERM stop it cleanly with exit status 0.

The code is split by concern; this module is the command line and the contract below:

- ``commons_protocol``: what the client shares with the server (paths, limits, the lines
  of a file and what makes one valid, ETags and conditional requests, the error shape);
- ``commons_auth``: bearer tokens, the per-token rate limit, the failed-authentication limit;
- ``commons_storage``: the files, written atomically and durably, and the index scan;
- ``commons_directory``: announcements and the peer directory;
- ``commons_app``: the ASGI app (``CommonsApp``, ``Limits``) and ``serve``.

Options: ``--listen HOST:PORT`` (default ``127.0.0.1:7429``; give ``0.0.0.0:7429`` to
serve other machines; port 0 picks a free port), ``--data DIR`` (required, created if
missing), ``--tokens FILE`` (required), ``--rate R`` (requests per second per token,
default 100; 0 disables the limiter), ``--burst B`` (default 1 100), ``--body-timeout S``
(default 30), ``--max-origins N`` (default 10 000), ``--auth-failure-rate R`` (failed
authentications per second per client address, default 1/6; 0 disables the limit),
``--auth-failure-burst B`` (default 20), ``--trusted-proxy ADDR`` (repeatable: a reverse
proxy whose ``X-Forwarded-For`` names the client), ``--verify-processes N`` (worker
processes that verify PUT bodies, default one per CPU; 0 verifies in the server's threads).
Exit status: 0 after a signal,
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

Failed authentications (a 401 or a 403) are limited per client address, whatever
token they tried: each address has a bucket of ``--auth-failure-burst`` failures
(default 20), refilled at ``--auth-failure-rate`` per second (default one every 6 s).
Once it is empty, every request from that address, with a good token or not, is
answered 429 ``rate-limited`` with ``Retry-After`` before its credentials are looked
at, so a guesser gains nothing by ignoring the refusals.  An IPv6 client is counted
by its /64 (one machine usually holds a whole /64).  At most 10 000 addresses are
tracked (the least recently failed is forgotten first).  Behind a reverse proxy every
client has the proxy's address: name the proxy with ``--trusted-proxy`` so that the
last address of its ``X-Forwarded-For`` is counted instead.  Refusals of
unauthenticated requests are logged at most once a minute per address; the next line
logged says how many were not.

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
its method, path, client address and token id (those of unauthenticated requests at
most once a minute per address, as said above).

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
- Work per PUT: the body (at most 256 KiB) is held in memory, then hashed, checked and
  written in one worker thread, at most 16 at once (so writes to different origins overlap
  their fsync waits).  A body with 16 lines or more to verify has them checked (signatures
  and all) in worker processes (``--verify-processes``, one per CPU by default: ``python -m
  neverest.verify_pool``, through ``commons_verify``, started at the first such PUT, stopped with the
  server, and each exits by itself when the server is gone, kill -9 included): a record's
  checks hold the GIL for a fifth of their time, so threads would verify at 1.5 × one core
  on two and slow the event loop down.  Fewer lines (an update) are verified in the worker
  thread, at most one per CPU at once.  The file is written, and the PUT answered, only once
  every line has passed.  A worker that dies or hangs (60 s) costs the PUTs it held a 500
  and is replaced.

Limits of what the server can promise: a token holder can replace an origin's file
with an older file of that origin, or with fewer of its records, or an empty one (the
lines are signed, the set of lines is not).  Receivers lose nothing by it: they keep
the records they already hold, and the owner's next push restores the file.  Tokens
are for writers you trust not to do that; signatures are what every receiver checks.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import trio

from neverest.serving import stop_on_signals
from neverest.transports.commons_app import (
    DEFAULT_AUTH_FAILURE_BURST,
    DEFAULT_AUTH_FAILURE_RATE_PER_S,
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_BURST,
    DEFAULT_RATE_PER_S,
    MAX_ORIGINS,
    CommonsApp,
    Limits,
    serve,
    serve_app,
)
from neverest.transports.commons_auth import CommonsServerError, FailureLimiter, RateLimiter, Tokens
from neverest.transports.commons_directory import Directory, check_announcement
from neverest.transports.commons_protocol import (
    MAX_ANNOUNCE_BYTES,
    MAX_FILE_BYTES,
    MAX_RECORDS,
    Refusal,
    check_file,
    check_preconditions,
    etag_of,
    not_modified,
)
from neverest.transports.commons_storage import Entry, scan
from neverest.transports.commons_verify import default_processes

# What this module offered before the split, kept for its importers.
__all__ = [
    "MAX_ANNOUNCE_BYTES", "MAX_FILE_BYTES", "MAX_ORIGINS", "MAX_RECORDS", "CommonsApp", "CommonsServerError",
    "Directory", "Entry", "FailureLimiter", "Limits", "RateLimiter", "Refusal", "Tokens", "check_announcement",
    "check_file", "check_preconditions", "etag_of", "main", "not_modified", "scan", "serve", "serve_app",
]

DEFAULT_LISTEN: Final = "127.0.0.1:7429"

log = logging.getLogger("neverest.commons")


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
    parser.add_argument("--auth-failure-rate", type=float, default=DEFAULT_AUTH_FAILURE_RATE_PER_S, metavar="R",
                        help="failed authentications allowed per second per client address, after the burst "
                             f"(default {DEFAULT_AUTH_FAILURE_RATE_PER_S:.3g}; 0: no limit)")
    parser.add_argument("--auth-failure-burst", type=float, default=DEFAULT_AUTH_FAILURE_BURST, metavar="B",
                        help=f"failed authentications a client address may make at once "
                             f"(default {DEFAULT_AUTH_FAILURE_BURST:g})")
    parser.add_argument("--trusted-proxy", action="append", default=[], metavar="ADDR",
                        help="a reverse proxy whose X-Forwarded-For names the client (repeatable)")
    parser.add_argument("--verify-processes", type=int, default=default_processes(), metavar="N",
                        help="worker processes that verify large PUT bodies (default: one per CPU, "
                             f"{default_processes()} here; 0: verify in the server's threads)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if (args.body_timeout <= 0 or args.max_origins < 1 or args.burst < 1 or args.auth_failure_burst < 1
            or args.verify_processes < 0):
        print("neverestd commons: --body-timeout must be > 0, --max-origins, --burst and --auth-failure-burst ≥ 1, "
              "--verify-processes ≥ 0", file=sys.stderr)
        return 2
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    limits = Limits(rate_per_s=args.rate, burst=args.burst, body_timeout_s=args.body_timeout,
                    max_origins=args.max_origins, auth_failure_rate_per_s=args.auth_failure_rate,
                    auth_failure_burst=args.auth_failure_burst, trusted_proxies=frozenset(args.trusted_proxy),
                    verify_processes=args.verify_processes)
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
