"""Anti-entropy between two memories, as sans-IO logic (h11's ``_connection.py`` style).

Nothing here opens a socket, reads a clock or draws from global randomness: the caller
passes ``now``, a ``random.Random`` (seeded in simulations, ``SystemRandom`` in the
daemon), the signing key and a ``StoreView``; the state machines take bytes and return
the bytes to send.  The HTTP edge, the loopback harness (loopback.py) and the simulator
all drive the same ``Initiator`` and ``Responder``.

**Digests** (Scuttlebutt reconciliation, van Renesse et al. 2008, §3).  A memory's digest
maps each origin whose records it holds with a ``seq`` to ``(n, h)``: ``n`` the highest seq
it holds of that origin (superseded records count: they are held and relayed, so the
history has no false gaps), ``h`` a short hash of the record held at ``n`` (``seq_hash``:
the first 8 bytes of the BLAKE2b-128 of its bytes, or, when the store holds fork
evidence at ``n``, a hash of all the records known there).  Gossip sends each origin's
records in seq order, starting right after the receiver's ``n``, never skipping one, and
the receiver refuses a delta that would leave a hole; so, as far as gossip goes, ``n``
also says "I hold 1..n".

Records without ``seq`` (from other implementations) are not in the vector and never
move by gossip: they move by the folder and the commons, which carry whole files.  An
origin's history with a hole in it (the folder carries only current records, so it can
leave out superseded ones) is relayed by gossip up to the hole; peers get the rest from
memories that hold it.

**The exchange** (PROTOCOL.md §11), one HTTP POST per round trip.  Revision 2 (SYNC with
``"w": 2``, the default; reconcile.py) compares fingerprints of ranges of the digests and
sends only the entries of the ranges that differ; a responder answers a SYNC without
``"w"`` as revision 1 always did, and an initiator with ``Settings(reconcile=False)`` is a
revision-1 peer.  Revision 1, which sends whole digests::

    initiator                                        responder
    SYNC {f: fingerprint, d: digest if ≤ 16 origins}  ──▶
                                                     ◀──  IN_SYNC {}                  (same fingerprint: done)
                                                     ◀──  DIGEST {d, r: pull if d was sent, m}
    PUSH {r: push, d: digest unless it was sent}      ──▶
                                                     ◀──  DELTA {r: pull, m}

Two memories in sync finish in one round trip of about 370 bytes, whatever the number of
origins, since a digest is only sent when fingerprints differ.  A small digest rides along
with SYNC so that small networks also pull in one round trip; PUSH is then sent only when
the initiator has something the responder lacks.  An initiator that only knows an
address sends SYNC to ``NO_ORIGIN``; the responder's signed ``wrong-peer`` refusal names its
origin, and the initiator starts again addressed to it (one more round trip).  That first
contact is a normal step, not a refusal: the responder marks it ``introduced`` rather than
an error, so it is neither logged nor counted.  When the origin it names is the initiator's
own, the address is this memory itself: the exchange ends there (``is_self``), with no
error and nobody to blame.  An address whose machine changed answers a request addressed
to the old origin with the same signed refusal, and the initiator starts again, once,
addressed to the new one (the caller re-keys the address).

**Addresses** (PROTOCOL.md, "Peers learned from peers").  SYNC may carry the initiator's
list of peer addresses it found healthy and the port it listens on; IN_SYNC, DIGEST and the
first RECON may carry the responder's list.  Each side leaves out the addresses of the origin it talks to.
What a peer shared ends up in ``ExchangeResult.addresses`` (and the port in
``listen_port``), for the caller to weigh: the logic here trusts none of it.

**Deltas** (``delta``).  For each origin where the peer's entry is behind or differs, in an
order shuffled by the caller's ``rng`` so that no origin starves when budgets cut: first
*fork witnesses* (below), then the origin's records from the peer's ``n + 1`` on, each
seq exactly one more than the last, until the first seq this memory lacks.  The delta
stops before the first record that does not fit the byte budget (``record_cost``: its
bytes plus 3 bytes of msgpack framing; a budget always fits the largest record).  An
origin's run is therefore always a prefix of what is missing, and a cut exchange resumes
exactly where it stopped: the receiver's ``n`` moved to the last record it applied, and
the next delta starts after it.  ``m`` (``more``) says the delta was cut; the daemon can
run another exchange at once.

**Receiving** (``take``).  Before anything is applied, the record lines are read just far
enough to know their origin, seq and signed time (``bad-record`` if they cannot be), and
a message in which an origin's records would skip past the receiver's ``n + 1`` is refused
whole as a ``gap``: an honest sender never does that, and accepting it would make this
memory skip the missing records forever.  A record signed further in the future than
``future_tolerance_s`` would be refused by the receive function today and accepted later,
so it and the rest of its origin's run are *held back* (not applied, no hole), and come
again in a later exchange.  Everything else goes through the one receive function
(``neverest.memory.receive.Receiver``, via ``StoreView.apply``), which verifies every
record, stores it once, records forks and applies the merge rule.  A record that it
refuses (an invalid one, or one its rules refuse) is not held, and the records after it
are still applied: a record refused here would be refused again, so waiting for it would
stop the origin for good.  The cost is that a hostile peer can make this memory skip a
record by sending an invalid one in its place; the receive function counts that refusal
against ``gossip:<peer origin>``, which is what peer scoring reads.  The storage budget
(memory/admission.py) refuses records too (``over-budget``), but only ever the end of an
origin's run, so it leaves no hole; the origins it declines show in this memory's digest at
the head they were offered (gossip/view.py), so the sender finds nothing more to send of them.

**Forks** (one origin, one seq, two different records: a key used on two machines, a
memory restored from a backup) are detected even where the seqs alone agree.  When a
peer's digest names seq ``k`` of an origin (its ``n``) and the records this memory knows
at ``k`` hash differently, the sender puts them (all but the one the peer's hash names)
ahead of that origin's run, as *witnesses*.  The receive function keeps the first record
and stores the other as evidence (``forks``), counted in ``ExchangeResult.applied.forks``.
Because a digest's hash covers every record known at that seq, a memory that holds
evidence the peer lacks sends it too, so both sides of an exchange learn of the fork and
can penalise the origin; and two memories that kept different sides agree again once
each holds the other's as evidence, so they go back to one round trip.  (The store keeps
one piece of evidence per kept record and seq; with three records at one seq, two
memories may go on sending each other a witness that is not stored, one record per
exchange, until the origin signs its next seq.)
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final, NamedTuple, Protocol

import nacl.signing

from neverest.clock import parse_time
from neverest.config import Config
from neverest.gossip import peer_auth
from neverest.gossip.codec import (
    CHILD_FP_BYTES,
    CHILD_FP_BYTES_COMPACT,
    COMPACT,
    COMPACT_TYPES,
    HASH_BYTES,
    MAX_ADDRESSES,
    MAX_RECORDS,
    NO_ORIGIN,
    NONCE_BYTES,
    RECONCILE,
    RECORD_OVERHEAD,
    REQUESTS,
    Auth,
    Body,
    Delta,
    Digest,
    DigestReply,
    Entry,
    InSync,
    Items,
    MessageType,
    ProtocolError,
    Push,
    Recon,
    Refused,
    Sync,
    decode,
    decode_body,
    encode,
    encode_body,
    type_of,
)
from neverest.gossip.ranges import RangeIndex
from neverest.gossip.reconcile import MAX_ROUND_TRIPS, NOTHING, RANGE_ITEMS, Asked, Plan, lags, node_for, plan
from neverest.memory.received import ReceiveResult
from neverest.records import MAX_RECORD_BYTES, origin_of

# Every exchange must make progress, so a budget always fits the largest record.
MIN_BUDGET_BYTES: Final = MAX_RECORD_BYTES + RECORD_OVERHEAD
# 1 MiB of records next to a digest of MAX_ORIGINS (about 2.4 MiB) stays under the 4 MiB
# message bound, and moves a few thousand lessons per round trip.
MAX_BUDGET_BYTES: Final = 1024 * 1024
# 16 origins make a digest of about 400 bytes: sent with SYNC, it keeps an in-sync
# exchange under 1 KB and saves a round trip whenever only the initiator lacks records.
INLINE_DIGEST_ORIGINS: Final = 16
# Items nodes of 512 ranges at 256 entries stay under 3 MiB next to the records.
MAX_RANGE_ITEMS: Final = 256


@dataclass(frozen=True)
class Settings:
    """What one memory chooses for its exchanges (the daemon builds it from Config)."""

    budget_bytes: int = MAX_BUDGET_BYTES  # records per delta, as record_cost counts them
    skew_s: int = peer_auth.DEFAULT_SKEW_S
    future_tolerance_s: float = Config._field_defaults["future_tolerance_s"]  # the receive function's own bound
    inline_digest_origins: int = INLINE_DIGEST_ORIGINS
    # Revision 2 (reconcile.py): False makes the initiator a revision-1 peer (whole digests),
    # the baseline the benchmarks and simulations compare against.
    reconcile: bool = True
    range_items: int = RANGE_ITEMS  # a range with at most this many entries is sent as items
    # Revision 3 (codec.COMPACT): 4-byte child fingerprints and envelopes without the origins once a
    # reconciliation is under way.  False: this memory speaks revision 2 (the benchmarks' baseline).
    compact: bool = True

    def __post_init__(self) -> None:
        if not MIN_BUDGET_BYTES <= self.budget_bytes <= MAX_BUDGET_BYTES:
            raise ValueError(f"budget_bytes must be from {MIN_BUDGET_BYTES} to {MAX_BUDGET_BYTES}")
        if not 1 <= self.range_items <= MAX_RANGE_ITEMS:
            raise ValueError(f"range_items must be from 1 to {MAX_RANGE_ITEMS}")


class Run(NamedTuple):
    """One origin's consecutive records; ``cut`` when the budget stopped it, not a gap or the end."""

    records: list[bytes]
    cut: bool


class StoreView(Protocol):
    """What the logic needs from a memory's store (view.SqliteView is the real one)."""

    def digest(self) -> Digest:
        """The version vector of the records held (see the module docstring): only revision 1 reads it."""
        ...

    def entry(self, origin: str) -> Entry | None:
        """The digest entry of one origin, None if this memory holds no record of it with a seq."""
        ...

    def index(self) -> RangeIndex:
        """The digest's range index (ranges.py), kept as current as ``entry``."""
        ...

    def known_at(self, origin: str, seq: int) -> list[bytes]:
        """Every record known with this origin and seq: the one kept first, then fork evidence."""
        ...

    def run(self, origin: str, after: int, *, budget_bytes: int, max_records: int) -> Run:
        """The origin's records with seq after+1, after+2, ... while consecutive and within the budgets."""
        ...

    def apply(self, records: Sequence[bytes], *, source: str, now: datetime,
              decoded: Sequence[Any] | None = None) -> ReceiveResult:
        """Verify, store and apply records through the one receive function.  ``decoded``: each
        record's ``json.loads``, as ``screen`` read it (the receive function need not read a
        record again once a verifying process has checked those bytes)."""
        ...


def record_digest(raw: bytes) -> bytes:
    """The BLAKE2b-128 of a record's bytes: what the store indexes records by (holdings.digest_of)."""
    return hashlib.blake2b(raw, digest_size=16).digest()


def seq_hash(digests: Collection[bytes]) -> bytes:
    """A digest entry's hash for the records known at one (origin, seq), from their record_digest:
    the first 8 bytes of the one record's digest, or when a fork put several there, of the
    BLAKE2b-128 of their digests sorted."""
    if len(digests) == 1:
        return next(iter(digests))[:HASH_BYTES]
    return hashlib.blake2b(b"".join(sorted(digests)), digest_size=16).digest()[:HASH_BYTES]


def record_cost(raw: bytes) -> int:
    """What a record counts against a byte budget: its bytes and its msgpack framing."""
    return len(raw) + RECORD_OVERHEAD


# -- sending -----------------------------------------------------------------------------


class Batch(NamedTuple):
    records: list[bytes]
    more: bool  # some origin's run was cut by the budget


def _witnesses(view: StoreView, origin: str, mine: tuple[int, bytes], theirs: tuple[int, bytes]) -> list[bytes]:
    """Records proving a fork at the peer's highest seq, or [] when we agree on it."""
    seq, their_hash = theirs
    if seq == 0 or seq > mine[0] or (seq == mine[0] and their_hash == mine[1]):
        return []
    known = view.known_at(origin, seq)
    digests = [record_digest(r) for r in known]
    if not known or seq_hash(set(digests)) == their_hash:
        return []
    # The peer's hash names its one record there, unless it already knows of a fork: send
    # every record known at that seq but that one.
    return [r for r, d in zip(known, digests, strict=True) if d[:HASH_BYTES] != their_hash]


def delta(view: StoreView, mine: Mapping[str, Entry], theirs: Mapping[str, Entry], *, budget_bytes: int,
          rng: random.Random, max_records: int = MAX_RECORDS) -> Batch:
    """The records a peer with digest ``theirs`` lacks, stopping before the first that does not fit.

    ``mine`` and ``theirs`` may be parts of the digests (reconciliation passes the origins of
    the ranges that differ): only the origins of ``mine`` are looked at."""
    behind = sorted(o for o, entry in mine.items() if lags(theirs.get(o, NOTHING), entry))
    rng.shuffle(behind)  # sorted first, so that the order depends on rng alone
    out: list[bytes] = []
    left = budget_bytes
    for origin in behind:
        entry, seen = mine[origin], theirs.get(origin, NOTHING)
        witnesses = _witnesses(view, origin, entry, seen)
        cost = sum(map(record_cost, witnesses))
        if cost > left or len(out) + len(witnesses) > max_records:
            return Batch(out, True)
        out += witnesses
        left -= cost
        if entry[0] > seen[0]:
            run = view.run(origin, seen[0], budget_bytes=left, max_records=max_records - len(out))
            out += run.records
            left -= sum(map(record_cost, run.records))
            if run.cut:
                return Batch(out, True)
    return Batch(out, False)


# -- receiving ---------------------------------------------------------------------------


_DECODER: Final = json.JSONDecoder()


def _loads(raw: bytes) -> Any:
    """``json.loads(raw)``, three times quicker for what gossip carries (UTF-8 JSON with nothing around
    the value); anything else (whitespace around it, a byte order mark, UTF-16...) takes
    ``json.loads``'s own path, so the result is the same whatever the bytes."""
    try:
        text = raw.decode("utf-8")
        obj, end = _DECODER.raw_decode(text)
        if end == len(text):
            return obj
    except ValueError:
        pass
    return json.loads(raw)


def _claim(raw: bytes) -> tuple[str, int, datetime, Any]:
    """A record's origin, seq and signed time as it claims them, and its JSON object; the receive
    function verifies."""
    try:
        obj: Any = _loads(raw)
        origin, seq = obj["origin"], obj["seq"]
        signed = parse_time(obj["updated" if "hash" in obj else "at"])
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        raise ProtocolError("remote", "bad-record", "a record's origin, seq or time cannot be read") from None
    if type(origin) is not str or len(origin) != 16 or type(seq) is not int or seq < 1:
        raise ProtocolError("remote", "bad-record", "a record needs an origin and a positive seq to be gossiped")
    return origin, seq, signed, obj


@dataclass
class Taken:
    result: ReceiveResult
    held_back: int  # records signed too far in the future, left for a later exchange


@dataclass
class Screened:
    """A delta whose shape passed ``screen``: the records to apply, in order, and the digest entry
    each origin among them will have once they are applied (``Initiator.ahead``)."""

    keep: list[bytes]
    held_back: int
    heads: dict[str, Entry]
    decoded: list[Any] = field(default_factory=list)  # json.loads of each record kept, for ``StoreView.apply``


def screen(view: StoreView, records: Sequence[bytes], *, now: datetime, future_tolerance_s: float,
           assumed: Mapping[str, Entry] | None = None) -> Screened:
    """Check a delta's shape against this memory's digest (see ``take``), without applying it.

    ``assumed``: the entries the request was built on for records received but not yet applied
    when it was sent (a pipelined pull, gossip/service.py).  If applying them refused the end of
    an origin's run, the peer rightly sends that origin from the assumed head on: its records are
    then held back (not applied, no hole, no blame), and the next exchange resumes from what is
    held.  Raises ProtocolError("remote", "bad-record" | "gap") before anything is applied.
    """
    horizon = now + timedelta(seconds=future_tolerance_s)
    top: dict[str, int] = {}
    stopped: set[str] = set()
    keep: list[bytes] = []
    decoded: list[Any] = []
    last: dict[str, bytes] = {}
    held_back = 0
    for raw in records:
        origin, seq, signed, obj = _claim(raw)
        if origin in stopped:
            held_back += 1
            continue
        high = top.get(origin)
        if high is None:
            entry = view.entry(origin)
            high = entry[0] if entry is not None else 0
            if seq > high + 1 and assumed is not None and seq <= assumed.get(origin, NOTHING)[0] + 1:
                stopped.add(origin)  # our request said more than what applying its records left
                held_back += 1
                continue
        if seq > high + 1:
            raise ProtocolError("remote", "gap", f"records of {origin} jump from seq {high} to {seq}")
        if signed > horizon:
            stopped.add(origin)
            held_back += 1
            continue
        top[origin] = max(high, seq)
        keep.append(raw)
        decoded.append(obj)
        if seq == top[origin]:
            last[origin] = raw
    heads = {o: (top[o], record_digest(raw)[:HASH_BYTES]) for o, raw in last.items()}
    return Screened(keep, held_back, heads, decoded)


def take(view: StoreView, records: Sequence[bytes], *, source: str, now: datetime,
         future_tolerance_s: float, assumed: Mapping[str, Entry] | None = None) -> Taken:
    """Check a delta's shape against this memory's digest, then apply it through the receive function.

    Raises ProtocolError("remote", "bad-record" | "gap") before applying anything.
    """
    if not records:
        return Taken(ReceiveResult(), 0)
    screened = screen(view, records, now=now, future_tolerance_s=future_tolerance_s, assumed=assumed)
    return Taken(view.apply(screened.keep, source=source, now=now, decoded=screened.decoded), screened.held_back)


# -- the exchange ------------------------------------------------------------------------


@dataclass
class ExchangeResult:
    """What one exchange (initiator) or one request (responder) did, for logs and peer scoring."""

    peer: str | None = None  # the peer's origin, once its signature verified
    round_trips: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    records_sent: int = 0
    records_received: int = 0
    held_back: int = 0
    applied: ReceiveResult = field(default_factory=ReceiveResult)
    in_sync: bool = False
    more: bool = False
    error: ProtocolError | None = None
    refused: str | None = None  # the code the peer refused this exchange with
    addresses: tuple[str, ...] = ()  # peer addresses the peer shared (untrusted: the caller weighs them)
    listen_port: int | None = None  # responder: the port the initiator said it listens on
    is_self: bool = False  # initiator: the address answered with this memory's own origin
    introduced: bool = False  # responder: a first contact, answered with this memory's origin

    def to_json(self) -> dict[str, Any]:
        return {"peer": self.peer, "round_trips": self.round_trips, "bytes_sent": self.bytes_sent,
                "bytes_received": self.bytes_received, "records_sent": self.records_sent,
                "records_received": self.records_received, "held_back": self.held_back,
                "applied": self.applied.to_json(), "in_sync": self.in_sync, "more": self.more,
                "error": None if self.error is None else {"who": self.error.who, "code": self.error.code,
                                                          "message": self.error.message},
                "refused": self.refused, "self": self.is_self, "addresses": len(self.addresses)}


def _unix(now: datetime) -> int:
    return int(now.timestamp())


def _source(peer: str) -> str:
    # Refusals are counted by source: this is the name peer scoring reads.
    return f"gossip:{peer}"


class Initiator:
    """One exchange, driven from the side that starts it::

        exchange = Initiator(view, key, peer_origin, now=now, rng=rng)
        request = exchange.start()
        while request is not None:
            request = exchange.handle(post(request))   # post: the transport
        exchange.result

    ``handle`` never raises for what the peer sent: a bad reply ends the exchange with
    ``result.error`` set.  A transport failure is reported with ``fail``.  ``share`` is the
    (url, origin) of addresses to tell the peer about, ``listen_port`` the port this memory
    listens on (None: it does not, or it does not say).

    Pipelining (gossip/service.py): with ``defer=True``, the records of the reply that ends
    the exchange are screened but not applied: they are left in ``deferred`` (in order) with the
    entries they will give in ``ahead``, for the caller to apply while it already asks for the
    next answer, with a new Initiator started on a view showing ``ahead`` and given it as
    ``assumed``.  Records of a reply that the exchange goes on from are always applied at once,
    since the next request is planned from what is held.
    """

    def __init__(self, view: StoreView, signing_key: nacl.signing.SigningKey, peer: str | None, *, now: datetime,
                 rng: random.Random, settings: Settings | None = None, share: Sequence[tuple[str, str | None]] = (),
                 listen_port: int | None = None, defer: bool = False,
                 assumed: Mapping[str, Entry] | None = None) -> None:
        self._view, self._key, self._now, self._rng = view, signing_key, now, rng
        self._defer, self._assumed = defer, assumed
        self.deferred: list[bytes] = []  # screened records left for the caller to apply (defer=True)
        self.deferred_decoded: list[Any] = []  # their JSON objects as screened (StoreView.apply's ``decoded``)
        self.ahead: dict[str, Entry] = {}  # the entries they will give once applied
        self._settings = settings or Settings()
        self._me = origin_of(bytes(signing_key.verify_key))
        self._peer = peer
        self._share, self._listen_port = share, listen_port
        self._readdressed = False
        self._expect: frozenset[MessageType] = frozenset()  # reply types acceptable now; none: over
        self._nonce = peer_auth.NO_NONCE
        self._inline = False
        self._asked = Asked()  # revision 2: what the last request asked about
        self._compact = False  # the peer answered compact (revision 3): so are the requests that follow
        self._requests = 0  # since the (last) SYNC
        self.result = ExchangeResult(peer=peer)

    @property
    def done(self) -> bool:
        return not self._expect

    def start(self) -> bytes | None:
        """The first request (SYNC), or None if it cannot be built (``result.error`` says why)
        or the peer is this memory itself (``result.is_self``)."""
        if self._peer == self._me:
            self.result.is_self = True
            self._end(None)
            return None
        self._requests = 0
        try:
            return self._send(self._sync(), {MessageType.IN_SYNC, MessageType.DIGEST, MessageType.RECON})
        except ProtocolError as exc:
            self._end(exc)
            return None

    def _sync(self) -> Sync:
        share = _shared(self._share, self._peer)
        if not self._settings.reconcile:
            mine = self._view.digest()
            self._inline = len(mine) <= self._settings.inline_digest_origins
            return Sync(mine.fingerprint, mine if self._inline else None, share, self._listen_port)
        index = self._view.index()
        self._inline = len(index) <= self._settings.inline_digest_origins
        if self._inline:
            # "f" stays the digest's fingerprint, which a revision-1 responder checks "d" against.
            small = Digest(dict(index.items(0, 0)))
            self._asked.note([Items(0, 0, small)])
            return Sync(small.fingerprint, small, share, self._listen_port,
                        COMPACT if self._settings.compact else RECONCILE)
        self._asked.ranges, self._asked.origins = {(0, 0)}, set()
        return Sync(index.root, None, share, self._listen_port, COMPACT if self._settings.compact else RECONCILE)

    def handle(self, reply: bytes) -> bytes | None:
        """Take the peer's reply; the next request, or None when the exchange is over."""
        if self.done:
            raise RuntimeError("this exchange is over; start a new Initiator")
        self.result.bytes_received += len(reply)
        try:
            return self._handle(reply)
        except ProtocolError as exc:
            self._end(exc)
            return None

    def reads_no_store(self, reply: bytes) -> bool:
        """Whether ``handle(reply)`` would read or write no store: the reply is IN_SYNC, which only ends
        the exchange.  (The caller can then handle it without a trip to a worker thread.)  A reply
        that cannot be decoded here is left to ``handle``, which refuses it."""
        try:
            return decode(reply).type is MessageType.IN_SYNC
        except ProtocolError:
            return False

    def applies_at_once(self, reply: bytes) -> bool:
        """Whether ``handle(reply)`` would apply records through the view (records in a reply the exchange
        goes on from, or any records without ``defer``), rather than only read the view and leave the last
        reply's records deferred.  (A pipelined pull handles the other replies while the records before are
        still being stored, gossip/service.py.)  A reply that cannot be decoded here applies nothing."""
        try:
            envelope = decode(reply)
            if envelope.type not in (MessageType.DIGEST, MessageType.RECON, MessageType.DELTA):
                return False
            body = decode_body(envelope.type, envelope.body)
        except ProtocolError:
            return False
        if isinstance(body, DigestReply):
            return bool(body.records)
        if isinstance(body, Recon):
            return bool(body.records) and (body.asks or not self._defer)
        return isinstance(body, Delta) and bool(body.records) and not self._defer

    def fail(self, error: ProtocolError) -> None:
        """End the exchange because the transport failed (a timeout, an HTTP error without a reply)."""
        self._end(error)

    def _end(self, error: ProtocolError | None) -> None:
        self.result.error = error
        self._expect = frozenset()

    def _send(self, body: Body, expect: set[MessageType]) -> bytes:
        mtype = type_of(body)
        payload = encode_body(body)
        self._nonce = self._rng.randbytes(NONCE_BYTES)
        auth = peer_auth.sign(self._key, mtype, payload, to=self._peer or NO_ORIGIN, ts=_unix(self._now),
                              nonce=self._nonce, compact=self._compact and mtype is MessageType.RECON)
        data = encode(mtype, auth, payload)
        self._requests += 1
        self.result.round_trips += 1
        self.result.bytes_sent += len(data)
        self._expect = frozenset(expect)
        return data

    def _handle(self, reply: bytes) -> bytes | None:
        envelope = decode(reply)
        auth = envelope.auth
        peer_auth.verify(auth, envelope.type, envelope.body, me=self._me, now_s=_unix(self._now), skew_s=None,
                         re=self._nonce)
        body = decode_body(envelope.type, envelope.body)
        if isinstance(body, Refused) and body.code == "wrong-peer" and not self._readdressed \
                and auth.origin != self._peer:
            # We addressed nobody in particular (a first contact), or the machine at this address
            # changed: the signed refusal says whose address it is.  Start again addressed to it, once.
            self._readdressed = True
            self._peer = self.result.peer = auth.origin
            return self.start()
        if self._peer is not None and auth.origin != self._peer:
            raise ProtocolError("remote", "wrong-peer", f"answered by {auth.origin}, not by {self._peer}")
        if isinstance(body, Refused):
            self.result.peer = auth.origin
            self.result.refused = body.code[:64]
            raise ProtocolError("remote", "refused", f"{auth.origin} refused: {body.code[:64]}: {body.message}")
        if envelope.type not in self._expect:
            raise ProtocolError("remote", "unexpected-type", f"a {envelope.type.name} reply to this request")
        if auth.compact and not self._settings.compact:
            raise ProtocolError("remote", "bad-field", "a compact reply to a revision-2 request")
        self._compact = auth.compact
        self.result.peer = auth.origin
        if isinstance(body, InSync | DigestReply):
            self.result.addresses = body.addresses
        if isinstance(body, InSync):
            self.result.in_sync = True
            self._end(None)
            return None
        if isinstance(body, DigestReply):
            return self._on_digest(body)
        if isinstance(body, Recon):
            return self._on_recon(body)
        assert isinstance(body, Delta)
        self._take(body.records, body.more, last=True)
        self._end(None)
        return None

    def _on_digest(self, body: DigestReply) -> bytes | None:
        if body.records is not None:
            self._take(body.records, body.more)
        out = delta(self._view, self._view.digest(), body.digest, budget_bytes=self._settings.budget_bytes,
                    rng=self._rng)
        self.result.more |= out.more
        if self._inline and not out.records:
            self._end(None)  # the responder already sent what we lack, and lacks nothing
            return None
        self.result.records_sent += len(out.records)
        return self._send(Push(tuple(out.records), None if self._inline else self._view.digest()),
                          {MessageType.DELTA})

    def _on_recon(self, body: Recon) -> bytes | None:
        self._asked.check(body)
        if body.addresses:
            self.result.addresses = body.addresses
        self._take(body.records, body.more, last=not body.asks)
        if not body.asks:
            self._end(None)  # only records (or nothing): the exchange is over
            return None
        if self._requests >= MAX_ROUND_TRIPS:
            raise ProtocolError("remote", "no-convergence",
                                f"ranges still differ after {self._requests} round trips; giving up")
        answer = plan(self._view, body, items_at_most=self._settings.range_items, width=_width(self._compact))
        reply = _recon(self._view, answer, self._settings, self._rng)
        self.result.more |= reply.more
        if not reply.asks and not reply.records:
            self._end(None)
            return None
        self._asked.note(reply.nodes)
        self.result.records_sent += len(reply.records)
        return self._send(reply, {MessageType.RECON})

    def _take(self, records: Sequence[bytes], more: bool, *, last: bool = False) -> None:
        """Apply (or, for the last reply of a deferring exchange, screen and leave) a reply's records."""
        assert self._peer is not None
        self.result.records_received += len(records)
        self.result.more |= more
        if self._defer and last:
            if records:
                screened = screen(self._view, records, now=self._now,
                                  future_tolerance_s=self._settings.future_tolerance_s, assumed=self._assumed)
                self.deferred, self.ahead, self.deferred_decoded = screened.keep, screened.heads, screened.decoded
                self.result.held_back += screened.held_back
            return
        taken = take(self._view, records, source=_source(self._peer), now=self._now,
                     future_tolerance_s=self._settings.future_tolerance_s, assumed=self._assumed)
        self.result.applied.add(taken.result)
        self.result.held_back += taken.held_back

    @property
    def source(self) -> str:
        """The source the records of this exchange are counted under (refusals, budget)."""
        assert self._peer is not None
        return _source(self._peer)


@dataclass
class Checked:
    """A request that passed ``Responder.check``: its decoded body, from ``peer``, with its nonce."""

    body: Body
    peer: str
    nonce: bytes
    result: ExchangeResult
    compact: bool = False  # the answer goes compact (revision 3): the initiator said it speaks it


@dataclass
class Reply:
    """A responder's answer: ``data`` to send back, or None when the request could not even be
    read well enough to sign a refusal (the edge answers HTTP 400 with ``result.error``)."""

    data: bytes | None
    result: ExchangeResult


class Responder:
    """The side that answers.  Stateless between requests except for the replay cache.

    ``respond`` never raises for what the peer sent: every refusal is a signed REFUSED
    reply (or ``Reply.data`` None when the request could not be read at all).  A store
    error (``StoreBusy``) does propagate: the edge answers 503 and the peer tries later.
    """

    def __init__(self, view: StoreView, signing_key: nacl.signing.SigningKey, *,
                 replay: peer_auth.ReplayCache | None = None, settings: Settings | None = None) -> None:
        self._view, self._key = view, signing_key
        self._settings = settings or Settings()
        self._replay = replay or peer_auth.ReplayCache(skew_s=self._settings.skew_s)
        self.origin = origin_of(bytes(signing_key.verify_key))

    def respond(self, request: bytes, *, now: datetime, rng: random.Random,
                share: Sequence[tuple[str, str | None]] = ()) -> Reply:
        """Answer one request; ``share`` is the (url, origin) of addresses to tell the peer about."""
        checked = self.check(request, now=now, rng=rng)
        if isinstance(checked, Reply):
            return checked
        return self.answer(checked, now=now, rng=rng, share=share)

    def check(self, request: bytes, *, now: datetime, rng: random.Random) -> Checked | Reply:
        """The checks that need no store: size, envelope, signature, replay window, body.

        Returns the request ready for ``answer``, or the refusal to send (``Reply``).  The edge
        runs this before it queues for the store, so that a flood of invalid requests costs
        a decode and a signature check each and never waits for, or delays, an honest answer.
        """
        result = ExchangeResult(round_trips=1, bytes_received=len(request))
        try:
            envelope = decode(request)
        except ProtocolError as exc:
            result.error = exc
            return Reply(None, result)
        auth, now_s = envelope.auth, _unix(now)
        try:
            peer_auth.verify(auth, envelope.type, envelope.body, me=self.origin, now_s=now_s,
                             skew_s=self._settings.skew_s)
            self._replay.admit(auth.nonce, auth.ts, now_s)
            result.peer = auth.origin
            if envelope.type not in REQUESTS:
                raise ProtocolError("remote", "unexpected-type", f"{envelope.type.name} is not a request")
            body = decode_body(envelope.type, envelope.body)
            # Revision 3 is answered in kind: a compact RECON, or a SYNC that says it speaks it.
            compact = self._settings.compact and (auth.compact or (
                isinstance(body, Sync) and body.revision is not None and body.revision >= COMPACT))
            return Checked(body, auth.origin, auth.nonce, result, compact)
        except ProtocolError as exc:
            return self._refuse(exc, auth, now_s, rng, result)

    def reads_index_only(self, checked: Checked) -> bool:
        """Whether ``answer(checked)`` reads nothing but the range index and writes nothing: a
        revision-2 SYNC without an inline digest (answered IN_SYNC or with the root's RECON node)."""
        body = checked.body
        return (isinstance(body, Sync) and body.digest is None and body.revision is not None
                and body.revision >= RECONCILE)

    def answer(self, checked: Checked, *, now: datetime, rng: random.Random,
               share: Sequence[tuple[str, str | None]] = ()) -> Reply:
        """The answer to a request that passed ``check`` (reads, and may write, the store)."""
        result, now_s = checked.result, _unix(now)
        try:
            answer = self._serve(checked.body, checked.peer, now, rng, result, _shared(share, checked.peer),
                                 checked.compact)
            data = self._seal(answer, checked.peer, checked.nonce, now_s, rng,
                              compact=checked.compact and type_of(answer) in COMPACT_TYPES)
        except ProtocolError as exc:
            result.error = exc
            data = self._seal(Refused(exc.code, exc.message), checked.peer, checked.nonce, now_s, rng)
        result.bytes_sent = len(data)
        return Reply(data, result)

    def _refuse(self, exc: ProtocolError, auth: Auth, now_s: int, rng: random.Random,
                result: ExchangeResult) -> Reply:
        if exc.code == "wrong-peer" and auth.to == NO_ORIGIN:
            # A first contact: the initiator knows our address, not our origin.  The signed
            # refusal tells it; nothing went wrong.
            result.introduced = True
        else:
            result.error = exc
        # Signed and bound to the request's nonce, so the requester can trust who refused
        # and why (and learn this memory's origin from a wrong-peer refusal).
        data = self._seal(Refused(exc.code, exc.message), auth.origin, auth.nonce, now_s, rng)
        result.bytes_sent = len(data)
        return Reply(data, result)

    def _seal(self, body: Body, to: str, re: bytes, now_s: int, rng: random.Random, *, compact: bool = False) -> bytes:
        mtype = type_of(body)
        payload = encode_body(body)
        auth = peer_auth.sign(self._key, mtype, payload, to=to, ts=now_s, nonce=rng.randbytes(NONCE_BYTES), re=re,
                              compact=compact)
        return encode(mtype, auth, payload)

    def _serve(self, body: Body, peer: str, now: datetime, rng: random.Random, result: ExchangeResult,
               share: tuple[str, ...], compact: bool = False) -> Body:
        if isinstance(body, Recon):
            self._receive(body.records, peer, now, result)
            answer = plan(self._view, body, items_at_most=self._settings.range_items, width=_width(compact))
            reply = _recon(self._view, answer, self._settings, rng)
            result.records_sent, result.more = len(reply.records), reply.more
            return reply
        if isinstance(body, Sync):
            result.addresses, result.listen_port = body.addresses, body.listen_port
            if body.revision is not None and body.revision >= RECONCILE:
                return self._sync_ranges(body, rng, result, share, compact)
            mine = self._view.digest()
            if body.fingerprint == mine.fingerprint:
                result.in_sync = True
                return InSync(share)
            if body.digest is None:
                return DigestReply(mine, addresses=share)
            if body.digest.fingerprint != body.fingerprint:
                raise ProtocolError("remote", "bad-field", "the fingerprint is not that of the digest sent")
            out = self._delta(mine, body.digest, rng, result)
            return DigestReply(mine, tuple(out.records), out.more, share)
        assert isinstance(body, Push)
        self._receive(body.records, peer, now, result)
        if body.digest is None:
            return Delta(())
        out = self._delta(self._view.digest(), body.digest, rng, result)
        return Delta(tuple(out.records), out.more)

    def _receive(self, records: Sequence[bytes], peer: str, now: datetime, result: ExchangeResult) -> None:
        result.records_received = len(records)
        taken = take(self._view, records, source=_source(peer), now=now,
                     future_tolerance_s=self._settings.future_tolerance_s)
        result.applied, result.held_back = taken.result, taken.held_back

    def _sync_ranges(self, body: Sync, rng: random.Random, result: ExchangeResult, share: tuple[str, ...],
                     compact: bool = False) -> Body:
        """Revision 2's answer to SYNC: IN_SYNC, or the first RECON (reconcile.py)."""
        index = self._view.index()
        if body.digest is None:
            if body.fingerprint == index.root:
                result.in_sync = True
                return InSync(share)
            return Recon((node_for(index, 0, 0, items_at_most=self._settings.range_items, width=_width(compact)),),
                         addresses=share)
        if body.digest.fingerprint != body.fingerprint:
            raise ProtocolError("remote", "bad-field", "the fingerprint is not that of the digest sent")
        if len(index) == len(body.digest) and all(self._view.entry(o) == e for o, e in body.digest.items()):
            result.in_sync = True
            return InSync(share)
        # The inline digest is the initiator's whole set: an items node for the whole range.
        answer = plan(self._view, [Items(0, 0, body.digest)], items_at_most=self._settings.range_items,
                      width=_width(compact))
        reply = _recon(self._view, answer, self._settings, rng, share)
        result.records_sent, result.more = len(reply.records), reply.more
        return reply

    def _delta(self, mine: Digest, theirs: Digest, rng: random.Random, result: ExchangeResult) -> Batch:
        out = delta(self._view, mine, theirs, budget_bytes=self._settings.budget_bytes, rng=rng)
        result.records_sent, result.more = len(out.records), out.more
        return out


def _width(compact: bool) -> int:
    """Bytes of each child fingerprint in the splits this memory sends."""
    return CHILD_FP_BYTES_COMPACT if compact else CHILD_FP_BYTES


def _recon(view: StoreView, answer: Plan, settings: Settings, rng: random.Random,
           share: tuple[str, ...] = ()) -> Recon:
    """The RECON carrying a plan: its nodes and entries, and the records it says the peer lacks."""
    out = delta(view, answer.mine, answer.theirs, budget_bytes=settings.budget_bytes, rng=rng)
    return Recon(tuple(answer.nodes), Digest(answer.entries) if answer.entries else None, tuple(answer.lacking),
                 tuple(out.records), out.more or answer.cut, share)


def _shared(share: Sequence[tuple[str, str | None]], peer: str | None) -> tuple[str, ...]:
    """The addresses to tell ``peer`` about: not its own, at most MAX_ADDRESSES."""
    return tuple(url for url, origin in share if origin is None or origin != peer)[:MAX_ADDRESSES]


def drive(initiator: Initiator, post: Callable[[bytes], bytes | None]) -> ExchangeResult:
    """Run an exchange over a synchronous transport; ``post`` returns None when the peer
    answered without a message (it could not read the request)."""
    request = initiator.start()
    while request is not None:
        reply = post(request)
        if reply is None:
            initiator.fail(ProtocolError("remote", "refused", "the peer could not read the request"))
            break
        request = initiator.handle(reply)
    return initiator.result
