"""Floods of invalid gossip requests: the in-memory tally, the cut-offs, and both through the
daemon's own ``Gossip`` service behind its own listener (hypercorn on 127.0.0.1:0).

The attacker posts from 127.0.0.2 (another loopback address, as another machine would), so
that cutting it off is seen not to cut off the honest peer on 127.0.0.1.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import nacl.signing
import pytest
import trio

from neverest.clock import FixedClock
from neverest.config import Config
from neverest.gossip import guard, http, peer_auth
from neverest.gossip.codec import MAX_MESSAGE_BYTES, MessageType, encode
from neverest.gossip.service import Gossip
from neverest.identity import Identity
from neverest.memory.store import open_store
from neverest.peers import table

NOW = datetime(2026, 5, 1, 12, tzinfo=UTC)


# -- the tally and the cut-offs, alone -----------------------------------------------------------

def test_the_tally_counts_by_source_and_reason_and_stays_bounded() -> None:
    tally = guard.Tally(max_keys=3)
    for i in range(10):
        tally.add(f"gossip:{i}", "bad-signature", NOW + timedelta(seconds=i))
    tally.add("gossip:0", "bad-signature", NOW)
    counts = tally.pending()
    # The map never grows past its bound (plus one OTHERS row per reason, a fixed set of codes)...
    assert set(counts) == {("gossip:0", "bad-signature"), ("gossip:1", "bad-signature"),
                           ("gossip:2", "bad-signature"), (guard.OTHERS, "bad-signature")}
    assert counts["gossip:0", "bad-signature"].n == 2
    assert counts[guard.OTHERS, "bad-signature"].n == 7  # ...what does not fit is counted, not lost
    assert counts[guard.OTHERS, "bad-signature"].last == NOW + timedelta(seconds=9)
    drained = tally.drain()
    assert len(tally) == 0 and sum(c.n for c in drained.values()) == 11
    tally.restore(drained)  # a flush that failed gives them back
    assert sum(c.n for c in tally.pending().values()) == 11


def test_a_cutoff_comes_after_so_many_strikes_within_the_cooling_time_and_cools_down() -> None:
    cutoffs = guard.Cutoffs(after=3, cooling_s=10.0)
    assert not cutoffs.strike("addr:a", 0.0) and not cutoffs.strike("addr:a", 1.0)
    assert cutoffs.blocked("addr:a", 1.5) is None
    assert cutoffs.strike("addr:a", 2.0)  # the third within 10 s
    assert cutoffs.blocked("addr:a", 3.0) == pytest.approx(9.0)
    assert cutoffs.blocked("addr:b", 3.0) is None  # others are heard
    assert cutoffs.blocked("addr:a", 12.0) is None  # cooled down: a clean slate
    assert not cutoffs.strike("addr:a", 12.5)
    # Strikes spread wider than the cooling time never add up to a cut-off.
    spread = guard.Cutoffs(after=3, cooling_s=10.0)
    assert not any(spread.strike("addr:c", 11.0 * i) for i in range(10))


def test_the_cutoff_table_is_bounded_and_forgets_the_oldest() -> None:
    cutoffs = guard.Cutoffs(after=1, cooling_s=100.0, max_keys=4)
    for i in range(10):
        cutoffs.strike(f"addr:{i}", float(i))
    assert len(cutoffs) == 4
    assert cutoffs.blocked("addr:9", 10.0) is not None and cutoffs.blocked("addr:0", 10.0) is None
    with pytest.raises(ValueError):
        guard.Cutoffs(after=0, cooling_s=1.0)


def test_ipv6_addresses_count_by_their_64() -> None:
    assert guard.address_key("2001:db8:1:2::1") == guard.address_key("2001:db8:1:2:ffff::9")
    assert guard.address_key("2001:db8:1:3::1") != guard.address_key("2001:db8:1:2::1")
    assert guard.address_key("192.0.2.1") == "addr:192.0.2.1"


# -- through the real HTTP edge ------------------------------------------------------------------

Start = Callable[..., Any]


@pytest.fixture
async def start(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[Start]:
    started: list[Gossip] = []

    async def start_node(name: str, seed: int, config: Config | None = None) -> tuple[Gossip, str]:
        gossip = Gossip(tmp_path / name, config or Config(), FixedClock(NOW), Identity.from_seed(bytes([seed]) * 32),
                        random.Random(seed))
        started.append(gossip)
        app = http.GossipApp(gossip.respond, max_body_bytes=MAX_MESSAGE_BYTES, cutoff=gossip.cutoff,
                             refused=gossip.refused, tarpit_s=0.05)
        binds = await nursery.start(http.serve, app, "127.0.0.1:0")
        url = "http://" + binds[0].split("//")[-1]
        gossip.listen_port = int(url.rpartition(":")[2])
        return gossip, url

    yield start_node
    nursery.cancel_scope.cancel()
    for gossip in started:
        await gossip.aclose()


def stored_refusals(gossip: Gossip) -> dict[tuple[str, str], int]:
    with open_store(gossip.home) as store:
        return {(s, r): n for s, r, n in store.db.execute("SELECT source, reason, count FROM refusals")}


async def test_a_flooding_address_is_cut_off_unread_while_an_honest_peer_still_exchanges(start: Start) -> None:
    config = Config(gossip_cutoff_address_after=5, gossip_cutoff_s=60.0)
    victim, url = await start("victim", 1, config)
    honest, _ = await start("honest", 2)
    with open_store(honest.home) as store, store.write() as db:
        table.add(db, url, source="manual", now=NOW)
    attacker = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(local_address="127.0.0.2"), timeout=10.0)
    statuses: list[int] = []
    async with attacker:
        for _ in range(12):
            began = trio.current_time()
            answer = await attacker.post(url + http.EXCHANGE_PATH, content=b"\xc1 not msgpack" * 10,
                                         headers={"content-type": http.CONTENT_TYPE})
            statuses.append(answer.status_code)
            if answer.status_code == 429:
                assert int(answer.headers["retry-after"]) >= 1
                assert trio.current_time() - began >= 0.05  # held for the tarpit before the answer
    # Five invalid requests are heard (and refused), then the address is cut off.
    assert statuses == [400] * 5 + [429] * 7
    # The refusals are counted in memory: nothing was written per refusal...
    assert stored_refusals(victim) == {}
    pending = {(r.source, r.reason): r.count for r in victim.pending_refusals()}
    assert pending["gossip:127.0.0.2", "cut-off"] == 7 and sum(pending.values()) == 12
    # ...and the honest peer, on another address, exchanges as if nothing happened.
    [result] = await honest.round(fanout=3)
    assert result["error"] is None and result["peer"] == victim.identity.origin
    await victim.flush()
    stored = stored_refusals(victim)
    assert stored["gossip:127.0.0.2", "cut-off"] == 7 and sum(stored.values()) == 12
    assert victim.pending_refusals() == []


async def test_an_oversized_body_is_a_strike_too(start: Start) -> None:
    config = Config(gossip_cutoff_address_after=2, gossip_cutoff_s=60.0)
    victim, url = await start("victim", 1, config)
    statuses = []
    async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(local_address="127.0.0.2"),
                                 timeout=10.0) as attacker:
        # Two bodies over the limit, then a small request: it is cut off, unread.  (A third big
        # body would be answered before it is read, while the client still writes it.)
        for size in (MAX_MESSAGE_BYTES + 1, MAX_MESSAGE_BYTES + 1, 10):
            answer = await attacker.post(url + http.EXCHANGE_PATH, content=b"\0" * size,
                                         headers={"content-type": http.CONTENT_TYPE})
            statuses.append(answer.status_code)
    assert statuses == [413, 413, 429]
    assert {(r.source, r.reason) for r in victim.pending_refusals()} == {("gossip:127.0.0.2", "http-413"),
                                                                         ("gossip:127.0.0.2", "cut-off")}


def signed_garbage(seed: int, to: str) -> bytes:
    """A request signed validly by a key made for it (``seed``), with a body that does not decode: the
    signature tells who sent it, and that origin is at fault."""
    key = nacl.signing.SigningKey(seed.to_bytes(4, "big") * 8)
    body = b"\xc1 not a sync"
    auth = peer_auth.sign(key, MessageType.SYNC, body, to=to, ts=int(NOW.timestamp()),
                          nonce=seed.to_bytes(16, "big"))
    return encode(MessageType.SYNC, auth, body)


async def test_an_honest_peer_behind_the_attackers_address_keeps_exchanging(start: Start) -> None:
    """Issue 26: an attacker and an honest peer behind one address (both on 127.0.0.1, as behind one
    NAT).  The attacker's flood cuts the address off; the honest peer, which exchanged from it
    before, signs its requests and keeps exchanging; a stranger from there waits like the attacker."""
    config = Config(gossip_cutoff_after=3, gossip_cutoff_address_after=6, gossip_cutoff_s=60.0)
    victim, url = await start("victim", 1, config)
    victim.tarpit_s = 0.05
    honest, _ = await start("honest", 2)
    late, late_url = await start("late", 3)
    for node in (honest, late):
        with open_store(node.home) as store, store.write() as db:
            table.add(db, url, source="manual", now=NOW)
    [result] = await honest.round(fanout=3)
    assert result["error"] is None and result["peer"] == victim.identity.origin
    statuses: list[int] = []
    attacker = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(local_address="127.0.0.1"), timeout=10.0)
    async with attacker:
        # Requests signed with a fresh key each: every one strikes its origin and, since none of
        # them exchanged from here, the address too (keys are free).
        for seed in range(100, 104):
            answer = await attacker.post(url + http.EXCHANGE_PATH, content=signed_garbage(seed, victim.identity.origin),
                                         headers={"content-type": http.CONTENT_TYPE})
            statuses.append(answer.status_code)
        # Then requests nobody signed.
        for _ in range(6):
            answer = await attacker.post(url + http.EXCHANGE_PATH, content=b"\xc1 not msgpack" * 10,
                                         headers={"content-type": http.CONTENT_TYPE})
            statuses.append(answer.status_code)
            if answer.status_code == 429:
                assert int(answer.headers["retry-after"]) >= 1
    # Six invalid requests from the address (the signed ones answered with a signed refusal, the
    # others with 400), then it is cut off: the rest are held and refused.
    assert statuses == [200] * 4 + [400] * 2 + [429] * 4
    assert victim.address_cutoffs.blocked(guard.address_key("127.0.0.1"), trio.current_time()) is not None
    # The honest peer, same address, signs as itself: it keeps exchanging, again and again.
    for _ in range(3):
        [result] = await honest.round(fanout=3)
        assert result["error"] is None and result["peer"] == victim.identity.origin
    # A peer that never exchanged from that address is held with the attacker until the cut-off cools...
    [result] = await late.round(fanout=3)
    assert result["error"] is not None
    # ...unless this memory exchanged with it there (it answered, signed, from that address).
    assert (await victim.exchange(late_url, None)).peer == late.identity.origin
    assert (await victim.exchange(late_url, late.identity.origin)).error is None
    [result] = await late.round(fanout=3)
    assert result["error"] is None and result["peer"] == victim.identity.origin
    pending = {(r.source, r.reason): r.count for r in victim.pending_refusals()}
    assert pending["gossip:127.0.0.1", "cut-off"] >= 5
    assert not any(source == f"gossip:{honest.identity.origin}" for source, _ in pending)


async def test_a_signed_peer_is_cut_off_by_its_origin_not_its_address(start: Start) -> None:
    """Strikes of a vouched origin count against it, not against the address it shares."""
    config = Config(gossip_cutoff_after=2, gossip_cutoff_address_after=100, gossip_cutoff_s=60.0)
    victim, _ = await start("victim", 1, config)
    for _ in range(2):
        victim._strike("127.0.0.1", "ab" * 8, "bad-record")
    now_s = trio.current_time()
    assert victim.cutoffs.blocked("origin:" + "ab" * 8, now_s) is not None
    # That origin was new to the address: its strikes counted there too, under the larger budget.
    assert victim.address_cutoffs.blocked(guard.address_key("127.0.0.1"), now_s) is None
    victim.vouched.add(guard.address_key("127.0.0.1"), "cd" * 8)
    for _ in range(150):
        victim._strike("127.0.0.1", "cd" * 8, "bad-record")
    assert victim.address_cutoffs.blocked(guard.address_key("127.0.0.1"), now_s) is None
    for _ in range(98):
        victim._strike("127.0.0.1", None, "bad-msgpack")
    assert victim.address_cutoffs.blocked(guard.address_key("127.0.0.1"), now_s) is not None


def test_vouched_is_bounded() -> None:
    vouched = guard.Vouched(max_addresses=2, per_address=2)
    for origin in ("a", "b", "c"):
        vouched.add("addr:1", origin)
    assert not vouched.has("addr:1", "a") and vouched.has("addr:1", "c")
    vouched.add("addr:2", "x")
    vouched.add("addr:3", "y")
    assert len(vouched) == 2 and not vouched.any("addr:1") and vouched.has("addr:3", "y")
