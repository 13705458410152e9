"""The HTTP commons, client side: push this memory's file, pull everyone else's.

The commons keeps one signed file per memory and checks only who wrote it; every
record pulled still goes through the one receive function here (PROTOCOL.md §13).

- ``push``: ``PUT /commons/<origin>.jsonl`` with this memory's current records, the
  newest that fit the commons' limits (1 000 records, 256 KiB).  The request is
  conditional: ``If-Match`` with the ETag this memory last wrote, or ``If-None-Match: *``
  for a first push, so two writers of one origin (a key copied to two machines, a
  restored backup) never silently overwrite each other.  On 412 the client reads the
  current ETag and tries once more: the file is this origin's own, so the newer
  content is ours to write, but the conflict is reported.  A commons older than the
  refutation record refuses a whole file holding one (422, reason ``bad-type`` at that
  line): the client then pushes once more without its refutations, and reports it.
- ``pull``: ``GET /commons/index`` with ``If-None-Match``: a memory already up to date
  pays one small request answered 304.  Otherwise it fetches only the files whose ETag
  changed since it last read them, each conditional too.

The ETags remembered live in the store's ``meta`` table, one entry per commons URL.
Every request goes through ``neverest.httpclient``: connect and read timeouts, a total
deadline per request (``REQUEST_TIMEOUT_S``) and a bounded body; a bearer token is sent on
every request.  ``push``, ``pull`` and ``announce`` take an optional ``transport`` (an
``httpx.BaseTransport``, such as ``httpx.MockTransport``) that carries their requests
instead of the network, so tests and the simulator can fake it.

Errors say who is at fault: ``CommonsUnreachable`` when the network did not carry a request
(nothing listening, a timeout), ``CommonsRefused`` when the commons answered and refused
(its status and reason in the message); both are ``CommonsError``.
"""

from __future__ import annotations

import json
from collections.abc import Container, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import httpx

from neverest import httpclient
from neverest.config import Config
from neverest.identity import Identity
from neverest.memory import holdings
from neverest.memory.admission import OVER_BUDGET
from neverest.memory.receive import Receiver, ReceiveResult
from neverest.memory.store import Store
from neverest.records import claimed
from neverest.transports.announce import sign_announcement
from neverest.transports.commons_protocol import (
    ANNOUNCE_PATH,
    INDEX_PATH,
    JSON_CONTENT_TYPE,
    MAX_FILE_BYTES,
    MAX_INDEX_BYTES,
    MAX_RECORDS,
    ORIGIN,
    RECORDS_CONTENT_TYPE,
    file_path,
    record_lines,
)

# One request, answer included; a file is at most 256 KiB and an index a few MB.
REQUEST_TIMEOUT_S: Final = 60.0
# What the commons may answer to a PUT or an announcement: a small JSON object.
MAX_ANSWER_BYTES: Final = 64 * 1024
# A file as served may be a little over the limit of what a PUT may hold (another server's
# rules): read it, and let the receive function judge each line.
MAX_FILE_ANSWER_BYTES: Final = MAX_FILE_BYTES + 1024


class CommonsError(Exception):
    """The commons could not be used; the message says what happened and who is at fault."""


class CommonsUnreachable(CommonsError):
    """The network did not carry a request to the commons (nothing listening, a timeout)."""


class CommonsRefused(CommonsError):
    """The commons answered and refused; ``status`` is its HTTP status, and for a refused file
    ``reason`` and ``line`` the refusal code and line number (from 1) it named, when it did."""

    def __init__(self, message: str, status: int, *, reason: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason, self.line = reason, line


@dataclass
class PullResult:
    index_requests: int = 0
    file_requests: int = 0
    files: dict[str, ReceiveResult] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        total = ReceiveResult()
        for r in self.files.values():
            total.add(r)
        return {"index_requests": self.index_requests, "file_requests": self.file_requests,
                "files": len(self.files), "total": total.to_json()}


def read_token(path: str | Path) -> str:
    """The first non-blank, non-comment line of a token file."""
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except OSError as exc:
        raise CommonsError(f"cannot read the token file {path}: {exc.strerror}") from None
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            return line.strip()
    raise CommonsError(f"the token file {path} holds no token")


def base_url(url: str) -> str:
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CommonsError(f"{url!r} is not an http:// or https:// URL")
    return url.strip().rstrip("/").removesuffix("/commons")


def _client(token: str, transport: httpx.BaseTransport | None) -> httpx.Client:
    # A commons is a service the owner named, often beyond the LAN: the environment's proxy applies.
    return httpclient.sync_client(transport=transport, headers={"authorization": f"Bearer {token}"},
                                  proxy_from_env=True)


def _refusal(exc: httpclient.PeerRefused) -> CommonsRefused:
    """What the commons said, from its error body ``{"error", "message"}`` when it sent one."""
    try:
        body = json.loads(exc.detail)
        said = f"HTTP {exc.status} {body['error']}: {body['message']}"
    except (ValueError, TypeError, KeyError):
        return CommonsRefused(str(exc), exc.status)
    reason, line = body.get("reason"), body.get("line")
    return CommonsRefused(said, exc.status, reason=reason if isinstance(reason, str) else None,
                          line=line if type(line) is int else None)


def _request(client: httpx.Client, method: str, url: str, *, max_bytes: int, accept: Container[int],
             content: bytes | None = None, headers: Mapping[str, str] | None = None) -> httpclient.Answer:
    """One bounded request; CommonsUnreachable or CommonsRefused (a status not in ``accept``)."""
    try:
        return httpclient.request_bounded_sync(client, method, url, max_bytes=max_bytes,
                                               total_timeout_s=REQUEST_TIMEOUT_S, content=content,
                                               headers=headers, accept=accept)
    except httpclient.TransportFailure as exc:
        raise CommonsUnreachable(str(exc)) from None
    except httpclient.PeerRefused as exc:
        raise _refusal(exc) from None


def load_memo(store: Store, url: str) -> dict[str, Any]:
    """What this memory remembers of the commons at ``url``: the ETags of its index and files."""
    raw = store.get_meta(f"commons:{url}")
    memo: dict[str, Any] = json.loads(raw) if raw else {}
    memo.setdefault("files", {})
    return memo


def save_memo(store: Store, url: str, remembered: dict[str, Any]) -> None:
    with store.write() as db:
        Store.set_meta(db, f"commons:{url}", json.dumps(remembered))


def _get(client: httpx.Client, url: str, limit: int, etag: str | None) -> tuple[int, bytes, str | None]:
    """A conditional GET: (200, body, ETag) or (304, b"", ETag); raises for any other answer."""
    headers = {"if-none-match": etag} if etag else {}
    answer = _request(client, "GET", url, max_bytes=limit, accept=(200, 304), headers=headers)
    return answer.status, answer.body, answer.headers.get("etag")


def own_file(store: Store, identity: Identity, *, refutations: bool = True) -> tuple[bytes, int]:
    """This memory's records for the commons: the newest that fit its limits, in seq order
    (without refutations, for a commons that predates them)."""
    records = holdings.of_origin(store.db, identity.origin, current_only=True)
    chosen: list[bytes] = []
    size = 0
    for held in reversed(records):
        if not refutations and held.type == "refute":
            continue
        if len(chosen) == MAX_RECORDS or size + len(held.raw) + 1 > MAX_FILE_BYTES:
            break
        chosen.append(held.raw)
        size += len(held.raw) + 1
    chosen.reverse()
    return b"".join(raw + b"\n" for raw in chosen), len(chosen)


def push(store: Store, identity: Identity, url: str, token: str, *,
         transport: httpx.BaseTransport | None = None) -> dict[str, Any]:
    base = base_url(url)
    body, count = own_file(store, identity)
    memo = load_memo(store, base)
    target = base + file_path(identity.origin)
    conflict = None
    left_out = 0
    tries = 2
    with _client(token, transport) as client:
        while tries:
            tries -= 1
            etag = memo.get("own")
            headers = {"content-type": RECORDS_CONTENT_TYPE} | (
                {"if-match": etag} if etag else {"if-none-match": "*"})
            try:
                answer = _request(client, "PUT", target, content=body, headers=headers, max_bytes=MAX_ANSWER_BYTES,
                                  accept=(200, 201, 204, 412))
            except CommonsRefused as exc:
                if not left_out and _refused_a_refutation(exc, body):
                    # A commons from before refutations (PROTOCOL.md §1, "Refutations"): this memory's
                    # lessons, confirmations and revocations still go there, its refutations do not.
                    left_out = sum(claimed(line)[0] == "refute" for line in body.splitlines())
                    body, count = own_file(store, identity, refutations=False)
                    tries += 1
                    continue
                raise CommonsRefused(f"push refused: {exc}", exc.status, reason=exc.reason, line=exc.line) from None
            if answer.status != 412:
                memo["own"] = answer.headers.get("etag")
                save_memo(store, base, memo)
                return {"records": count, "bytes": len(body), "etag": memo["own"], "conflict": conflict,
                        "refutations_left_out": left_out}
            # Someone else wrote this origin's file (another machine with this key, a restored
            # backup): read what is there now, report it, and write ours over it once.
            try:
                status, _, current = _get(client, target, MAX_FILE_ANSWER_BYTES, None)
            except CommonsRefused as exc:
                if exc.status != 404:
                    raise
                status, current = 404, None
            conflict = f"the commons held another version ({current or 'none'}) than the one last written here"
            memo["own"] = current if status == 200 else None
    raise CommonsRefused(f"push refused twice: {conflict}", 412)


def _refused_a_refutation(exc: CommonsRefused, body: bytes) -> bool:
    """Whether the commons refused the file as ``bad-type`` at a line of ``body`` that is a refutation:
    what a commons that predates the record type answers (it knows three types)."""
    if exc.status != 422 or exc.reason != "bad-type" or exc.line is None or exc.line < 1:
        return False
    lines = body.split(b"\n")
    return exc.line <= len(lines) and claimed(lines[exc.line - 1])[0] == "refute"


def pull(store: Store, identity: Identity, url: str, token: str, config: Config, now: datetime, *,
         transport: httpx.BaseTransport | None = None) -> PullResult:
    base = base_url(url)
    memo = load_memo(store, base)
    result = PullResult()
    with _client(token, transport) as client:
        status, body, etag = _get(client, base + INDEX_PATH, MAX_INDEX_BYTES, memo.get("index"))
        result.index_requests += 1
        if status == 304:
            return result
        try:
            index = json.loads(body)
        except (ValueError, RecursionError):
            raise CommonsRefused(f"{base}{INDEX_PATH} is not JSON", status) from None
        if not isinstance(index, list):
            raise CommonsRefused(f"{base}{INDEX_PATH} is not a list", status)
        complete = True
        with Receiver(store, own_origin=identity.origin, config=config, now=now) as receiver:
            for entry in index[:100_000]:
                origin = entry.get("origin") if isinstance(entry, dict) else None
                if not isinstance(origin, str) or not ORIGIN.fullmatch(origin) or origin == identity.origin:
                    continue
                known = memo["files"].get(origin)
                if known is not None and known == entry.get("etag"):
                    continue  # unchanged since it was last read here
                result.file_requests += 1
                try:
                    status, data, file_etag = _get(client, base + file_path(origin), MAX_FILE_ANSWER_BYTES, known)
                except CommonsRefused as exc:
                    # Not read this time (rate limited, gone...): the index is not remembered,
                    # so the next pull looks at every file again instead of getting a 304.
                    complete = False
                    if exc.status == 429:
                        break
                    continue
                if status == 304:
                    memo["files"][origin] = file_etag or known
                    continue
                result.files[origin] = receiver.receive(
                    (line for _, line in record_lines(data)), source=f"commons:{urlsplit(base).netloc}")
                memo["files"][origin] = file_etag
        for origin, got in result.files.items():
            if got.refused.get(OVER_BUDGET):
                # Some of its records were refused for the storage budget (admission.py): read the file
                # again next time, when there may be room (a declined origin's lines then cost no check).
                memo["files"].pop(origin, None)
                complete = False
        memo["index"] = etag if complete else None
    save_memo(store, base, memo)
    return result


def announce(url: str, token: str, identity: Identity, reachable_at: str, now: datetime, *,
             transport: httpx.BaseTransport | None = None) -> bool:
    """Tell the commons' directory where peers reach this daemon (signed by its key)."""
    body = sign_announcement(identity.signing_key, reachable_at, now)
    with _client(token, transport) as client:
        try:
            _request(client, "POST", base_url(url) + ANNOUNCE_PATH, content=body, max_bytes=MAX_ANSWER_BYTES,
                     headers={"content-type": JSON_CONTENT_TYPE}, accept=(200, 201, 204))
        except CommonsRefused as exc:
            raise CommonsRefused(f"announce refused: {exc}", exc.status) from None
    return True
