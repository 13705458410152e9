"""Refutations over real gossip (the daemon's ``Gossip`` service behind its listener on 127.0.0.1): a
relay that delivers refutations this memory refuses by its own bound is not scored down for them, the
honest records after them are applied, and the two memories are in sync afterwards."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
import trio

from neverest.clock import FixedClock, iso
from neverest.config import Config
from neverest.gossip import http
from neverest.gossip.codec import MAX_MESSAGE_BYTES
from neverest.gossip.service import Gossip
from neverest.identity import Identity
from neverest.memory.receive import REFUTE_FLOOD, receive
from neverest.memory.store import open_store
from neverest.peers import table
from neverest.records import lesson_hash, origin_of, sign_lesson, sign_refute

NOW = datetime(2026, 5, 1, 12, tzinfo=UTC)
FLOODER = nacl.signing.SigningKey(b"\x2a" * 32)
Start = Callable[..., Any]


@pytest.fixture
async def start(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[Start]:
    started: list[Gossip] = []

    async def start_node(name: str, seed: int, config: Config) -> tuple[Gossip, str]:
        gossip = Gossip(tmp_path / name, config, FixedClock(NOW), Identity.from_seed(bytes([seed]) * 32),
                        random.Random(seed))
        started.append(gossip)
        app = http.GossipApp(gossip.respond, max_body_bytes=MAX_MESSAGE_BYTES)
        binds = await nursery.start(http.serve, app, "127.0.0.1:0")
        url = "http://" + binds[0].split("//")[-1]
        gossip.listen_port = int(url.rpartition(":")[2])
        return gossip, url

    yield start_node
    nursery.cancel_scope.cancel()
    for gossip in started:
        await gossip.aclose()


async def test_a_relay_is_not_scored_down_for_refutations_past_this_memorys_bound(start: Start) -> None:
    bound, sent = 256, 300
    a, _ = await start("a", 1, Config(refute_origin_max=bound))
    b, b_url = await start("b", 2, Config(refute_origin_max=0))  # the relay holds every one of them
    lines = [sign_refute(FLOODER, lesson_hash("error", f"lesson {i}"), at=iso(NOW), seq=i + 1).raw
             for i in range(sent)]
    lines.append(sign_lesson(FLOODER, kind="error", text="make check hangs on the network tests", seen=2,
                             strength=1.0, updated=iso(NOW), seq=sent + 1).raw)
    with open_store(b.home) as store:
        got = receive(store, lines, source="folder:x", own_origin=b.identity.origin, config=b.config, now=NOW)
        assert got.refused == {} and got.refutations == sent
    with open_store(a.home) as store, store.write() as db:
        table.add(db, b_url, source="manual", now=NOW)

    [first] = await a.round(fanout=1)
    assert first["error"] is None and first["applied"]["refused"] == {REFUTE_FLOOD: sent - bound}
    assert first["applied"]["candidates"] == 1  # the flooder's lesson after the refused ones
    with open_store(a.home) as store:
        [address] = table.listing(store.db)
        assert (address.score, address.failures) == (table.SUCCESS, 0)
        assert store.db.execute("SELECT count(*) FROM records WHERE origin = ? AND type = 'refute'",
                                (origin_of(bytes(FLOODER.verify_key)),)).fetchone() == (bound,)
        refusals = {(r[0], r[1]): r[2] for r in store.db.execute("SELECT source, reason, count FROM refusals")}
    assert refusals == {(f"gossip:{b.identity.origin}", REFUTE_FLOOD): sent - bound}

    # The head (the lesson) is held: the two are in sync, and nothing is sent or refused again.
    [second] = await a.round(fanout=1)
    assert second["error"] is None and second["in_sync"] and second["records_received"] == 0
