"""The in-sync exchange without worker threads (issue 26): both ends answer from the view's cached
range index on the event loop while nothing was committed since it was read, and go back to a
worker thread (reading the store again) as soon as anything was."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
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
from neverest.gossip.view import SqliteView
from neverest.identity import Identity
from neverest.memory.receive import receive
from neverest.memory.store import open_store
from neverest.records import sign_lesson

NOW = datetime(2026, 4, 1, 12, tzinfo=UTC)
CONFIG = Config(verify_processes=0)


def lesson(i: int, seq: int = 1) -> bytes:
    key = nacl.signing.SigningKey(bytes([i + 1]) * 32)
    return sign_lesson(key, kind="error", text=f"tool {i} fails at step {seq} on the runner", seen=1,
                       strength=1.0, updated=iso(NOW), seq=seq).raw


def fill(home: Path, raws: list[bytes]) -> None:
    with open_store(home) as store:
        result = receive(store, raws, source="test", own_origin="f" * 16, config=CONFIG, now=NOW)
    assert not result.refused


@asynccontextmanager
async def pair(tmp_path: Path) -> AsyncIterator[tuple[Gossip, Gossip, str]]:
    """A responder on loopback over ``tmp_path / "b"`` and an initiator over ``tmp_path / "a"``, and its URL."""
    clock = FixedClock(NOW)
    server = Gossip(tmp_path / "b", CONFIG, clock, Identity.from_seed(b"\x41" * 32), random.Random(1))
    me = Gossip(tmp_path / "a", CONFIG, clock, Identity.from_seed(b"\x42" * 32), random.Random(2))
    try:
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(http.serve, http.GossipApp(server.respond, max_body_bytes=MAX_MESSAGE_BYTES),
                                        "127.0.0.1:0")
            yield server, me, "http://" + binds[0].split("//")[-1]
            nursery.cancel_scope.cancel()
    finally:
        await me.aclose()
        await server.aclose()


def test_a_view_is_fresh_until_any_connection_commits(tmp_path: Path) -> None:
    fill(tmp_path, [lesson(i) for i in range(20)])
    with open_store(tmp_path) as store:
        view = SqliteView(store, own_origin="f" * 16, config=CONFIG)
        assert not view.fresh()  # never read
        root = view.index().root
        assert view.fresh()
        fill(tmp_path, [lesson(20)])  # another connection commits
        assert not view.fresh()
        assert view.index().root != root and len(view.index()) == 21
        assert view.fresh()
        view.apply([lesson(21)], source="test", now=NOW)  # this view's own write
        assert len(view.index()) == 22 and view.fresh()


@pytest.mark.parametrize("inline", [True, False])
async def test_in_sync_needs_no_thread_and_a_write_is_seen_at_once(tmp_path: Path, inline: bool,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    shared = [lesson(i) for i in range(30)]  # over the 16 origins a SYNC lists inline
    fill(tmp_path / "a", shared)
    fill(tmp_path / "b", shared)
    trips: list[str] = []
    real = trio.to_thread.run_sync

    async def counted(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        trips.append(getattr(fn, "__name__", repr(fn)))
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", counted)
    async with pair(tmp_path) as (server, me, url):
        server.inline_reads = me.inline_reads = inline
        first = await me.exchange(url, None)
        assert first.in_sync and first.error is None
        await me.exchange(url, first.peer)  # both indexes read now
        trips.clear()
        again = await me.exchange(url, first.peer)
        assert again.in_sync and again.round_trips == 1
        assert (trips == []) == inline, trips
        # Another connection writes a record into the responder's store: its cached index is stale.
        fill(tmp_path / "b", [lesson(99)])
        pulled = await me.exchange(url, first.peer)
        assert not pulled.in_sync and pulled.error is None and pulled.applied.accepted == 1
        after = await me.exchange(url, first.peer)
        assert after.in_sync and after.round_trips == 1
        # And a write into the initiator's own store is sent on at the next exchange.
        fill(tmp_path / "a", [lesson(98)])
        pushed = await me.exchange(url, first.peer)
        assert not pushed.in_sync and pushed.error is None
        last = await me.exchange(url, first.peer)
        assert last.in_sync
    with open_store(tmp_path / "b") as store:
        assert store.db.execute("SELECT count(*) FROM records").fetchone()[0] == 32


async def test_what_an_exchange_writes_besides_records_leaves_the_view_current(tmp_path: Path) -> None:
    """An exchange that received records then writes the peer's score and addresses (the peer tables) on
    the same connection: not what the view caches, so the view stays current and the next exchange reads
    no entry again (before, every such exchange left the view to rebuild them all: 12 ms at 500 origins)."""
    fill(tmp_path / "b", [lesson(i) for i in range(30)])
    async with pair(tmp_path) as (_, me, url):
        pulled = await me.exchange(url, None)
        assert pulled.error is None and pulled.applied.accepted == 30
        with open_store(tmp_path / "a") as store:  # the peer was scored: the peer table was written
            assert store.db.execute("SELECT origin FROM peers").fetchall() == [(pulled.peer,)]
        assert me._view.fresh(), "the peer table's write made the view rebuild every entry"
        assert len(me._view.index()) == 30
