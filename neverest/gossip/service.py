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
  (a cut delta), a bounded number of times, pipelined: the next request goes out while the
  records of the last answer are applied (``exchange`` says how).  The result scores the address in the peer
  table: a transport failure backs off without a penalty, a refusal or bad bytes are
  penalised, an address that turns out to be this memory is marked ``self``, and the
  addresses the peer shared are learned (bounded; garbage is penalised).
- ``round``: ``fanout`` healthy addresses at random, exchanged with concurrently.

Randomness (``random.SystemRandom`` in the daemon), the clock and the HTTP transport
(``transport``: an ``httpx.AsyncBaseTransport``, to fake the network) are injected.
Close with ``aclose`` (the HTTP client and the store).
"""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar
from urllib.parse import urlsplit

import trio

from neverest.clock import Clock, iso
from neverest.config import Config, GossipSection
from neverest.gossip import guard, http
from neverest.gossip.codec import MAX_MESSAGE_BYTES, Entry, ProtocolError
from neverest.gossip.core import Checked, ExchangeResult, Initiator, Reply, Responder, Settings
from neverest.gossip.view import Received, SqliteView
from neverest.identity import Identity
from neverest.memory import holdings
from neverest.memory.received import POLICY_REFUSALS, ReceiveResult
from neverest.memory.store import Store, StoreBusy, StoreError, open_store
from neverest.peers import table

if TYPE_CHECKING:  # the HTTP client side is loaded by the first exchange this memory starts (``http``)
    import sqlite3

    import httpx

    from neverest.memory.receive import Lookahead  # loaded by the first records applied, like the receive path

log = logging.getLogger("neverestd.gossip")
MAX_CONTINUATIONS: Final = 16  # exchanges in a row with one peer while it says there is more
SHARE_REFRESH_S: Final = 60.0  # how old the list of addresses a responder shares may be
INBOUND_EVERY_S: Final = 600.0  # how often a peer's inbound requests are written to the peer table
INBOUND_REMEMBERED: Final = 4096  # peers whose last inbound write is remembered (then forgotten at once)
MEMO_ENTRIES: Final = 4096  # addresses (and peers) whose last success is remembered, to skip writes
CHECK_INLINE_BYTES: Final = 64 * 1024  # requests up to this size are checked on the event loop
T = TypeVar("T")
V = TypeVar("V")

# The peer-table penalty for each way an exchange can fail on the peer's side.
_PENALTY_KIND: Final = {"too-large": "oversize", "too-many-records": "too-many", "too-many-origins": "too-many",
                        "bad-record": "invalid-records", "gap": "invalid-records", "origin-mismatch": "identity",
                        "bad-signature": "identity", "replay": "identity", "stale": "identity",
                        "busy": "busy"}


def settings_of(gossip: GossipSection) -> Settings:
    return Settings(budget_bytes=gossip.budget_bytes, future_tolerance_s=gossip.future_tolerance_s)


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
    # False: every store turn in a worker thread, as before issue 26 (benchmarks/bench_exchange.py's
    # baseline, measured in the same run).
    inline_reads: bool = True
    tarpit_s: float = http.DEFAULT_TARPIT_S  # what a refused request from a cut-off address is held for

    def __post_init__(self) -> None:
        # The whole config goes on to the store view (receiving is the memory's: trust, budget); gossip's
        # own rules read only their section.
        self._gossip = self.config.sections.gossip
        self._settings = settings_of(self._gossip)
        # One connection and one view for both sides, kept for the life of the service: the view's
        # range index is then rebuilt only when the records changed, not once per exchange.  The
        # lock makes its users (worker threads) take turns; nothing waits for the network under it.
        self._store = self._open()
        self._view = SqliteView(self._store, own_origin=self.identity.origin, config=self.config)
        self._responder = Responder(self._view, self.identity.signing_key, settings=self._settings)
        self._using_store = trio.Lock()
        # The deferred records being stored in a worker thread (``_apply``), and the connection the
        # exchange after them reads through meanwhile (``_handle_pinned``; open during a pull only).
        self._in_flight: _Applying | None = None
        self._reader: Store | None = None
        # The records after the ones in flight, once screened: verified ahead by the verifying processes
        # while the last batches of those in flight are stored (receive.Lookahead).
        self._next: Lookahead | None = None
        self.replies_while_storing = 0  # replies handled so (``_handle_pinned``); and answers then held back:
        self.held_back_after_storing = 0  # their screen's assumptions did not hold (``_confirmed``)
        self._shared: list[tuple[str, str | None]] = []
        self._shared_at: float | None = None
        self._inbound_at: dict[str, float] = {}
        self.tally = guard.Tally()
        # Strikes by origin (signed requests) and by address (the rest, and origins new to the address):
        # an address may be shared by an attacker and honest peers behind one NAT (``_strike``).
        self.cutoffs = guard.Cutoffs(after=self._gossip.cutoff_after, cooling_s=self._gossip.cutoff_s)
        self.address_cutoffs = guard.Cutoffs(after=self._gossip.cutoff_address_after,
                                             cooling_s=self._gossip.cutoff_s)
        self.vouched = guard.Vouched()  # origins that exchanged validly from each address lately
        # Addresses whose last write was a success with this origin, and what their peer last shared:
        # another success with them changes nothing but a score and a time, written in batches.
        self._clean: dict[str, str] = {}
        # Addresses a peer shared that learning again would leave as they are (learned without a bad
        # one or one over a bound): a peer's list is its 16 most recently seen, so its order and its
        # members turn over from exchange to exchange while every address in it is long known.
        self._known: dict[str, None] = {}
        self._successes: dict[str, tuple[str, datetime]] = {}  # url -> (origin, when): not yet written
        self._http: httpx.AsyncClient | None = None
        self.last_round: dict[str, Any] | None = None

    async def aclose(self) -> None:
        """Write what is counted in memory, close the HTTP client (its pooled connections) and the store."""
        try:
            with trio.CancelScope(shield=True):
                await self.flush()
        except StoreError as exc:
            log.warning("gossip: the last refusals and successes were not written: %s", exc)
        finally:
            try:
                if self._http is not None:
                    await self._http.aclose()
            finally:
                self._close_stores()

    @property
    def http(self) -> httpx.AsyncClient:
        """The HTTP client exchanges are posted with, made at its first use: httpx (about 6 MB resident)
        is not held by a memory that answers peers but has called none yet (an idle daemon alone)."""
        if self._http is None:
            self._http = http.client(transport=self.transport)
        return self._http

    async def _client(self) -> httpx.AsyncClient:
        """``http``, with httpx imported in a worker thread the first time: not on the event loop
        (0.2 s), which answers peers meanwhile.  An injected transport has loaded httpx already."""
        if self._http is None and self.transport is None:
            await trio.to_thread.run_sync(http.load_client)
        return self.http

    def close(self) -> None:
        """Close the store only, for a caller outside the event loop; prefer ``aclose``."""
        self._close_stores()

    def _close_stores(self) -> None:
        try:
            self._close_reader()
        finally:
            self._store.close()

    def _close_reader(self) -> None:
        """Close the connection a pull read through (``_reading``), if one is open."""
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()

    def _open(self) -> Store:
        """A connection of its own, for work in a worker thread."""
        return open_store(self.home, busy_timeout_s=self.config.sections.store.busy_timeout_s)

    async def _with_store(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread, its turn on the service's store connection."""
        async with self._using_store:
            return await trio.to_thread.run_sync(fn, *args)

    async def _with_store_or_inline(self, inline: Callable[[], bool], fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on its turn on the store: here on the event loop when ``inline()`` says that it
        reads nothing but the view's cached index, else in a worker thread.

        The trip to a thread and back costs about 0.2 ms of CPU, more than an in-sync exchange's own
        work on either side; three of them were a quarter of such an exchange (issue 26).  ``inline`` is
        asked under the store's turn, so no worker uses the connection meanwhile."""
        if not self.inline_reads:
            return await self._with_store(fn, *args)
        try:  # the store's turn is nearly always free: take it without a trip through trio's scheduler
            self._using_store.acquire_nowait()
        except trio.WouldBlock:
            await self._using_store.acquire()
        try:
            if inline():
                return fn(*args)
            return await trio.to_thread.run_sync(fn, *args)
        finally:
            self._using_store.release()

    def _cached(self, now_s: float) -> bool:
        """Whether the view's index is current and the shared addresses need no reading: then a
        SYNC is built or answered without touching the database (but for one PRAGMA)."""
        return not self._share_due(now_s) and self._view.fresh()

    def _share_due(self, now_s: float) -> bool:
        return self._shared_at is None or now_s - self._shared_at > SHARE_REFRESH_S

    def _share(self, now_s: float) -> list[tuple[str, str | None]]:
        """The addresses to tell peers about, read again at most every SHARE_REFRESH_S."""
        if self._share_due(now_s):
            self._shared = list(table.shareable(self._store.db, self.clock.now()))
            self._shared_at = now_s
        return self._shared

    # -- what is counted in memory ----------------------------------------------------------

    async def flush(self) -> None:
        """Write the refusals counted and the successes batched since the last flush (one transaction)."""
        counts, successes = self.tally.drain(), self._successes
        self._successes = {}
        if not counts and not successes:
            return
        try:
            await self._with_store(self._write_counts, counts, successes)
        except BaseException:
            self.tally.restore(counts)
            self._successes = successes | self._successes
            raise

    @contextmanager
    def _peer_write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction on the gossip connection for what an exchange writes besides records: the
        peer tables and refusal counts, none of which the view caches.  The view is told, so that its
        entries stay current (else the exchange after every one that received records rebuilt them all:
        12 ms at 500 origins).  Never for records, forks or declined heads."""
        before = self._store.data_version()
        with self._store.write() as db:
            yield db
        self._view.unchanged(before, self._store.data_version())

    def _write_counts(self, counts: dict[tuple[str, str], guard.Count],
                      successes: dict[str, tuple[str, datetime]]) -> None:
        with self._peer_write() as db:
            for (source, reason), count in counts.items():
                holdings.count_refusal(db, source, reason, count.last, count.n)
            for url, (origin, at) in successes.items():
                table.succeeded(db, url, origin, at)

    def pending_refusals(self) -> list[holdings.Refusal]:
        """The refusals counted in memory and not yet written (status adds them to the store's)."""
        return [holdings.Refusal(source, reason, c.n, iso(c.last))
                for (source, reason), c in self.tally.pending().items()]

    def cutoff(self, host: str) -> float | None:
        """For the HTTP edge, before it reads a request: seconds ``host`` stays cut off, or None.

        A cut-off address from which some origin exchanged validly lately is read all the same:
        ``respond`` answers that origin's signed requests and refuses the rest (an honest peer
        behind the attacker's NAT keeps exchanging; the attacker cannot sign as it)."""
        address = guard.address_key(host)
        left = self.address_cutoffs.blocked(address, trio.current_time())
        if left is None or self.vouched.any(address):
            return None
        self.tally.add(f"gossip:{host}", "cut-off", self.clock.now())
        return left

    def refused(self, host: str, reason: str) -> None:
        """The HTTP edge refused a request's body (oversize, too slow): one strike."""
        self._strike(host, None, reason)

    def _strike(self, host: str, origin: str | None, reason: str) -> None:
        """One invalid request from ``host``, signed by ``origin`` (None: not signed, or its
        signature did not verify).  A signed one strikes its origin; it strikes the address too
        unless the origin exchanged validly from there lately, since keys are free: a flood signed
        with a fresh key per request must still add up against the address it comes from."""
        now_s = trio.current_time()
        address = guard.address_key(host)
        self.tally.add(f"gossip:{origin}" if origin else f"gossip:{host}", reason, self.clock.now())
        strikes: list[tuple[guard.Cutoffs, str]] = []
        if origin:
            strikes.append((self.cutoffs, f"origin:{origin}"))
        if origin is None or not self.vouched.has(address, origin):
            strikes.append((self.address_cutoffs, address))
        for cutoffs, key in strikes:
            if cutoffs.strike(key, now_s):
                log.warning("cut off %s for %g s: %d invalid requests", key, cutoffs.cooling_s, cutoffs.after)

    # -- answering ------------------------------------------------------------------------

    async def respond(self, body: bytes, client: str) -> bytes:
        host = client.rpartition(":")[0]
        address = guard.address_key(host)
        now_s, now = trio.current_time(), self.clock.now()
        # The checks that need no store come first, outside the lock: an invalid request costs
        # a decode and a signature check, and never waits for (or delays) an honest answer.
        if len(body) <= CHECK_INLINE_BYTES:
            checked = self._responder.check(body, now=now, rng=self.rng)
        else:  # hashing and decoding a large body: not on the event loop
            checked = await trio.to_thread.run_sync(functools.partial(self._responder.check, body, now=now,
                                                                      rng=self.rng))
        left = self.address_cutoffs.blocked(address, now_s)
        if left is not None and not (isinstance(checked, Checked) and self.vouched.has(address, checked.peer)):
            # The edge read it only because origins exchanged from this cut-off address lately
            # (``cutoff``): anyone else there is held like at the edge, then refused.
            self.tally.add(f"gossip:{host}", "cut-off", now)
            await trio.sleep(min(left, self.tarpit_s))
            raise http.RemoteError("too many invalid requests: cut off for a while", 429,
                                   [(b"retry-after", str(max(1, round(left))).encode()), (b"connection", b"close")])
        if isinstance(checked, Checked):
            if self.cutoffs.blocked(f"origin:{checked.peer}", now_s) is not None:
                self.tally.add(f"gossip:{checked.peer}", "cut-off", now)
                raise http.RemoteError("too many invalid requests: cut off for a while", 429)

            def answer() -> Reply:
                return self._responder.answer(checked, now=now, rng=self.rng, share=self._share(now_s))

            def inline() -> bool:
                return self._responder.reads_index_only(checked) and self._cached(now_s)
            try:
                reply = await self._with_store_or_inline(inline, answer)
            except StoreBusy:
                raise http.RemoteError("busy: try again later", 503) from None
        else:
            reply = checked
        result = reply.result
        if result.error is not None and result.error.who == "remote":
            log.info("refused a request from %s (%s): %s %s", client, result.peer or "unknown origin",
                     result.error.code, result.error.message)
            self._strike(host, result.peer, result.error.code)
        elif result.error is None and result.peer is not None and not result.introduced:
            self.vouched.add(address, result.peer)
            if result.applied.accepted:
                log.info("received %d record(s) from %s", result.applied.accepted, result.peer)
                if self.on_received is not None:
                    self.on_received(result.applied.accepted)
            if self._inbound_due(result.peer, now_s):
                await self._with_store(self._inbound, result, host)
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
        with self._peer_write() as db:
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

    # -- initiating -----------------------------------------------------------------------

    async def exchange(self, url: str, origin: str | None) -> ExchangeResult:
        """Exchange with ``url`` until in sync or nothing more comes (bounded).

        Pipelined: the records of an answer that ends an exchange (a cut delta) are applied in a
        worker thread while the next exchange is already asked for, on a view that shows them as
        held (``SqliteView.ahead``), and its replies are handled meanwhile when they apply nothing at
        once (``_handle_pinned``): answer k + 1 is asked for, built by the peer, sent and screened while
        answer k is verified and stored, and applied only once answer k is, in order, and only if what
        answer k left stored is what its screen assumed (else it is held back: fetched again by the next
        exchange, never applied on a wrong assumption).  At most two answers are held in memory."""
        total: ExchangeResult | None = None
        failure: list[Exception] = []
        done: list[ReceiveResult] = []  # what the deferred applies did, added to the total at the end
        applying = _Applying()
        with self._view.keeping_meaning():
            async with trio.open_nursery() as nursery:
                for _ in range(MAX_CONTINUATIONS):
                    initiator, read = await self._exchange_once(url, origin, applying, nursery, done, failure)
                    result = initiator.result
                    origin = result.peer or origin
                    total = result if total is None else _merge(total, result)
                    applying = _Applying(initiator.deferred, initiator.ahead, initiator.source, url, result.peer,
                                         initiator.deferred_decoded, read or None, self._ahead(initiator.deferred)) \
                        if initiator.deferred else _Applying()
                    if failure or result.error is not None or not result.more or result.is_self:
                        break
                if applying.records and not failure:
                    assert total is not None
                    async with self._using_store:
                        applying = self._confirmed(applying, total)
                    if applying.records:
                        await self._apply(applying, done, failure)
        assert total is not None
        self._close_reader()  # what the pull read through it is not kept in an idle daemon's pages
        if failure:
            raise failure[0]
        for applied in done:
            total.applied.add(applied)
        if total.error is None and total.peer is not None and not total.is_self:
            # It answered from that address, signed: its own requests from there are heard even
            # while the address is cut off (``cutoff``), as those of peers that asked from there.
            host = urlsplit(url).hostname
            if host:
                self.vouched.add(guard.address_key(host), total.peer)
        if not self._batched(url, total):
            await self._with_store(self._score, url, total)
        return total

    async def _apply(self, applying: _Applying, done: list[ReceiveResult], failure: list[Exception],
                     task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Apply deferred records; ``started`` once this holds the store, so that the next answer is
        taken after them.  An error is kept for ``exchange`` to raise (not an exception group)."""
        now = self.clock.now()
        try:
            async with self._using_store:
                task_status.started()
                self._in_flight, self._next = applying, None
                try:
                    received = await trio.to_thread.run_sync(self._claim_and_receive, applying, now)
                finally:
                    self._in_flight = self._next = None
                # Here on the event loop, which is where the next exchange's replies are handled while
                # the records are stored (``_handle_pinned``): the cached entries never change under it.
                self._view.refresh(received)
            done.append(received.result)
        except Exception as exc:  # re-raised by exchange once the nursery is done, not as a group
            failure.append(exc)

    def _claim_and_receive(self, applying: _Applying, now: datetime) -> Received:
        if applying.peer is not None and applying.url:
            # A peer added by its address alone is known by origin only once an exchange completes: its
            # first exchange's records would be screened as a stranger's (2 MB) and their origins declined.
            with self._peer_write() as db:
                table.claim_chosen(db, applying.url, applying.peer)
        return self._view.receive(applying.records, source=applying.source, now=now, decoded=applying.decoded,
                                  verified_ahead=applying.verified, lookahead=lambda: self._next)

    def _ahead(self, records: list[bytes]) -> Lookahead | None:
        """The next records to apply, to be verified ahead while the ones in flight are stored (when
        the verifying processes are used, and records are in flight)."""
        if self._in_flight is None or self.config.verify_processes == 0:
            return None
        from neverest.memory.receive import Lookahead  # loaded already: records are being applied

        self._next = Lookahead(records)
        return self._next

    def _confirmed(self, applying: _Applying, result: ExchangeResult) -> _Applying:
        """``applying`` if its records were screened on entries that are what is stored now (always, but
        when they were screened while the records before them were still being stored and those did not
        all go in: refused, evicted, or another writer in between); else nothing, its records counted as
        held back in ``result``: the next exchange fetches them again from what is held.  Under the
        store's turn."""
        if applying.read is None or all(self._view.entry(o) == e for o, e in applying.read.items()):
            return applying
        log.info("%d record(s) from %s held back: those before them were not all stored", len(applying.records),
                 applying.peer)
        result.held_back += len(applying.records)
        self.held_back_after_storing += 1
        return _Applying()

    def _reading(self) -> bool:
        """Whether the connection ``_handle_pinned`` reads the store through is open (opened here the
        first time; if it cannot be, replies wait for the store's turn as before)."""
        if self._reader is None:
            try:
                self._reader = self._open()
            except StoreError as exc:
                log.warning("gossip: no second store connection, replies wait for the records before: %s", exc)
                return False
        return True

    def _handle_pinned(self, initiator: Initiator, reply: bytes, applying: _Applying,
                       read: dict[str, Entry | None]) -> bytes | None:
        """``initiator.handle(reply)`` while the records before (``applying``) are stored in a worker
        thread through the view's connection: here on the event loop, without the store's turn, on the
        cached entries with those records shown as held; what it must read of the store it reads through
        a connection of its own.  ``read`` gathers the entries it was shown (``_confirmed`` checks them)."""
        assert self._reader is not None
        self.replies_while_storing += 1
        with self._view.pinned(self._reader) as seen, self._view.ahead(applying.ahead):
            try:
                return initiator.handle(reply)
            finally:
                for origin, entry in seen.items():
                    read.setdefault(origin, entry)

    async def _exchange_once(self, url: str, origin: str | None, applying: _Applying, nursery: trio.Nursery,
                             done: list[ReceiveResult], failure: list[Exception]
                             ) -> tuple[Initiator, dict[str, Entry | None]]:
        """One exchange, and the entries shown to its replies handled while ``applying`` was being stored."""
        now_s = trio.current_time()
        held_back = ExchangeResult()

        def start() -> tuple[Initiator, bytes | None, _Applying]:
            confirmed = self._confirmed(applying, held_back)
            initiator = Initiator(self._view, self.identity.signing_key, origin, now=self.clock.now(), rng=self.rng,
                                  settings=self._settings, share=self._share(now_s), listen_port=self.listen_port,
                                  defer=True, assumed=confirmed.ahead or None)
            initiator.result.held_back += held_back.held_back
            with self._view.ahead(confirmed.ahead):
                return initiator, initiator.start(), confirmed

        initiator, request, applying = await self._with_store_or_inline(
            lambda: applying.read is None and self._cached(now_s), start)
        read: dict[str, Entry | None] = {}  # the entries shown to replies handled while the records are stored
        if applying.records:  # the previous answer's records, while this request is out
            await nursery.start(self._apply, applying, done, failure)
        if request is None:
            return initiator, read
        client = await self._client()
        from neverest import httpclient  # loaded with the client

        while request is not None:
            try:
                reply = await http.post(client, url, request, max_response_bytes=MAX_MESSAGE_BYTES,
                                        total_timeout_s=self._gossip.exchange_timeout_s)
            except httpclient.TransportFailure as exc:
                initiator.fail(ProtocolError("network", exc.kind, exc.detail))
                break
            except httpclient.PeerRefused as exc:
                if exc.status in (429, 503):
                    initiator.fail(ProtocolError("remote", "busy", f"HTTP {exc.status}: {exc.detail}"))
                else:
                    initiator.fail(ProtocolError("remote", "refused", f"HTTP {exc.status}: {exc.detail}"
                                                 if not exc.oversize else exc.detail))
                    initiator.result.refused = "oversize" if exc.oversize else None
                break
            if self._in_flight is applying and applying.records and not initiator.applies_at_once(reply) \
                    and self._reading():
                # This exchange's records before are still being stored: handled now all the same, on
                # what they will leave (``_handle_pinned``), so that the records this reply brings are
                # verified as soon as those are stored, not a round trip and a screen later.  (Another
                # exchange's records in flight: this one waits for them, as it was built without them.)
                request = self._handle_pinned(initiator, reply, applying, read)
            else:
                # An IN_SYNC reply only ends the exchange: handled here, without a worker thread.
                request = await self._with_store_or_inline(functools.partial(initiator.reads_no_store, reply),
                                                           initiator.handle, reply)
            if failure:  # applying the previous answer failed: stop here, exchange raises it
                break
        return initiator, read

    def _batched(self, url: str, result: ExchangeResult) -> bool:
        """Whether the result only confirms what the peer table says (a success with the same
        peer, only addresses already learned shared, nothing invalid): it is then batched for ``flush``."""
        peer = result.peer
        if (result.error is not None or result.is_self or peer is None or self._clean.get(url) != peer
                or any(address not in self._known for address in result.addresses)
                or any(reason not in POLICY_REFUSALS for reason in result.applied.refused)):
            self._clean.pop(url, None)
            return False
        self._successes[url] = (peer, self.clock.now())
        return True

    def _score(self, url: str, result: ExchangeResult) -> None:
        now = self.clock.now()
        learned: table.Learned | None = None
        self._successes.pop(url, None)
        with self._peer_write() as db:
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
                # Forks and this memory's refutation bounds are refusals of records their origin
                # signed validly: the peer that relayed them is not at fault (receive.POLICY_REFUSALS).
                invalid = sum(n for reason, n in result.applied.refused.items() if reason not in POLICY_REFUSALS)
                if invalid:
                    table.failed(db, url, "invalid-records", f"{invalid} invalid record(s)", now)
                elif result.peer is not None and learned is not None and not learned.bad:
                    _remember(self._clean, url, result.peer)
                    if not learned.dropped:
                        for address in result.addresses:
                            _remember(self._known, address, None)
            elif error.who == "local":
                log.warning("exchange with %s failed on our side: %s", url, error)
            elif error.who == "network":
                table.failed(db, url, error.code, error.message, now)  # back off; no penalty
            else:
                kind = result.refused if result.refused in table.PENALTY else _PENALTY_KIND.get(error.code, "protocol")
                table.failed(db, url, kind, f"{error.code}: {error.message}", now)
        if learned is not None and result.peer is not None:
            self._log_learned(result.peer, learned)

    healthy_peers: int = field(default=0, init=False)  # addresses the last round could pick from

    async def holdings_root(self) -> bytes:
        """The fingerprint of everything this memory holds (the range index's root): it moves when anything does."""
        return await self._with_store(lambda: self._view.index().root)

    async def round(self, *, fanout: int, only: str | None = None) -> list[dict[str, Any]]:
        """One gossip round; returns what each exchange did.

        Raises ``table.PeerError`` when ``only`` is not a usable address, or is this memory's own.
        """
        chosen = await self._with_store(self._choose, fanout, only)
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
            with self._peer_write() as db:
                url = table.add(db, only, source="manual", now=self.clock.now(), own_origin=self.identity.origin)
            self._clean.pop(url, None)
            return [(url, None)]
        healthy = table.healthy(self._store.db, self.clock.now())
        healthy = [a for a in healthy if a.origin != self.identity.origin]
        self.healthy_peers = len(healthy)  # pacing: a peer met or lost is news
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


@dataclass(frozen=True)
class _Applying:
    """Records screened from the answer that ended the last exchange, not yet applied."""

    records: list[bytes] = field(default_factory=list)
    ahead: dict[str, Entry] = field(default_factory=dict)  # the entries they will give
    source: str = ""
    url: str = ""  # where they came from
    peer: str | None = None  # the origin that answered from there, proven by its signature
    decoded: list[Any] = field(default_factory=list)  # json.loads of each record, as the screen read it
    # The entries their screen was shown, when it ran while the records before were still being
    # stored (``Gossip._handle_pinned``): applied only if these are what is stored once those are.
    read: dict[str, Entry | None] | None = None
    verified: Lookahead | None = None  # some of them verified ahead (receive.Lookahead)


def _remember(memo: dict[str, V], key: str, value: V) -> None:
    """``memo[key] = value``, the memo forgotten whole past MEMO_ENTRIES (it only saves writes)."""
    if key not in memo and len(memo) >= MEMO_ENTRIES:
        memo.clear()
    memo[key] = value


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
