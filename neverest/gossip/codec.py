"""The gossip wire format v1: msgpack messages, every size bounded before it is allocated.

One message is one HTTP body (the edge posts requests to the responder and gets the
reply in the response).  It is a msgpack map with short keys; readers ignore keys they
do not know, and type numbers are append-only (a new message gets a new number, an old
number never changes meaning)::

    {"v": 1,          # wire version; any other value is refused as bad-version
     "t": <int>,      # MessageType below; an unknown number is refused as unknown-type
     "a": <auth>,     # who sends it and to whom, signed (peer_auth.py)
     "b": <bin>}      # the body: itself a msgpack map, kept as bytes so that the
                      # signature covers exactly the bytes received (no re-encoding)

    auth = {"o": bin 8    sender's origin,   "k": bin 32  its Ed25519 public key,
            "to": bin 8   origin addressed (8 zero bytes: not known yet),
            "ts": int     unix seconds,      "n": bin 16  fresh random nonce,
            "s": bin 64   Ed25519 signature (peer_auth.signed_bytes)}

Bodies, by type (``?`` marks an optional key):

==  ========  =========  ==================================================================
t   name      sent by    body
==  ========  =========  ==================================================================
1   SYNC      initiator  {"f": bin 16 fingerprint of its digest, "d"?: its digest,
                          "p"?: addresses, "l"?: int its listening port,
                          "w"?: int the revision it speaks (2: reconciliation)}
2   IN_SYNC   responder  {"p"?: addresses}  (fingerprints equal: the exchange is over)
3   DIGEST    responder  {"d": its digest, "r"?: records the initiator lacks, "m": bool,
                          "p"?: addresses}
4   PUSH      initiator  {"d"?: its digest, "r": records the responder lacks}
5   DELTA     responder  {"r": records the initiator lacks, "m": bool}
6   REFUSED   responder  {"c": str code, "w": str message}  (ProtocolError codes below)
7   RECON     both       {"n": [nodes], "e"?: a digest, "x"?: bin 8k origins, "r"?: records,
                          "m"?: bool, "p"?: addresses}  (revision 2: reconcile.py)
==  ========  =========  ==================================================================

Revision 2 (``"w": 2`` in SYNC, RECON) came without a version change: a reader of
revision 1 ignores ``"w"`` and answers as before.  Its ranges, nodes and bounds are
described in reconcile.py; a node is ``[bits, prefix, b, bin 8·2^b]`` (split: the first 8
bytes of each child range's fingerprint, ranges.py) or ``[bits, prefix, digest]`` (items:
the sender's entries in the range).  Nodes go in ascending order of range and do not
overlap; a message holds at most ``MAX_NODES`` (512) of them, at most ``MAX_CHILDREN``
(4 096) child fingerprints in all, and at most ``MAX_ORIGINS`` entries and origins in all.

- a *digest* is ``{"o": bin 8n, "s": [n ints], "h": bin 8n}``: n origins as 8 raw bytes each,
  sorted strictly ascending (so there are no duplicates and the form is canonical), each
  origin's highest held ``seq`` (1 ≤ seq < 2^63), and the first 8 bytes of the BLAKE2b-128
  of that record's bytes (``core.seq_hash``, which also says how forks change it);
- its *fingerprint* is BLAKE2b-128 of ``b"neverest-digest-v1\\0"`` followed, per origin in
  that order, by origin (8) ‖ seq (8, big-endian) ‖ hash (8): independent of the encoding;
- ``"p"`` and ``"l"`` are optional and came after v1 was first published, without a
  version change: a reader that does not know them ignores them.  ``"p"`` is an array of
  at most ``MAX_ADDRESSES`` (16) strings, each at most ``MAX_TEXT`` bytes: peer addresses
  the sender knows and found healthy, which the receiver may try (it takes only
  ``http://`` URLs of at most 200 bytes, and learns each one's origin from its own signed
  exchange); ``"l"`` is the port (1..65535) the initiator listens on, which the responder
  pairs with the address the request came from.  Both are in the body, so the message's
  signature covers them;
- ``"r"`` is an array of records, each a bin holding one record line exactly as its origin
  signed it (1..16 384 bytes, ``records.MAX_RECORD_BYTES``); ``"m"`` says the sender cut
  the records at its byte budget and has more.

Bounds, all checked before the thing bounded is allocated (msgpack's ``max_*_len``
limits refuse a length header before it allocates, and the body is only unpacked after
the envelope decoded):

- a message: at most ``MAX_MESSAGE_BYTES`` (4 MiB), checked on the length alone;
- a digest: at most ``MAX_ORIGINS`` (100 000) origins, so at most about 2.4 MiB;
- records: at most ``MAX_RECORDS`` (10 000) per message, each at most 16 KiB;
- maps at most 32 entries, arrays at most 100 000 items, strings at most 1 024 bytes, no
  extension types, nesting as deep as msgpack's own fixed stack (a deeper message is
  refused).

Every refusal is a ``ProtocolError`` that says who is at fault (h11's Local/Remote
split): ``"remote"`` for bytes a peer sent, ``"local"`` for a message this memory could
not build.  Codes are a closed set, ``CODES``: programs may rely on them.
"""

from __future__ import annotations

import enum
import hashlib
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import msgpack

from neverest.records import MAX_RECORD_BYTES, origin_of

VERSION: Final = 1
MAX_MESSAGE_BYTES: Final = 4 * 1024 * 1024
# 100 000 origins: two orders of magnitude above the networks this is built for
# (the benchmarks measure 10 000), while a full digest stays well under the message bound.
MAX_ORIGINS: Final = 100_000
MAX_RECORDS: Final = 10_000
MAX_ADDRESSES: Final = 16
ORIGIN_BYTES: Final = 8
HASH_BYTES: Final = 8
KEY_BYTES: Final = 32
NONCE_BYTES: Final = 16
SIG_BYTES: Final = 64
FINGERPRINT_BYTES: Final = 16
MAX_SEQ: Final = 2**63 - 1
MAX_TEXT: Final = 1024
# A record bin costs its bytes plus at most 3 bytes of msgpack header (bin 16: records are
# under 64 KiB); byte budgets count this so that a budget bounds the encoded size.
RECORD_OVERHEAD: Final = 3

# Revision 2 (reconciliation by ranges): bounds of one RECON message.
RECONCILE: Final = 2
MAX_NODES: Final = 512
MAX_CHILDREN: Final = 4096  # child fingerprints in all split nodes: 32 KiB
MAX_SPLIT_BITS: Final = 6  # a split node has 2 to 64 children
CHILD_FP_BYTES: Final = 8
# Revision 3 (issue 26): the compact form of a reconciliation (PROTOCOL.md §11).  Its split nodes
# carry 4 bytes of each child's fingerprint, and its messages after SYNC leave out the envelope's
# "o" (the fingerprint of "k") and "to" (the receiver's own origin): both are still signed.
COMPACT: Final = 3
CHILD_FP_BYTES_COMPACT: Final = 4
CHILD_FP_WIDTHS: Final = (CHILD_FP_BYTES_COMPACT, CHILD_FP_BYTES)

FINGERPRINT_DOMAIN: Final = b"neverest-digest-v1\x00"
NO_ORIGIN: Final = "0" * (2 * ORIGIN_BYTES)

# "network": the transport failed (a timeout, nothing listening): nobody's misbehaviour.
Who = Literal["remote", "local", "network"]

# Refusal codes.  Add, never rename: peers and programs rely on them.
CODES: Final = frozenset({
    "too-large",          # a message over MAX_MESSAGE_BYTES
    "bad-msgpack",        # not msgpack, truncated, trailing bytes, a length over a bound, too deep
    "bad-version",        # "v" is not 1
    "unknown-type",       # "t" is not a MessageType
    "unexpected-type",    # a known type where it makes no sense (a reply sent as a request...)
    "bad-field",          # a field missing or of the wrong type, size or order
    "too-many-origins",   # a digest over MAX_ORIGINS
    "too-many-records",   # more than MAX_RECORDS records
    "bad-record",         # a record whose origin, seq or signed time cannot be read
    "gap",                # records of an origin that would leave a hole in the receiver's history
    "origin-mismatch",    # auth origin is not the fingerprint of auth key
    "wrong-peer",         # addressed to another origin (or to nobody in particular)
    "stale",              # auth timestamp outside the allowed clock skew
    "bad-signature",      # the auth signature does not verify
    "replay",             # a nonce already seen
    "busy",               # too many nonces to remember: try again later
    "refused",            # the peer answered REFUSED (its code is in the message)
    "timeout",            # who "network": no complete answer in time
    "unreachable",        # who "network": nothing listening, a reset, a broken connection
    "bad-range",          # a range out of bounds, overlapping, out of order, or not one that was asked about
    "too-many-ranges",    # more than MAX_NODES ranges or MAX_CHILDREN child fingerprints in a message
    "no-convergence",     # reconciliation still asking after MAX_ROUND_TRIPS round trips
})


class ProtocolError(Exception):
    """A gossip message was refused.  ``who`` is at fault; ``code`` is one of ``CODES``."""

    def __init__(self, who: Who, code: str, message: str) -> None:
        assert code in CODES, code
        super().__init__(f"{who} {code}: {message}")
        self.who: Who = who
        self.code = code
        self.message = message


class MessageType(enum.IntEnum):
    SYNC = 1
    IN_SYNC = 2
    DIGEST = 3
    PUSH = 4
    DELTA = 5
    REFUSED = 6
    RECON = 7


REQUESTS: Final = frozenset({MessageType.SYNC, MessageType.PUSH, MessageType.RECON})
# Only these types may come compact (revision 3): never SYNC (the first contact names whom it
# addresses) nor REFUSED (a wrong-peer refusal is how an initiator learns whose address it reached).
COMPACT_TYPES: Final = frozenset({MessageType.RECON, MessageType.IN_SYNC})

Entry = tuple[int, bytes]  # (highest seq held, HASH_BYTES of that record's digest)


class Digest(Mapping[str, Entry]):
    """A memory's version vector: origin (hex) → (highest seq held, short hash of that record)."""

    __slots__ = ("_entries", "_fingerprint")

    def __init__(self, entries: Mapping[str, Entry] | None = None) -> None:
        self._entries: dict[str, Entry] = dict(entries or {})
        self._fingerprint: bytes | None = None

    def __getitem__(self, origin: str) -> Entry:
        return self._entries[origin]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Digest({len(self)} origins, fingerprint {self.fingerprint.hex()})"

    @property
    def fingerprint(self) -> bytes:
        """BLAKE2b-128 of the sorted entries; equal fingerprints mean equal digests."""
        if self._fingerprint is None:
            h = hashlib.blake2b(FINGERPRINT_DOMAIN, digest_size=FINGERPRINT_BYTES)
            for origin in sorted(self._entries):
                seq, short = self._entries[origin]
                h.update(bytes.fromhex(origin) + seq.to_bytes(8, "big") + short)
            self._fingerprint = h.digest()
        return self._fingerprint


# -- bodies ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sync:
    fingerprint: bytes
    digest: Digest | None = None
    addresses: tuple[str, ...] = ()
    listen_port: int | None = None
    revision: int | None = None  # "w": None from a revision-1 peer


@dataclass(frozen=True, slots=True)
class InSync:
    addresses: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DigestReply:
    digest: Digest
    records: tuple[bytes, ...] | None = None
    more: bool = False
    addresses: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Push:
    records: tuple[bytes, ...]
    digest: Digest | None = None


@dataclass(frozen=True, slots=True)
class Delta:
    records: tuple[bytes, ...]
    more: bool = False


@dataclass(frozen=True, slots=True)
class Refused:
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Split:
    """A range whose fingerprint differed, split in 2^b: the first 8 (revision 3: 4) bytes of each
    child's fingerprint."""

    bits: int
    prefix: int
    b: int
    fingerprints: bytes  # width · 2^b, width in CHILD_FP_WIDTHS

    def child(self, i: int) -> tuple[int, int]:
        return self.bits + self.b, (self.prefix << self.b) | i

    @property
    def width(self) -> int:
        """Bytes of each child's fingerprint (the decoder checked it is one of CHILD_FP_WIDTHS)."""
        return len(self.fingerprints) >> self.b


@dataclass(frozen=True, slots=True)
class Items:
    """A range's entries as the sender holds them."""

    bits: int
    prefix: int
    entries: Digest


Node = Split | Items


@dataclass(frozen=True, slots=True)
class Recon:
    nodes: tuple[Node, ...] = ()
    entries: Digest | None = None  # "e": the sender's entries where the receiver is ahead or differs
    lacking: tuple[str, ...] = ()  # "x": origins the receiver named that the sender holds nothing of
    records: tuple[bytes, ...] = ()
    more: bool = False
    addresses: tuple[str, ...] = ()

    @property
    def asks(self) -> bool:
        """Whether the receiver must answer (nodes or entries to answer with records)."""
        return bool(self.nodes or self.entries or self.lacking)


Body = Sync | InSync | DigestReply | Push | Delta | Refused | Recon

_TYPES: Final[dict[type[Any], MessageType]] = {
    Sync: MessageType.SYNC, InSync: MessageType.IN_SYNC, DigestReply: MessageType.DIGEST,
    Push: MessageType.PUSH, Delta: MessageType.DELTA, Refused: MessageType.REFUSED, Recon: MessageType.RECON,
}


def type_of(body: Body) -> MessageType:
    return _TYPES[type(body)]


@dataclass(frozen=True, slots=True)
class Auth:
    """The identity part every message carries (peer_auth.py signs and checks it)."""

    origin: str  # hex, 16 digits
    key: bytes
    to: str  # hex, 16 digits; NO_ORIGIN when the sender does not know the peer's origin yet
    ts: int
    nonce: bytes
    sig: bytes
    # Revision 3: "o" and "to" were not sent.  ``origin`` is then the fingerprint of ``key`` and
    # ``to`` is not known here: the signature covers the receiver's own origin (peer_auth.verify).
    compact: bool = False


@dataclass(frozen=True, slots=True)
class Envelope:
    """A decoded message whose body is still bytes: authenticate first, then decode_body."""

    type: MessageType
    auth: Auth
    body: bytes


# -- decoding ----------------------------------------------------------------------------

# The envelope holds one bin of up to a whole message (the body) and a few small fields.
_ENVELOPE_LIMITS: Final = {"max_bin_len": MAX_MESSAGE_BYTES, "max_str_len": 64, "max_array_len": 64,
                           "max_map_len": 32, "max_ext_len": 0}
# A body holds at most one digest (an array of MAX_ORIGINS ints) or MAX_RECORDS record bins.
# Arrays are what must be bounded here: msgpack makes the list from the length header before
# it reads the items.  A bin is only made from bytes that are there, so the body's own length
# bounds it; its size is then checked with a clearer error (too-many-origins, a record's size).
_BODY_LIMITS: Final = {"max_bin_len": MAX_MESSAGE_BYTES, "max_str_len": MAX_TEXT,
                       "max_array_len": max(MAX_ORIGINS, MAX_RECORDS), "max_map_len": 32, "max_ext_len": 0}


def _remote(code: str, message: str) -> ProtocolError:
    return ProtocolError("remote", code, message)


def _unpack(data: bytes, limits: Mapping[str, int], what: str) -> dict[str, Any]:
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True, **limits)
    except msgpack.StackError:
        raise _remote("bad-msgpack", f"{what} is nested too deeply") from None
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise _remote("bad-msgpack", f"{what} is not valid msgpack: {exc or type(exc).__name__}") from None
    if not isinstance(obj, dict):
        raise _remote("bad-field", f"{what} must be a msgpack map, not {type(obj).__name__}")
    return obj


def _bin(obj: Mapping[str, Any], key: str, size: int | None = None) -> bytes:
    value = obj.get(key)
    if type(value) is not bytes or (size is not None and len(value) != size):
        shape = "bytes" if size is None else f"{size} bytes"
        raise _remote("bad-field", f'"{key}" must be {shape}')
    return value


def _int(obj: Mapping[str, Any], key: str) -> int:
    value = obj.get(key)
    if type(value) is not int:  # bool is not an int here
        raise _remote("bad-field", f'"{key}" must be an integer')
    return value


def _bool(obj: Mapping[str, Any], key: str) -> bool:
    value = obj.get(key, False)
    if type(value) is not bool:
        raise _remote("bad-field", f'"{key}" must be a boolean')
    return value


def _str(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    if type(value) is not str:
        raise _remote("bad-field", f'"{key}" must be a string')
    return value


def _origin(obj: Mapping[str, Any], key: str) -> str:
    return _bin(obj, key, ORIGIN_BYTES).hex()


def decode(data: bytes) -> Envelope:
    """Decode a message's envelope.  Raises ProtocolError("remote", ...)."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise _remote("too-large", f"message is {len(data)} bytes; the limit is {MAX_MESSAGE_BYTES}")
    obj = _unpack(data, _ENVELOPE_LIMITS, "the message")
    version = obj.get("v")
    if type(version) is not int or version != VERSION:
        raise _remote("bad-version", f"v must be {VERSION}, not {version!r:.40}")
    number = _int(obj, "t")
    try:
        mtype = MessageType(number)
    except ValueError:
        raise _remote("unknown-type", f"unknown message type {number}") from None
    auth = obj.get("a")
    if not isinstance(auth, dict):
        raise _remote("bad-field", '"a" must be a map')
    if "o" not in auth and "to" not in auth:
        if mtype not in COMPACT_TYPES:
            raise _remote("bad-field", f'a {mtype.name} must name "o" and "to"')
        key = _bin(auth, "k", KEY_BYTES)
        return Envelope(
            type=mtype,
            auth=Auth(origin=origin_of(key), key=key, to="", ts=_int(auth, "ts"), nonce=_bin(auth, "n", NONCE_BYTES),
                      sig=_bin(auth, "s", SIG_BYTES), compact=True),
            body=_bin(obj, "b"),
        )
    return Envelope(
        type=mtype,
        auth=Auth(origin=_origin(auth, "o"), key=_bin(auth, "k", KEY_BYTES), to=_origin(auth, "to"),
                  ts=_int(auth, "ts"), nonce=_bin(auth, "n", NONCE_BYTES), sig=_bin(auth, "s", SIG_BYTES)),
        body=_bin(obj, "b"),
    )


def _digest(obj: Mapping[str, Any], key: str = "d") -> Digest:
    return _digest_value(obj.get(key), f'"{key}"')


def _digest_value(value: Any, what: str) -> Digest:
    if not isinstance(value, dict):
        raise _remote("bad-field", f"{what} must be a digest map")
    origins, seqs, hashes = _bin(value, "o"), value.get("s"), _bin(value, "h")
    n = len(origins) // ORIGIN_BYTES
    if n > MAX_ORIGINS:
        raise _remote("too-many-origins", f"a digest names {n} origins; the limit is {MAX_ORIGINS}")
    if (len(origins) % ORIGIN_BYTES or type(seqs) is not list or len(seqs) != n
            or len(hashes) != n * HASH_BYTES):
        raise _remote("bad-field", "a digest needs 8 bytes of origin, one seq and 8 bytes of hash per origin")
    entries: dict[str, Entry] = {}
    previous = b""
    for i, seq in enumerate(seqs):
        origin = origins[i * ORIGIN_BYTES:(i + 1) * ORIGIN_BYTES]
        if origin <= previous:
            raise _remote("bad-field", "digest origins must be sorted and distinct")
        if type(seq) is not int or not 1 <= seq <= MAX_SEQ:
            raise _remote("bad-field", f"digest seq must be an integer from 1 to 2^63-1, not {seq!r:.40}")
        entries[origin.hex()] = (seq, hashes[i * HASH_BYTES:(i + 1) * HASH_BYTES])
        previous = origin
    return Digest(entries)


def _records(obj: Mapping[str, Any]) -> tuple[bytes, ...]:
    value = obj.get("r")
    if type(value) is not list:
        raise _remote("bad-field", '"r" must be an array of records')
    if len(value) > MAX_RECORDS:
        raise _remote("too-many-records", f"{len(value)} records; the limit is {MAX_RECORDS}")
    for record in value:
        if type(record) is not bytes or not 1 <= len(record) <= MAX_RECORD_BYTES:
            raise _remote("bad-field", f"each record must be 1 to {MAX_RECORD_BYTES} bytes")
    return tuple(value)


def _addresses(obj: Mapping[str, Any]) -> tuple[str, ...]:
    value = obj.get("p", [])
    if type(value) is not list or any(type(item) is not str for item in value):
        raise _remote("bad-field", '"p" must be an array of address strings')
    if len(value) > MAX_ADDRESSES:
        raise _remote("bad-field", f'"p" names {len(value)} addresses; the limit is {MAX_ADDRESSES}')
    return tuple(value)


def _port(obj: Mapping[str, Any]) -> int | None:
    if "l" not in obj:
        return None
    port = obj["l"]
    if type(port) is not int or not 1 <= port <= 65535:
        raise _remote("bad-field", '"l" must be a port from 1 to 65535')
    return port


def _revision(obj: Mapping[str, Any]) -> int | None:
    if "w" not in obj:
        return None
    value = obj["w"]
    if type(value) is not int or not 1 <= value <= 2**32:
        raise _remote("bad-field", '"w" must be a revision number from 1 to 2^32')
    return value


_ORIGIN_SPACE: Final = 64  # origins are 64-bit: a range is a prefix of at most 64 bits


def _node(raw: Any, children: int) -> tuple[Node, int]:
    """One node, checked alone; ``children`` counts child fingerprints so far."""
    if type(raw) is not list or len(raw) not in (3, 4):
        raise _remote("bad-field", "a node must be [bits, prefix, b, fingerprints] or [bits, prefix, entries]")
    bits, prefix = raw[0], raw[1]
    if type(bits) is not int or type(prefix) is not int or not 0 <= bits <= _ORIGIN_SPACE \
            or not 0 <= prefix < (1 << bits):
        raise _remote("bad-range", f"({bits!r:.24}, {prefix!r:.24}) is not a prefix of 64-bit origins")
    if len(raw) == 4:
        b, fps = raw[2], raw[3]
        if type(b) is not int or not 1 <= b <= MAX_SPLIT_BITS or bits + b > _ORIGIN_SPACE:
            raise _remote("bad-range", f"a split of ({bits}, {prefix}) in 2^{b!r:.24} is out of bounds")
        children += 1 << b
        if children > MAX_CHILDREN:
            raise _remote("too-many-ranges", f"more than {MAX_CHILDREN} child fingerprints in one message")
        if type(fps) is not bytes or len(fps) not in (w << b for w in CHILD_FP_WIDTHS):
            raise _remote("bad-field", f"a split in 2^{b} needs {CHILD_FP_BYTES_COMPACT << b} or "
                                       f"{CHILD_FP_BYTES << b} bytes of fingerprints")
        return Split(bits, prefix, b, fps), children
    entries = _digest_value(raw[2], "a node's entries")
    if entries:
        shift = _ORIGIN_SPACE - bits
        first, last = next(iter(entries)), next(reversed(entries._entries))
        if int(first, 16) >> shift != prefix or int(last, 16) >> shift != prefix:
            raise _remote("bad-range", f"entries outside the range ({bits}, {prefix})")
    return Items(bits, prefix, entries), children


def _nodes(obj: Mapping[str, Any]) -> tuple[Node, ...]:
    value = obj.get("n")
    if type(value) is not list:
        raise _remote("bad-field", '"n" must be an array of nodes')
    if len(value) > MAX_NODES:
        raise _remote("too-many-ranges", f"{len(value)} ranges in one message; the limit is {MAX_NODES}")
    nodes: list[Node] = []
    children, entries, end = 0, 0, 0
    for raw in value:
        node, children = _node(raw, children)
        shift = _ORIGIN_SPACE - node.bits
        if node.prefix << shift < end:
            raise _remote("bad-range", f"range ({node.bits}, {node.prefix}) overlaps or precedes the one before")
        end = (node.prefix + 1) << shift
        if isinstance(node, Items):
            entries += len(node.entries)
            if entries > MAX_ORIGINS:
                raise _remote("too-many-origins", f"the nodes name more than {MAX_ORIGINS} origins")
        nodes.append(node)
    return tuple(nodes)


def _lacking(obj: Mapping[str, Any]) -> tuple[str, ...]:
    if "x" not in obj:
        return ()
    data = _bin(obj, "x")
    if len(data) % ORIGIN_BYTES:
        raise _remote("bad-field", '"x" must be 8 bytes per origin')
    if len(data) // ORIGIN_BYTES > MAX_ORIGINS:
        raise _remote("too-many-origins", f'"x" names more than {MAX_ORIGINS} origins')
    origins = [data[i:i + ORIGIN_BYTES] for i in range(0, len(data), ORIGIN_BYTES)]
    if any(a >= b for a, b in itertools.pairwise(origins)):
        raise _remote("bad-field", '"x" origins must be sorted and distinct')
    return tuple(o.hex() for o in origins)


def _recon(obj: Mapping[str, Any]) -> Recon:
    nodes = _nodes(obj)
    entries = _digest(obj, "e") if "e" in obj else None
    lacking = _lacking(obj)
    named = sum(len(n.entries) for n in nodes if isinstance(n, Items)) + len(entries or ()) + len(lacking)
    if named > MAX_ORIGINS:
        raise _remote("too-many-origins", f"a message names {named} origins; the limit is {MAX_ORIGINS}")
    return Recon(nodes=nodes, entries=entries, lacking=lacking, records=_records(obj) if "r" in obj else (),
                 more=_bool(obj, "m"), addresses=_addresses(obj))


def decode_body(mtype: MessageType, data: bytes) -> Body:
    """Decode the body of a message of type ``mtype``.  Raises ProtocolError("remote", ...)."""
    obj = _unpack(data, _BODY_LIMITS, "the body")
    if mtype is MessageType.SYNC:
        return Sync(fingerprint=_bin(obj, "f", FINGERPRINT_BYTES), digest=_digest(obj) if "d" in obj else None,
                    addresses=_addresses(obj), listen_port=_port(obj), revision=_revision(obj))
    if mtype is MessageType.IN_SYNC:
        return InSync(addresses=_addresses(obj))
    if mtype is MessageType.DIGEST:
        return DigestReply(digest=_digest(obj), records=_records(obj) if "r" in obj else None, more=_bool(obj, "m"),
                           addresses=_addresses(obj))
    if mtype is MessageType.PUSH:
        return Push(records=_records(obj), digest=_digest(obj) if "d" in obj else None)
    if mtype is MessageType.DELTA:
        return Delta(records=_records(obj), more=_bool(obj, "m"))
    if mtype is MessageType.RECON:
        return _recon(obj)
    return Refused(code=_str(obj, "c"), message=_str(obj, "w"))


# -- encoding ----------------------------------------------------------------------------


def _local(code: str, message: str) -> ProtocolError:
    return ProtocolError("local", code, message)


def _encode_digest(digest: Digest) -> dict[str, Any]:
    if len(digest) > MAX_ORIGINS:
        raise _local("too-many-origins", f"this memory holds {len(digest)} origins; a digest names at most "
                                         f"{MAX_ORIGINS}")
    origins = sorted(digest)
    return {"o": bytes.fromhex("".join(origins)), "s": [digest[o][0] for o in origins],
            "h": b"".join(digest[o][1] for o in origins)}


def _encode_records(records: Sequence[bytes]) -> list[bytes]:
    if len(records) > MAX_RECORDS:
        raise _local("too-many-records", f"{len(records)} records; the limit is {MAX_RECORDS}")
    if any(not 1 <= len(r) <= MAX_RECORD_BYTES for r in records):
        raise _local("bad-record", f"a record must be 1 to {MAX_RECORD_BYTES} bytes")
    return list(records)


def _encode_addresses(obj: dict[str, Any], addresses: Sequence[str]) -> None:
    # Only when there are some: an exchange without them is byte for byte what it was before.
    if addresses:
        if len(addresses) > MAX_ADDRESSES or any(len(a.encode("utf-8")) > MAX_TEXT for a in addresses):
            raise _local("bad-field", f"at most {MAX_ADDRESSES} addresses of at most {MAX_TEXT} bytes are shared")
        obj["p"] = list(addresses)


def _encode_node(node: Node) -> list[Any]:
    if isinstance(node, Split):
        return [node.bits, node.prefix, node.b, node.fingerprints]
    return [node.bits, node.prefix, _encode_digest(node.entries)]


def _encode_recon(body: Recon) -> dict[str, Any]:
    if len(body.nodes) > MAX_NODES or sum(1 << n.b for n in body.nodes if isinstance(n, Split)) > MAX_CHILDREN:
        raise _local("too-many-ranges", f"at most {MAX_NODES} ranges and {MAX_CHILDREN} child fingerprints are sent")
    obj: dict[str, Any] = {"n": [_encode_node(n) for n in body.nodes]}
    if body.entries:
        obj["e"] = _encode_digest(body.entries)
    if body.lacking:
        obj["x"] = bytes.fromhex("".join(sorted(body.lacking)))
    if body.records:
        obj["r"] = _encode_records(body.records)
    if body.more:
        obj["m"] = True
    _encode_addresses(obj, body.addresses)
    return obj


def encode_body(body: Body) -> bytes:
    """The body's bytes (what the signature covers).  Raises ProtocolError("local", ...)."""
    obj: dict[str, Any]
    if isinstance(body, Sync):
        obj = {"f": body.fingerprint}
        if body.digest is not None:
            obj["d"] = _encode_digest(body.digest)
        _encode_addresses(obj, body.addresses)
        if body.listen_port is not None:
            if not 1 <= body.listen_port <= 65535:
                raise _local("bad-field", f"port {body.listen_port} is out of range")
            obj["l"] = body.listen_port
        if body.revision is not None:
            obj["w"] = body.revision
    elif isinstance(body, InSync):
        obj = {}
        _encode_addresses(obj, body.addresses)
    elif isinstance(body, DigestReply):
        obj = {"d": _encode_digest(body.digest), "m": body.more}
        if body.records is not None:
            obj["r"] = _encode_records(body.records)
        _encode_addresses(obj, body.addresses)
    elif isinstance(body, Push):
        obj = {"r": _encode_records(body.records)}
        if body.digest is not None:
            obj["d"] = _encode_digest(body.digest)
    elif isinstance(body, Delta):
        obj = {"r": _encode_records(body.records), "m": body.more}
    elif isinstance(body, Recon):
        obj = _encode_recon(body)
    else:
        # Cut to the bounds a reader applies, by characters and then by UTF-8 bytes.
        obj = {"c": body.code[:64], "w": body.message.encode("utf-8")[:MAX_TEXT].decode("utf-8", "ignore")}
    return bytes(msgpack.packb(obj, use_bin_type=True))


def encode(mtype: MessageType, auth: Auth, body: bytes) -> bytes:
    """A whole message.  Raises ProtocolError("local", "too-large") past MAX_MESSAGE_BYTES."""
    if auth.compact:
        if mtype not in COMPACT_TYPES:
            raise _local("bad-field", f"a {mtype.name} is never sent compact")
        head: dict[str, Any] = {"k": auth.key, "ts": auth.ts, "n": auth.nonce, "s": auth.sig}
    else:
        head = {"o": bytes.fromhex(auth.origin), "k": auth.key, "to": bytes.fromhex(auth.to), "ts": auth.ts,
                "n": auth.nonce, "s": auth.sig}
    data = bytes(msgpack.packb({"v": VERSION, "t": int(mtype), "a": head, "b": body}, use_bin_type=True))
    if len(data) > MAX_MESSAGE_BYTES:
        raise _local("too-large", f"message would be {len(data)} bytes; the limit is {MAX_MESSAGE_BYTES}")
    return data
