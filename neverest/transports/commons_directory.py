"""The commons' peer directory: signed announcements of where daemons listen.

``POST /directory/announce`` adds one (checked by ``check_announcement``: exact fields,
origin = fingerprint of key, signature, clock skew); ``GET /directory`` lists the newest.
The ``Directory`` holds one announcement per origin (the latest signed wins, so a replay
cannot move an origin back to an old address), at most ``MAX_DIRECTORY_ENTRIES``, and
serialises itself for ``DIR/directory.json``.  The contract is in the docstring of
``neverest.transports.commons_server``; announcements are built by
``neverest.transports.announce``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import nacl.exceptions
import nacl.signing

from neverest.clock import iso
from neverest.peers import directory as peer_directory
from neverest.peers.table import PeerError, normalise_url
from neverest.records import origin_of
from neverest.transports.announce import announcement_bytes
from neverest.transports.commons_auth import CommonsServerError
from neverest.transports.commons_protocol import Refusal, etag_of

DIRECTORY_FILE: Final = "directory.json"
MAX_DIRECTORY_ENTRIES: Final = 10_000
# What GET /directory serves: no more than a daemon's directory reader keeps.
DIRECTORY_SERVED: Final = peer_directory.MAX_PEERS
ANNOUNCE_SKEW_S: Final = 600.0
ANNOUNCEMENT_FIELDS: Final = frozenset({"origin", "key", "url", "at", "sig"})

_HEX = frozenset("0123456789abcdef")


def _is_hex(value: object, length: int) -> bool:
    return isinstance(value, str) and len(value) == length and set(value) <= _HEX



def _announcement_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        # The signature covers a re-serialisation: two values for one key would be ambiguous.
        raise ValueError("the same key twice")
    return obj


def check_announcement(body: bytes, now: datetime) -> dict[str, str]:
    """A verified announcement (the five fields), or a Refusal saying what is wrong."""

    def bad(reason: str, message: str, status: int = 400) -> Refusal:
        return Refusal(status, "bad-announcement", message, extra={"reason": reason})

    try:
        obj = json.loads(body.decode("utf-8"), object_pairs_hook=_announcement_pairs)
    except UnicodeDecodeError as exc:
        raise Refusal(400, "bad-encoding", f"the body is not UTF-8 (byte {exc.start})") from None
    except (ValueError, RecursionError) as exc:
        raise bad("not-json", f"the body is not a JSON object: {exc}") from None
    if not isinstance(obj, dict):
        raise bad("not-json", "the body is not a JSON object")
    if set(obj) != ANNOUNCEMENT_FIELDS:
        raise bad("bad-field", "an announcement has exactly the fields " + ", ".join(sorted(ANNOUNCEMENT_FIELDS)))
    if not all(isinstance(value, str) for value in obj.values()):
        raise bad("bad-field", "every field of an announcement is a string")
    if not _is_hex(obj["origin"], 16):
        raise bad("bad-field", "origin must be 16 lower-case hex digits")
    if not _is_hex(obj["key"], 64):
        raise bad("bad-field", "key must be 64 lower-case hex digits")
    if not _is_hex(obj["sig"], 128):
        raise bad("bad-field", "sig must be 128 lower-case hex digits")
    try:
        at = datetime.fromisoformat(obj["at"]) if len(obj["at"]) <= 64 else None
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        raise bad("bad-field", "at must be an ISO 8601 time with a zone, like 2026-11-21T03:00:00.000000Z")
    try:
        if len(obj["url"]) > 512 or normalise_url(obj["url"]) != obj["url"]:
            raise PeerError("not in normal form")
    except PeerError:
        raise bad("bad-url", "url must be http(s)://host:port in normal form (no path, no trailing slash), "
                             "as signed") from None
    if origin_of(bytes.fromhex(obj["key"])) != obj["origin"]:
        raise bad("origin-mismatch", "origin is not the fingerprint of key", 422)
    unsigned = {name: value for name, value in obj.items() if name != "sig"}
    try:
        nacl.signing.VerifyKey(bytes.fromhex(obj["key"])).verify(announcement_bytes(unsigned),
                                                                 bytes.fromhex(obj["sig"]))
    except (nacl.exceptions.BadSignatureError, ValueError):
        raise bad("bad-signature", "sig does not verify over the announcement", 422) from None
    skew = abs((at - now).total_seconds())
    if skew > ANNOUNCE_SKEW_S:
        raise bad("clock-skew", f"at is {skew:.0f} s away from the server's clock ({iso(now)}); "
                                f"the limit is {ANNOUNCE_SKEW_S:.0f} s", 422)
    return {name: obj[name] for name in ("origin", "key", "url", "at", "sig")}


def _at(entry: Mapping[str, str]) -> float:
    return datetime.fromisoformat(entry["at"]).timestamp()


@dataclass
class Directory:
    """The announcements held, one per origin (the latest signed wins)."""

    entries: dict[str, dict[str, str]] = field(default_factory=dict)
    generation: int = 0  # bumped by every change; what is on disk is ``written``
    written: int = 0
    _listing: tuple[bytes, str] | None = None

    @classmethod
    def load(cls, path: Path) -> Directory:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return cls()
        try:
            items = json.loads(data)
            if not isinstance(items, list):
                raise ValueError("not a JSON array")
            entries = {}
            for item in items:
                if not isinstance(item, dict) or set(item) != ANNOUNCEMENT_FIELDS:
                    raise ValueError("an entry is not an announcement")
                _at(item)
                entries[item["origin"]] = {name: str(item[name]) for name in ANNOUNCEMENT_FIELDS}
        except (ValueError, TypeError) as exc:
            # Only this server writes the file, atomically: damage is someone else's doing,
            # and starting empty would overwrite what may still be recovered.
            raise CommonsServerError(f"{path} cannot be read ({exc}); move it away to start with an empty "
                                     "directory") from None
        return cls(entries)

    def add(self, entry: dict[str, str]) -> None:
        held = self.entries.get(entry["origin"])
        if held is not None and _at(held) > _at(entry):
            raise Refusal(409, "superseded", f"an announcement of {entry['origin']} signed later ({held['at']}) "
                                             "is already held")
        self.entries[entry["origin"]] = entry
        if len(self.entries) > MAX_DIRECTORY_ENTRIES:
            oldest = min(self.entries.values(), key=_at)
            del self.entries[oldest["origin"]]
        self.generation += 1
        self._listing = None

    def serialise(self) -> bytes:
        return json.dumps(sorted(self.entries.values(), key=lambda e: e["origin"]),
                          separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def listing(self) -> tuple[bytes, str]:
        if self._listing is None:
            newest = sorted(self.entries.values(), key=_at, reverse=True)[:DIRECTORY_SERVED]
            body = json.dumps([{"url": e["url"], "origin": e["origin"], "at": e["at"], "key": e["key"],
                                "sig": e["sig"]} for e in newest], separators=(",", ":"), ensure_ascii=False)
            data = body.encode("utf-8")
            self._listing = (data, etag_of(data))
        return self._listing


