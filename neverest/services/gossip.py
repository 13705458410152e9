"""Gossip as a daemon service: the peer-facing HTTP listener and the rounds.

- the listener (hypercorn, trio worker) serves ``POST /gossip/v1/exchange`` to peers,
  and ``GET /healthz`` and ``GET /metrics`` for the owner's monitoring;
- a round with ``fanout`` peers runs every ``gossip_every_s``, after every night, and
  when the owner changes what is shared (``neverestctl publish``, ``revoke``...); when
  rounds keep finding every peer in sync they space out, up to ``gossip_quiet_every_s``,
  and anything new brings the full rate back at once (``gossip/pace.py``);
- records received either way make the memory settle (judge, render) soon after;
- what gossip counts in memory (refused requests, successes that change nothing else) is
  written every ``FLUSH_EVERY_S`` and when the daemon stops; status adds what is pending.
"""

from __future__ import annotations

import errno
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

import trio

from neverest.gossip import http as gossip_http
from neverest.gossip.codec import MAX_MESSAGE_BYTES
from neverest.gossip.pace import Outcome, Pace
from neverest.gossip.service import Gossip
from neverest.memory.store import StoreError
from neverest.services.listen import ListenError, first_of, parse_listen
from neverest.services.state import DaemonState

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("neverestd.gossip")
FLUSH_EVERY_S: Final = 30.0  # at most one write per this long for what a flood (or idle gossip) counts
# Records new to this memory are passed on by a round that starts this soon after the last one began, not a
# whole period after (a rumour's next hop, as memberlist sends a broadcast on its next tick): a quarter of
# ``gossip_every_s``, at most 1 s.  Rounds stay one at a time, so news brings at most 4 rounds a period (one
# a second at a long period), only while records that verify and that this memory did not hold keep coming.
EAGER_GAP_MAX_S: Final = 1.0


class GossipService:
    def __init__(self, state: DaemonState, rng: random.Random,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.state = state
        # ``transport``: None is the real network; tests give an in-memory one (gossip/loopback.AppNetwork).
        self.gossip = Gossip(state.home, state.config, state.clock, state.identity, rng, transport=transport,
                             on_received=self._received)
        state.pending_refusals = self.gossip.pending_refusals
        self.settings = state.config.sections.gossip
        self.pace = Pace(self.settings.every_s, self.settings.quiet_every_s)
        # The scheduled rounds' current wait (serve_rounds): ``wake`` shortens it.  Waits count from
        # when the last round began, not from when it ended: a round every ``gossip_every_s``, as the
        # config says, however long its exchanges took (measured with 30 daemons sharing 2 cores: a
        # round took 1.4 s, and each hop of a new record waited that long plus the whole period).
        self._nap: trio.CancelScope | None = None
        self._nap_from = 0.0
        self._round_began: float | None = None
        self._news = False  # records new here arrived while no nap was running: the next nap is short

    def _received(self, accepted: int) -> None:
        # A peer that asked brought records new here: settle them, and pass them on (EAGER_GAP_MAX_S).
        self.state.settle_soon()
        self.wake(news=True)

    def _eager_gap_s(self) -> float:
        return min(self.pace.every_s / 4, EAGER_GAP_MAX_S)

    def wake(self, *, news: bool = False) -> None:
        """Back to the full rate: the next scheduled round comes ``gossip_every_s`` after the last one began,
        or with ``news`` (records new here) ``_eager_gap_s`` after it."""
        self.pace.wake()
        gap = self._eager_gap_s() if news else self.pace.every_s
        if self._nap is not None:
            self._nap.deadline = min(self._nap.deadline, max(trio.current_time(), self._nap_from + gap))
        elif news:
            self._news = True

    async def nap(self) -> None:
        """Wait until the next scheduled round is due (``wake`` may end the wait early)."""
        now = trio.current_time()
        self._nap_from = now if self._round_began is None else min(now, self._round_began)
        wait = min(self.pace.wait_s(), self._eager_gap_s()) if self._news else self.pace.wait_s()
        self._news = False
        with trio.move_on_at(self._nap_from + wait) as self._nap:
            await trio.sleep_forever()
        self._nap = None

    async def aclose(self) -> None:
        await self.gossip.aclose()

    async def respond(self, body: bytes, client: str) -> bytes:
        try:
            answer = await self.gossip.respond(body, client)
        except gossip_http.RemoteError:
            self.state.count_exchange("refused")
            raise
        self.state.count_exchange("answered")
        return answer

    async def round(self, only: str | None = None) -> list[dict[str, Any]]:
        """One round now (with ``only`` that address); what each exchange did."""
        self._round_began = trio.current_time()
        results = await self.gossip.round(fanout=self.settings.fanout, only=only)
        self.state.last_round = self.gossip.last_round
        for result in results:
            self.state.count_exchange("failed" if result.get("error") else "ok")
        if any(result.get("records_received") for result in results):
            self.state.settle_soon()
        # News is records stored here for the first time (a peer sending what this memory refuses is not).
        news = any((result.get("applied") or {}).get("accepted") for result in results)
        outcomes = [Outcome(completed=bool(r) and not r.get("error"), in_sync=bool(r.get("in_sync")),
                            moved=int(r.get("records_sent", 0)) + int(r.get("records_received", 0))) for r in results]
        # What pacing compares round to round: what is held, and how many peers there are to pick
        # from (a peer added by hand, found by discovery or met inbound is news too).
        state = await self.gossip.holdings_root() + self.gossip.healthy_peers.to_bytes(8, "big")
        self.pace.after_round(state, outcomes)
        if self.pace.quiet_rounds == 0 or only is not None:  # the owner asked for this peer: news
            self.wake(news=news)
        self.state.quiet_rounds = self.pace.quiet_rounds
        return results

    async def round_quietly(self) -> None:
        """A scheduled round: its failures are logged, never fatal."""
        try:
            await self.round()
        except StoreError as exc:
            log.warning("gossip: %s", exc)


async def serve_listener(service: GossipService, app: Any, *,
                         task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
    """The peer-facing listener; reports the bound addresses.  A port that cannot be bound is one
    clear error (``ListenError``), not a traceback."""
    listen = service.settings.listen
    parse_listen(listen)
    try:
        await gossip_http.serve(app, listen, task_status=task_status)
    except (OSError, BaseExceptionGroup) as raised:
        exc = first_of(raised, OSError)
        if exc is None:
            raise
        if exc.errno == errno.EADDRINUSE:
            raise ListenError(f"cannot listen on {listen}: the port is in use (another neverestd? "
                              "choose another with --listen HOST:PORT)") from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise ListenError(f"cannot listen on {listen}: permission denied (ports below 1024 need privileges)"
                              ) from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise ListenError(f"cannot listen on {listen}: this machine has no such address") from None
        raise ListenError(f"cannot listen on {listen}: {exc.strerror or exc}") from None


def make_app(service: GossipService, metrics: Callable[[], Awaitable[str]] | None = None) -> gossip_http.GossipApp:
    return gossip_http.GossipApp(service.respond, max_body_bytes=MAX_MESSAGE_BYTES, metrics=metrics,
                                 cutoff=service.gossip.cutoff, refused=service.gossip.refused)


async def serve_flush(service: GossipService, *, every_s: float = FLUSH_EVERY_S,
                      task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Write what gossip counted in memory, every ``every_s`` (and ``aclose`` writes the rest)."""
    task_status.started()
    while True:
        await trio.sleep(every_s)
        try:
            await service.gossip.flush()
        except StoreError as exc:
            log.warning("gossip: counts not written yet: %s", exc)


async def serve_rounds(service: GossipService, *,
                       task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    task_status.started()
    while True:
        await service.nap()
        await service.round_quietly()
