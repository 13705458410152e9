"""Gossip core alone: in-sync round trips, push-pull, cuts and resumption, forks, peer identity.

Real stores in tmp folders exchange messages by direct calls (gossip/loopback.py); records
are signed with deterministic keys and enter every store through the receive function.
"""

from __future__ import annotations

import dataclasses
import json
import random
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nacl.signing
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neverest.clock import iso
from neverest.config import Config
from neverest.gossip import codec, peer_auth
from neverest.gossip.codec import Digest, MessageType, ProtocolError
from neverest.gossip.core import (
    MAX_BUDGET_BYTES,
    MIN_BUDGET_BYTES,
    ExchangeResult,
    Initiator,
    Settings,
    delta,
    drive,
    record_cost,
    record_digest,
    seq_hash,
    take,
)
from neverest.gossip.loopback import Cluster
from neverest.gossip.view import SqliteView
from neverest.memory import holdings
from neverest.memory.receive import receive
from neverest.memory.store import Store, open_store
from neverest.records import origin_of, parse, sign_confirm, sign_lesson

NOW = datetime(2026, 4, 1, 12, tzinfo=UTC)
CONFIG = Config()
KEYS = [nacl.signing.SigningKey(bytes([i]) * 32) for i in range(1, 9)]
ORIGINS = [origin_of(bytes(k.verify_key)) for k in KEYS]


def lesson(key: nacl.signing.SigningKey, seq: int, *, tag: str = "", seen: int = 1, at: datetime = NOW) -> bytes:
    text = f"pytest hangs when cache {tag}{seq} of {key.verify_key.encode()[0]} is cold"
    return sign_lesson(key, kind="error", text=text, seen=seen, strength=1.0, updated=iso(at), seq=seq).raw


def history(key: nacl.signing.SigningKey, n: int) -> list[bytes]:
    return [lesson(key, seq) for seq in range(1, n + 1)]


def give(store: Store, raws: list[bytes], *, now: datetime = NOW) -> None:
    result = receive(store, raws, source="test", own_origin="f" * 16, config=CONFIG, now=now)
    assert not result.refused, result.refused


def held(store: Store) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for origin, seq in store.db.execute("SELECT origin, seq FROM records WHERE seq IS NOT NULL ORDER BY origin, seq"):
        out.setdefault(origin, []).append(seq)
    return out


def assert_consistent(store: Store) -> None:
    """Every origin's history is 1..n without a hole, and every record held verifies."""
    for origin, seqs in held(store).items():
        assert seqs == list(range(1, len(seqs) + 1)), (origin, seqs)
    for (raw,) in store.db.execute("SELECT raw FROM records"):
        parse(bytes(raw))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, 3)
    yield c
    c.close()


def rng() -> random.Random:
    return random.Random(5)


# -- in sync ---------------------------------------------------------------------------------


def _fill_real(store: Store, n: int) -> None:
    keys = [nacl.signing.SigningKey(i.to_bytes(4, "big") * 8) for i in range(1, n + 1)]
    give(store, [lesson(k, 1) for k in keys])


def _fill_rows(store: Store, n: int) -> None:
    # What an in-sync exchange sends depends only on the fingerprint of the digest, so for
    # 10 000 origins the rows are written directly: verifying 10 000 signed records per
    # store would take seconds and test the receive function, not gossip.
    with store.write() as db:
        db.executemany(
            "INSERT INTO records (origin, seq, type, target, raw, source, received, at, digest) "
            "VALUES (?, 3, 'lesson', ?, ?, 'test', ?, ?, ?)",
            [(f"{i:016x}", f"{i:032x}", b"x%d" % i, iso(NOW), iso(NOW), holdings.digest_of(b"x%d" % i))
             for i in range(n)])


@pytest.mark.parametrize(("origins", "fill"), [(1_000, _fill_real), (10_000, _fill_rows)])
def test_peers_in_sync_finish_in_one_round_trip_under_1_kb(cluster: Cluster, origins: int,
                                                           fill: Callable[[Store, int], None]) -> None:
    fill(cluster[0].store, origins)
    fill(cluster[1].store, origins)
    assert len(cluster[0].view.digest()) == origins
    result = cluster.exchange(0, 1, now=NOW, rng=rng())
    assert result.error is None and result.in_sync
    assert result.round_trips == 1
    assert result.bytes_sent + result.bytes_received <= 1_000
    assert sum(len(data) for _, _, data in cluster.wire) == result.bytes_sent + result.bytes_received


def test_an_in_sync_exchange_with_an_inline_digest_stays_under_1_kb(cluster: Cluster) -> None:
    for node in cluster.nodes[:2]:
        give(node.store, [lesson(k, 1) for k in KEYS] + [lesson(k, 2) for k in KEYS])
    result = cluster.exchange(0, 1, now=NOW, rng=rng())
    assert result.in_sync and result.round_trips == 1
    assert result.bytes_sent + result.bytes_received <= 1_000


# -- push-pull -------------------------------------------------------------------------------


@pytest.mark.parametrize("inline", [True, False])
def test_after_one_exchange_both_hold_the_union(tmp_path: Path, inline: bool) -> None:
    tuning = Settings() if inline else Settings(inline_digest_origins=0)
    c = Cluster(tmp_path, 2, settings=tuning)
    give(c[0].store, history(KEYS[0], 4) + history(KEYS[1], 2))
    give(c[1].store, history(KEYS[1], 3) + history(KEYS[2], 2))
    result = c.exchange(0, 1, now=NOW, rng=rng())
    assert result.error is None and not result.in_sync and not result.more
    assert result.round_trips == 2
    assert result.records_sent == 4 and result.records_received == 3
    assert result.applied.accepted == 3
    union = {ORIGINS[0]: [1, 2, 3, 4], ORIGINS[1]: [1, 2, 3], ORIGINS[2]: [1, 2]}
    assert held(c[0].store) == held(c[1].store) == union
    assert c[0].view.digest() == c[1].view.digest()
    again = c.exchange(1, 0, now=NOW, rng=rng())
    assert again.in_sync and again.round_trips == 1
    c.close()


def test_a_small_network_pulls_in_one_round_trip(cluster: Cluster) -> None:
    give(cluster[0].store, history(KEYS[0], 2))
    give(cluster[1].store, history(KEYS[0], 5) + history(KEYS[1], 1))
    result = cluster.exchange(0, 1, now=NOW, rng=rng())
    assert result.round_trips == 1 and result.records_received == 4 and result.records_sent == 0
    assert held(cluster[0].store) == held(cluster[1].store)


# -- cuts and resumption ---------------------------------------------------------------------


def _sender_records() -> list[bytes]:
    # Three origins; the first re-signs a lesson (seen 1, then 2: seq 2 supersedes seq 1) and
    # confirms another origin's lesson, so superseded records and confirmations are in the runs.
    text = "pytest hangs when the shared cache is cold"
    first = [sign_lesson(KEYS[0], kind="error", text=text, seen=seen, strength=1.0, updated=iso(NOW), seq=seen).raw
             for seen in (1, 2)]
    first += [lesson(KEYS[0], 3), sign_confirm(KEYS[0], parse(lesson(KEYS[1], 1)).target, at=iso(NOW), seq=4).raw,
              lesson(KEYS[0], 5), lesson(KEYS[0], 6)]
    return first + history(KEYS[1], 4) + history(KEYS[2], 2)


@pytest.fixture(scope="module")
def sender(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqliteView]:
    store = open_store(tmp_path_factory.mktemp("sender"))
    give(store, _sender_records())
    yield SqliteView(store, own_origin="f" * 16, config=CONFIG)
    store.close()


def _fresh(root: Path) -> SqliteView:
    return SqliteView(open_store(root), own_origin="e" * 16, config=CONFIG)


def _sync_until_equal(src: SqliteView, dst: SqliteView, seed: int) -> int:
    """Deltas at the smallest budget until dst holds what src holds; the records sent."""
    sent = 0
    for _ in range(50):
        if dst.digest() == src.digest():
            return sent
        out = delta(src, src.digest(), dst.digest(), budget_bytes=MIN_BUDGET_BYTES, rng=random.Random(seed))
        sent += len(out.records)
        take(dst, out.records, source="gossip:test", now=NOW, future_tolerance_s=600)
    raise AssertionError("did not converge")


def _check_cut(src: SqliteView, root: Path, budget: int, seed: int) -> None:
    dst = _fresh(root)
    total = sum(len(s) for s in held(src.store).values())
    out = delta(src, src.digest(), Digest(), budget_bytes=budget, rng=random.Random(seed))
    assert sum(map(record_cost, out.records)) <= budget
    assert out.more == (len(out.records) < total)
    result = take(dst, out.records, source="gossip:test", now=NOW, future_tolerance_s=600).result
    assert result.accepted == len(out.records) and not result.refused
    assert_consistent(dst.store)
    # The rest arrives without a record sent twice.
    assert _sync_until_equal(src, dst, seed) == total - len(out.records)
    assert_consistent(dst.store)
    assert held(dst.store) == held(src.store)
    dst.store.close()


def test_every_cut_of_a_delta_leaves_the_receiver_consistent(sender: SqliteView, tmp_path: Path) -> None:
    full = delta(sender, sender.digest(), Digest(), budget_bytes=MAX_BUDGET_BYTES, rng=random.Random(3))
    assert len(full.records) == 12 and not full.more
    costs = [record_cost(r) for r in full.records]
    cuts = sorted({b for k in range(len(costs) + 1) for b in (sum(costs[:k]), sum(costs[:k + 1]) - 1)} - {-1})
    for i, budget in enumerate(cuts):
        _check_cut(sender, tmp_path / f"cut{i}", budget, seed=3)


@settings(max_examples=25, deadline=None)
@given(budget=st.integers(0, 6_000), seed=st.integers(0, 2**32 - 1))
def test_any_budget_and_order_leaves_the_receiver_consistent(sender: SqliteView, budget: int, seed: int) -> None:
    with tempfile.TemporaryDirectory() as root:
        _check_cut(sender, Path(root), budget, seed)


def test_cut_exchanges_resume_without_resending(tmp_path: Path) -> None:
    c = Cluster(tmp_path, 2, settings=Settings(budget_bytes=MIN_BUDGET_BYTES))
    give(c[0].store, history(KEYS[0], 60))
    give(c[1].store, history(KEYS[1], 60))
    results: list[ExchangeResult] = []
    chance = rng()
    while not (results and results[-1].in_sync):
        results.append(c.exchange(0, 1, now=NOW, rng=chance))
        assert results[-1].error is None and len(results) < 20
    work = results[:-1]
    assert len(work) > 1 and all(r.more for r in work[:-1]) and not work[-1].more
    assert sum(r.records_sent for r in work) == 60  # pushed
    assert sum(r.records_received for r in work) == 60  # pulled
    assert sum(r.applied.accepted for r in work) == 60 and sum(r.applied.duplicates for r in work) == 0
    assert held(c[0].store) == held(c[1].store)
    assert_consistent(c[0].store)
    assert_consistent(c[1].store)
    c.close()


def test_the_sender_stops_at_a_hole_in_its_own_history(cluster: Cluster) -> None:
    records = history(KEYS[0], 4)
    give(cluster[1].store, records[:2] + records[3:])  # seq 3 missing, as the folder can leave it
    result = cluster.exchange(0, 1, now=NOW, rng=rng())
    assert result.error is None and not result.more
    assert held(cluster[0].store) == {ORIGINS[0]: [1, 2]}


# -- receiving -------------------------------------------------------------------------------


def test_a_delta_with_a_gap_is_refused_whole(cluster: Cluster) -> None:
    view = cluster[0].view
    with pytest.raises(ProtocolError) as caught:
        take(view, [lesson(KEYS[0], 1), lesson(KEYS[1], 1), lesson(KEYS[0], 3)], source="gossip:x", now=NOW,
             future_tolerance_s=600)
    assert (caught.value.who, caught.value.code) == ("remote", "gap")
    assert held(cluster[0].store) == {}


@pytest.mark.parametrize("raw", [b"not json", b"[1]", b'{"origin": "abc", "seq": 1}',
                                 sign_confirm(KEYS[0], "a" * 32, at=iso(NOW)).raw])
def test_a_record_gossip_cannot_place_is_refused(cluster: Cluster, raw: bytes) -> None:
    with pytest.raises(ProtocolError) as caught:
        take(cluster[0].view, [raw], source="gossip:x", now=NOW, future_tolerance_s=600)
    assert (caught.value.who, caught.value.code) == ("remote", "bad-record")


def test_an_invalid_record_is_refused_and_counted_against_the_peer(cluster: Cluster) -> None:
    records = history(KEYS[0], 3)
    forged = records[1].replace(b'"seen":1', b'"seen":9')
    taken = take(cluster[0].view, [records[0], forged, records[2]], source="gossip:bad", now=NOW,
                 future_tolerance_s=600)
    assert taken.result.refused == {"bad-signature": 1} and taken.result.accepted == 2
    assert cluster[0].store.db.execute("SELECT count FROM refusals WHERE source = 'gossip:bad'").fetchone() == (1,)


def test_records_signed_in_the_future_are_held_back_without_a_hole(cluster: Cluster) -> None:
    later = NOW + timedelta(hours=1)
    give(cluster[1].store, [lesson(KEYS[0], 1), lesson(KEYS[0], 2, at=later), lesson(KEYS[0], 3)],
         now=later)
    chance = rng()
    first = cluster.exchange(0, 1, now=NOW, rng=chance)
    assert first.error is None and first.held_back == 2 and first.applied.accepted == 1
    assert held(cluster[0].store) == {ORIGINS[0]: [1]}
    second = cluster.exchange(0, 1, now=later, rng=chance)
    assert second.held_back == 0 and second.applied.accepted == 2
    assert held(cluster[0].store) == {ORIGINS[0]: [1, 2, 3]}


def test_digest_hashes_are_the_store_digests(cluster: Cluster) -> None:
    records = history(KEYS[0], 3)
    give(cluster[0].store, records)
    assert cluster[0].view.digest()[ORIGINS[0]] == (3, seq_hash([record_digest(records[2])]))
    assert record_digest(records[2]).hex() == holdings.digest_of(records[2])


def test_a_budget_must_fit_the_largest_record() -> None:
    with pytest.raises(ValueError):
        Settings(budget_bytes=MIN_BUDGET_BYTES - 1)
    with pytest.raises(ValueError):
        Settings(budget_bytes=MAX_BUDGET_BYTES + 1)


# -- forks -----------------------------------------------------------------------------------


def _fork_count(store: Store) -> int:
    return int(store.db.execute("SELECT COUNT(*) FROM forks").fetchone()[0])


def test_a_fork_at_the_same_height_is_detected_and_the_first_kept(cluster: Cluster) -> None:
    a, b = lesson(KEYS[4], 1, tag="a"), lesson(KEYS[4], 1, tag="b")
    give(cluster[0].store, [a])
    give(cluster[1].store, [b])
    result = cluster.exchange(0, 1, now=NOW, rng=rng())
    assert result.error is None and result.applied.forks == 1
    assert cluster.replies[-1].result.applied.forks == 1
    assert cluster[0].view.known_at(ORIGINS[4], 1) == [a, b]  # kept first, then the evidence
    assert cluster[1].view.known_at(ORIGINS[4], 1) == [b, a]
    assert _fork_count(cluster[0].store) == _fork_count(cluster[1].store) == 1
    # Each side holds the other's record as evidence: their digests agree again.
    assert cluster.exchange(1, 0, now=NOW, rng=rng()).in_sync


def test_a_fork_below_new_records_is_detected_by_its_witness(cluster: Cluster) -> None:
    a, b, c = lesson(KEYS[4], 1, tag="a"), lesson(KEYS[4], 1, tag="b"), lesson(KEYS[4], 2, tag="b")
    give(cluster[0].store, [a])
    give(cluster[1].store, [b, c])
    result = cluster.exchange(0, 1, now=NOW, rng=rng())
    assert result.records_received == 2 and result.applied.forks == 1 and result.applied.accepted == 1
    assert cluster[0].view.known_at(ORIGINS[4], 1) == [a, b]
    assert held(cluster[0].store) == {ORIGINS[4]: [1, 2]}


# -- peer identity ---------------------------------------------------------------------------


def forge(request: bytes, signer: nacl.signing.SigningKey, **changes: object) -> bytes:
    """The request with auth fields changed, signed by ``signer`` over what it then says."""
    envelope = codec.decode(request)
    auth = dataclasses.replace(envelope.auth, **changes)  # type: ignore[arg-type]
    message = peer_auth.signed_bytes(envelope.type, origin=auth.origin, to=auth.to, ts=auth.ts, nonce=auth.nonce,
                                     re=peer_auth.NO_NONCE, body=envelope.body)
    return codec.encode(envelope.type, dataclasses.replace(auth, sig=signer.sign(message).signature), envelope.body)


def _request(cluster: Cluster, to: int = 1, now: datetime = NOW) -> bytes:
    data = cluster[0].initiator(cluster[to].origin, now=now, rng=random.Random()).start()
    assert data is not None
    return data


def _refusal(cluster: Cluster, request: bytes, node: int = 1) -> str:
    reply = cluster[node].responder.respond(request, now=NOW, rng=rng())
    assert reply.result.error is not None and reply.result.error.who == "remote"
    assert reply.result.peer is None and reply.data is not None
    envelope = codec.decode(reply.data)
    assert envelope.type is MessageType.REFUSED
    body = codec.decode_body(envelope.type, envelope.body)
    assert isinstance(body, codec.Refused) and body.code == reply.result.error.code
    return body.code


def test_a_well_formed_request_is_accepted(cluster: Cluster) -> None:
    reply = cluster[1].responder.respond(forge(_request(cluster), cluster[0].identity.signing_key), now=NOW, rng=rng())
    assert reply.result.error is None and reply.result.peer == cluster[0].origin


def test_a_key_that_did_not_sign_is_refused(cluster: Cluster) -> None:
    other = bytes(KEYS[3].verify_key)
    forged = forge(_request(cluster), cluster[0].identity.signing_key, key=other, origin=origin_of(other))
    assert _refusal(cluster, forged) == "bad-signature"


def test_a_signature_by_another_key_is_refused(cluster: Cluster) -> None:
    assert _refusal(cluster, forge(_request(cluster), KEYS[3])) == "bad-signature"


def test_an_origin_that_is_not_the_keys_fingerprint_is_refused(cluster: Cluster) -> None:
    forged = forge(_request(cluster), cluster[0].identity.signing_key, origin=cluster[2].origin)
    assert _refusal(cluster, forged) == "origin-mismatch"


@pytest.mark.parametrize("skew", [-301, 301])
def test_a_stale_timestamp_is_refused(cluster: Cluster, skew: int) -> None:
    stale = int(NOW.timestamp()) + skew
    assert _refusal(cluster, forge(_request(cluster), cluster[0].identity.signing_key, ts=stale)) == "stale"


def test_a_replayed_nonce_is_refused(cluster: Cluster) -> None:
    request = _request(cluster)
    assert cluster[1].responder.respond(request, now=NOW, rng=rng()).result.error is None
    assert _refusal(cluster, request) == "replay"


def test_a_request_replayed_to_another_peer_is_refused(cluster: Cluster) -> None:
    assert _refusal(cluster, _request(cluster, to=1), node=2) == "wrong-peer"


def test_a_changed_body_is_refused(cluster: Cluster) -> None:
    envelope = codec.decode(_request(cluster))
    other = codec.encode_body(codec.Sync(bytes(16)))
    assert _refusal(cluster, codec.encode(envelope.type, envelope.auth, other)) == "bad-signature"


def test_the_initiator_learns_why_it_was_refused(cluster: Cluster) -> None:
    late = cluster[0].initiator(cluster[1].origin, now=NOW - timedelta(seconds=400), rng=rng())
    result = drive(late, lambda request: cluster[1].responder.respond(request, now=NOW, rng=rng()).data)
    assert result.error is not None and result.error.code == "refused" and result.refused == "stale"


def test_an_initiator_that_knows_only_an_address_learns_the_origin(cluster: Cluster) -> None:
    result = cluster.exchange(0, 1, now=NOW, rng=rng(), addressed=False)
    assert result.error is None and result.in_sync and result.round_trips == 2
    assert result.peer == cluster[1].origin


def test_a_first_contact_is_an_introduction_not_a_refusal(cluster: Cluster) -> None:
    result = cluster.exchange(0, 1, now=NOW, rng=rng(), addressed=False)
    assert result.error is None and result.peer == cluster[1].origin
    hello = cluster.replies[0].result
    assert hello.introduced and hello.error is None  # nothing for the responder to log or count
    # A request addressed to another origin (not to nobody) is still a refusal.
    wrong = forge(_request(cluster), cluster[0].identity.signing_key, to=cluster[2].origin)
    reply = cluster[1].responder.respond(wrong, now=NOW, rng=rng())
    assert not reply.result.introduced and reply.result.error is not None
    assert reply.result.error.code == "wrong-peer"


def test_an_address_that_is_this_memory_ends_the_exchange_without_blame(cluster: Cluster) -> None:
    result = cluster.exchange(0, 0, now=NOW, rng=rng(), addressed=False)
    assert result.is_self and result.error is None and result.peer == cluster[0].origin
    assert result.round_trips == 1 and result.records_received == 0
    assert cluster.replies[0].result.error is None
    addressed = cluster[0].initiator(cluster[0].origin, now=NOW, rng=rng())
    assert addressed.start() is None and addressed.result.is_self and addressed.result.error is None


def test_addresses_travel_both_ways_without_the_peers_own(cluster: Cluster) -> None:
    give(cluster[1].store, history(KEYS[0], 2))  # not in sync: a DIGEST reply carries them too
    a_share = [("http://192.0.2.1:7428", None), ("http://192.0.2.2:7428", cluster[1].origin)]
    b_share = [("http://192.0.2.3:7428", ORIGINS[5]), ("http://192.0.2.4:7428", cluster[0].origin)]
    result = cluster.exchange(0, 1, now=NOW, rng=rng(), share=a_share, respond_share=b_share, listen_port=7500)
    assert result.error is None and result.addresses == ("http://192.0.2.3:7428",)
    heard = cluster.replies[0].result
    assert heard.addresses == ("http://192.0.2.1:7428",) and heard.listen_port == 7500
    again = cluster.exchange(0, 1, now=NOW, rng=random.Random(2), respond_share=b_share)  # IN_SYNC carries them
    assert again.in_sync and again.addresses == ("http://192.0.2.3:7428",)
    assert cluster.replies[-1].result.listen_port is None


def test_shared_addresses_are_signed(cluster: Cluster) -> None:
    cluster.tamper = lambda sender, receiver, data: data.replace(b"192.0.2.1", b"192.0.2.9")
    result = cluster.exchange(0, 1, now=NOW, rng=rng(), share=[("http://192.0.2.1:7428", None)])
    assert result.error is not None and result.refused == "bad-signature"
    result = cluster.exchange(1, 0, now=NOW, rng=rng(), respond_share=[("http://192.0.2.1:7428", None)])
    assert result.error is not None and result.error.code == "bad-signature" and result.addresses == ()


def test_a_reply_from_another_memory_is_refused(cluster: Cluster) -> None:
    initiator = cluster[0].initiator(cluster[1].origin, now=NOW, rng=rng())
    request = initiator.start()
    assert request is not None
    # Node 2 answers a request it was sent (as if it sat at node 1's address).
    readdressed = forge(request, cluster[0].identity.signing_key, to=cluster[2].origin)
    reply = cluster[2].responder.respond(readdressed, now=NOW, rng=rng()).data
    assert reply is not None and initiator.handle(reply) is None
    assert initiator.result.error is not None and initiator.result.error.code == "wrong-peer"


def test_a_replayed_reply_is_refused(cluster: Cluster) -> None:
    give(cluster[1].store, history(KEYS[0], 1))
    old = Initiator(cluster[0].view, cluster[0].identity.signing_key, cluster[1].origin, now=NOW, rng=rng())
    request = old.start()
    assert request is not None
    captured = cluster[1].responder.respond(request, now=NOW, rng=rng()).data
    assert captured is not None
    fresh = cluster[0].initiator(cluster[1].origin, now=NOW, rng=random.Random(9))
    assert fresh.start() is not None and fresh.handle(captured) is None
    assert fresh.result.error is not None and fresh.result.error.code == "bad-signature"
    assert held(cluster[0].store) == {}


def test_the_replay_cache_is_bounded_and_forgets_old_nonces() -> None:
    cache = peer_auth.ReplayCache(skew_s=10, max_entries=2)
    cache.admit(b"a" * 16, 100, 100)
    cache.admit(b"b" * 16, 105, 100)
    with pytest.raises(ProtocolError) as caught:
        cache.admit(b"c" * 16, 100, 100)
    assert (caught.value.who, caught.value.code) == ("local", "busy")
    cache.admit(b"c" * 16, 111, 111)  # a's timestamp left the window: forgotten
    assert len(cache) == 2
    with pytest.raises(ProtocolError, match="replay"):
        cache.admit(b"b" * 16, 105, 111)


def test_a_bare_refusal_ends_the_exchange(cluster: Cluster) -> None:
    cluster.tamper = lambda sender, receiver, data: data[:-1] if sender == cluster[0].origin else data
    result = cluster.exchange(0, 1, now=NOW, rng=rng())
    assert result.error is not None and result.error.code == "refused"
    assert cluster.replies[-1].data is None and cluster.replies[-1].result.error is not None
    assert cluster.replies[-1].result.error.code == "bad-msgpack"


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.binary(max_size=40),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                 lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                 max_leaves=8).map(lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":")).encode()),
    st.sampled_from([b' {"a":1}', b'{"a":1} ', b'\xef\xbb\xbf{"a":1}', '{"a":1}'.encode("utf-16"),
                     b'{"a":"\xed\xa0\x80"}', b'{"a":1}{', b'{"a":NaN}', b'\xff'])))
def test_a_records_claims_are_read_as_json_loads_reads_them(raw: bytes) -> None:
    """The screen's quick reading of a record (core._loads) gives what json.loads gives, or fails as it does."""
    from neverest.gossip.core import _loads

    try:
        expected = json.dumps(json.loads(raw))
    except (ValueError, RecursionError):
        with pytest.raises((ValueError, RecursionError)):
            _loads(raw)
        return
    assert json.dumps(_loads(raw)) == expected
