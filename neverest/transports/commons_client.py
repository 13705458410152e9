"""The HTTP commons, client side: push this memory's file, pull everyone else's.

The commons keeps one signed file per memory and checks only who wrote it; every
record pulled still goes through the one receive function here (PROTOCOL.md §14).

- ``push``: ``PUT /commons/<origin>.jsonl`` with this memory's current records, the
  newest that fit the commons' limits (1 000 records, 256 KiB).  The request is
  conditional: ``If-Match`` with the ETag this memory last wrote, or ``If-None-Match: *``
  for a first push, so two writers of one origin (a key copied to two machines, a
  restored backup) never silently overwrite each other.  On 412 the client reads the
  current ETag and tries once more: the file is this origin's own, so the newer
  content is ours to write, but the conflict is reported.
- ``pull``: ``GET /commons/index`` with ``If-None-Match``: a memory already up to date
  pays one small request answered 304.  Otherwise it fetches only the files whose ETag
  changed since it last read them, each conditional too.

The ETags remembered live in the store's ``meta`` table, one entry per commons URL.
Every request has connect and read timeouts and a bounded body; a bearer token is
sent on every request.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import httpx

from neverest.config import Config
from neverest.identity import Identity
from neverest.memory import holdings
from neverest.memory.receive import Receiver, ReceiveResult
from neverest.memory.store import Store
from neverest.records import MAX_RECORD_BYTES
from neverest.transports.announce import sign_announcement

MAX_RECORDS: Final = 1000
MAX_FILE_BYTES: Final = 256 * 1024
MAX_INDEX_BYTES: Final = 8 * 1024 * 1024
_ORIGIN = re.compile(r"[0-9a-f]{16}")


class CommonsError(Exception):
    """The commons could not be used; the message says what it answered."""


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


def _client(token: str, url: str) -> httpx.Client:
    # A plain-http commons (a LAN, loopback) needs no TLS: skip loading the CA bundle, which
    # costs ~50 ms per client.  An https:// one is verified as always.
    tls: bool = urlsplit(url).scheme == "https"
    return httpx.Client(timeout=httpx.Timeout(30.0, connect=5.0), follow_redirects=False, verify=tls,
                        headers={"authorization": f"Bearer {token}"})


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
    headers = {"if-none-match": etag} if etag else {}
    try:
        with client.stream("GET", url, headers=headers) as response:
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > limit:
                    raise CommonsError(f"{url} answered more than {limit} bytes")
            return response.status_code, bytes(body), response.headers.get("etag")
    except httpx.HTTPError as exc:
        raise CommonsError(f"{url}: {exc}") from None


def _refusal(response: httpx.Response) -> str:
    try:
        body = response.json()
        return f"HTTP {response.status_code} {body.get('error')}: {body.get('message')}"
    except ValueError:
        return f"HTTP {response.status_code}: {response.text[:200]}"


def own_file(store: Store, identity: Identity) -> tuple[bytes, int]:
    """This memory's records for the commons: the newest that fit its limits, in seq order."""
    records = holdings.of_origin(store.db, identity.origin, current_only=True)
    chosen: list[bytes] = []
    size = 0
    for held in reversed(records):
        if len(chosen) == MAX_RECORDS or size + len(held.raw) + 1 > MAX_FILE_BYTES:
            break
        chosen.append(held.raw)
        size += len(held.raw) + 1
    chosen.reverse()
    return b"".join(raw + b"\n" for raw in chosen), len(chosen)


def push(store: Store, identity: Identity, url: str, token: str) -> dict[str, Any]:
    base = base_url(url)
    body, count = own_file(store, identity)
    memo = load_memo(store, base)
    target = f"{base}/commons/{identity.origin}.jsonl"
    conflict = None
    with _client(token, base) as client:
        for _ in range(2):
            etag = memo.get("own")
            headers = {"content-type": "application/x-ndjson"} | (
                {"if-match": etag} if etag else {"if-none-match": "*"})
            try:
                response = client.put(target, content=body, headers=headers)
            except httpx.HTTPError as exc:
                raise CommonsError(f"{target}: {exc}") from None
            if response.status_code in (200, 201, 204):
                memo["own"] = response.headers.get("etag")
                save_memo(store, base, memo)
                return {"records": count, "bytes": len(body), "etag": memo["own"], "conflict": conflict}
            if response.status_code != 412:
                raise CommonsError(f"push refused: {_refusal(response)}")
            # Someone else wrote this origin's file (another machine with this key, a restored
            # backup): read what is there now, report it, and write ours over it once.
            status, _, current = _get(client, target, MAX_FILE_BYTES + 1024, None)
            conflict = f"the commons held another version ({current or 'none'}) than the one last written here"
            memo["own"] = current if status == 200 else None
    raise CommonsError(f"push refused twice: {conflict}")


def pull(store: Store, identity: Identity, url: str, token: str, config: Config, now: datetime) -> PullResult:
    base = base_url(url)
    memo = load_memo(store, base)
    result = PullResult()
    with _client(token, base) as client:
        status, body, etag = _get(client, f"{base}/commons/index", MAX_INDEX_BYTES, memo.get("index"))
        result.index_requests += 1
        if status == 304:
            return result
        if status != 200:
            raise CommonsError(f"{base}/commons/index answered HTTP {status}")
        try:
            index = json.loads(body)
        except ValueError:
            raise CommonsError(f"{base}/commons/index is not JSON") from None
        if not isinstance(index, list):
            raise CommonsError(f"{base}/commons/index is not a list")
        complete = True
        with Receiver(store, own_origin=identity.origin, config=config, now=now) as receiver:
            for entry in index[:100_000]:
                origin = entry.get("origin") if isinstance(entry, dict) else None
                if not isinstance(origin, str) or not _ORIGIN.fullmatch(origin) or origin == identity.origin:
                    continue
                known = memo["files"].get(origin)
                if known is not None and known == entry.get("etag"):
                    continue  # unchanged since it was last read here
                status, data, file_etag = _get(client, f"{base}/commons/{origin}.jsonl", MAX_FILE_BYTES + 1024,
                                               known)
                result.file_requests += 1
                if status == 304:
                    memo["files"][origin] = file_etag or known
                    continue
                if status != 200:
                    # Not read this time (rate limited, gone...): the index is not remembered,
                    # so the next pull looks at every file again instead of getting a 304.
                    complete = False
                    if status == 429:
                        break
                    continue
                lines = [line for line in data.split(b"\n") if line.strip()]
                result.files[origin] = receiver.receive(
                    (line if len(line) <= MAX_RECORD_BYTES else None for line in lines),
                    source=f"commons:{urlsplit(base).netloc}")
                memo["files"][origin] = file_etag
        memo["index"] = etag if complete else None
    save_memo(store, base, memo)
    return result


def announce(url: str, token: str, identity: Identity, reachable_at: str, now: datetime) -> bool:
    """Tell the commons' directory where peers reach this daemon (signed by its key)."""
    body = sign_announcement(identity.signing_key, reachable_at, now)
    with _client(token, url) as client:
        try:
            response = client.post(f"{base_url(url)}/directory/announce", content=body,
                                   headers={"content-type": "application/json"})
        except httpx.HTTPError as exc:
            raise CommonsError(f"announce: {exc}") from None
    if response.status_code not in (200, 201, 204):
        raise CommonsError(f"announce refused: {_refusal(response)}")
    return True
