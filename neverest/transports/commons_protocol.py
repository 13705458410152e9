"""The HTTP commons protocol, shared by the server and the client.

What both sides must agree on, in one place: the paths, the content types, the limits of
a file, how a file is cut into record lines, what makes a file valid for an origin, the
ETag of some bytes and the rules of conditional requests, and the shape of an error
(``{"error": code, "message": text}``).  The contract itself is written out in the
docstring of ``neverest.transports.commons_server``.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from neverest.lines import read_lines
from neverest.records import MAX_RECORD_BYTES, RecordError, parse_many

INDEX_PATH: Final = "/commons/index"
DIRECTORY_PATH: Final = "/directory"
ANNOUNCE_PATH: Final = "/directory/announce"
RECORDS_CONTENT_TYPE: Final = "application/x-ndjson"
JSON_CONTENT_TYPE: Final = "application/json"

MAX_RECORDS: Final = 1000
MAX_FILE_BYTES: Final = 256 * 1024
MAX_ANNOUNCE_BYTES: Final = 4 * 1024
# What a client reads of an index at most: 10 000 origins (a server's default bound) take
# about 1.2 MB; the margin allows for servers configured to hold more.
MAX_INDEX_BYTES: Final = 8 * 1024 * 1024

ORIGIN: Final = re.compile(r"[0-9a-f]{16}")
FILE_PATH: Final = re.compile(r"/commons/([0-9a-f]{16})\.jsonl")

Headers = list[tuple[bytes, bytes]]


def file_path(origin: str) -> str:
    """The path of ``origin``'s file; ``origin`` must be 16 lower-case hex digits."""
    if not ORIGIN.fullmatch(origin):
        raise ValueError(f"{origin!r} is not an origin (16 lower-case hex digits)")
    return f"/commons/{origin}.jsonl"


class Refusal(Exception):
    """A request is refused; everything in it is safe to send back to the client."""

    def __init__(self, status: int, code: str, message: str, *, headers: Headers | None = None,
                 extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or []
        self.extra = dict(extra or {})


# -- ETags and conditional requests ------------------------------------------------------


def etag_of(data: bytes) -> str:
    """The strong ETag of some bytes: BLAKE2b-128 in hex, quoted, as it appears in headers."""
    return '"' + hashlib.blake2b(data, digest_size=16).hexdigest() + '"'


def _etag_list(value: bytes) -> list[str] | None:
    """The entity tags of an If-Match / If-None-Match header; None stands for ``*``."""
    text = value.decode("latin-1").strip()
    if text == "*":
        return None
    return [item.strip() for item in text.split(",") if item.strip()]


def _strong_match(tags: list[str], etag: str) -> bool:
    return etag in tags  # a weak tag (W/"…") never equals a strong one


def _weak_match(tags: list[str], etag: str) -> bool:
    return any(tag.removeprefix("W/") == etag for tag in tags)


def check_preconditions(headers: Mapping[bytes, bytes], current: str | None) -> None:
    """Raise 412 unless the write's conditions hold for the current ETag (None: no file).

    Evaluated in the order of RFC 9110 §13.2.2: If-Match, then If-None-Match.
    """
    extra = {"etag": current} if current is not None else {}
    if_match = headers.get(b"if-match")
    if if_match is not None:
        tags = _etag_list(if_match)
        if current is None:
            raise Refusal(412, "precondition-failed", "If-Match: there is no file for this origin yet", extra=extra)
        if tags is not None and not _strong_match(tags, current):
            raise Refusal(412, "precondition-failed",
                          f"If-Match: the file has changed; its current ETag is {current}", extra=extra)
    if_none_match = headers.get(b"if-none-match")
    if if_none_match is not None and current is not None:
        tags = _etag_list(if_none_match)
        if tags is None:
            raise Refusal(412, "precondition-failed",
                          f"If-None-Match: *: a file for this origin exists (ETag {current})", extra=extra)
        if _weak_match(tags, current):
            raise Refusal(412, "precondition-failed", f"If-None-Match: the file is {current}", extra=extra)


def not_modified(headers: Mapping[bytes, bytes], etag: str) -> bool:
    """Whether a read's If-None-Match names ``etag`` (weak comparison, ``*`` included)."""
    value = headers.get(b"if-none-match")
    if value is None:
        return False
    tags = _etag_list(value)
    return tags is None or _weak_match(tags, etag)


# -- files of records --------------------------------------------------------------------


def record_lines(data: bytes) -> list[tuple[int, bytes | None]]:
    """The record lines of a file as every receiver reads them: numbered from 1, ``\\n`` or
    ``\\r\\n`` endings, lines of only whitespace skipped, a line over MAX_RECORD_BYTES None."""
    return [(n, line) for n, line in read_lines(io.BytesIO(data), MAX_RECORD_BYTES)
            if line is None or line.strip()]


def file_lines(body: bytes) -> list[tuple[int, bytes | None]]:
    """The record lines of a PUT body after the checks that cost no verification (UTF-8, the
    number of records); raises Refusal."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Refusal(400, "bad-encoding", f"the body is not UTF-8 (byte {exc.start})") from None
    lines = record_lines(body)
    if len(lines) > MAX_RECORDS:
        raise Refusal(413, "too-many-records", f"{len(lines)} records; a file holds at most {MAX_RECORDS}")
    return lines


BadLine = tuple[int, str, str]  # line number (from 1), reason code, message


def first_bad_line(origin: str, lines: Iterable[tuple[int, bytes | None]]) -> BadLine | None:
    """The first of ``lines`` that is not a valid record of ``origin``, or None when all are.

    Blocking (it verifies signatures).  Plain data in and out, so that it can run in
    another process (``commons_verify``); ``bad_record`` makes the Refusal of its answer.
    """
    for number, result in parse_many(lines):
        if isinstance(result, RecordError):
            return number, result.code, str(result)
        if result.origin != origin:
            return number, "other-origin", (f"other-origin: the record is signed by {result.origin}, "
                                            f"and this file is {origin}'s")
    return None


def bad_record(bad: BadLine) -> Refusal:
    number, reason, message = bad
    return Refusal(422, "bad-record", f"line {number}: {message}", extra={"line": number, "reason": reason})


def fresh_lines(lines: list[tuple[int, bytes | None]], known: Iterable[bytes]) -> list[tuple[int, bytes | None]]:
    """The lines still to verify: ``known`` are lines already verified for this origin (those of
    the stored file), and a line repeated byte for byte is not verified again, since the
    verdict is a function of the bytes alone."""
    verified = known if isinstance(known, (set, frozenset)) else set(known)
    return [(n, line) for n, line in lines if line is None or line not in verified]


def check_file(origin: str, body: bytes, known: Iterable[bytes] = ()) -> int:
    """Check a PUT body for ``origin``; the number of records, or a Refusal.

    ``known``: lines already verified for this origin (see ``fresh_lines``).  Blocking (it
    verifies signatures): run it in a thread.
    """
    lines = file_lines(body)
    bad = first_bad_line(origin, fresh_lines(lines, known))
    if bad is not None:
        raise bad_record(bad)
    return len(lines)
