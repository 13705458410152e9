"""The peer table: addresses before origins, scoring and back-off, and the peer commands."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from neverest.clock import iso
from neverest.ctl import main
from neverest.memory.store import open_store
from neverest.peers import table

NOW = datetime(2026, 5, 1, tzinfo=UTC)


@pytest.mark.parametrize(("given", "normal"), [
    ("http://192.0.2.7:7428", "http://192.0.2.7:7428"),
    ("HTTP://Example.ORG:7428/", "http://example.org:7428"),
    ("http://[::1]:7428", "http://[::1]:7428"),
    # What a person types: host:port, [v6]:port, a bare host or IPv6 address (port 7428).
    ("192.0.2.7:7428", "http://192.0.2.7:7428"),
    ("  peer.lan:7500 ", "http://peer.lan:7500"),
    ("[2001:DB8::7]:7428", "http://[2001:db8::7]:7428"),
    ("[::1]", "http://[::1]:7428"),
    ("::1", "http://[::1]:7428"),
    ("peer.lan", "http://peer.lan:7428"),
    ("192.0.2.7", "http://192.0.2.7:7428"),
])
def test_urls_are_normalised(given: str, normal: str) -> None:
    assert table.normalise_url(given) == normal


@pytest.mark.parametrize(("bad", "says"), [
    ("ftp://x", "not ftp://"),
    ("ssh://192.0.2.7:7428", "not ssh://"),
    ("http://x:99999", "out of range"),
    ("x:0", "out of range"),
    ("x:70000", "out of range"),
    ("x:port", "not a number"),
    ("http://x/gossip", "no path"),
    ("x:7428/gossip", "no path"),
    ("http://x?a=1", "no path"),
    ("http://u@x", "no user name"),
    ("u:pw@x:7428", "no user name"),
    ("2001:db8::7:7428x", "in brackets"),
    ("[2001:db8::7", "closing bracket"),
    ("[not-v6]:7428", "not an IPv6 address"),
    ("bad host:7428", "not a host name"),
    ("", "empty"),
    ("http://:7428", "no host"),
])
def test_bad_urls_are_refused_saying_what_is_wrong(bad: str, says: str) -> None:
    with pytest.raises(table.PeerError, match=says):
        table.normalise_url(bad)


def test_a_scheme_can_be_required() -> None:
    assert table.normalise_url("http://192.0.2.7:7428", require_scheme=True) == "http://192.0.2.7:7428"
    with pytest.raises(table.PeerError, match="not an http:// URL"):
        table.normalise_url("192.0.2.7:7428", require_scheme=True)


def test_an_address_learns_its_origin_and_failures_back_off(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    with store.write() as db:
        url = table.add(db, "http://127.0.0.1:7001", source="manual", now=NOW)
        assert table.listing(db)[0].origin is None
        assert table.succeeded(db, url, "a" * 16, NOW) is None
        [a] = table.listing(db)
        assert (a.origin, a.score, a.last_seen) == ("a" * 16, table.SUCCESS, "2026-05-01T00:00:00.000000Z")
        for i in range(table.IGNORE_AFTER):
            table.failed(db, url, "timeout", "read timed out", NOW + timedelta(minutes=i))
        [a] = table.listing(db)
        assert a.failures == table.IGNORE_AFTER and a.ignored_until is not None
        # The network's failures: tried again 10 s after the third, then after 20 s, 40 s...
        assert table.healthy(db, NOW + timedelta(minutes=2, seconds=9)) == []
        assert [x.url for x in table.healthy(db, NOW + timedelta(minutes=2, seconds=10))] == [url]
        table.failed(db, url, "unreachable", "connection refused", NOW + timedelta(minutes=3))
        assert table.healthy(db, NOW + timedelta(minutes=3, seconds=19)) == []
        assert [x.url for x in table.healthy(db, NOW + timedelta(hours=1))] == [url]
        # The machine at that address changed: the address is re-keyed, and the caller is told.
        assert table.succeeded(db, url, "b" * 16, NOW + timedelta(hours=1)) == "a" * 16
        assert table.listing(db)[0].failures == 0


def test_failures_the_peer_caused_back_off_for_minutes(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    with store.write() as db:
        url = table.add(db, "http://127.0.0.1:7006", source="manual", now=NOW)
        for _ in range(table.IGNORE_AFTER):
            table.failed(db, url, "protocol", "HTTP 400", NOW)
        assert table.healthy(db, NOW + timedelta(minutes=4, seconds=59)) == []
        assert [x.url for x in table.healthy(db, NOW + timedelta(minutes=5))] == [url]
        # Hostile by score: even the network's failures then back off for minutes.
        table.succeeded(db, url, "f" * 16, NOW)
        for _ in range(5):
            table.penalise(db, "f" * 16, "identity")
        table.failed(db, url, "timeout", "read timed out", NOW)
        assert table.healthy(db, NOW + timedelta(minutes=4)) == []


def test_a_hostile_peer_is_ignored_at_once_by_score(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    with store.write() as db:
        url = table.add(db, "http://127.0.0.1:7002", source="mdns", now=NOW, origin="c" * 16)
        for _ in range(2):
            table.failed(db, url, "identity", "signature does not verify", NOW)
            table.failed(db, url, "invalid-records", "bad-signature x 40", NOW)
        [a] = table.listing(db)
        assert a.score < table.IGNORE_BELOW and a.ignored_until is not None


def test_a_transport_failure_backs_off_without_a_penalty(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    with store.write() as db:
        url = table.add(db, "http://127.0.0.1:7003", source="manual", now=NOW)
        table.succeeded(db, url, "d" * 16, NOW)
        for kind in ("timeout", "unreachable", "busy"):
            table.failed(db, url, kind, "the network", NOW)
        [a] = table.listing(db)
        assert a.score == table.SUCCESS  # nobody misbehaved
        assert a.failures == 3 and a.ignored_until is not None  # but it is not tried at once again
        table.failed(db, url, "protocol", "HTTP 400", NOW)
        assert table.listing(db)[0].score == table.SUCCESS - table.PENALTY["protocol"]


def test_this_memorys_own_address_is_marked_and_refused(tmp_path: Path) -> None:
    me = "e" * 16
    store = open_store(tmp_path)
    with store.write() as db:
        url = table.add(db, "127.0.0.1:7004", source="manual", now=NOW)
        table.mark_self(db, url, me, NOW)
        [a] = table.listing(db)
        assert (a.source, a.origin, a.score) == ("self", me, 0)
        assert table.healthy(db, NOW) == [] and table.shareable(db, NOW) == []
        with pytest.raises(table.PeerError, match="own address"):
            table.add(db, "http://127.0.0.1:7004", source="manual", now=NOW)
        with pytest.raises(table.PeerError, match="own address"):
            table.add(db, "http://127.0.0.1:7005", source="manual", now=NOW, origin=me, own_origin=me)
        # The directory and zeroconf list this memory among the others: not an error, and not added.
        assert table.add(db, "http://127.0.0.1:7004", source="directory", now=NOW) == "http://127.0.0.1:7004"
        table.add(db, "http://127.0.0.1:7005", source="mdns", now=NOW, origin=me, own_origin=me)
        assert table.learn(db, ["http://127.0.0.1:7004"], via="f" * 16, now=NOW).known == 1
        assert [x.source for x in table.listing(db)] == ["self"]


def test_learned_addresses_are_bounded_and_only_addresses(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    peer, other = "a1" * 8, "b2" * 8
    with store.write() as db:
        table.add(db, "http://127.0.0.1:7100", source="manual", now=NOW)
        shared = ["http://127.0.0.1:7100", "https://127.0.0.1:7101", "127.0.0.1:7102", "http://x/p",
                  "http://" + "a" * 200 + ":1", "http://u@h:1", "gopher://h"] + \
                 [f"http://10.0.0.{i}:7428" for i in range(20)]
        learned = table.learn(db, shared, via=peer, now=NOW)
        assert (learned.known, learned.bad, learned.added, learned.dropped) == (1, 6, table.LEARN_PER_EXCHANGE, 12)
        rows = {a.url: a for a in table.listing(db)}
        assert rows["http://10.0.0.0:7428"].source == f"peer:{peer}" and rows["http://10.0.0.0:7428"].origin is None
        assert rows["http://127.0.0.1:7100"].source == "manual"  # a known address is left as it is
        for start in range(0, 200, 8):  # the per-peer bound
            table.learn(db, [f"http://10.1.{start}.{i}:7428" for i in range(8)], via=peer, now=NOW)
        assert sum(a.source == f"peer:{peer}" for a in table.listing(db)) == table.LEARN_PER_PEER
        assert table.learn(db, ["http://10.2.0.1:7428"], via=other, now=NOW).added == 1
        with pytest.raises(ValueError):
            table.learn(db, [], via="not an origin", now=NOW)


def test_only_healthy_plain_http_addresses_with_an_origin_are_shared(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    with store.write() as db:
        for port, origin in ((7201, "1" * 16), (7202, "2" * 16), (7203, None)):
            url = table.add(db, f"127.0.0.1:{port}", source="manual", now=NOW)
            if origin:
                table.succeeded(db, url, origin, NOW + timedelta(seconds=port))
        table.add(db, "https://127.0.0.1:7204", source="manual", now=NOW, origin="4" * 16)
        table.succeeded(db, "https://127.0.0.1:7204", "4" * 16, NOW)
        table.failed(db, "http://127.0.0.1:7202", "timeout", "x", NOW)
        assert table.shareable(db, NOW) == [("http://127.0.0.1:7201", "1" * 16)]


def test_an_inbound_peer_is_recorded_with_where_it_listens(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    with store.write() as db:
        assert table.inbound(db, "c3" * 8, "http://127.0.0.1:7301", NOW)
        assert not table.inbound(db, "c3" * 8, "http://127.0.0.1:7301", NOW)  # known: nothing changes
        assert not table.inbound(db, "d4" * 8, None, NOW)  # did not say where it listens
        [a] = table.listing(db)
        # The peer named its own address in a request it signed: the address takes its origin at once.
        assert (a.url, a.source, a.origin) == ("http://127.0.0.1:7301", "inbound", "c3" * 8)
        assert (a.last_seen, a.peer_seen, a.heard) == (None, iso(NOW), iso(NOW))
        peers = dict(db.execute("SELECT origin, source FROM peers").fetchall())
        assert peers == {"c3" * 8: "inbound", "d4" * 8: "inbound"}


def test_peer_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = ["--home", str(tmp_path)]
    assert main([*home, "peer", "add", "http://127.0.0.1:7428/"]) == 0
    assert main([*home, "peer", "add", "127.0.0.1:7429"]) == 0  # no http:// needed
    assert main([*home, "peer", "add", "not a url"]) == 2
    capsys.readouterr()
    assert main([*home, "peer", "list", "--json"]) == 0
    [row, row2] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["url"] == "http://127.0.0.1:7428" and row["origin"] is None and row["source"] == "manual"
    assert row2["url"] == "http://127.0.0.1:7429"
    assert main([*home, "peer", "remove", "http://127.0.0.1:7428"]) == 0
    assert main([*home, "peer", "remove", "http://127.0.0.1:7428"]) == 1
