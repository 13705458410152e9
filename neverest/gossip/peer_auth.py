"""Peer identity: every gossip message says who sent it, to whom, and proves it.

The ``auth`` part of a message (codec.py) carries the sender's origin and Ed25519 key, the
origin it addresses, a unix timestamp, a fresh 16-byte nonce and a signature over::

    b"neverest-gossip-v1\\0" ‖ u8 version ‖ u8 type ‖ origin (8) ‖ to (8) ‖ i64 ts (big-endian)
        ‖ nonce (16) ‖ re (16) ‖ BLAKE2b-256(body bytes)

``re`` is 16 zero bytes in a request; in a reply it is the nonce of the request it
answers, which is never sent (the requester knows it).  So:

- a peer cannot pose as another: the origin must be the fingerprint of the key
  (``records.origin_of``) and the signature must verify with that key, so the peer
  table can be keyed by origin;
- a request cannot be sent to another peer: it names the origin it addresses, and a
  responder refuses what is addressed to someone else (or to nobody: ``NO_ORIGIN``;
  that refusal is signed, which is how an initiator that only knows an address learns
  the origin behind it);
- a request cannot be replayed: its timestamp must be within ``skew_s`` (300 s) of the
  receiver's clock, and a responder remembers every nonce it accepted until its
  timestamp is out of that window (``ReplayCache``, bounded);
- a reply cannot be replayed or redirected: it is bound to the fresh nonce of the
  request it answers (so its timestamp is not checked: a requester with a wrong clock
  can still read the signed refusal that says its clock is wrong);
- neither the type nor the body can be swapped: both are signed.

The checks run cheapest first and the Ed25519 verification last, and a nonce is only
remembered once its message verified, so unsigned junk cannot fill the cache.
"""

from __future__ import annotations

import hashlib
import heapq
import threading
from typing import Final

import nacl.bindings
import nacl.exceptions
import nacl.signing

from neverest.gossip.codec import NONCE_BYTES, VERSION, Auth, MessageType, ProtocolError
from neverest.records import origin_of

DOMAIN: Final = b"neverest-gossip-v1\x00"
# Five minutes, as Kerberos allows: clocks of machines on NTP agree far better, and a
# shorter window makes the replay cache smaller without refusing honest peers.
DEFAULT_SKEW_S: Final = 300
NO_NONCE: Final = bytes(NONCE_BYTES)
# 65 536 nonces cover a request per 5 ms sustained over the whole skew window.
DEFAULT_REPLAY_ENTRIES: Final = 65_536


def signed_bytes(mtype: MessageType, *, origin: str, to: str, ts: int, nonce: bytes, re: bytes, body: bytes) -> bytes:
    """What the signature of a message covers (see the module docstring)."""
    return b"".join((
        DOMAIN, bytes((VERSION, int(mtype))), bytes.fromhex(origin), bytes.fromhex(to),
        ts.to_bytes(8, "big", signed=True), nonce, re, hashlib.blake2b(body, digest_size=32).digest(),
    ))


def sign(signing_key: nacl.signing.SigningKey, mtype: MessageType, body: bytes, *, to: str, ts: int, nonce: bytes,
         re: bytes = NO_NONCE, compact: bool = False) -> Auth:
    """The auth part for a message of type ``mtype`` with ``body``, addressed to ``to``.

    ``compact`` (revision 3): the message will not carry the origins; the signature is the same."""
    key = bytes(signing_key.verify_key)
    origin = origin_of(key)
    message = signed_bytes(mtype, origin=origin, to=to, ts=ts, nonce=nonce, re=re, body=body)
    return Auth(origin=origin, key=key, to=to, ts=ts, nonce=nonce, sig=signing_key.sign(message).signature,
                compact=compact)


def verify(auth: Auth, mtype: MessageType, body: bytes, *, me: str, now_s: int, skew_s: int | None,
           re: bytes = NO_NONCE) -> None:
    """Check a received message's auth part.  Raises ProtocolError("remote", code).

    ``skew_s`` None skips the timestamp check: a reply is fresh because it is bound to the
    nonce of the request it answers, and its timestamp is what lets a requester whose clock
    is off read the ``stale`` refusal that tells it so.
    """
    if origin_of(auth.key) != auth.origin:
        raise ProtocolError("remote", "origin-mismatch", f"origin {auth.origin} is not the fingerprint of the key")
    # A compact message (revision 3) does not say whom it addresses: the signature is checked over
    # this memory's origin, so one meant for another fails as bad-signature.
    to = me if auth.compact else auth.to
    if to != me:
        raise ProtocolError("remote", "wrong-peer", f"the message is addressed to {auth.to}, this is {me}")
    if skew_s is not None and abs(auth.ts - now_s) > skew_s:
        raise ProtocolError("remote", "stale", f"timestamp {auth.ts} is {auth.ts - now_s:+d} s from this clock; "
                                               f"at most {skew_s} s either way is accepted")
    message = signed_bytes(mtype, origin=auth.origin, to=to, ts=auth.ts, nonce=auth.nonce, re=re, body=body)
    try:
        # crypto_sign_open is the primitive under VerifyKey.verify (as in records.py); a key
        # that is not a curve point fails here too.
        nacl.bindings.crypto_sign_open(auth.sig + message, auth.key)
    except (nacl.exceptions.BadSignatureError, ValueError):
        raise ProtocolError("remote", "bad-signature", f"the signature does not verify with the key of "
                                                       f"{auth.origin}") from None


class ReplayCache:
    """The nonces of requests accepted within the skew window, at most ``max_entries``.

    A nonce is kept until its timestamp leaves the window; after that the timestamp
    check refuses the message anyway.  When the cache is full of nonces that are still
    in the window, new requests are refused as ``busy`` rather than evicting one that
    could then be replayed.  It lives in memory: after a restart, a request captured in
    the last ``skew_s`` seconds could be replayed once, which can only make this memory
    receive records it verifies anyway and answer with records that are public.
    """

    def __init__(self, *, skew_s: int = DEFAULT_SKEW_S, max_entries: int = DEFAULT_REPLAY_ENTRIES) -> None:
        self.skew_s = skew_s
        self.max_entries = max_entries
        self._expiry: list[tuple[int, bytes]] = []  # a heap of (forget after, nonce)
        self._nonces: set[bytes] = set()
        self._lock = threading.Lock()  # the edge checks large requests in worker threads

    def __len__(self) -> int:
        return len(self._nonces)

    def admit(self, nonce: bytes, ts: int, now_s: int) -> None:
        """Remember ``nonce``; raises ProtocolError if it was seen or there is no room."""
        with self._lock:
            self._admit(nonce, ts, now_s)

    def _admit(self, nonce: bytes, ts: int, now_s: int) -> None:
        while self._expiry and self._expiry[0][0] < now_s:
            self._nonces.discard(heapq.heappop(self._expiry)[1])
        if nonce in self._nonces:
            raise ProtocolError("remote", "replay", "this request was already received")
        if len(self._nonces) >= self.max_entries:
            raise ProtocolError("local", "busy", "too many requests in the last minutes; try again later")
        self._nonces.add(nonce)
        heapq.heappush(self._expiry, (ts + self.skew_s, nonce))
