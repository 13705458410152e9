"""Gossip as the daemon runs it: the sans-IO core driven over HTTP, with the peer table.

- ``respond``: what the HTTP app calls for each ``POST /gossip/v1/exchange``.  One
  ``Responder`` (and its replay cache) per process, on its own store connection, used
  from worker threads one request at a time.
- ``exchange``: one exchange with one address, as the initiator: the core's steps run
  in worker threads (SQLite), the posts go through the bounded, timed httpx client.
  Runs again at once while the peer says there is more (a cut delta), a bounded
  number of times.  The result scores the address in the peer table.
- ``round``: ``fanout`` healthy addresses at random, exchanged with concurrently.

Randomness (``random.SystemRandom`` in the daemon) and the clock are injected.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx
import trio

from neverest.clock import Clock
from neverest.config import Config
from neverest.gossip import http
from neverest.gossip.codec import MAX_MESSAGE_BYTES, ProtocolError
from neverest.gossip.core import ExchangeResult, Initiator, Responder, Settings
from neverest.gossip.view import SqliteView
from neverest.identity import Identity
from neverest.memory import holdings
from neverest.memory.store import Store, StoreBusy, open_store
from neverest.peers import table

log = logging.getLogger("neverestd.gossip")
MAX_CONTINUATIONS: Final = 16  # exchanges in a row with one peer while it says there is more

# The peer-table penalty for each way an exchange can fail on the peer's side.
_PENALTY_KIND: Final = {"too-large": "oversize", "too-many-records": "too-many", "too-many-origins": "too-many",
                        "bad-record": "invalid-records", "gap": "invalid-records", "origin-mismatch": "identity",
                        "bad-signature": "identity", "replay": "identity", "stale": "identity"}


def settings_of(config: Config) -> Settings:
    return Settings(budget_bytes=config.gossip_budget_bytes, future_tolerance_s=config.future_tolerance_s)


@dataclass
class Gossip:
    home: Path
    config: Config
    clock: Clock
    identity: Identity
    rng: random.Random

    def __post_init__(self) -> None:
        self._settings = settings_of(self.config)
        self._store = self._open()
        self._responder = Responder(SqliteView(self._store, own_origin=self.identity.origin, config=self.config),
                                    self.identity.signing_key, settings=self._settings)
        self._responding = trio.Lock()
        self.last_round: dict[str, Any] | None = None

    def close(self) -> None:
        self._store.close()

    def _open(self) -> Store:
        """A connection of its own, for work in a worker thread."""
        return open_store(self.home, busy_timeout_s=self.config.busy_timeout_s)

    # -- answering ------------------------------------------------------------------------

    async def respond(self, body: bytes, client: str) -> bytes:
        async with self._responding:
            try:
                reply = await trio.to_thread.run_sync(
                    lambda: self._responder.respond(body, now=self.clock.now(), rng=self.rng))
            except StoreBusy:
                raise http.RemoteError("busy: try again later", 503) from None
        result = reply.result
        if result.error is not None and result.error.who == "remote":
            log.info("refused a request from %s (%s): %s %s", client, result.peer or "unknown origin",
                     result.error.code, result.error.message)
            source = f"gossip:{result.peer}" if result.peer else f"gossip:{client.rpartition(':')[0]}"
            await trio.to_thread.run_sync(self._count, source, result.error.code)
        elif result.applied.accepted:
            log.info("received %d record(s) from %s", result.applied.accepted, result.peer)
        if reply.data is None:
            assert result.error is not None
            raise http.RemoteError(f"{result.error.code}: {result.error.message}")
        return reply.data

    def _count(self, source: str, reason: str) -> None:
        """Count a refused request by its source, for ``neverestctl status``."""
        with self._open() as store, store.write() as db:
            holdings.count_refusal(db, source, reason, self.clock.now())

    # -- initiating -----------------------------------------------------------------------

    async def exchange(self, client: httpx.AsyncClient, url: str, origin: str | None) -> ExchangeResult:
        """Exchange with ``url`` until in sync or nothing more comes (bounded)."""
        total: ExchangeResult | None = None
        for _ in range(MAX_CONTINUATIONS):
            result = await self._exchange_once(client, url, origin)
            origin = result.peer or origin
            total = result if total is None else _merge(total, result)
            if result.error is not None or not result.more:
                break
        assert total is not None
        await trio.to_thread.run_sync(self._score, url, total)
        return total

    async def _exchange_once(self, client: httpx.AsyncClient, url: str, origin: str | None) -> ExchangeResult:
        store = await trio.to_thread.run_sync(self._open)
        try:
            view = SqliteView(store, own_origin=self.identity.origin, config=self.config)
            initiator = Initiator(view, self.identity.signing_key, origin, now=self.clock.now(), rng=self.rng,
                                  settings=self._settings)
            request = await trio.to_thread.run_sync(initiator.start)
            while request is not None:
                try:
                    reply = await http.post(client, url, request, max_response_bytes=MAX_MESSAGE_BYTES,
                                            total_timeout_s=self.config.exchange_timeout_s)
                except http.ExchangeFailed as exc:
                    initiator.fail(ProtocolError("remote", "refused", f"{exc.kind}: {exc.detail}"))
                    initiator.result.refused = exc.kind
                    break
                request = await trio.to_thread.run_sync(initiator.handle, reply)
            return initiator.result
        finally:
            await trio.to_thread.run_sync(store.close)

    def _score(self, url: str, result: ExchangeResult) -> None:
        now = self.clock.now()
        with self._open() as store, store.write() as db:
            error = result.error
            if error is None:
                if result.peer is not None:
                    before = table.succeeded(db, url, result.peer, now)
                    if before is not None:
                        log.warning("%s now answers as %s (was %s)", url, result.peer, before)
                invalid = sum(n for reason, n in result.applied.refused.items() if reason != "fork")
                if invalid:
                    table.failed(db, url, "invalid-records", f"{invalid} invalid record(s)", now)
                return
            if error.who == "local":
                log.warning("exchange with %s failed on our side: %s", url, error)
                return
            kind = result.refused if result.refused in table.PENALTY else _PENALTY_KIND.get(error.code, "protocol")
            table.failed(db, url, kind, f"{error.code}: {error.message}", now)

    async def round(self, *, fanout: int, only: str | None = None) -> list[dict[str, Any]]:
        """One gossip round; returns what each exchange did."""
        if only is not None:
            with self._open() as store, store.write() as db:
                url = table.add(db, only, source="manual", now=self.clock.now())
            chosen: list[tuple[str, str | None]] = [(url, None)]
        else:
            with self._open() as store:
                healthy = table.healthy(store.db, self.clock.now())
            healthy = [a for a in healthy if a.origin != self.identity.origin]
            picked = self.rng.sample(healthy, min(fanout, len(healthy)))
            chosen = [(a.url, a.origin) for a in picked]
        results: list[dict[str, Any]] = [{} for _ in chosen]
        async with client() as http_client, trio.open_nursery() as nursery:
            for i, (url, origin) in enumerate(chosen):
                nursery.start_soon(self._one, http_client, url, origin, results, i)
        self.last_round = {"at": self.clock.now().isoformat(), "exchanges": results}
        return results

    async def _one(self, http_client: httpx.AsyncClient, url: str, origin: str | None,
                   results: list[dict[str, Any]], i: int) -> None:
        result = await self.exchange(http_client, url, origin)
        results[i] = {"url": url} | result.to_json()
        moved = result.records_sent + result.records_received
        if result.error is not None:
            log.info("gossip with %s: %s", url, result.error)
        elif moved:
            log.info("gossip with %s (%s): sent %d, received %d", url, result.peer, result.records_sent,
                     result.records_received)


def client() -> httpx.AsyncClient:
    return http.client(connect_timeout_s=5.0, read_timeout_s=30.0)


def _merge(a: ExchangeResult, b: ExchangeResult) -> ExchangeResult:
    a.round_trips += b.round_trips
    a.bytes_sent += b.bytes_sent
    a.bytes_received += b.bytes_received
    a.records_sent += b.records_sent
    a.records_received += b.records_received
    a.held_back += b.held_back
    a.applied.add(b.applied)
    a.in_sync, a.more, a.error, a.refused, a.peer = b.in_sync, b.more, b.error, b.refused, b.peer or a.peer
    return a
