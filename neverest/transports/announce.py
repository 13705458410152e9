"""Announcements to a commons' peer directory: what a daemon signs to say where it listens.

Shared by the client (which signs) and the server (which checks): the body is a JSON object
with exactly ``origin``, ``key``, ``url``, ``at`` and ``sig``, the signature by ``key`` over
the canonical JSON of the other four fields (sorted keys, no spaces, UTF-8).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import nacl.signing

from neverest.clock import iso
from neverest.peers.table import normalise_url
from neverest.records import origin_of


def announcement_bytes(fields: Mapping[str, Any]) -> bytes:
    """The canonical serialisation an announcement's signature covers (and is sent in)."""
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sign_announcement(signing_key: nacl.signing.SigningKey, url: str, at: datetime | str) -> bytes:
    """The body of a ``POST /directory/announce`` saying that this key's memory listens at ``url``.

    ``url`` is normalised first (raises ``neverest.peers.table.PeerError`` if it is not an
    http(s) URL of a host and port); ``at`` is the time of the announcement (a datetime,
    written as ISO 8601 UTC, or such a string), checked by the server against its clock.
    """
    public = bytes(signing_key.verify_key)
    fields = {"origin": origin_of(public), "key": public.hex(), "url": normalise_url(url),
              "at": iso(at) if isinstance(at, datetime) else at}
    fields["sig"] = signing_key.sign(announcement_bytes(fields)).signature.hex()
    return announcement_bytes(fields)
