"""Gossip services over real HTTP on 127.0.0.1: first contact, this memory's own address, peers
learned from peers, inbound peers, hostile address lists, and transport failures apart from refusals.

Each node is the daemon's own ``Gossip`` service behind the daemon's own listener (hypercorn on
127.0.0.1:0); only the transport-failure test fakes the network (``httpx.MockTransport``).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest
import trio

from neverest.clock import FixedClock, iso
from neverest.config import Config
from neverest.ctl import main
from neverest.gossip import http, peer_auth
from neverest.gossip.codec import MAX_MESSAGE_BYTES, NONCE_BYTES, MessageType, decode, encode
from neverest.gossip.core import Initiator
from neverest.gossip.loopback import AppNetwork
from neverest.gossip.service import Gossip
from neverest.gossip.view import SqliteView
from neverest.identity import Identity
from neverest.memory.store import open_store
from neverest.peers import table

NOW = datetime(2026, 5, 1, 12, tzinfo=UTC)


@dataclass
class Node:
    gossip: Gossip
    url: str

    @property
    def origin(self) -> str:
        return self.gossip.identity.origin

    def peers(self) -> dict[str, table.Address]:
        with open_store(self.gossip.home) as store:
            return {a.url: a for a in table.listing(store.db)}

    def add(self, other: Node) -> None:
        with open_store(self.gossip.home) as store, store.write() as db:
            table.add(db, other.url, source="manual", now=NOW)

    def refusals(self) -> list[tuple[str, str, int]]:
        with open_store(self.gossip.home) as store:
            return [tuple(r) for r in store.db.execute("SELECT source, reason, count FROM refusals")]

    def peer_sources(self) -> dict[str, str]:
        with open_store(self.gossip.home) as store:
            return dict(store.db.execute("SELECT origin, source FROM peers").fetchall())


Start = Callable[..., Any]


@pytest.fixture
async def start(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[Start]:
    started: list[Gossip] = []

    async def start_node(name: str, seed: int, *, transport: httpx.AsyncBaseTransport | None = None) -> Node:
        gossip = Gossip(tmp_path / name, Config(), FixedClock(NOW), Identity.from_seed(bytes([seed]) * 32),
                        random.Random(seed), transport=transport)
        started.append(gossip)
        app = http.GossipApp(gossip.respond, max_body_bytes=MAX_MESSAGE_BYTES)
        binds = await nursery.start(http.serve, app, "127.0.0.1:0")
        url = "http://" + binds[0].split("//")[-1]
        gossip.listen_port = int(url.rpartition(":")[2])
        return Node(gossip, url)

    yield start_node
    nursery.cancel_scope.cancel()
    for gossip in started:
        await gossip.aclose()


async def test_a_first_contact_is_a_normal_exchange_not_a_refusal(start: Start,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    a, b = await start("a", 1), await start("b", 2)
    a.add(b)
    [result] = await a.gossip.round(fanout=3)
    assert result["error"] is None and result["peer"] == b.origin and result["round_trips"] == 2
    assert b.refusals() == [] and a.refusals() == []
    assert not [r for r in caplog.records if "refused" in r.getMessage()]
    assert a.peers()[b.url].origin == b.origin and a.peers()[b.url].score == table.SUCCESS


async def test_a_changed_machine_at_a_known_address_is_readdressed(start: Start) -> None:
    a, b = await start("a", 1), await start("b", 2)
    with open_store(a.gossip.home) as store, store.write() as db:
        table.add(db, b.url, source="manual", now=NOW, origin="ab" * 8)  # what was there before
    [result] = await a.gossip.round(fanout=3)
    assert result["error"] is None and result["peer"] == b.origin
    assert a.peers()[b.url].origin == b.origin


async def test_this_memorys_own_address_is_marked_and_never_gossiped_with(start: Start) -> None:
    a = await start("a", 1)
    [result] = await a.gossip.round(fanout=3, only=a.url)
    assert result["self"] and result["error"] is None and result["records_received"] == 0
    assert result["round_trips"] == 1  # the signed hello said who answers: no exchange with itself
    [row] = a.peers().values()
    assert (row.source, row.origin, row.score, row.failures) == ("self", a.origin, 0, 0)
    assert await a.gossip.round(fanout=3) == []  # never picked again
    with pytest.raises(table.PeerError, match="own address"):
        await a.gossip.round(fanout=3, only=a.url)
    assert a.refusals() == []


async def test_peers_are_learned_from_peers_and_inbound_peers_recorded(start: Start) -> None:
    a, b, c = await start("a", 1), await start("b", 2), await start("c", 3)
    a.add(b)
    b.add(c)
    assert (await b.gossip.round(fanout=3))[0]["error"] is None  # B found C healthy
    [first] = await a.gossip.round(fanout=3)
    assert first["error"] is None and first["addresses"] >= 1

    known = a.peers()
    assert known[c.url].source == f"peer:{b.origin}"
    assert known[c.url].origin is None  # an address only: its origin comes from its own exchange
    # B recorded A as an inbound peer, at the port A listens on; and C recorded B.
    assert b.peers()[a.url].source == "inbound" and b.peer_sources()[a.origin] == "inbound"
    assert c.peers()[b.url].source == "inbound"

    results = {r["url"]: r for r in await a.gossip.round(fanout=10)}
    assert results[c.url]["error"] is None and results[c.url]["peer"] == c.origin
    assert a.peers()[c.url].origin == c.origin
    assert [r for node in (a, b, c) for r in node.refusals()] == []


async def test_peer_list_shows_a_peer_that_gossiped_in_with_its_origin_and_when_it_was_seen(
        start: Start, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = await start("a", 1), await start("b", 2)
    a.add(b)
    assert (await a.gossip.round(fanout=3))[0]["error"] is None
    capsys.readouterr()
    assert main(["--home", str(b.gossip.home), "peer", "list"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert line.split()[:3] == [a.url, a.origin, "inbound"]
    assert "origin not known yet" not in line and f"last seen {iso(NOW)}" in line
    assert main(["--home", str(b.gossip.home), "peer", "list", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert (row["origin"], row["last_seen"], row["peer_last_seen"]) == (a.origin, None, iso(NOW))


# -- hostile peers -------------------------------------------------------------------------


def _hostile_responder(addresses: list[Any], seed: int = 9) -> http.Responder:
    """A peer that answers every request with a signed IN_SYNC carrying ``addresses``."""
    key = Identity.from_seed(bytes([seed]) * 32).signing_key

    async def respond(body: bytes, client: str) -> bytes:
        request = decode(body)
        payload = msgpack.packb({"p": addresses}, use_bin_type=True)
        auth = peer_auth.sign(key, MessageType.IN_SYNC, payload, to=request.auth.origin, ts=request.auth.ts,
                              nonce=random.randbytes(NONCE_BYTES), re=request.auth.nonce)
        return encode(MessageType.IN_SYNC, auth, payload)
    return respond


async def _serve_hostile(nursery: trio.Nursery, addresses: list[Any]) -> str:
    binds = await nursery.start(http.serve, http.GossipApp(_hostile_responder(addresses)), "127.0.0.1:0")
    return "http://" + binds[0].split("//")[-1]


async def test_ten_thousand_addresses_are_refused_and_penalised(start: Start, nursery: trio.Nursery) -> None:
    a = await start("a", 1)
    hostile = await _serve_hostile(nursery, [f"http://10.0.{i // 256}.{i % 256}:7428" for i in range(10_000)])
    with open_store(a.gossip.home) as store, store.write() as db:
        table.add(db, hostile, source="manual", now=NOW, origin=Identity.from_seed(bytes([9]) * 32).origin)
    [result] = await a.gossip.round(fanout=3)
    assert result["error"]["code"] == "bad-field" and "10000 addresses" in result["error"]["message"]
    assert list(a.peers()) == [hostile]  # nothing learned
    assert a.peers()[hostile].score == -table.PENALTY["protocol"]


async def test_garbage_addresses_are_bounded_counted_and_penalised(start: Start, nursery: trio.Nursery) -> None:
    a = await start("a", 1)
    garbage = ["ftp://x", "http://u@h:1", "http://h/path", "javascript:alert(1)", "x" * 1000, "http://[::1"]
    hostile = await _serve_hostile(nursery, garbage + [f"http://10.9.0.{i}:7428" for i in range(10)])
    a_url = hostile
    with open_store(a.gossip.home) as store, store.write() as db:
        table.add(db, a_url, source="manual", now=NOW)
    [result] = await a.gossip.round(fanout=3)
    assert result["error"] is None and result["in_sync"]
    learned = [u for u, row in a.peers().items() if row.source.startswith("peer:")]
    assert len(learned) == table.LEARN_PER_EXCHANGE  # at most 8 new ones per exchange
    row = a.peers()[hostile]
    assert row.score == table.SUCCESS - table.PENALTY["bad-addresses"]
    assert [(reason, n) for _, reason, n in a.refusals()] == [("bad-address", len(garbage))]


async def test_a_responder_penalises_an_initiator_that_shares_garbage(start: Start) -> None:
    b = await start("b", 2)
    hostile_home = b.gossip.home.parent / "hostile"
    identity = Identity.from_seed(bytes([7]) * 32)
    with open_store(hostile_home) as store:
        view = SqliteView(store, own_origin=identity.origin, config=Config())
        share = [(f"gopher://h{i}", None) for i in range(16)]
        initiator = Initiator(view, identity.signing_key, b.origin, now=NOW, rng=random.Random(1), share=share,
                              listen_port=1)
        request = initiator.start()
        async with http.client() as client:
            while request is not None:
                request = initiator.handle(await http.post(client, b.url, request, max_response_bytes=1 << 20))
    assert initiator.result.error is None
    assert ("gossip:" + identity.origin, "bad-address", 16) in b.refusals()
    assert b.peers()["http://127.0.0.1:1"].source == "inbound"
    with open_store(b.gossip.home) as store:
        [score] = store.db.execute("SELECT score FROM peers WHERE origin = ?", (identity.origin,)).fetchone()
    assert score == -table.PENALTY["bad-addresses"]


# -- a transport failure is not a refusal ----------------------------------------------------


async def test_a_transport_failure_backs_off_without_blame_and_a_refusal_is_penalised(start: Start) -> None:
    def network(request: httpx.Request) -> httpx.Response:
        if request.url.host == "down.test":
            raise httpx.ConnectError("connection refused")
        return httpx.Response(400, content=b"bad-msgpack: not a gossip message")

    a = await start("a", 1, transport=httpx.MockTransport(network))
    with open_store(a.gossip.home) as store, store.write() as db:
        for url, origin in (("http://down.test:7428", "d0" * 8), ("http://rude.test:7428", "e0" * 8)):
            table.add(db, url, source="manual", now=NOW, origin=origin)
    results = {r["url"]: r for r in await a.gossip.round(fanout=3)}
    down, rude = results["http://down.test:7428"], results["http://rude.test:7428"]
    assert (down["error"]["who"], down["error"]["code"]) == ("network", "unreachable")
    assert (rude["error"]["who"], rude["error"]["code"]) == ("remote", "refused")
    assert "HTTP 400" in rude["error"]["message"]
    rows = a.peers()
    assert rows["http://down.test:7428"].score == 0 and rows["http://down.test:7428"].failures == 1
    assert rows["http://rude.test:7428"].score == -table.PENALTY["protocol"]


# -- the same services without sockets: the simulator's network --------------------------------


async def test_services_learn_peers_over_an_in_memory_network(tmp_path: Path) -> None:
    network = AppNetwork()
    nodes: list[Node] = []
    for i, name in enumerate("abc"):
        host = f"10.0.0.{i + 1}"
        gossip = Gossip(tmp_path / name, Config(), FixedClock(NOW), Identity.from_seed(bytes([i + 1]) * 32),
                        random.Random(i), transport=network.transport_for(host), listen_port=7428)
        network.listen(f"http://{host}:7428", http.GossipApp(gossip.respond))
        nodes.append(Node(gossip, f"http://{host}:7428"))
    a, b, c = nodes
    try:
        a.add(b)
        b.add(c)
        await b.gossip.round(fanout=3)
        await a.gossip.round(fanout=3)
        assert a.peers()[c.url].source == f"peer:{b.origin}"
        assert b.peers()[a.url].source == "inbound"  # from the host the request came from, at its port
        await a.gossip.round(fanout=3)  # A meets C: the address learns its origin from C itself
        assert a.peers()[c.url].origin == c.origin and a.peers()[c.url].score == table.SUCCESS
        network.stop(c.url)  # C goes away: the network's fault, not C's
        results = {r["url"]: r for r in await a.gossip.round(fanout=3)}
        assert results[c.url]["error"]["who"] == "network" and results[c.url]["error"]["code"] == "unreachable"
        assert a.peers()[c.url].failures == 1 and a.peers()[c.url].score == table.SUCCESS
    finally:
        for node in nodes:
            await node.gossip.aclose()
