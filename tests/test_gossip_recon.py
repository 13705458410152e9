"""Gossip revision 2: range fingerprints, reconciliation's cost and convergence, hostile peers.

Most exchanges here run between ``loopback.MemoryView``s (dicts, no verification), which
makes 10^4 origins cheap; the ones that must hold for real memories run on SQLite stores
(loopback.Cluster) with signed records.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import msgpack
import nacl.signing
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neverest.clock import iso
from neverest.gossip import codec, peer_auth
from neverest.gossip.codec import Digest, Items, MessageType, ProtocolError, Recon, Split
from neverest.gossip.core import ExchangeResult, Initiator, Responder, Settings, drive
from neverest.gossip.loopback import Cluster, MemoryView
from neverest.gossip.ranges import EMPTY, ITEM_DOMAIN, RANGE_DOMAIN, RangeIndex, fingerprint_of, item_hash
from neverest.gossip.reconcile import MAX_ROUND_TRIPS, split_bits
from neverest.records import origin_of
from tests.test_gossip_core import KEYS, ORIGINS, give, held, history

NOW = datetime(2026, 4, 1, 12, tzinfo=UTC)
A_KEY, B_KEY = nacl.signing.SigningKey(b"\x31" * 32), nacl.signing.SigningKey(b"\x32" * 32)
A, B = origin_of(bytes(A_KEY.verify_key)), origin_of(bytes(B_KEY.verify_key))


def synthetic(origin: str, seq: int, tag: str = "") -> bytes:
    """A record as gossip reads it (origin, seq, signed time), about the size of a lesson."""
    return json.dumps({"origin": origin, "seq": seq, "at": iso(NOW), "text": f"{tag}{'x' * 300}"},
                      separators=(",", ":")).encode()


def shared(n: int, seed: int) -> tuple[MemoryView, MemoryView, list[str]]:
    """Two memories holding the same n origins (entries only: they are never sent)."""
    chance = random.Random(seed)
    a, b = MemoryView(), MemoryView()
    origins = [f"{chance.getrandbits(64):016x}" for _ in range(n)]
    for origin in origins:
        entry = (chance.randrange(1, 40), chance.randbytes(8))
        a.assume(origin, entry)
        b.assume(origin, entry)
    return a, b, origins


def exchange(a: MemoryView, b: MemoryView, *, seed: int = 1, initiator: Settings | None = None,
             responder: Settings | None = None, wire: list[bytes] | None = None) -> ExchangeResult:
    start = Initiator(a, A_KEY, B, now=NOW, rng=random.Random(seed), settings=initiator)
    answer = Responder(b, B_KEY, settings=responder)
    chance = random.Random(seed + 1)

    def post(request: bytes) -> bytes | None:
        reply = answer.respond(request, now=NOW, rng=chance).data
        if wire is not None:
            wire.extend([request] + ([reply] if reply is not None else []))
        return reply

    return drive(start, post)


def same(a: MemoryView, b: MemoryView) -> bool:
    return a.index().root == b.index().root and a.digest() == b.digest()


# -- ranges ----------------------------------------------------------------------------------

entries_st = st.dictionaries(st.integers(0, 2**64 - 1).map(lambda o: f"{o:016x}"),
                             st.tuples(st.integers(1, 2**63 - 1), st.binary(min_size=8, max_size=8)), max_size=60)


def _by_definition(entries: dict[str, tuple[int, bytes]], bits: int, prefix: int) -> bytes:
    inside = [(o, e) for o, e in entries.items() if bits == 0 or int(o, 16) >> (64 - bits) == prefix]
    if not inside:
        return EMPTY
    total = 0
    for origin, (seq, short) in inside:
        data = ITEM_DOMAIN + bytes.fromhex(origin) + seq.to_bytes(8, "big") + short
        total += int.from_bytes(hashlib.blake2b(data, digest_size=16).digest(), "big")
    total %= 2**128
    return hashlib.blake2b(RANGE_DOMAIN + total.to_bytes(16, "big") + len(inside).to_bytes(8, "big"),
                           digest_size=16).digest()


@settings(max_examples=60, deadline=None)
@given(entries=entries_st, probe=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=5),
       bits=st.integers(0, 64), b=st.integers(1, 6))
def test_a_range_fingerprint_is_its_definition(entries: dict[str, tuple[int, bytes]], probe: list[int], bits: int,
                                               b: int) -> None:
    index = RangeIndex.from_digest(entries)
    # Probe ranges that hold entries as well as arbitrary ones.
    for point in probe + [int(o, 16) for o in list(entries)[:3]]:
        prefix = point >> (64 - bits) if bits else 0
        assert index.fingerprint(bits, prefix) == _by_definition(entries, bits, prefix)
        inside = index.items(bits, prefix)
        assert [o for o, _ in inside] == sorted(o for o in entries if bits == 0 or int(o, 16) >> (64 - bits) == prefix)
        assert index.count(bits, prefix) == len(inside)
        if bits + b <= 64:
            children = index.children(bits, prefix, b)
            assert [fp for fp, _ in children] == [index.fingerprint(bits + b, (prefix << b) | i) for i in range(1 << b)]
            assert sum(c for _, c in children) == len(inside)


@settings(max_examples=40, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 40), st.none() | st.tuples(st.integers(1, 9), st.binary(min_size=8,
                                                                                                     max_size=8))),
                    max_size=80))
def test_an_index_updated_entry_by_entry_equals_one_built_at_once(
        ops: list[tuple[int, tuple[int, bytes] | None]]) -> None:
    index, final = RangeIndex(), dict[str, tuple[int, bytes]]()
    for key, entry in ops:
        origin = hashlib.sha256(bytes([key])).hexdigest()[:16]
        index.set(origin, entry)
        if entry is None:
            final.pop(origin, None)
        else:
            final[origin] = entry
    rebuilt = RangeIndex.from_digest(final)
    assert index.root == rebuilt.root and len(index) == len(final)
    for bits in (1, 6, 9, 12, 13, 20):
        assert index.children(bits, 0, 2) == rebuilt.children(bits, 0, 2)
    assert index.items(0, 0) == sorted(final.items())


def test_empty_ranges_have_the_zero_fingerprint_and_items_have_a_fixed_hash() -> None:
    assert RangeIndex().root == EMPTY == fingerprint_of(0, 0)
    # Pinned: a change of the item hash is a change of the wire format (tests/vectors has more).
    assert item_hash("0123456789abcdef", (1, bytes(8))) == int.from_bytes(hashlib.blake2b(
        ITEM_DOMAIN + bytes.fromhex("0123456789abcdef") + (1).to_bytes(8, "big") + bytes(8), digest_size=16).digest(),
        "big")


def test_splits_aim_at_children_below_the_items_threshold() -> None:
    assert [split_bits(c) for c in (49, 100, 1_000, 10**4, 10**6)] == [2, 3, 6, 5, 6]


# -- what an exchange costs ------------------------------------------------------------------


def _record_bytes(wire: list[bytes]) -> int:
    """Bytes of the records the messages carry (as the budget counts them)."""
    total = 0
    for data in wire:
        envelope = codec.decode(data)
        body = codec.decode_body(envelope.type, envelope.body)
        total += sum(len(r) + 3 for r in getattr(body, "records", None) or ())
    return total


@pytest.mark.parametrize(("n", "limit"), [(1_000, 2_300), (10_000, 2_000), (100_000, 2_900)])
@pytest.mark.parametrize("who", ["initiator", "responder", "new-origin"])
def test_one_difference_costs_little_and_few_round_trips(n: int, limit: int, who: str) -> None:
    a, b, origins = shared(n, seed=n)
    target = origins[7]
    if who == "new-origin":
        b.put(synthetic("00000000000000aa", 1))
    else:
        ahead = a if who == "initiator" else b
        seq = ahead.entry(target)
        assert seq is not None
        ahead.put(synthetic(target, seq[0] + 1))
    wire: list[bytes] = []
    result = exchange(a, b, wire=wire)
    assert result.error is None and not result.more, result.error
    assert result.round_trips <= 3
    assert result.records_sent + result.records_received == 1
    assert result.bytes_sent + result.bytes_received - _record_bytes(wire) <= limit
    assert same(a, b)
    again = exchange(a, b, seed=2)
    assert again.in_sync and again.round_trips == 1 and again.bytes_sent + again.bytes_received < 1_000


def test_the_baseline_still_sends_whole_digests() -> None:
    a, b, origins = shared(1_000, seed=3)
    entry = b.entry(origins[0])
    assert entry is not None
    b.put(synthetic(origins[0], entry[0] + 1))
    wire: list[bytes] = []
    result = exchange(a, b, initiator=Settings(reconcile=False), wire=wire)
    assert result.error is None and same(a, b)
    assert [codec.decode(m).type for m in wire] == [MessageType.SYNC, MessageType.DIGEST, MessageType.PUSH,
                                                     MessageType.DELTA]
    assert result.bytes_received > 1_000 * 17  # the responder's whole digest


def _random_pair(data: st.DataObject) -> tuple[MemoryView, MemoryView, dict[str, int]]:
    """Two memories with overlapping histories of a few origins, forks included; the union's heights."""
    a, b, _ = shared(data.draw(st.integers(0, 300)), seed=data.draw(st.integers(0, 10**6)))
    heights: dict[str, int] = {}
    for i in range(data.draw(st.integers(0, 25))):
        origin = hashlib.sha256(b"o%d" % i).hexdigest()[:16]
        ha, hb = data.draw(st.integers(0, 5)), data.draw(st.integers(0, 5))
        fork = data.draw(st.integers(0, 6))  # a fork at this seq, when both hold it
        for view, height, tag in ((a, ha, "a"), (b, hb, "b")):
            for seq in range(1, height + 1):
                view.put(synthetic(origin, seq, tag if seq == fork else ""))
        if max(ha, hb):
            heights[origin] = max(ha, hb)
    return a, b, heights


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_reconciliation_converges_to_the_union_without_gaps(data: st.DataObject) -> None:
    a, b, heights = _random_pair(data)
    tuning = Settings(range_items=data.draw(st.integers(1, 60)),
                      budget_bytes=data.draw(st.sampled_from([16_387, 40_000, 1024 * 1024])))
    for round_ in range(30):
        result = exchange(a, b, seed=round_, initiator=tuning, responder=tuning)
        assert result.error is None, result.error
        assert result.round_trips <= MAX_ROUND_TRIPS
        if result.in_sync:
            break
    else:
        raise AssertionError("did not converge")
    assert same(a, b)
    for origin, height in heights.items():
        for view in (a, b):
            entry = view.entry(origin)
            assert entry is not None and entry[0] == height
            assert all(view.known_at(origin, seq) for seq in range(1, height + 1))  # no hole


def test_cut_reconciliations_resume_and_say_so() -> None:
    a, b, _ = shared(2_000, seed=4)
    for i in range(100):
        b.put(synthetic(f"{i:02x}" + "0" * 14, 1))
        a.put(synthetic(f"{i:02x}" + "1" * 14, 1))
    small = Settings(budget_bytes=16_387)
    results = []
    for seed in range(10):
        results.append(exchange(a, b, seed=seed, initiator=small, responder=small))
        assert results[-1].error is None
        if results[-1].in_sync:
            break
    assert results[-1].in_sync and len(results) > 2 and results[0].more
    assert sum(r.records_received for r in results) == 100 and sum(r.records_sent for r in results) == 100
    assert same(a, b)


# -- real memories ---------------------------------------------------------------------------


def test_real_memories_reconcile_with_forks_and_stay_gap_free(tmp_path: Path) -> None:
    c = Cluster(tmp_path, 2, settings=Settings(inline_digest_origins=0, range_items=1))
    give(c[0].store, history(KEYS[0], 4) + history(KEYS[1], 2) + history(KEYS[3], 1))
    give(c[1].store, history(KEYS[1], 3) + history(KEYS[2], 2) + history(KEYS[3], 1))
    from tests.test_gossip_core import lesson
    give(c[0].store, [lesson(KEYS[4], 1, tag="a")])
    give(c[1].store, [lesson(KEYS[4], 1, tag="b")])
    result = c.exchange(0, 1, now=NOW, rng=random.Random(3))
    assert result.error is None, result.error
    assert any(codec.decode(m).type is MessageType.RECON for _, _, m in c.wire)
    assert result.applied.forks == 1 and c.replies[-1].result.applied.forks + result.applied.forks >= 1
    union = {ORIGINS[0]: [1, 2, 3, 4], ORIGINS[1]: [1, 2, 3], ORIGINS[2]: [1, 2], ORIGINS[3]: [1], ORIGINS[4]: [1]}
    assert held(c[0].store) == held(c[1].store) == union
    again = c.exchange(1, 0, now=NOW, rng=random.Random(4))
    assert again.in_sync and again.round_trips == 1
    c.close()


def test_the_view_keeps_its_index_current_after_its_own_apply_and_others_writes(tmp_path: Path) -> None:
    c = Cluster(tmp_path, 2)
    give(c[1].store, history(KEYS[0], 3) + history(KEYS[1], 2))
    view = c[0].view
    assert len(view.index()) == 0
    assert c.exchange(0, 1, now=NOW, rng=random.Random(1)).applied.accepted == 5
    kept = view.index().root
    view.invalidate()
    assert view.index().root == kept == c[1].view.index().root
    give(c[0].store, history(KEYS[2], 1))  # another writer (the test's own receive call)
    assert view.entry(ORIGINS[2]) is not None and view.index().root != kept
    c.close()


def test_a_revision_1_responder_still_serves_a_revision_3_initiator(tmp_path: Path) -> None:
    c = Cluster(tmp_path, 2, settings=Settings(inline_digest_origins=0))
    give(c[0].store, history(KEYS[0], 2))
    give(c[1].store, history(KEYS[1], 2))

    def without_revision(sender: str, receiver: str, data: bytes) -> bytes:
        envelope = codec.decode(data)
        if envelope.type is not MessageType.SYNC:
            return data
        body = codec.decode_body(envelope.type, envelope.body)
        assert isinstance(body, codec.Sync) and body.revision == codec.COMPACT  # revision 3 since issue 26
        # What a revision-1 responder reads: the same SYNC without "w" (re-signed by its sender).
        old = codec.encode_body(codec.Sync(body.fingerprint, body.digest, body.addresses, body.listen_port))
        return _sign(c[0].identity.signing_key, MessageType.SYNC, old, to=envelope.auth.to, nonce=envelope.auth.nonce)

    c.tamper = without_revision
    result = c.exchange(0, 1, now=NOW, rng=random.Random(1))
    assert result.error is None
    assert [codec.decode(m).type for _, _, m in c.wire] == [MessageType.SYNC, MessageType.DIGEST, MessageType.PUSH,
                                                             MessageType.DELTA]
    assert held(c[0].store) == held(c[1].store)
    c.close()


# -- hostile peers ---------------------------------------------------------------------------


def _sign(key: nacl.signing.SigningKey, mtype: MessageType, body: bytes, *, to: str, nonce: bytes,
          re: bytes = peer_auth.NO_NONCE) -> bytes:
    auth = peer_auth.sign(key, mtype, body, to=to, ts=int(NOW.timestamp()), nonce=nonce, re=re)
    # Packed here rather than by codec.encode, which would not build a message over the bound.
    return bytes(msgpack.packb({"v": 1, "t": int(mtype), "a": {"o": bytes.fromhex(auth.origin), "k": auth.key,
                                                             "to": bytes.fromhex(auth.to), "ts": auth.ts,
                                                             "n": auth.nonce, "s": auth.sig}, "b": body},
                               use_bin_type=True))


Liar = Callable[[codec.Body], bytes]  # the body bytes to answer a request with


def _exchange_with(a: MemoryView, liar: Liar, *, seed: int = 1) -> ExchangeResult:
    """An honest initiator against a responder that answers with whatever ``liar`` makes."""
    start = Initiator(a, A_KEY, B, now=NOW, rng=random.Random(seed))

    def post(request: bytes) -> bytes:
        envelope = codec.decode(request)
        answer = liar(codec.decode_body(envelope.type, envelope.body))
        return _sign(B_KEY, MessageType.RECON, answer, to=A, nonce=bytes(16), re=envelope.auth.nonce)

    return drive(start, post)


def _recon_bytes(nodes: list[list[object]], **extra: object) -> bytes:
    return bytes(msgpack.packb({"n": nodes, **extra}, use_bin_type=True))


def _honest_afterwards(a: MemoryView) -> None:
    b = MemoryView()
    for origin, entry in a.index().items(0, 0):
        b.assume(origin, entry)
    b.put(synthetic("ff000000000000bb", 1))
    result = exchange(a, b, seed=99)
    assert result.error is None and result.records_received == 1 and same(a, b)


def test_a_peer_whose_fingerprints_never_match_is_given_up_on() -> None:
    # Origins ground to share 48 bits keep this memory's ranges full down to 48 bits, so
    # every split it is sent leads it to split again: only MAX_ROUND_TRIPS ends it.
    a = MemoryView()
    for i in range(100):
        a.assume(f"{'0' * 12}{i:04x}", (1, bytes(8)))
    chance = random.Random(7)

    def liar(body: codec.Body) -> bytes:
        # Split the first range asked about in two, with fingerprints nobody holds.
        if isinstance(body, codec.Sync):
            bits, prefix = 0, 0
        else:
            assert isinstance(body, Recon)
            first = next(n for n in body.nodes if isinstance(n, Split))
            bits, prefix = first.child(0)
        return _recon_bytes([[bits, prefix, 1, chance.randbytes(16)]])

    result = _exchange_with(a, liar)
    assert result.error is not None and (result.error.who, result.error.code) == ("remote", "no-convergence")
    assert result.round_trips == MAX_ROUND_TRIPS
    _honest_afterwards(a)


@pytest.mark.parametrize(("nodes", "code"), [
    ([[1, 1, 1, bytes(16)], [1, 0, 1, bytes(16)]], "bad-range"),  # backwards
    ([[1, 0, 1, bytes(16)], [2, 1, 1, bytes(16)]], "bad-range"),  # overlapping
    ([[1, 0, 1, bytes(16)], [1, 0, 1, bytes(16)]], "bad-range"),  # twice
    ([[3, 8, 1, bytes(16)]], "bad-range"),  # prefix over 2^bits
    ([[65, 0, 1, bytes(16)]], "bad-range"),  # deeper than an origin
    ([[0, 0, 7, bytes(8 << 7)]], "bad-range"),  # b over 6
    ([[63, 0, 2, bytes(32)]], "bad-range"),  # children deeper than an origin
    ([[0, 0, 2, bytes(31)]], "bad-field"),  # fingerprints of the wrong size
    ([[1, 1, {"o": bytes(8), "s": [1], "h": bytes(8)}]], "bad-range"),  # entries outside the range
    ([[7, i, 6, bytes(512)] for i in range(65)], "too-many-ranges"),  # 4 160 child fingerprints
    ([[64, i, []] for i in range(513)], "bad-field"),  # 513 nodes is checked before their shape
])
def test_malformed_ranges_are_refused_with_a_reason(nodes: list[list[object]], code: str) -> None:
    if len(nodes) == 513:
        nodes = [[64, i, {"o": b"", "s": [], "h": b""}] for i in range(513)]
        code = "too-many-ranges"
    with pytest.raises(ProtocolError) as caught:
        codec.decode_body(MessageType.RECON, _recon_bytes(nodes))
    assert (caught.value.who, caught.value.code) == ("remote", code), caught.value.message


def test_a_responder_refuses_bad_ranges_counts_them_and_then_serves_honestly() -> None:
    b = MemoryView()
    b.put(synthetic("00000000000000cc", 1))
    answer = Responder(b, B_KEY)
    body = _recon_bytes([[1, 1, 1, bytes(16)], [1, 0, 1, bytes(16)]])
    reply = answer.respond(_sign(A_KEY, MessageType.RECON, body, to=B, nonce=b"\x01" * 16), now=NOW,
                           rng=random.Random(1))
    assert reply.result.error is not None and reply.result.error.code == "bad-range"
    assert reply.result.peer == A  # signed: counted against this peer
    assert reply.data is not None
    envelope = codec.decode(reply.data)
    refusal = codec.decode_body(envelope.type, envelope.body)
    assert isinstance(refusal, codec.Refused) and refusal.code == "bad-range"
    a = MemoryView()
    result = exchange(a, b, seed=5)
    assert result.error is None and same(a, b)


def test_a_million_tiny_ranges_are_refused_before_they_are_read() -> None:
    # An array header claiming a million nodes, with nothing behind it.
    body = b"\x81\xa1n\xdd" + (1_000_000).to_bytes(4, "big")
    with pytest.raises(ProtocolError) as caught:
        codec.decode_body(MessageType.RECON, body)
    assert caught.value.code == "bad-msgpack"
    # A real one, under the array bound but over the node bound.
    nodes = [[64, i, {"o": b"", "s": [], "h": b""}] for i in range(50_000)]
    with pytest.raises(ProtocolError) as caught:
        codec.decode_body(MessageType.RECON, _recon_bytes(nodes))
    assert caught.value.code == "too-many-ranges"


def test_a_frame_over_the_limit_is_refused_and_the_exchange_after_completes() -> None:
    a, _, _ = shared(100, seed=6)

    def liar(body: codec.Body) -> bytes:
        return _recon_bytes([], r=[b"x" * 16_000] * 300)  # about 4.8 MB

    result = _exchange_with(a, liar)
    assert result.error is not None and result.error.code == "too-large"
    _honest_afterwards(a)


@pytest.mark.parametrize("answer", ["unasked-range", "unlisted-origin"])
def test_a_reply_about_what_was_not_asked_is_refused(answer: str) -> None:
    a, _, _ = shared(1_000, seed=8)

    def liar(body: codec.Body) -> bytes:
        if answer == "unasked-range":
            return _recon_bytes([[1, 0, 1, bytes(16)]])  # the first reply must be about the whole range
        return _recon_bytes([], x=bytes.fromhex("00000000000000dd"))

    result = _exchange_with(a, liar)
    assert result.error is not None and result.error.code == "bad-range"
    _honest_afterwards(a)


def test_items_of_a_node_must_be_sorted() -> None:
    entries = {"o": bytes.fromhex("00000000000000020000000000000001"), "s": [1, 1], "h": bytes(16)}
    with pytest.raises(ProtocolError) as caught:
        codec.decode_body(MessageType.RECON, _recon_bytes([[0, 0, entries]]))
    assert caught.value.code == "bad-field"


def test_recon_and_sync_revision_round_trip() -> None:
    body = Recon((Split(1, 0, 1, bytes(16)), Items(1, 1, Digest({"8" + "0" * 15: (3, bytes(8))}))),
                 Digest({"0" * 16: (1, b"\x01" * 8)}), ("1" * 16,), (b"{}",), True, ("http://192.0.2.1:7428",))
    assert codec.decode_body(MessageType.RECON, codec.encode_body(body)) == body
    sync = codec.Sync(bytes(16), revision=2)
    assert codec.decode_body(MessageType.SYNC, codec.encode_body(sync)) == sync
    # Without a revision, SYNC is byte for byte what revision 1 sends.
    assert codec.encode_body(codec.Sync(bytes(16))) == msgpack.packb({"f": bytes(16)}, use_bin_type=True)


_any_value = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.binary(max_size=40),
                          lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.sampled_from("nexrmo"), inner,
                                                                                       max_size=4), max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(body=st.dictionaries(st.sampled_from(["n", "e", "x", "r", "m", "p"]), _any_value, max_size=6))
def test_any_recon_body_is_read_or_refused_as_the_peers_fault(body: dict[str, object]) -> None:
    data = bytes(msgpack.packb(body, use_bin_type=True))
    try:
        codec.decode_body(MessageType.RECON, data)
    except ProtocolError as exc:
        assert exc.who == "remote"


_node_st = st.tuples(st.integers(0, 64), st.integers(0, 2**64 - 1), st.integers(1, 6), st.booleans())


@settings(max_examples=100, deadline=None)
@given(raw=st.lists(_node_st, max_size=12), seed=st.integers(0, 1000))
def test_a_responder_answers_any_well_formed_ranges(raw: list[tuple[int, int, int, bool]], seed: int) -> None:
    b, _, _ = shared(300, seed=seed)
    nodes: list[codec.Node] = []
    end = 0
    for bits, point, width, split in sorted(raw, key=lambda n: n[1]):
        prefix = point >> (64 - bits) if bits else 0
        if prefix << (64 - bits) < end:
            continue
        end = (prefix + 1) << (64 - bits)
        if split and bits + width <= 64:
            nodes.append(Split(bits, prefix, width, random.Random(seed).randbytes(8 << width)))
        else:
            inside = {o: e for o, e in b.index().items(bits, prefix)[:3]}
            nodes.append(Items(bits, prefix, Digest({o: (s + 1, h) for o, (s, h) in inside.items()})))
    request = _sign(A_KEY, MessageType.RECON, codec.encode_body(Recon(tuple(nodes))), to=B, nonce=b"\x02" * 16)
    reply = Responder(b, B_KEY).respond(request, now=NOW, rng=random.Random(seed))
    assert reply.data is not None and reply.result.error is None, reply.result.error
    envelope = codec.decode(reply.data)
    assert envelope.type is MessageType.RECON
    codec.decode_body(envelope.type, envelope.body)  # what it sends, it could read


class _NoDigest(MemoryView):
    def digest(self) -> Digest:
        raise AssertionError("revision 2 must not read a whole digest")


@pytest.mark.parametrize("inline", [True, False])
def test_reconciliation_never_reads_a_whole_digest(inline: bool) -> None:
    a, b = _NoDigest(), _NoDigest()
    for view, origins in ((a, range(0, 30)), (b, range(10, 40))):
        for i in origins:
            view.put(synthetic(f"{i * 0x0500000000000000 + i:016x}", 1))
    tuning = Settings(inline_digest_origins=100 if inline else 0)
    for seed in range(3):
        result = exchange(a, b, seed=seed, initiator=tuning, responder=tuning)
        assert result.error is None, result.error
    assert result.in_sync and a.index().root == b.index().root


def test_a_newcomer_gets_records_not_a_whole_digest() -> None:
    _, b, _ = shared(10_000, seed=9)
    for i in range(30):
        b.put(synthetic(f"{i:02x}{'0' * 14}", 1))
    a = MemoryView()
    wire: list[bytes] = []
    result = exchange(a, b, wire=wire)
    assert result.error is None and result.round_trips == 1 and result.records_received == 30
    assert [codec.decode(m).type for m in wire] == [MessageType.SYNC, MessageType.RECON]
    assert result.bytes_received - _record_bytes(wire) < 300  # no digest of 10 000 origins


def test_origins_ground_to_share_a_prefix_cost_round_trips_but_converge() -> None:
    # 60 origins sharing 44 bits (keys ground for it) among 2 000 others; one record differs
    # inside.  Ranges there are split by 2^6 on both sides: about 12 bits a round trip.
    ground = [f"{'7' * 11}{(i * 0x4C1D5) & 0xFFFFF:05x}" for i in range(60)]
    a, b, _ = shared(2_000, seed=10)
    for view in (a, b):
        for origin in ground:
            view.put(synthetic(origin, 1))
    b.put(synthetic(ground[7], 2))
    result = exchange(a, b)
    assert result.error is None and result.round_trips <= 6, result
    assert same(a, b)
