"""The peer table: addresses before origins, scoring and back-off, and the peer commands."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from neverest.ctl import main
from neverest.memory.store import open_store
from neverest.peers import table

NOW = datetime(2026, 5, 1, tzinfo=UTC)


@pytest.mark.parametrize(("given", "normal"), [
    ("http://192.0.2.7:7428", "http://192.0.2.7:7428"),
    ("HTTP://Example.ORG:7428/", "http://example.org:7428"),
    ("http://[::1]:7428", "http://[::1]:7428"),
])
def test_urls_are_normalised(given: str, normal: str) -> None:
    assert table.normalise_url(given) == normal


@pytest.mark.parametrize("bad", ["ftp://x", "192.0.2.7:7428", "http://x:99999", "http://x/gossip", "http://u@x"])
def test_bad_urls_are_refused(bad: str) -> None:
    with pytest.raises(table.PeerError):
        table.normalise_url(bad)


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
        assert table.healthy(db, NOW + timedelta(minutes=3)) == []
        assert [x.url for x in table.healthy(db, NOW + timedelta(hours=1))] == [url]
        # The machine at that address changed: the address is re-keyed, and the caller is told.
        assert table.succeeded(db, url, "b" * 16, NOW + timedelta(hours=1)) == "a" * 16
        assert table.listing(db)[0].failures == 0


def test_a_hostile_peer_is_ignored_at_once_by_score(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    with store.write() as db:
        url = table.add(db, "http://127.0.0.1:7002", source="mdns", now=NOW, origin="c" * 16)
        for _ in range(2):
            table.failed(db, url, "identity", "signature does not verify", NOW)
            table.failed(db, url, "invalid-records", "bad-signature x 40", NOW)
        [a] = table.listing(db)
        assert a.score < table.IGNORE_BELOW and a.ignored_until is not None


def test_peer_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = ["--home", str(tmp_path)]
    assert main([*home, "peer", "add", "http://127.0.0.1:7428/"]) == 0
    assert main([*home, "peer", "add", "not a url"]) == 2
    capsys.readouterr()
    assert main([*home, "peer", "list", "--json"]) == 0
    [row] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["url"] == "http://127.0.0.1:7428" and row["origin"] is None and row["source"] == "manual"
    assert main([*home, "peer", "remove", "http://127.0.0.1:7428"]) == 0
    assert main([*home, "peer", "remove", "http://127.0.0.1:7428"]) == 1
