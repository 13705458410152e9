"""Paced gossip between three memories: while everything is in sync the rounds space out; a memory
that receives something new wakes up at once, so a lesson still crosses the network at the full
rate (gossip/pace.py).

In-process and in virtual time.  Each memory runs the daemon's own services on a home of its own:
the gossip service with its scheduled rounds (``serve_rounds``), its flushes and the settling of
what it receives, and the control operations ``neverestctl`` calls (``ControlOps``).  They talk
HTTP to each other's ``GossipApp`` through httpx's ASGI transport (``loopback.AppNetwork``): no
socket, no process.  The clock is trio's ``MockClock``, advanced by ``virtual_time.autojump``
only when every task waits for a timer and no store work is out in a thread, so every round's
virtual time is exact and the same on any machine.  (The wall clock the memories sign with is
pinned, as ``NEVEREST_NOW`` pins a daemon's.)
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from neverest import daemon
from neverest.clock import FixedClock
from neverest.config import Config
from neverest.control import BadRequest
from neverest.gossip.loopback import AppNetwork
from neverest.identity import load_or_create
from neverest.memory.store import open_store
from neverest.paths import KEY_FILE
from neverest.services.control import ControlOps
from neverest.services.discovery import add_static_peers
from neverest.services.gossip import GossipService, make_app, serve_flush, serve_rounds
from neverest.services.state import DaemonState, MemoryWorker, serve_settle
from neverest.services.status import daemon_status
from tests.virtual_time import autojump

NOW = datetime(2026, 3, 1, 9, tzinfo=UTC)
EVERY_S = 1.0
QUIET_EVERY_S = 30.0
PORT = 7428
ERROR = {"kind": "error", "title": "pip install -e .", "happened": "fails without --no-build-isolation"}


class Wire(httpx.AsyncBaseTransport):
    """A sender's transport on the network that notes when each request left, and from whom."""

    def __init__(self, inner: httpx.AsyncBaseTransport, sender: str, sent: list[tuple[float, str]]) -> None:
        self._inner, self._sender, self._sent = inner, sender, sent

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self._sent.append((trio.current_time(), self._sender))
        return await self._inner.handle_async_request(request)


@dataclass
class Daemon:
    """One memory's daemon services, in-process."""

    host: str
    state: DaemonState
    gossip: GossipService
    ops: ControlOps
    sent: list[tuple[float, str]] = field(repr=False)

    def rounds(self) -> list[float]:
        """The virtual times of this memory's rounds: a round takes no virtual time, so all of its
        requests leave at one instant (a round with no peer to ask sends nothing: it is not seen)."""
        return sorted({at for at, sender in self.sent if sender == self.host})

    def records(self, origin: str) -> set[bytes]:
        with open_store(self.state.home) as store:
            return {raw for (raw,) in store.db.execute("SELECT raw FROM records WHERE origin = ?", (origin,))}

    async def ask(self, op: str, **request: Any) -> dict[str, Any]:
        return await self.ops.handle({"op": op, **request})


@asynccontextmanager
async def line_of_three(root: Path, clock: trio.testing.MockClock) -> AsyncIterator[list[Daemon]]:
    """A told of B, B of C, as the daemon's config would; they meet the rest through peer exchange."""
    network, sent, daemons = AppNetwork(), list[tuple[float, str]](), list[Daemon]()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(autojump, clock)
        try:
            for i, name in enumerate("ABC"):
                home, host = root / name, f"10.0.0.{i + 1}"
                home.mkdir(mode=0o700)
                fd = os.open(home / KEY_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # a seeded identity
                os.write(fd, (bytes([i + 1]) * 32).hex().encode() + b"\n")
                os.close(fd)
                peers = (f"http://10.0.0.{i + 2}:{PORT}",) if name != "C" else ()
                config = Config(gossip_every_s=EVERY_S, gossip_quiet_every_s=QUIET_EVERY_S, mdns=False,
                                ingest_every_s=0.0, peers=peers)
                state = DaemonState(home, config, FixedClock(NOW), load_or_create(home),
                                    MemoryWorker(home, config, FixedClock(NOW)))
                wire = Wire(network.transport_for(host), host, sent)
                service = GossipService(state, random.Random(i), transport=wire)
                service.gossip.listen_port = PORT  # as the daemon does once its listener is bound
                network.listen(f"http://{host}:{PORT}", make_app(service))
                daemons.append(Daemon(host, state, service, ControlOps(state, service, nursery), sent))
            # What daemon.run starts, less the sockets, the inbox, the night and discovery.
            for daemon in daemons:
                await nursery.start(serve_settle, daemon.state)
                await nursery.start(serve_flush, daemon.gossip)
                await add_static_peers(daemon.state, daemon.state.config.peers)
            for daemon in daemons:
                await nursery.start(serve_rounds, daemon.gossip)
            yield daemons
        finally:
            nursery.cancel_scope.cancel()
            with trio.CancelScope(shield=True):
                for daemon in daemons:
                    await daemon.gossip.aclose()


def gaps(times: list[float]) -> list[float]:
    return [round(b - a, 6) for a, b in itertools.pairwise(times)]


async def test_quiet_rounds_space_out_and_a_new_lesson_still_crosses_at_the_full_rate(
        tmp_path: Path, mock_clock: trio.testing.MockClock) -> None:
    async with line_of_three(tmp_path, mock_clock) as (a, b, c):
        # In sync from the start (nothing to share).  Once B has met everyone, its rounds stay at
        # the full rate for WARM_ROUNDS quiet rounds, then each wait doubles up to the quiet period.
        while gaps(b.rounds())[-2:] != [QUIET_EVERY_S] * 2:
            assert trio.current_time() < 200, gaps(b.rounds())
            await trio.sleep(EVERY_S)
        assert gaps(b.rounds())[-7:] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
        quiet = (await b.ask("status"))["status"]["quiet_rounds"]
        assert quiet == 7  # the rounds after those 7 waits, as its status counts them

        # A learns a lesson and publishes it, mid-way through B's 30 s wait.
        await trio.sleep(QUIET_EVERY_S / 2)
        pushed = trio.current_time()
        project = tmp_path / "project"
        project.mkdir()
        for session in ("s1", "s2"):
            await a.ask("remember", events=[ERROR | {"cwd": str(project), "session": session}])
        await a.ask("publish", project=str(project))
        slept = await a.ask("sleep")  # the lesson is signed, and a round ends the sleep: A pushes it
        assert slept["report"]["signed_lessons"] == 1
        [lesson] = a.records(a.state.identity.origin)

        await trio.sleep(3.5 * EVERY_S)
        # B received it from A (who asked) and woke: its next round came at once, not at the end of
        # the 30 s wait, the one after at the full rate (that round was not quiet: the lesson was news),
        # and the waits grew again from the first quiet round on (WARM_ROUNDS).
        assert [t - pushed for t in b.rounds() if t >= pushed] == [0.0, 1.0, 3.0]
        assert (await b.ask("status"))["status"]["quiet_rounds"] < quiet
        # A met C's address through B (peer exchange), so the lesson may come from either.
        assert lesson in c.records(a.state.identity.origin)


async def test_the_daemon_paces_its_own_rounds(tmp_path: Path, mock_clock: trio.testing.MockClock) -> None:
    """What the test above composes by hand, ``daemon.run`` composes: a lone daemon (its listener on
    127.0.0.1, nobody to ask) runs its scheduled rounds, they are quiet from the second on, they space
    out, and its status says so."""
    home = tmp_path / "lone"
    home.mkdir(mode=0o700)
    config = Config(gossip_every_s=EVERY_S, gossip_quiet_every_s=QUIET_EVERY_S, mdns=False, ingest_every_s=0.0,
                    inbox_every_s=1000.0, listen="127.0.0.1:0")  # (an inbox drain every 2 s costs a thread each)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(autojump, mock_clock)
        state = await nursery.start(daemon.run, home, config, FixedClock(NOW), load_or_create(home))
        # Rounds at 1, 2, 4, 8, 16, 32, 62 and 92 s: the first is news (nothing compared yet).
        await trio.sleep(100.0)
        assert (await daemon_status(state))["quiet_rounds"] == 7
        nursery.cancel_scope.cancel()


async def test_records_new_here_are_passed_on_by_the_next_round_soon_not_a_period_later(
        tmp_path: Path, mock_clock: trio.testing.MockClock) -> None:
    async with line_of_three(tmp_path, mock_clock) as (a, b, _c):
        await trio.sleep(2.5 * EVERY_S)  # every memory still at the full rate
        last = max(b.rounds())
        assert 0 < trio.current_time() - last < EVERY_S
        project = tmp_path / "project"
        project.mkdir()
        for session in ("s1", "s2"):
            await a.ask("remember", events=[ERROR | {"cwd": str(project), "session": session}])
        await a.ask("publish", project=str(project))
        await a.ask("sleep")  # A's round pushes the lesson to B
        pushed = trio.current_time()
        assert a.records(a.state.identity.origin) <= b.records(a.state.identity.origin)
        await trio.sleep(2 * EVERY_S)
        # B passed it on in a round of its own at once (its last began more than a quarter period before),
        # not at its next scheduled round, a period after its last.
        assert min(t for t in b.rounds() if t >= pushed) == pushed


async def test_an_owner_error_raised_by_a_job_is_answered_as_a_bad_request(
        tmp_path: Path, mock_clock: trio.testing.MockClock) -> None:
    # services/control.py names OwnerError only once a job has raised one (the memory service is loaded by
    # the worker's first job, not by an idle daemon): the owner still gets a refusal, not an internal error.
    async with line_of_three(tmp_path, mock_clock) as (a, _b, _c):
        with pytest.raises(BadRequest, match="is not a lesson of this memory"):
            await a.ask("revoke", hash="0" * 32)
        with pytest.raises(BadRequest, match="is this memory's own origin"):
            await a.ask("trust", action="add", origin=a.state.identity.origin)


async def test_news_received_while_no_nap_runs_shortens_the_next_one(
        tmp_path: Path, mock_clock: trio.testing.MockClock) -> None:
    """Records new here that arrive during a round (no nap to shorten then) make the nap after it short."""
    home = tmp_path / "one"
    home.mkdir(mode=0o700)
    config = Config(gossip_every_s=EVERY_S, gossip_quiet_every_s=QUIET_EVERY_S, mdns=False, ingest_every_s=0.0)
    clock = FixedClock(NOW)
    state = DaemonState(home, config, clock, load_or_create(home), MemoryWorker(home, config, clock))
    service = GossipService(state, random.Random(0), transport=AppNetwork().transport_for("10.0.0.9"))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(autojump, mock_clock)
        try:
            for news, expected in ((False, EVERY_S), (True, EVERY_S / 4), (False, EVERY_S)):
                service.wake(news=news)  # no nap is running: as during a round
                began = trio.current_time()
                await service.nap()
                assert trio.current_time() - began == expected
        finally:
            await service.aclose()
            nursery.cancel_scope.cancel()
