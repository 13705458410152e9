"""Gossip as the daemon runs it: the sans-IO core driven over HTTP, with the peer table.

- ``respond``: what the HTTP app calls for each ``POST /gossip/v1/exchange``.  One
  ``Responder`` (and its replay cache) per process, on its own store connection, used
  from worker threads one request at a time.  A peer whose request verified is recorded
  as an inbound peer (with its address, when it said which port it listens on), and the
  addresses it shared are learned; at most once per peer per ``INBOUND_EVERY_S``, so that
  answering stays one read transaction in the common case.
- ``exchange``: one exchange with one address, as the initiator: the core's steps run
  in worker threads (SQLite), the posts go through ``neverest.httpclient`` on one client
  kept for the life of the service.  Runs again at once while the peer says there is more
  (a cut delta), a bounded number of times.  The result scores the address in the peer
  table: a transport failure backs off without a penalty, a refusal or bad bytes are
  penalised, an address that turns out to be this memory is marked ``self``, and the
  addresses the peer shared are learned (bounded; garbage is penalised).
- ``round``: ``fanout`` healthy addresses at random, exchanged with concurrently.

Randomness (``random.SystemRandom`` in the daemon), the clock and the HTTP transport
(``transport``: an ``httpx.AsyncBaseTransport``, to fake the network) are injected.
Close with ``aclose`` (the HTTP client and the store).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx
import trio

from neverest import httpclient
from neverest.clock import Clock
from neverest.config import Config
from neverest.gossip import http
from neverest.gossip.codec import MAX_MESSAGE_BYTES, ProtocolError
from neverest.gossip.core import ExchangeResult, Initiator, Reply, Responder, Settings
from neverest.gossip.view import SqliteView
from neverest.identity import Identity
from neverest.memory import holdings
from neverest.memory.store import Store, StoreBusy, open_store
from neverest.peers import table

log = logging.getLogger("neverestd.gossip")
MAX_CONTINUATIONS: Final = 16  # exchanges in a row with one peer while it says there is more
SHARE_REFRESH_S: Final = 60.0  # how old the list of addresses a responder shares may be
INBOUND_EVERY_S: Final = 600.0  # how often a peer's inbound requests are written to the peer table
INBOUND_REMEMBERED: Final = 4096  # peers whose last inbound write is remembered (then forgotten at once)

# The peer-table penalty for each way an exchange can fail on the peer's side.
_PENALTY_KIND: Final = {"too-large": "oversize", "too-many-records": "too-many", "too-many-origins": "too-many",
                        "bad-record": "invalid-records", "gap": "invalid-records", "origin-mismatch": "identity",
                        "bad-signature": "identity", "replay": "identity", "stale": "identity",
                        "busy": "busy"}


def settings_of(config: Config) -> Settings:
    return Settings(budget_bytes=config.gossip_budget_bytes, future_tolerance_s=config.future_tolerance_s)


@dataclass
class Gossip:
    home: Path
    config: Config
    clock: Clock
    identity: Identity
    rng: random.Random
    transport: httpx.AsyncBaseTransport | None = None  # None: the real network
    listen_port: int | None = None  # told to peers, so that they can gossip back; None: not listening
    # Called with the number of records a peer's request brought (the daemon then judges and renders).
    on_received: Callable[[int], None] | None = None

    def __post_init__(self) -> None:
        self._settings = settings_of(self.config)
        self._store = self._open()
        self._responder = Responder(SqliteView(self._store, own_origin=self.identity.origin, config=self.config),
                                    self.identity.signing_key, settings=self._settings)
        self._responding = trio.Lock()
        self._shared: list[tuple[str, str | None]] = []
        self._shared_at: float | None = None
        self._inbound_at: dict[str, float] = {}
        self.http = http.client(transport=self.transport)
        self.last_round: dict[str, Any] | None = None

    async def aclose(self) -> None:
        """Close the HTTP client (its pooled connections) and the store."""
        try:
            await self.http.aclose()
        finally:
            self._store.close()

    def close(self) -> None:
        """Close the store only, for a caller outside the event loop; prefer ``aclose``."""
        self._store.close()

    def _open(self) -> Store:
        """A connection of its own, for work in a worker thread."""
        return open_store(self.home, busy_timeout_s=self.config.busy_timeout_s)

    def _share(self, store: Store, now_s: float) -> list[tuple[str, str | None]]:
        """The addresses to tell peers about, read again at most every SHARE_REFRESH_S."""
        if self._shared_at is None or now_s - self._shared_at > SHARE_REFRESH_S:
            self._shared = list(table.shareable(store.db, self.clock.now()))
            self._shared_at = now_s
        return self._shared

    # -- answering ------------------------------------------------------------------------

    async def respond(self, body: bytes, client: str) -> bytes:
        async with self._responding:
            now_s = trio.current_time()

            def answer() -> Reply:
                share = self._share(self._store, now_s)
                return self._responder.respond(body, now=self.clock.now(), rng=self.rng, share=share)
            try:
                reply = await trio.to_thread.run_sync(answer)
            except StoreBusy:
                raise http.RemoteError("busy: try again later", 503) from None
        result = reply.result
        host = client.rpartition(":")[0]
        if result.error is not None and result.error.who == "remote":
            log.info("refused a request from %s (%s): %s %s", client, result.peer or "unknown origin",
                     result.error.code, result.error.message)
            source = f"gossip:{result.peer}" if result.peer else f"gossip:{host}"
            await trio.to_thread.run_sync(self._count, source, result.error.code, 1)
        elif result.error is None and result.peer is not None and not result.introduced:
            if result.applied.accepted:
                log.info("received %d record(s) from %s", result.applied.accepted, result.peer)
                if self.on_received is not None:
                    self.on_received(result.applied.accepted)
            if self._inbound_due(result.peer, now_s):
                await trio.to_thread.run_sync(self._inbound, result, host)
        if reply.data is None:
            assert result.error is not None
            raise http.RemoteError(f"{result.error.code}: {result.error.message}")
        return reply.data

    def _inbound_due(self, origin: str, now_s: float) -> bool:
        if origin == self.identity.origin:
            return False
        last = self._inbound_at.get(origin)
        if last is not None and now_s - last < INBOUND_EVERY_S:
            return False
        if len(self._inbound_at) >= INBOUND_REMEMBERED:
            self._inbound_at.clear()
        self._inbound_at[origin] = now_s
        return True

    def _inbound(self, result: ExchangeResult, host: str) -> None:
        """Record the peer that asked (and where it listens), and learn the addresses it shared."""
        assert result.peer is not None
        url = None
        if result.listen_port is not None and host:
            try:
                url = table.normalise_url(f"[{host}]:{result.listen_port}" if ":" in host
                                          else f"{host}:{result.listen_port}")
            except table.PeerError:
                url = None
        now = self.clock.now()
        with self._open() as store, store.write() as db:
            if table.inbound(db, result.peer, url, now):
                log.info("%s gossiped with us; it listens at %s", result.peer, url)
            learned = table.learn(db, result.addresses, via=result.peer, now=now)
            if learned.bad:
                table.penalise(db, result.peer, "bad-addresses")
                holdings.count_refusal(db, f"gossip:{result.peer}", "bad-address", now, learned.bad)
        self._log_learned(result.peer, learned)

    @staticmethod
    def _log_learned(peer: str, learned: table.Learned) -> None:
        if learned.added:
            log.info("learned %d address(es) from %s", learned.added, peer)
        if learned.bad or learned.dropped:
            log.info("%s shared %d unusable address(es); %d more were over the bounds", peer, learned.bad,
                     learned.dropped)

    def _count(self, source: str, reason: str, n: int) -> None:
        """Count a refused request by its source, for ``neverestctl status``."""
        with self._open() as store, store.write() as db:
            holdings.count_refusal(db, source, reason, self.clock.now(), n)

    # -- initiating -----------------------------------------------------------------------

    async def exchange(self, url: str, origin: str | None) -> ExchangeResult:
        """Exchange with ``url`` until in sync or nothing more comes (bounded)."""
        total: ExchangeResult | None = None
        for _ in range(MAX_CONTINUATIONS):
            result = await self._exchange_once(url, origin)
            origin = result.peer or origin
            total = result if total is None else _merge(total, result)
            if result.error is not None or not result.more or result.is_self:
                break
        assert total is not None
        await trio.to_thread.run_sync(self._score, url, total)
        return total

    async def _exchange_once(self, url: str, origin: str | None) -> ExchangeResult:
        store = await trio.to_thread.run_sync(self._open)
        try:
            view = SqliteView(store, own_origin=self.identity.origin, config=self.config)
            share = await trio.to_thread.run_sync(self._share, store, trio.current_time())
            initiator = Initiator(view, self.identity.signing_key, origin, now=self.clock.now(), rng=self.rng,
                                  settings=self._settings, share=share, listen_port=self.listen_port)
            request = await trio.to_thread.run_sync(initiator.start)
            while request is not None:
                try:
                    reply = await http.post(self.http, url, request, max_response_bytes=MAX_MESSAGE_BYTES,
                                            total_timeout_s=self.config.exchange_timeout_s)
                except httpclient.TransportFailure as exc:
                    initiator.fail(ProtocolError("network", exc.kind, exc.detail))
                    break
                except httpclient.PeerRefused as exc:
                    if exc.status == 503:
                        initiator.fail(ProtocolError("remote", "busy", f"HTTP 503: {exc.detail}"))
                    else:
                        initiator.fail(ProtocolError("remote", "refused", f"HTTP {exc.status}: {exc.detail}"
                                                     if not exc.oversize else exc.detail))
                        initiator.result.refused = "oversize" if exc.oversize else None
                    break
                request = await trio.to_thread.run_sync(initiator.handle, reply)
            return initiator.result
        finally:
            await trio.to_thread.run_sync(store.close)

    def _score(self, url: str, result: ExchangeResult) -> None:
        now = self.clock.now()
        learned: table.Learned | None = None
        with self._open() as store, store.write() as db:
            error = result.error
            if result.is_self:
                log.info("%s is this memory's own address: it will not be picked again", url)
                table.mark_self(db, url, self.identity.origin, now)
                return
            if error is None:
                if result.peer is not None:
                    before = table.succeeded(db, url, result.peer, now)
                    if before is not None:
                        log.warning("%s now answers as %s (was %s)", url, result.peer, before)
                    learned = table.learn(db, result.addresses, via=result.peer, now=now)
                    if learned.bad:
                        holdings.count_refusal(db, f"gossip:{result.peer}", "bad-address", now, learned.bad)
                        table.failed(db, url, "bad-addresses", f"{learned.bad} unusable address(es)", now)
                invalid = sum(n for reason, n in result.applied.refused.items() if reason != "fork")
                if invalid:
                    table.failed(db, url, "invalid-records", f"{invalid} invalid record(s)", now)
            elif error.who == "local":
                log.warning("exchange with %s failed on our side: %s", url, error)
            elif error.who == "network":
                table.failed(db, url, error.code, error.message, now)  # back off; no penalty
            else:
                kind = result.refused if result.refused in table.PENALTY else _PENALTY_KIND.get(error.code, "protocol")
                table.failed(db, url, kind, f"{error.code}: {error.message}", now)
        if learned is not None and result.peer is not None:
            self._log_learned(result.peer, learned)

    async def round(self, *, fanout: int, only: str | None = None) -> list[dict[str, Any]]:
        """One gossip round; returns what each exchange did.

        Raises ``table.PeerError`` when ``only`` is not a usable address, or is this memory's own.
        """
        chosen = await trio.to_thread.run_sync(self._choose, fanout, only)
        results: list[dict[str, Any]] = [{} for _ in chosen]
        async with trio.open_nursery() as nursery:
            for i, (url, origin) in enumerate(chosen):
                nursery.start_soon(self._one, url, origin, results, i)
        self._shared_at = None  # what this round learned is shared from now on
        self.last_round = {"at": self.clock.now().isoformat(), "exchanges": results}
        return results

    def _choose(self, fanout: int, only: str | None) -> list[tuple[str, str | None]]:
        """The round's addresses (SQLite: run in a worker thread, never on the event loop)."""
        if only is not None:
            with self._open() as store, store.write() as db:
                url = table.add(db, only, source="manual", now=self.clock.now(), own_origin=self.identity.origin)
            return [(url, None)]
        with self._open() as store:
            healthy = table.healthy(store.db, self.clock.now())
        healthy = [a for a in healthy if a.origin != self.identity.origin]
        picked = self.rng.sample(healthy, min(fanout, len(healthy)))
        return [(a.url, a.origin) for a in picked]

    async def _one(self, url: str, origin: str | None, results: list[dict[str, Any]], i: int) -> None:
        result = await self.exchange(url, origin)
        results[i] = {"url": url} | result.to_json()
        moved = result.records_sent + result.records_received
        if result.error is not None:
            log.info("gossip with %s: %s", url, result.error)
        elif moved:
            log.info("gossip with %s (%s): sent %d, received %d", url, result.peer, result.records_sent,
                     result.records_received)


def _merge(a: ExchangeResult, b: ExchangeResult) -> ExchangeResult:
    a.round_trips += b.round_trips
    a.bytes_sent += b.bytes_sent
    a.bytes_received += b.bytes_received
    a.records_sent += b.records_sent
    a.records_received += b.records_received
    a.held_back += b.held_back
    a.applied.add(b.applied)
    a.in_sync, a.more, a.error, a.refused, a.peer = b.in_sync, b.more, b.error, b.refused, b.peer or a.peer
    a.addresses = a.addresses or b.addresses
    a.is_self = a.is_self or b.is_self
    return a
