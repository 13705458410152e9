"""The pipelined pull (gossip/service.py): the records of a cut answer are applied while the next
answer is asked for.  Over real HTTP on 127.0.0.1, against the same pull unpipelined (the sans-IO
core driven one answer after the other)."""

from __future__ import annotations

import random
import string
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import nacl.signing
import pytest
import trio

from neverest.clock import FixedClock, iso
from neverest.config import Config
from neverest.gossip import http
from neverest.gossip.codec import MAX_MESSAGE_BYTES, ProtocolError
from neverest.gossip.core import MIN_BUDGET_BYTES, Initiator, Responder, Settings, drive, record_digest, screen
from neverest.gossip.service import MAX_CONTINUATIONS, Gossip
from neverest.gossip.view import SqliteView
from neverest.identity import Identity
from neverest.memory.receive import receive
from neverest.memory.store import Store, open_store
from neverest.records import sign_lesson

NOW = datetime(2026, 4, 1, 12, tzinfo=UTC)
T = TypeVar("T")
# The smallest budget: about 50 records per answer, so that 1 200 records take more answers than
# one exchange's MAX_CONTINUATIONS and the pull is cut and resumed.
CONFIG = Config(gossip_budget_bytes=MIN_BUDGET_BYTES, verify_processes=0)
SERVER_SEED, PULLER_SEED = b"\x31" * 32, b"\x32" * 32


def lesson(key: nacl.signing.SigningKey, seq: int, text: str) -> bytes:
    return sign_lesson(key, kind="error", text=text, seen=1, strength=1.0, updated=iso(NOW), seq=seq).raw


def source_records() -> list[bytes]:
    keys = [nacl.signing.SigningKey(bytes([i + 1]) * 32) for i in range(30)]
    # Half the origins publish the same lessons (corroborations), half their own (candidates).  The
    # sentences share no word, so what the merge rule makes of them does not depend on the order in
    # which the peer sends origins (its shuffle draws from its own randomness).
    return [lesson(k, s, words(s) if i % 2 else words(1000 * i + s)) for i, k in enumerate(keys) for s in range(1, 41)]


def words(seed: int) -> str:
    rng = random.Random(seed)
    return " ".join("".join(rng.choice(string.ascii_lowercase) for _ in range(9)) for _ in range(5))


def fill(home: Path, raws: list[bytes]) -> None:
    with open_store(home) as store:
        result = receive(store, raws, source="test", own_origin="f" * 16, config=CONFIG, now=NOW)
    assert not result.refused


def state(store: Store) -> tuple[list[tuple[object, ...]], ...]:
    """What a pull leaves: records, lessons (with strength and support), refusals."""
    db = store.db
    return (db.execute("SELECT origin, seq, digest, superseded, source FROM records ORDER BY origin, seq").fetchall(),
            db.execute("SELECT hash, kind, text, strength, seen, layer, archived FROM lessons "
                       "ORDER BY hash").fetchall(),
            db.execute("SELECT l.hash, o.origin FROM lesson_origins o JOIN lessons l ON l.id = o.lesson_id "
                       "ORDER BY 1, 2").fetchall(),
            db.execute("SELECT source, reason, count FROM refusals ORDER BY 1, 2").fetchall())


async def serving(home: Path, work: Callable[[str], Awaitable[T]]) -> T:
    server = Gossip(home, CONFIG, FixedClock(NOW), Identity.from_seed(SERVER_SEED), random.Random(1))
    try:
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(http.serve, http.GossipApp(server.respond, max_body_bytes=MAX_MESSAGE_BYTES),
                                        "127.0.0.1:0")
            result = await work("http://" + binds[0].split("//")[-1])
            nursery.cancel_scope.cancel()
        return result
    finally:
        await server.aclose()


def unpipelined_pull(source: Path, home: Path) -> None:
    """The same pull, one answer applied before the next is asked for (the sans-IO core alone)."""
    settings = Settings(budget_bytes=CONFIG.gossip_budget_bytes)
    server_id, me = Identity.from_seed(SERVER_SEED), Identity.from_seed(PULLER_SEED)
    with open_store(source) as s, open_store(home) as d:
        responder = Responder(SqliteView(s, own_origin=server_id.origin, config=CONFIG), server_id.signing_key,
                              settings=settings)
        view = SqliteView(d, own_origin=me.origin, config=CONFIG)
        rng = random.Random(2)
        for _ in range(100):
            initiator = Initiator(view, me.signing_key, server_id.origin, now=NOW, rng=rng, settings=settings)
            result = drive(initiator, lambda b: responder.respond(b, now=NOW, rng=rng).data)
            assert result.error is None, result.error
            if not result.more:
                return
        raise AssertionError("the unpipelined pull did not finish")


async def test_a_pipelined_pull_of_many_answers_leaves_what_an_unpipelined_one_does(tmp_path: Path) -> None:
    raws = source_records()
    fill(tmp_path / "source", raws)
    unpipelined_pull(tmp_path / "source", tmp_path / "one-by-one")
    pinned: list[int] = []

    async def work(url: str) -> list[int]:
        me = Gossip(tmp_path / "pipelined", CONFIG, FixedClock(NOW), Identity.from_seed(PULLER_SEED),
                    random.Random(3))
        accepted: list[int] = []
        try:
            await me.exchange(url, None)  # first contact: learns the peer's origin, then pulls
            for _ in range(10):
                result = await me.exchange(url, Identity.from_seed(SERVER_SEED).origin)
                assert result.error is None, result.error
                accepted.append(result.applied.accepted)
                if result.in_sync:
                    break
            pinned.append(me.replies_while_storing)
        finally:
            await me.aclose()
        return accepted

    accepted = await serving(tmp_path / "source", work)
    # The first exchange was cut after MAX_CONTINUATIONS answers and the next ones resumed it.
    assert sum(accepted) < len(raws) and accepted[-1] == 0
    # Some replies were handled while the answer before was still being stored (_handle_pinned).
    assert pinned and pinned[0] > 0
    with open_store(tmp_path / "pipelined") as a, open_store(tmp_path / "one-by-one") as b:
        got, want = state(a), state(b)
        assert len(got[0]) == len(raws) and not got[3]
        assert got[:3] == want[:3]
        assert {record_digest(bytes(r[0])).hex() for r in a.db.execute("SELECT raw FROM records")} \
            == {record_digest(r).hex() for r in raws}


async def test_each_exchange_counts_what_its_deferred_answers_did(tmp_path: Path) -> None:
    raws = source_records()
    fill(tmp_path / "source", raws)

    async def work(url: str) -> tuple[int, int, bool]:
        me = Gossip(tmp_path / "pulling", CONFIG, FixedClock(NOW), Identity.from_seed(PULLER_SEED),
                    random.Random(4))
        try:
            first = await me.exchange(url, Identity.from_seed(SERVER_SEED).origin)
            with open_store(tmp_path / "pulling") as store:
                held = int(store.db.execute("SELECT count(*) FROM records").fetchone()[0])
        finally:
            await me.aclose()
        return first.applied.accepted, held, first.more

    accepted, held, more = await serving(tmp_path / "source", work)
    # The exchange returns once its last answer is applied, and its result counts every answer.
    assert more and accepted == held and MAX_CONTINUATIONS * 10 < held < len(raws)


def test_a_request_built_ahead_of_a_refused_tail_holds_back_instead_of_blaming(tmp_path: Path) -> None:
    key = nacl.signing.SigningKey(b"\x07" * 32)
    raws = [lesson(key, s, f"the build fails on step {s}") for s in range(1, 9)]
    with open_store(tmp_path / "m") as store:
        view = SqliteView(store, own_origin="f" * 16, config=CONFIG)
        view.apply(raws[:3], source="test", now=NOW)  # held: 1..3
        origin = view.digest().keys().__iter__().__next__()
        ahead = {origin: (5, record_digest(raws[4])[:8])}  # the request said 1..5 (4 and 5 were refused)
        # The peer sends from 6 on: held back, not a gap, nothing applied.
        out = screen(view, raws[5:], now=NOW, future_tolerance_s=60, assumed=ahead)
        assert out.keep == [] and out.held_back == 3
        # From 4 on (what is held + 1): applied as usual, and its head is known ahead.
        out = screen(view, raws[3:], now=NOW, future_tolerance_s=60, assumed=ahead)
        assert out.keep == raws[3:] and out.heads == {origin: (8, record_digest(raws[7])[:8])}
        # Past what the request said: a gap, the peer's fault.
        with pytest.raises(ProtocolError, match="jump"):
            screen(view, raws[6:], now=NOW, future_tolerance_s=60, assumed=ahead)
        # And the view shows the heads ahead only inside ``ahead``.
        with view.ahead(ahead):
            assert view.entry(origin) == ahead[origin]
        assert view.entry(origin) is not None and view.entry(origin)[0] == 3  # type: ignore[index]



def test_a_pinned_view_reads_its_cache_while_another_thread_stores(tmp_path: Path) -> None:
    import threading

    key = nacl.signing.SigningKey(b"\x08" * 32)
    raws = [lesson(key, s, f"the deploy fails on step {s}") for s in range(1, 7)]
    with open_store(tmp_path / "m") as store, open_store(tmp_path / "m") as reader:
        view = SqliteView(store, own_origin="f" * 16, config=CONFIG)
        view.apply(raws[:2], source="test", now=NOW)
        origin = next(iter(view.digest().keys()))
        ahead = {origin: (4, record_digest(raws[3])[:8])}
        stored: list[object] = []
        with view.pinned(reader) as read, view.ahead(ahead):
            # Another thread stores through the view's connection meanwhile: the cache is not touched.
            worker = threading.Thread(target=lambda: stored.append(view.receive(raws[2:4], source="test", now=NOW)))
            worker.start()
            worker.join()
            assert view.entry(origin) == ahead[origin]  # what the screen is shown: the records ahead as held
            # What must be read of the store is read through the reader: what is committed, 1..4.
            assert view.run(origin, 0, budget_bytes=10**6, max_records=100).records == raws[:4]
            with pytest.raises(RuntimeError):  # nothing is applied from the thread that pinned it
                view.receive(raws[4:], source="test", now=NOW)
        assert read == {origin: ahead[origin]}
        view.refresh(stored[0])  # type: ignore[arg-type]
        assert view.entry(origin) == ahead[origin]  # what is stored now


async def test_an_answer_screened_on_entries_that_did_not_hold_is_held_back(tmp_path: Path) -> None:
    from neverest.gossip.core import ExchangeResult
    from neverest.gossip.service import _Applying

    key = nacl.signing.SigningKey(b"\x09" * 32)
    raws = [lesson(key, s, f"the linter fails on rule {s}") for s in range(1, 5)]
    me = Gossip(tmp_path / "m", CONFIG, FixedClock(NOW), Identity.from_seed(PULLER_SEED), random.Random(5))
    try:
        me._view.apply(raws[:2], source="test", now=NOW)
        origin = next(iter(me._view.digest().keys()))
        held = me._view.entry(origin)
        result = ExchangeResult()
        # Screened on what was stored: applied as screened.
        right = _Applying(raws[2:], {origin: (4, record_digest(raws[3])[:8])}, read={origin: held})
        assert me._confirmed(right, result) is right and result.held_back == 0
        # Screened on a head the records before would have made, but they were not all stored: held back.
        wrong = _Applying(raws[3:], {origin: (4, record_digest(raws[3])[:8])},
                          read={origin: (3, record_digest(raws[2])[:8])})
        assert me._confirmed(wrong, result).records == [] and result.held_back == 1
        assert me.held_back_after_storing == 1
        # Screened for real (not while storing): nothing to check.
        plain = _Applying(raws[2:], {origin: (4, record_digest(raws[3])[:8])})
        assert me._confirmed(plain, result) is plain
    finally:
        await me.aclose()
