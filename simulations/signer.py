"""Records signed in bulk: exactly the bytes ``neverest.records`` signs, without its round trip.

``records.sign_confirm`` (and ``sign_refute``, ``sign_lesson``) build the canonical fields,
sign them with Ed25519 and then parse the result as a receiver would, so that a memory
never signs a record others refuse.  That parse (JSON, field checks, and an Ed25519
verification that costs more than the signing) and the general JSON serialiser are two
thirds of the cost of a record, and the commons experiment's adversaries sign 10^5 to
10^6 records a run, all of three shapes.  Ed25519 signatures are deterministic, so the
records here are the very bytes the ``records`` functions return for the same key,
fields and seq: every signature is real and valid (tests/test_sim_adversaries.py compares
them byte for byte and parses them).  What is left out is only the round trip, for
fields the ``records`` functions have accepted in that shape already: a confirmation or
refutation names a lesson hash, and a copy of a lesson repeats a text signed before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import nacl.bindings
import nacl.signing

from neverest.commons import Fact
from neverest.records import WIRE_VERSION, Record, lesson_hash, origin_of

_SIG = 64  # bytes of an Ed25519 signature, which crypto_sign puts before the message


@dataclass(frozen=True)
class Signer:
    """One key, with what every record it signs repeats."""

    secret: bytes  # libsodium's secret key: seed then public key
    public: str  # hex, as the ``key`` field
    origin: str

    @classmethod
    def of(cls, key: nacl.signing.SigningKey) -> Signer:
        public = bytes(key.verify_key)
        return cls(key.encode() + public, public.hex(), origin_of(public))

    def _sign(self, members: dict[str, str], rtype: Literal["lesson", "confirm", "refute"], target: str,
              fields: dict[str, Any], seq: int, at: datetime) -> tuple[Record, Fact]:
        """``members``: the record's own fields, each already serialised as JSON."""
        members.update(key=f'"{self.public}"', origin=f'"{self.origin}"', seq=str(seq), v=str(WIRE_VERSION))
        # records.canonical: sorted keys, no spaces (every key here is a plain ASCII word).
        unsigned = ",".join(f'"{k}":{members[k]}' for k in sorted(members))
        sig = nacl.bindings.crypto_sign(("{" + unsigned + "}").encode(), self.secret)[:_SIG].hex()
        members["sig"] = f'"{sig}"'
        raw = ("{" + ",".join(f'"{k}":{members[k]}' for k in sorted(members)) + "}").encode()
        fields.update(key=self.public, origin=self.origin, seq=seq, sig=sig, v=WIRE_VERSION)
        record = Record(type=rtype, raw=raw, fields=fields, origin=self.origin, key=self.public, target=target,
                        seq=seq)
        return record, Fact(kind=rtype, origin=self.origin, at=at)

    def about(self, rtype: Literal["confirm", "refute"], target: str, *, stamp: str, at: datetime,
              seq: int) -> tuple[Record, Fact]:
        """What ``records.sign_confirm`` / ``sign_refute`` (key, target, at=stamp, seq=seq) return, and its
        fact; ``stamp`` is ``clock.iso(at)``."""
        # The canonical member order: at, confirm, key, origin, seq, sig, v / at, key, origin, refute, seq, sig, v.
        if rtype == "confirm":
            head = f'{{"at":"{stamp}","confirm":"{target}","key":"{self.public}","origin":"{self.origin}","seq":{seq}'
        else:
            head = f'{{"at":"{stamp}","key":"{self.public}","origin":"{self.origin}","refute":"{target}","seq":{seq}'
        tail = f',"v":{WIRE_VERSION}}}'
        sig = nacl.bindings.crypto_sign((head + tail).encode(), self.secret)[:_SIG].hex()
        raw = f'{head},"sig":"{sig}"{tail}'.encode()
        fields = {rtype: target, "at": stamp, "key": self.public, "origin": self.origin, "seq": seq, "sig": sig,
                  "v": WIRE_VERSION}
        record = Record(type=rtype, raw=raw, fields=fields, origin=self.origin, key=self.public, target=target,
                        seq=seq)
        return record, Fact(kind=rtype, origin=self.origin, at=at)

    def lesson(self, *, kind: str, text: str, stamp: str, at: datetime, seq: int) -> tuple[Record, Fact]:
        """What ``records.sign_lesson`` (key, kind=kind, text=text, seen=1, strength=1.0, updated=stamp,
        seq=seq) returns, and its fact: a copy of a lesson already signed."""
        target = lesson_hash(kind, text)
        fields: dict[str, Any] = {"hash": target, "kind": kind, "text": text, "seen": 1, "strength": 1.0,
                                  "updated": stamp}
        members = {k: json.dumps(v, ensure_ascii=False) for k, v in fields.items()}
        return self._sign(members, "lesson", target, fields, seq, at)
