"""The directory: a file or a URL that lists peers, polled by the daemon.

A directory is a convenience, not a dependency: when it is down the daemon keeps the
peers it knows.  Accepted forms, whichever the body parses as:

- JSON: an array whose items are URLs (``"http://192.0.2.7:7428"``) or objects with a
  ``url`` and optionally an ``origin`` (what an HTTP commons' ``GET /directory`` serves);
- text: one URL per line; blank lines and lines starting with ``#`` are skipped.

Everything is bounded: at most ``MAX_BYTES`` are read, at most ``MAX_PEERS`` entries
kept; an entry that is not a usable URL, or an origin that is not 16 hex digits, is
skipped and counted.  Entries must be URLs with their scheme (``http://...``): a
directory is written by programs, so a bare ``host:port`` there is more likely a mistake.
A URL is fetched with ``neverest.httpclient`` (a total deadline, a streamed, size-capped
body; ``transport`` fakes the network in tests).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from neverest.peers.table import PeerError, normalise_url

if TYPE_CHECKING:
    import httpx

MAX_BYTES: Final = 1024 * 1024
MAX_PEERS: Final = 1000
CONNECT_TIMEOUT_S: Final = 5.0
READ_TIMEOUT_S: Final = 15.0
TOTAL_TIMEOUT_S: Final = 30.0
_ORIGIN = re.compile(r"[0-9a-f]{16}")


class DirectoryError(Exception):
    """The directory could not be read; the message says why."""


@dataclass
class Listing:
    peers: list[tuple[str, str | None]] = field(default_factory=list)  # (url, origin or None)
    skipped: int = 0


def parse(body: bytes) -> Listing:
    if len(body) > MAX_BYTES:
        raise DirectoryError(f"the directory is over {MAX_BYTES} bytes")
    text = body.decode("utf-8", errors="replace")
    items: list[Any]
    try:
        loaded = json.loads(text)
        items = loaded if isinstance(loaded, list) else []
        if not isinstance(loaded, list):
            raise DirectoryError("a JSON directory is an array of URLs or {url, origin} objects")
    except ValueError:
        items = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    listing = Listing()
    seen: set[str] = set()
    for item in items:
        url, origin = (item, None) if isinstance(item, str) else (
            (item.get("url"), item.get("origin")) if isinstance(item, dict) else (None, None))
        if not isinstance(url, str) or (origin is not None and not (
                isinstance(origin, str) and _ORIGIN.fullmatch(origin))):
            listing.skipped += 1
            continue
        try:
            url = normalise_url(url, require_scheme=True)
        except PeerError:
            listing.skipped += 1
            continue
        if url in seen:
            continue
        if len(listing.peers) >= MAX_PEERS:
            listing.skipped += 1
            continue
        seen.add(url)
        listing.peers.append((url, origin))
    return listing


def fetch(where: str, *, transport: httpx.BaseTransport | None = None) -> Listing:
    """Read the directory at ``where``: an http(s) URL, or a file path."""
    from neverest import httpclient  # httpx: loaded by the first fetch, not by a daemon without a directory

    if not where.startswith(("http://", "https://")):
        try:
            with open(Path(where).expanduser(), "rb") as f:
                return parse(f.read(MAX_BYTES + 1))
        except OSError as exc:
            raise DirectoryError(f"cannot read the directory file {where}: {exc.strerror}") from None
    try:
        # A directory is a service the owner named, often beyond the LAN: the environment's proxy applies.
        with httpclient.sync_client(transport=transport, connect_timeout_s=CONNECT_TIMEOUT_S,
                                    read_timeout_s=READ_TIMEOUT_S, proxy_from_env=True) as client:
            answer = httpclient.get_bounded_sync(client, where, max_bytes=MAX_BYTES, total_timeout_s=TOTAL_TIMEOUT_S)
    except httpclient.PeerRefused as exc:
        if exc.oversize:
            raise DirectoryError(f"the directory {where} is over {MAX_BYTES} bytes") from None
        raise DirectoryError(f"the directory {where} answered HTTP {exc.status}") from None
    except httpclient.TransportFailure as exc:
        raise DirectoryError(f"the directory {where} could not be read ({exc.kind}): {exc.detail}") from None
    return parse(answer.body)
