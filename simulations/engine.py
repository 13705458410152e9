"""Agents running the real gossip code over the simulated network, on a virtual clock.

Each ``Agent`` is a real memory: the SQLite schema and code of ``neverest.memory.store``
(in memory, ``:memory:``, since durability is not what a simulation measures), the real
``SqliteView``, the real ``Responder`` and ``Initiator`` of ``neverest.gossip.core``, and
through them the one receive function.  The simulator adds only what the daemon gets
from the outside world: a clock, a network and a schedule.

**Time** is virtual: a heap of events ordered by time, each the arrival of one message.
An exchange is the daemon's: SYNC, then IN_SYNC or the RECON messages of revision 2
(DIGEST and PUSH with ``Settings(reconcile=False)``), each message carried by
``VirtualNetwork.carry``; a lost message fails the exchange when the sender's timeout
expires; a cut delta (``more``) is followed at once by another exchange with the same peer,
at most ``MAX_CONTINUATIONS`` times, as ``gossip/service.py`` does.

**Rounds** are the daemon's gossip period (``gossip_every_s``): in each, every online agent
starts one exchange with each of ``fanout`` peers drawn uniformly from the others, at a
uniformly random moment of the period (daemons are not synchronised).  The contacts are
drawn from their own seeded stream (``Schedule``), so that the ideal model can replay
exactly the same contacts (ideal.py) and a fault changes only what happens on the wire.

**Randomness** comes from three streams derived from the seed: the schedule, the network
(latency, loss) and the protocol (nonces, the order in which deltas list origins), so a
seed gives the same run, message for message.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import itertools
import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from neverest.clock import iso
from neverest.config import Config
from neverest.gossip.codec import ProtocolError
from neverest.gossip.core import ExchangeResult, Initiator, Responder, Settings
from neverest.gossip.peer_auth import ReplayCache
from neverest.gossip.service import MAX_CONTINUATIONS, settings_of
from neverest.gossip.view import SqliteView
from neverest.identity import Identity
from neverest.memory import holdings
from neverest.memory.store import Store
from neverest.records import TARGET_FIELD, Record, RecordType, sign_lesson
from simulations.network import NetworkModel, VirtualNetwork

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)  # virtual time 0


def stream(seed: int, name: str) -> random.Random:
    """One named, independent random stream of a run."""
    return random.Random(f"{seed}/{name}")


def at(t: float) -> datetime:
    return EPOCH + timedelta(seconds=t)


class Agent:
    """One memory: an identity and a real store, view and responder."""

    def __init__(self, index: int, seed: int, config: Config, settings: Settings,
                 identity: Identity | None = None) -> None:
        self.index = index
        self.identity = identity or Identity.from_seed(hashlib.sha256(f"neverest-sim/{seed}/{index}".encode()).digest())
        self.origin = self.identity.origin
        self.store = Store(Path(":memory:"))
        self.view = SqliteView(self.store, own_origin=self.origin, config=config)
        self.settings = settings
        self.responder = Responder(self.view, self.identity.signing_key,
                                   replay=ReplayCache(skew_s=settings.skew_s), settings=settings)

    def own(self, record: Record, now: datetime) -> None:
        """Hold a record this agent signed, as the daemon's publish step does."""
        with self.store.write() as db:
            holdings.put(db, record, source=holdings.OWN_SOURCE, now=now)

    def holds(self, origin: str, seq: int) -> bool:
        return self.view.digest().get(origin, (0, b""))[0] >= seq

    def close(self) -> None:
        self.store.close()


@dataclass
class Schedule:
    """Who contacts whom, and when: drawn round by round from its own stream, then kept."""

    n: int
    fanout: int
    period_s: float
    rng: random.Random
    tables: list[list[int]] | None = None  # each agent's peer table; None: every other agent
    rounds: dict[int, list[tuple[float, int, int]]] = field(default_factory=dict)

    def contacts(self, r: int) -> list[tuple[float, int, int]]:
        """Round r's contacts, sorted by time.  Rounds are drawn in the order they are first
        asked for (in order, unless a caller skips ahead with ``Simulation.skip_to``)."""
        if r not in self.rounds:
            out = []
            for i in range(self.n):
                for j in self._peers(i):
                    out.append(((r + self.rng.random()) * self.period_s, i, j))
            out.sort()
            self.rounds[r] = out
        return self.rounds[r]

    def peers(self, i: int) -> list[int]:
        """``fanout`` peers for agent i, drawn from the schedule's stream (for contacts outside the rounds)."""
        return self._peers(i)

    def _peers(self, i: int) -> list[int]:
        if self.tables is not None:
            return self.rng.sample(self.tables[i], min(self.fanout, len(self.tables[i])))
        f = min(self.fanout, self.n - 1)
        picked: list[int] = []
        while len(picked) < f:
            j = self.rng.randrange(self.n - 1)
            j += j >= i  # uniform over the others
            if j not in picked:
                picked.append(j)
        return picked


@dataclass
class Stats:
    exchanges: int = 0
    failed: int = 0
    deliveries: int = 0  # records carried to a receiver
    redundant: int = 0  # of those, records the receiver already held
    accepted: int = 0
    refused: int = 0
    in_sync: int = 0
    in_sync_bytes_max: int = 0
    in_sync_bytes_total: int = 0



@dataclass
class _Exchange:
    initiator: Initiator
    src: int
    dst: int
    continuation: int


class Simulation:
    """``n`` agents gossiping with the real code; faults are applied between rounds by the caller."""

    def __init__(self, n: int, *, seed: int, fanout: int = 1, config: Config | None = None,
                 network: NetworkModel | None = None, identities: Sequence[Identity] | None = None,
                 peer_tables: list[list[int]] | None = None) -> None:
        if n < 2:
            raise ValueError("a network needs at least 2 agents")
        self.n, self.seed, self.fanout = n, seed, fanout
        self.config = config or Config()
        self.period_s = self.config.gossip_every_s
        settings = settings_of(self.config.sections.gossip)
        self.agents = [Agent(i, seed, self.config, settings, None if identities is None else identities[i])
                       for i in range(n)]
        self.schedule = Schedule(n, fanout, self.period_s, stream(seed, "schedule"), peer_tables)
        self.net = VirtualNetwork(n, network or NetworkModel(), stream(seed, "network"))
        self.proto_rng = stream(seed, "protocol")
        self.stats = Stats()
        self.round = 0  # rounds run so far
        self.t = 0.0
        self._events: list[tuple[float, int, Callable[[float], None]]] = []
        self._tie = itertools.count()
        self.on_accept: Callable[[int, float], None] | None = None  # (agent, time) after it accepted records

    # -- running --------------------------------------------------------------------------

    def run_round(self) -> None:
        """One gossip period: every online agent's contacts start, and every message due in it is delivered."""
        r = self.round
        for t, i, j in self.schedule.contacts(r):
            if self.net.online[i]:
                self._at(t, functools.partial(self._begin, i, j))
        self._run_until((r + 1) * self.period_s)
        self.round += 1

    def skip_to(self, t: float) -> None:
        """Let the clock run idle to ``t``: finish what is in flight, and start the next round at or after t
        (the rounds skipped are not drawn: nothing happens in them)."""
        self._run_until(max(t, self.t))
        self.round = max(self.round, math.ceil(t / self.period_s))

    def _at(self, t: float, fn: Callable[[float], None]) -> None:
        heapq.heappush(self._events, (t, next(self._tie), fn))

    def _run_until(self, end: float) -> None:
        while self._events and self._events[0][0] < end:
            t, _, fn = heapq.heappop(self._events)
            self.t = t
            fn(t)
        self.t = end

    # -- one exchange, message by message ------------------------------------------------

    def _begin(self, i: int, j: int, now: float) -> None:
        self._start(now, i, j, 0)

    def _start(self, now: float, i: int, j: int, continuation: int) -> None:
        a = self.agents[i]
        initiator = Initiator(a.view, a.identity.signing_key, self.agents[j].origin, now=at(now),
                              rng=self.proto_rng, settings=a.settings)
        self.stats.exchanges += continuation == 0
        request = initiator.start()
        if request is None:
            self._finish(now, _Exchange(initiator, i, j, continuation))
            return
        self._send_request(now, _Exchange(initiator, i, j, continuation), request)

    def _send_request(self, now: float, x: _Exchange, request: bytes) -> None:
        delay = self.net.carry(x.src, x.dst, len(request))
        if delay is None:
            self._at(now + self.net.model.timeout_s, lambda t: self._lost(t, x))
            return
        self._at(now + delay, lambda t: self._serve(t, x, request))

    def _serve(self, now: float, x: _Exchange, request: bytes) -> None:
        b = self.agents[x.dst]
        reply = b.responder.respond(request, now=at(now), rng=self.proto_rng)
        self._count(x.dst, reply.result, now)
        if reply.data is None:
            self._lost(now, x)
            return
        delay = self.net.carry(x.dst, x.src, len(reply.data))
        if delay is None:
            self._at(now + self.net.model.timeout_s, lambda t: self._lost(t, x))
            return
        data = reply.data
        self._at(now + delay, lambda t: self._answer(t, x, data))

    def _answer(self, now: float, x: _Exchange, reply: bytes) -> None:
        before = x.initiator.result.applied.accepted
        request = x.initiator.handle(reply)
        if x.initiator.result.applied.accepted > before and self.on_accept is not None:
            self.on_accept(x.src, now)
        if request is not None:
            self._send_request(now, x, request)
        else:
            self._finish(now, x)

    def _lost(self, now: float, x: _Exchange) -> None:
        x.initiator.fail(ProtocolError("remote", "refused", "timeout: the message was lost"))
        self._finish(now, x)

    def _finish(self, now: float, x: _Exchange) -> None:
        result = x.initiator.result
        self._count(None, result, now)
        if result.error is not None:
            self.stats.failed += 1
        elif result.in_sync:
            self.stats.in_sync += 1
            size = result.bytes_sent + result.bytes_received
            self.stats.in_sync_bytes_total += size
            self.stats.in_sync_bytes_max = max(self.stats.in_sync_bytes_max, size)
        if result.error is None and result.more and x.continuation + 1 < MAX_CONTINUATIONS:
            self._start(now, x.src, x.dst, x.continuation + 1)

    def _count(self, responder: int | None, result: ExchangeResult, now: float) -> None:
        """Deliveries as the receiving side saw them (the responder's PUSH, the initiator's pulls)."""
        received = result.records_received
        if received:
            self.stats.deliveries += received
            self.stats.redundant += result.applied.duplicates
            self.stats.accepted += result.applied.accepted
            self.stats.refused += sum(result.applied.refused.values())
            if responder is not None and result.applied.accepted and self.on_accept is not None:
                self.on_accept(responder, now)

    # -- helpers for experiments ----------------------------------------------------------

    def publish(self, agent: int, record: Record) -> None:
        self.agents[agent].own(record, at(self.t))

    def inject(self, agent: int, raw: bytes) -> None:
        """Make an agent hold bytes that no receive function checked: how an adversary's store
        holds the forged or altered records it serves.  ``raw`` must name an origin, seq and hash."""
        obj = json.loads(raw)
        kind: RecordType = next(k for k in ("lesson", "confirm", "revoke", "refute") if TARGET_FIELD[k] in obj)
        unchecked = Record(type=kind, raw=raw, fields=obj, origin=obj["origin"], key=obj["key"],
                           target=obj[TARGET_FIELD[kind]], seq=obj["seq"])
        with self.agents[agent].store.write() as db:
            holdings.put(db, unchecked, source="adversary", now=at(self.t))

    def close(self) -> None:
        for a in self.agents:
            a.close()


LESSON = "pytest finds no tests when the package uses a src layout and is not installed"


def lesson_record(agent: Agent) -> Record:
    """The experiments' new lesson, signed by ``agent`` at virtual time 0 with seq 1."""
    return sign_lesson(agent.identity.signing_key, kind="error", text=LESSON, seen=3, strength=0.8,
                       updated=iso(at(0)), seq=1)


def first_lesson(sim: Simulation, agent: int = 0) -> str:
    """Agent ``agent`` signs the experiments' new lesson and holds it; returns its origin."""
    sim.publish(agent, lesson_record(sim.agents[agent]))
    return sim.agents[agent].origin


class Holders:
    """Which agents hold one origin's record at ``seq``, kept up to date as ``Simulation.on_accept``.

    ``curve`` lists (virtual time, agents holding it) at each new holder, from the first."""

    def __init__(self, sim: Simulation, origin: str, *, first: int, seq: int = 1) -> None:
        self._sim, self._origin, self._seq = sim, origin, seq
        self.held = [False] * sim.n
        self.held[first] = True
        self.count = 1
        self.curve: list[tuple[float, int]] = [(0.0, 1)]
        sim.on_accept = self

    def __call__(self, agent: int, t: float) -> None:
        if not self.held[agent] and self._sim.agents[agent].holds(self._origin, self._seq):
            self.held[agent] = True
            self.count += 1
            self.curve.append((t, self.count))
