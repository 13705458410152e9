"""The gossip wire format: round trips, and hostile bytes refused as remote errors without large allocations."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import msgpack
import nacl.signing
import pytest

from neverest.gossip import codec, peer_auth
from neverest.gossip.codec import (
    MAX_MESSAGE_BYTES,
    MAX_ORIGINS,
    MAX_RECORDS,
    Delta,
    Digest,
    DigestReply,
    InSync,
    MessageType,
    ProtocolError,
    Push,
    Refused,
    Sync,
)
from neverest.records import MAX_RECORD_BYTES, origin_of

KEY = nacl.signing.SigningKey(bytes([1]) * 32)
PEER = origin_of(bytes(nacl.signing.SigningKey(bytes([2]) * 32).verify_key))
DIGEST = Digest({"00000000000000aa": (3, b"h" * 8), "00000000000000ff": (1, b"i" * 8),
                 "0000000000000011": (2**63 - 1, b"j" * 8)})
RECORDS = (b'{"a":1}', b"x" * MAX_RECORD_BYTES)


def message(body: codec.Body) -> bytes:
    payload = codec.encode_body(body)
    mtype = codec.type_of(body)
    auth = peer_auth.sign(KEY, mtype, payload, to=PEER, ts=1_700_000_000, nonce=b"n" * 16)
    return codec.encode(mtype, auth, payload)


def raw_message(body: bytes, *, t: Any = 1, **changes: Any) -> bytes:
    """A message whose body bytes and envelope fields are given as they are."""
    auth = peer_auth.sign(KEY, MessageType.SYNC, body, to=PEER, ts=1_700_000_000, nonce=b"n" * 16)
    obj: dict[str, Any] = {"v": 1, "t": t, "a": {"o": bytes.fromhex(auth.origin), "k": auth.key,
                                                 "to": bytes.fromhex(auth.to), "ts": auth.ts, "n": auth.nonce,
                                                 "s": auth.sig}, "b": body}
    obj.update(changes)
    return bytes(msgpack.packb({k: v for k, v in obj.items() if v is not None}, use_bin_type=True))


def refused(data: bytes) -> ProtocolError:
    """Decode envelope and body; the error they raise, which must be the remote's fault."""
    with pytest.raises(ProtocolError) as caught:
        envelope = codec.decode(data)
        codec.decode_body(envelope.type, envelope.body)
    assert caught.value.who == "remote"
    return caught.value


@pytest.mark.parametrize("body", [
    Sync(b"f" * 16), Sync(b"f" * 16, DIGEST), InSync(), DigestReply(DIGEST), DigestReply(DIGEST, RECORDS, True),
    Sync(b"f" * 16, None, ("http://192.0.2.7:7428",) * 16, 7428), InSync(("http://[::1]:7428",)),
    DigestReply(DIGEST, RECORDS, False, ("http://192.0.2.8:7428", "anything a peer says")),
    DigestReply(Digest(), ()), Push(RECORDS), Push((), DIGEST), Delta(RECORDS, True), Delta(()),
    Refused("stale", "clock off by 400 s"),
])
def test_every_message_type_round_trips(body: codec.Body) -> None:
    envelope = codec.decode(message(body))
    assert envelope.type is codec.type_of(body)
    assert envelope.auth.origin == origin_of(bytes(KEY.verify_key)) and envelope.auth.to == PEER
    decoded = codec.decode_body(envelope.type, envelope.body)
    assert decoded == body
    peer_auth.verify(envelope.auth, envelope.type, envelope.body, me=PEER, now_s=1_700_000_000, skew_s=300)


def test_a_digest_is_canonical_and_its_fingerprint_independent_of_order() -> None:
    reordered = Digest(dict(reversed(list(DIGEST.items()))))
    assert reordered.fingerprint == DIGEST.fingerprint
    assert codec.encode_body(Sync(b"f" * 16, reordered)) == codec.encode_body(Sync(b"f" * 16, DIGEST))
    assert Digest({**DIGEST, "00000000000000aa": (4, b"h" * 8)}).fingerprint != DIGEST.fingerprint
    assert Digest({**DIGEST, "00000000000000aa": (3, b"H" * 8)}).fingerprint != DIGEST.fingerprint


def test_unknown_keys_are_ignored() -> None:
    body = msgpack.packb({"f": b"f" * 16, "future": [1, 2, 3]}, use_bin_type=True)
    envelope = codec.decode(raw_message(body, later={"x": 1}))
    assert codec.decode_body(envelope.type, envelope.body) == Sync(b"f" * 16)


def test_addresses_and_port_are_optional_and_leave_old_messages_byte_for_byte() -> None:
    # What a v1 writer that predates them sends decodes with none; and without them, what
    # this writer sends is what that writer sent (so its readers see no difference).
    assert codec.encode_body(Sync(b"f" * 16, DIGEST, (), None)) == msgpack.packb(
        {"f": b"f" * 16, "d": codec._encode_digest(DIGEST)}, use_bin_type=True)
    assert codec.encode_body(InSync(())) == msgpack.packb({})
    assert codec.decode_body(MessageType.DIGEST, codec.encode_body(DigestReply(DIGEST))).addresses == ()


def test_this_memory_cannot_share_more_than_the_bound() -> None:
    with pytest.raises(ProtocolError) as caught:
        codec.encode_body(InSync(("http://h:1",) * (codec.MAX_ADDRESSES + 1)))
    assert (caught.value.who, caught.value.code) == ("local", "bad-field")


def _digest_body(origins: bytes, seqs: list[Any], hashes: bytes) -> bytes:
    return bytes(msgpack.packb({"f": b"f" * 16, "d": {"o": origins, "s": seqs, "h": hashes}}, use_bin_type=True))


@pytest.mark.parametrize(("data", "code"), [
    (b"\xc1garbage", "bad-msgpack"),
    (b"", "bad-msgpack"),
    (message(Delta(RECORDS))[:-10], "bad-msgpack"),  # truncated
    (message(InSync()) + b"\x00", "bad-msgpack"),  # trailing bytes
    (b"\x91" * 5000, "bad-msgpack"),  # nested deeper than msgpack's stack
    (msgpack.packb([1, 2, 3]), "bad-field"),
    (msgpack.packb({1: 2}), "bad-msgpack"),  # keys are strings
    (msgpack.packb({"x": msgpack.ExtType(1, b"ab")}), "bad-msgpack"),
    (raw_message(b"\x80", v=2), "bad-version"),
    (raw_message(b"\x80", v=True), "bad-version"),
    (raw_message(b"\x80", t=99), "unknown-type"),
    (raw_message(b"\x80", t="1"), "bad-field"),
    (raw_message(b"\x80", a=None), "bad-field"),
    (raw_message(b"\x80", b=None), "bad-field"),
    (raw_message(b"\x80", a={"o": b"o" * 8}), "bad-field"),
    (raw_message(b"\x80"), "bad-field"),  # a SYNC without its fingerprint
    (raw_message(msgpack.packb({"f": b"f" * 15})), "bad-field"),
    (raw_message(msgpack.packb({"f": b"f" * 16, "d": []})), "bad-field"),
    (raw_message(_digest_body(b"a" * 8 + b"b" * 8, [1], b"h" * 16)), "bad-field"),  # one seq for two origins
    (raw_message(_digest_body(b"b" * 8 + b"a" * 8, [1, 1], b"h" * 16)), "bad-field"),  # not sorted
    (raw_message(_digest_body(b"a" * 16, [1, 1], b"h" * 16)), "bad-field"),  # an origin twice
    (raw_message(_digest_body(b"a" * 8, [0], b"h" * 8)), "bad-field"),
    (raw_message(_digest_body(b"a" * 8, [True], b"h" * 8)), "bad-field"),
    (raw_message(_digest_body(b"a" * 8, [2**63], b"h" * 8)), "bad-field"),
    (raw_message(_digest_body(b"a" * 7, [], b"")), "bad-field"),
    (raw_message(msgpack.packb({"r": [b"x" * (MAX_RECORD_BYTES + 1)]}, use_bin_type=True), t=5), "bad-field"),
    (raw_message(msgpack.packb({"r": [b""]}, use_bin_type=True), t=5), "bad-field"),
    (raw_message(msgpack.packb({"r": ["a string"]}, use_bin_type=True), t=5), "bad-field"),
    (raw_message(msgpack.packb({"r": [], "m": 1}, use_bin_type=True), t=5), "bad-field"),
    (raw_message(msgpack.packb({"r": [b"{}"] * (MAX_RECORDS + 1)}, use_bin_type=True), t=5), "too-many-records"),
    (raw_message(msgpack.packb({"c": "x"}), t=6), "bad-field"),
    (raw_message(msgpack.packb({"f": b"f" * 16, "x": "y" * 2000}, use_bin_type=True)), "bad-msgpack"),
    (raw_message(msgpack.packb({"f": b"f" * 16, "p": ["http://h:1"] * 17}, use_bin_type=True)), "bad-field"),
    (raw_message(msgpack.packb({"f": b"f" * 16, "p": ["http://h:1"] * 10_000}, use_bin_type=True)), "bad-field"),
    (raw_message(msgpack.packb({"f": b"f" * 16, "p": [b"http://h:1"]}, use_bin_type=True)), "bad-field"),
    (raw_message(msgpack.packb({"f": b"f" * 16, "p": "http://h:1"}, use_bin_type=True)), "bad-field"),
    (raw_message(msgpack.packb({"f": b"f" * 16, "p": ["h" * 2000]}, use_bin_type=True)), "bad-msgpack"),
    (raw_message(msgpack.packb({"f": b"f" * 16, "l": 0}, use_bin_type=True)), "bad-field"),
    (raw_message(msgpack.packb({"f": b"f" * 16, "l": 65536}, use_bin_type=True)), "bad-field"),
    (raw_message(msgpack.packb({"f": b"f" * 16, "l": True}, use_bin_type=True)), "bad-field"),
    (raw_message(msgpack.packb({"p": [1]}, use_bin_type=True), t=2), "bad-field"),
])
def test_hostile_bytes_are_refused_as_remote_errors(data: bytes, code: str) -> None:
    assert refused(data).code == code


def _peak(action: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        action()
    except ProtocolError:
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def test_a_digest_naming_a_million_origins_is_refused_without_allocating_it() -> None:
    n = 1_000_001
    # As bins, it is larger than any message: refused on its length alone.
    whole = raw_message(_digest_body(bytes(8 * n), [1] * n, bytes(8 * n)))
    assert refused(whole).code == "too-large"
    assert _peak(lambda: codec.decode(whole)) < 64 * 1024
    # A header claiming that many seqs, with nothing behind it: refused before a list is made.
    header = (b"\x82\xa1f\xc4\x10" + b"f" * 16 + b"\xa1d\x83\xa1o\xc4\x08" + b"a" * 8
              + b"\xa1s\xdd" + n.to_bytes(4, "big"))
    assert refused(raw_message(header)).code == "bad-msgpack"
    assert _peak(lambda: codec.decode_body(MessageType.SYNC, header)) < 64 * 1024
    # Under the message bound, but over MAX_ORIGINS: refused before the seqs are read.
    over = MAX_ORIGINS + 1
    body = _digest_body(b"".join(i.to_bytes(8, "big") for i in range(over)), [], b"")
    assert refused(raw_message(body)).code == "too-many-origins"


def test_a_header_claiming_a_huge_bin_is_refused_without_allocating_it() -> None:
    # bin 32 claiming 3 GiB, then a few bytes.
    data = b"\x84\xa1v\x01\xa1t\x01\xa1b\xc6\xc0\x00\x00\x00abc"
    assert refused(data).code == "bad-msgpack"
    assert _peak(lambda: codec.decode(data)) < 64 * 1024


def test_a_message_over_the_bound_is_refused_on_its_length() -> None:
    data = b"\x00" * (MAX_MESSAGE_BYTES + 1)
    assert refused(data).code == "too-large"


def test_what_this_memory_cannot_send_is_a_local_error() -> None:
    huge = Digest({f"{i:016x}": (1, bytes(8)) for i in range(MAX_ORIGINS + 1)})
    with pytest.raises(ProtocolError) as caught:
        codec.encode_body(Sync(b"f" * 16, huge))
    assert (caught.value.who, caught.value.code) == ("local", "too-many-origins")
    with pytest.raises(ProtocolError) as caught:
        codec.encode_body(Delta((b"x" * (MAX_RECORD_BYTES + 1),)))
    assert (caught.value.who, caught.value.code) == ("local", "bad-record")
    with pytest.raises(ProtocolError) as caught:
        codec.encode_body(Delta((b"x",) * (MAX_RECORDS + 1)))
    assert (caught.value.who, caught.value.code) == ("local", "too-many-records")


def test_the_largest_digest_and_budget_fit_in_one_message() -> None:
    from neverest.gossip.core import MAX_BUDGET_BYTES, record_cost

    digest = Digest({f"{i:016x}": (2**63 - 1, bytes(8)) for i in range(MAX_ORIGINS)})
    record = b"x" * 1000
    records = (record,) * (MAX_BUDGET_BYTES // record_cost(record))
    data = message(DigestReply(digest, records, True))
    assert len(data) <= MAX_MESSAGE_BYTES
    envelope = codec.decode(data)
    decoded = codec.decode_body(envelope.type, envelope.body)
    assert isinstance(decoded, DigestReply) and len(decoded.digest) == MAX_ORIGINS


def test_a_refusal_is_cut_to_the_bounds() -> None:
    envelope = codec.decode(message(Refused("c" * 100, "é" * 2000)))
    body = codec.decode_body(envelope.type, envelope.body)
    assert isinstance(body, Refused) and len(body.code) == 64 and len(body.message.encode()) <= codec.MAX_TEXT
