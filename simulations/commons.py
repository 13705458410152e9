"""``python -m simulations commons``: do true lessons become common, and false ones never?

Agents, honest and adversarial (world.py), live ``nights`` nights.  Each night:

1. **sessions**: honest agents meet true phenomena and test the lessons they hold
   (world.py); what they learn is signed with the real ``records`` functions at their
   sleep: their own lesson, a confirmation of a received one, or, once per false lesson
   it holds and meets, a refutation.  The adversaries then play their strategy
   (adversaries.py: ``--strategy``, default ``collude``).
2. **gossip**: ``rounds_per_night`` rounds in which each agent exchanges with ``fanout``
   peers of its table.  Records move as the ideal anti-entropy moves them (both sides
   leave holding the union), which the ``dissemination`` experiment shows the real gossip
   matches; by default the real gossip core is not run, because 1 000 full stores of
   ~70 000 records each is ~1 000 times what one memory does, beyond one machine in
   minutes.  ``exchange="real"`` (``--exchange real``) runs it instead, for smaller
   networks: every record then moves through ``engine.Simulation`` (real stores, real
   exchanges over the same peer tables, the receive function), and what each store holds
   is read back after the night's rounds.  Every record is verified once (ledger.py); an
   honest agent never holds one that fails, so forged records stay with the adversaries.
   A replayed record has the bytes of one already held: it changes nothing.
3. **judging**: every honest agent judges every lesson it holds records about with the
   real ``neverest.commons.judge``, under its trust policy, and keeps the tombstones the
   verdicts ask for, as ``memory/states.commons_pass`` does.

Policies: ``any`` (every origin counts), ``peers`` (the origins in the agent's peer table),
``vouched`` (``neverest.commons.vouched``: origins whose claims this agent tested itself, none
refuted, once it has tested ``vouch_min_resolved`` lessons), and ``earned`` (the default, the
daemon's: ``neverest.commons.counted_origins``, trust earned from first claims borne out and
passed along, discredited by contradictions; computed for every honest agent at once, see
``Run.update_earned``).  Under ``vouched`` and ``earned`` a lesson held here less than
``vouch_quarantine_days`` is not common here yet.

Judging every lesson at 700 agents is the slow part; verdicts are cached per night by
exactly what they depend on (the records admitted, the tombstone and which publishers
count), which changes nothing in what ``judge`` returns.  Confirmations from origins the
policy does not count are left out before judging: ``judge`` ignores them (commons.py).
"""

from __future__ import annotations

import functools
import hashlib
import json
import operator
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from neverest.clock import iso
from neverest.commons import COMMON, CommonsConfig, Evidence, Fact, Trust, TrustConfig, judge, standing, vouched
from neverest.config import Config
from neverest.identity import Identity
from neverest.memory import holdings
from neverest.records import Record, sign_confirm, sign_lesson, sign_refute, sign_revoke
from simulations import report
from simulations.adversaries import STRATEGIES, Strategy, Tactics, strategy
from simulations.engine import EPOCH, Simulation, stream
from simulations.ledger import CONFIRM, KIND_OF, LESSON, REFUTE, REVOKE, Held, Ledger, bits
from simulations.signer import Signer
from simulations.world import KIND, Lesson, WorldOptions, lessons

__all__ = ["CONFIRM", "LESSON", "POLICIES", "REFUTE", "REVOKE", "STRATEGIES", "Ledger", "Options", "Run", "World",
           "run"]

POLICIES = ("any", "peers", "vouched", "earned")


@dataclass
class Options:
    agents: int
    adversaries: float
    nights: int
    trust: str = "earned"
    seed: int = 1
    world: WorldOptions = field(default_factory=WorldOptions)
    config: Config = field(default_factory=Config)
    trust_config: TrustConfig = field(default_factory=TrustConfig)  # ``earned``'s parameters (corroboration: 0 = off)
    strategy: str = "collude"  # what the adversaries do (adversaries.py)
    tactics: Tactics = field(default_factory=Tactics)
    revoke_night: int | None = None  # default: the middle of the run
    fading: bool = True  # measure fading_nights after the last night
    exchange: str = "ideal"  # how records move: "ideal" anti-entropy, or "real": the gossip engine (engine.py)
    out: Path | None = None
    quiet: bool = False


@dataclass
class Honest:
    contexts: list[int]
    verified: set[int] = field(default_factory=set)
    refuted: set[int] = field(default_factory=set)
    supported: set[int] = field(default_factory=set)  # lessons it published or confirmed
    first_held: dict[int, datetime] = field(default_factory=dict)  # lesson -> when it first held a copy
    tombstones: dict[int, str] = field(default_factory=dict)


class World:
    def __init__(self, opts: Options, play: Strategy) -> None:
        self.opts, w = opts, opts.world
        n = opts.agents
        rng = stream(opts.seed, "world")
        self.rng = rng
        n_adv = round(opts.adversaries * n)
        order = list(range(n))
        rng.shuffle(order)
        self.adversaries = sorted(order[:n_adv])
        self.is_adv = np.zeros(n, dtype=bool)
        self.is_adv[self.adversaries] = True
        self.honest = [i for i in range(n) if not self.is_adv[i]]
        n_syb = play.sybils(n_adv, len(self.honest), w.sybils_per_adversary)
        self.keys = [_identity(opts.seed, i) for i in range(n + n_syb)]
        self.origins = [k.origin for k in self.keys]
        self._signers: list[Signer | None] = [None] * len(self.keys)
        # Sybil s belongs to adversary s mod n_adv: each adversary relays every n_adv-th.
        self.sybils_of = {a: [n + s for s in range(j, n_syb, n_adv)] for j, a in enumerate(self.adversaries)}
        self.lessons: list[Lesson] = lessons(w, play.false_count(n_adv, w.false_per_adversary), rng)
        self.agents = {h: Honest(sorted(rng.sample(range(w.contexts), w.contexts_per_agent))) for h in self.honest}
        self.peers = [rng.sample([j for j in range(n) if j != i], min(w.peers_per_agent, n - 1)) for i in range(n)]
        play.place(self)
        self.true = [le.index for le in self.lessons if le.true]
        self.false = [le.index for le in self.lessons if not le.true]
        self.by_context: dict[int, list[int]] = {}
        for le in self.lessons:
            self.by_context.setdefault(le.context, []).append(le.index)
        self.false_author = {f: rng.choice(self.adversaries) for f in self.false} if self.adversaries else {}
        self.false_night = {f: play.publish_night(1 + rng.randrange(max(1, w.false_publish_nights)))
                            for f in self.false}
        # Lessons each adversary key (the adversary's own and its Sybils') has acted on.
        self.acted: dict[int, set[int]] = {k: set() for a in self.adversaries for k in (a, *self.sybils_of[a])}
        self.ledger = Ledger()
        # Holdings by batch (ledger.py): one integer per agent, bit b set when it holds batch b.
        self.batched = opts.exchange == "ideal"
        self.rows = [0] * n
        self.valid_batches = 0  # bit b: batch b's records are valid
        self.batch_size: list[int] = []
        # When each batch was made (its records all on one night): no agent holds a record before it exists,
        # whatever time the record itself states.
        self.batch_made: list[float] = []
        self._open: dict[tuple[int, bool], int] = {}  # (holder, valid) -> the batch it fills until the next gossip
        self.lesson_batches: dict[int, int] = {}  # lesson -> the batches holding a valid lesson record of it
        self.first_published: dict[int, datetime] = {}  # lesson -> the earliest signed time of an honest copy
        self.held = Held(self.rows, self.ledger)
        self.seq = [0] * len(self.keys)  # each key's last seq: gossip moves records by (origin, seq)
        self.on_hold: Callable[[int, Record, datetime], None] | None = None  # the real engine's stores
        self.refresh()

    # -- records --------------------------------------------------------------------------

    def _add(self, record: Record | None, raw: bytes, lesson: int, origin: int, holder: int, when: datetime,
             fact: Fact | None = None) -> int:
        """Keep a record held by ``holder``; ``fact``: the record's, when the caller made it (signer.py)."""
        kind = KIND_OF[record.type] if record is not None and fact is not None else None
        if kind is None:
            fact, kind = Ledger.check(raw, record)
        valid = fact is not None
        batch = self._open.get((holder, valid)) if self.batched else None
        if batch is None:
            batch = len(self.batch_size)
            self.batch_size.append(0)
            self.batch_made.append(when.timestamp())
            if self.batched:
                self._open[holder, valid] = batch
            if valid:
                self.valid_batches |= 1 << batch
            self.rows[holder] |= 1 << batch
        self.batch_size[batch] += 1
        rec = self.ledger.append(raw, fact, kind, lesson, origin, batch)
        if valid and kind == LESSON:
            self.lesson_batches[lesson] = self.lesson_batches.get(lesson, 0) | (1 << batch)
            assert fact is not None
            if self.honest_key(origin) and (lesson not in self.first_published
                                             or fact.at < self.first_published[lesson]):
                self.first_published[lesson] = fact.at
        if record is not None and self.on_hold is not None:
            self.on_hold(holder, record, when)
        return rec

    def honest_key(self, key: int) -> bool:
        """Key ``key`` is an honest agent's (not an adversary's, nor a Sybil's)."""
        return key < self.opts.agents and not self.is_adv[key]

    def _next_seq(self, signer: int) -> int:
        self.seq[signer] += 1
        return self.seq[signer]

    def sign(self, signer: int, holder: int, kind: int, lesson: int, when: datetime) -> int:
        """One record signed with the real ``records`` functions, held by ``holder``."""
        key = self.keys[signer].signing_key
        le = self.lessons[lesson]
        seq = self._next_seq(signer)
        if kind == LESSON:
            record = sign_lesson(key, kind=KIND, text=le.text, seen=1, strength=1.0, updated=iso(when), seq=seq)
        elif kind == CONFIRM:
            record = sign_confirm(key, le.hash, at=iso(when), seq=seq)
        elif kind == REFUTE:
            record = sign_refute(key, le.hash, at=iso(when), seq=seq)
        else:
            record = sign_revoke(key, le.hash, at=iso(when), seq=seq)
        return self._add(record, record.raw, lesson, signer, holder, when)

    def publish(self, author: int, lesson: int, when: datetime) -> int:
        """An adversary publishes (a false lesson) under its own key."""
        return self.sign(author, author, LESSON, lesson, when)

    def sign_many(self, holder: int, todo: list[tuple[int, int, int]], when: datetime,
                  signed: datetime | None = None) -> None:
        """``(signer, kind, lesson)`` records held by ``holder`` since ``when``: confirmations, refutations
        and copies of lessons already signed, by the bulk signer (the same bytes as ``sign``, signer.py),
        dated ``signed`` (default ``when``: a signer may put any time in its records)."""
        stamp = iso(when if signed is None else signed)
        at = datetime.fromisoformat(stamp)  # what fact_of reads back from the record
        for signer, kind, lesson in todo:
            key = self._signers[signer]
            if key is None:
                key = self._signers[signer] = Signer.of(self.keys[signer].signing_key)
            le, seq = self.lessons[lesson], self._next_seq(signer)
            if kind == LESSON:
                record, fact = key.lesson(kind=KIND, text=le.text, stamp=stamp, at=at, seq=seq)
            elif kind == CONFIRM:
                record, fact = key.about("confirm", le.hash, stamp=stamp, at=at, seq=seq)
            elif kind == REFUTE:
                record, fact = key.about("refute", le.hash, stamp=stamp, at=at, seq=seq)
            else:
                raise ValueError(f"the bulk signer signs lessons, confirmations and refutations, not kind {kind}")
            self._add(record, record.raw, lesson, signer, holder, when, fact)

    def forge(self, adversary: int, lesson: int, victim: int, when: datetime) -> int | None:
        """A confirmation in an honest agent's name, signed with the adversary's key: refused by parse.
        Not made when records move by the real engine (tests/test_simulations.py covers forged records
        there): a forgery there would need a seq in the victim's history."""
        if self.on_hold is not None:
            return None
        record = sign_confirm(self.keys[adversary].signing_key, self.lessons[lesson].hash, at=iso(when))
        obj = json.loads(record.raw)
        obj["origin"], obj["key"] = self.origins[victim], bytes(self.keys[victim].signing_key.verify_key).hex()
        raw = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
        return self._add(None, raw, lesson, victim, adversary, when)

    def held_lessons(self, agent: int) -> set[int]:
        """Lessons the agent holds a valid lesson record of."""
        row = self.rows[agent]
        return {lesson for lesson, batches in self.lesson_batches.items() if batches & row}

    def hold(self, agent: int, rec: int) -> None:
        """The agent holds record ``rec`` (and so the rest of its batch)."""
        self.rows[agent] |= 1 << int(self.ledger.column("batch")[rec])

    def seal(self) -> None:
        """Gossip starts: records signed from now on travel in new batches."""
        self._open.clear()

    def holders(self) -> npt.NDArray[np.int64]:
        """For each batch, the number of agents holding it."""
        width = len(self.batch_size)
        counts = np.zeros(width, dtype=np.int64)
        for row in self.rows:
            counts += bits(row, width)
        return counts

    def invalid_held(self, agents: list[int]) -> int:
        """Refused records the agents hold, in all."""
        invalid = ((1 << len(self.batch_size)) - 1) & ~self.valid_batches
        total = 0
        for agent in agents:
            row = self.rows[agent] & invalid
            while row:
                low = row & -row
                total += self.batch_size[low.bit_length() - 1]
                row ^= low
        return total

    def refresh(self) -> None:
        """Take in the records signed since the last refresh (``arrays``: lesson, origin, kind, valid)."""
        self.arrays = self.ledger.arrays()


def _identity(seed: int, i: int) -> Identity:
    return Identity.from_seed(hashlib.sha256(f"neverest-sim-commons/{seed}/{i}".encode()).digest())


def _night_time(night: int) -> datetime:
    return EPOCH + timedelta(days=night, hours=3)  # every agent sleeps at 03:00


class Run:
    def __init__(self, opts: Options) -> None:
        if opts.trust not in POLICIES:
            raise ValueError(f"--trust must be one of {', '.join(POLICIES)}")
        self.opts = opts
        self.strategy = strategy(opts.strategy, opts.tactics, opts.seed)
        self.w = World(opts, self.strategy)
        self.rng = stream(opts.seed, "sessions")
        self.gossip_rng = stream(opts.seed, "gossip")
        self.cconfig = CommonsConfig(support_n=opts.config.support_n, window_days=opts.config.window_days,
                                     revoke_quorum=opts.config.revoke_quorum,
                                     future_tolerance_s=opts.config.future_tolerance_s)
        self.revoked_lesson: int | None = None
        self.revocation_record: int | None = None
        self.revocation_rounds: int | None = None
        self.rounds_since_revocation = 0
        self.last_support: dict[int, datetime] = {}  # lesson -> newest support signed
        self._prepared: dict[int, tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_], list[npt.NDArray[np.intp]]]] = {}
        self.engine: Simulation | None = None
        # The policy "earned": one Evidence for the run, fed the records every honest agent holds.
        self.evidence = Evidence(self.w.origins)
        self.trust_config = opts.trust_config
        self._in_evidence = np.zeros(0, dtype=bool)
        self._earned: npt.NDArray[np.bool_] | None = None
        self._corroborating: npt.NDArray[np.bool_] | None = None
        if opts.exchange == "real":
            w = self.w
            self.engine = Simulation(opts.agents, seed=opts.seed, fanout=opts.world.fanout, config=opts.config,
                                     identities=w.keys[:opts.agents], peer_tables=w.peers)
            engine = self.engine
            w.on_hold = lambda holder, record, when: engine.agents[holder].own(record, when)
        elif opts.exchange != "ideal":
            raise ValueError("exchange must be ideal or real")

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()

    # -- one night ------------------------------------------------------------------------

    def live(self, night: int, *, revoke: bool = False) -> None:
        """One night of the world, up to judging: sessions, the adversaries' play, the revocation
        when ``revoke``, gossip, and the holdings noted.  Nothing here depends on verdicts."""
        self.sessions(night)
        self.adversaries(night)
        if revoke:
            self.revoke(night)
        self.gossip(night)
        self.note_holdings(night)

    def sessions(self, night: int) -> None:
        w, when = self.w, _night_time(night)
        w.refresh()
        for h in w.honest:
            agent = w.agents[h]
            holding = w.held_lessons(h)
            for _ in range(self.opts.world.sessions_per_night):
                context = self.rng.choice(agent.contexts)
                for lesson in w.by_context.get(context, []):
                    if self.rng.random() >= self.opts.world.meet_probability:
                        continue
                    le = w.lessons[lesson]
                    if not le.true:
                        if lesson in holding:
                            # The prediction failed here: said once, and never about its own lesson.
                            if lesson not in agent.refuted and lesson not in agent.supported:
                                w.sign(h, h, REFUTE, lesson, when)
                            agent.refuted.add(lesson)
                        continue
                    agent.verified.add(lesson)
                    if lesson in agent.supported or lesson == self.revoked_lesson:
                        continue
                    agent.supported.add(lesson)
                    # Learned here for the first time: its own lesson; held from elsewhere: a confirmation.
                    kind = CONFIRM if lesson in holding else LESSON
                    w.sign(h, h, kind, lesson, when)
                    self.last_support[lesson] = when

    def adversaries(self, night: int) -> None:
        """The adversaries' night: their strategy's (adversaries.py)."""
        self.strategy.night(self.w, night, _night_time(night), self.rng)

    def revoke(self, night: int) -> None:
        """The first publisher of the most widely held true lesson withdraws it."""
        w = self.w
        w.refresh()
        les, _, kind, valid = w.arrays
        published = (kind == LESSON) & valid
        copies = np.bincount(les[published], weights=w.holders()[w.ledger.column("batch")[published]],
                             minlength=len(w.lessons))
        best = {lesson: int(copies[lesson]) for lesson in w.true if copies[lesson] > 0}
        if not best:
            return
        lesson = max(best, key=lambda k: (best[k], -k))
        # The earliest honest publisher: the withdrawal measured is an honest origin's (a back-dated copy
        # can make an adversary's key the earliest by signed time, backdate in adversaries.py).
        origins = w.ledger.column("origin")
        facts = [(f, int(r)) for r in np.flatnonzero(published & (les == lesson))
                 if (f := w.ledger.facts[r]) is not None and w.honest_key(int(origins[r]))]
        if not facts:
            return
        first = min(facts, key=lambda fr: (fr[0].at, fr[0].origin))[1]
        publisher = int(origins[first])
        self.revoked_lesson = lesson
        self.revocation_record = w.sign(publisher, publisher, REVOKE, lesson, _night_time(night))

    def gossip(self, night: int) -> None:
        if self.engine is not None:
            self._real_gossip(night)
            return
        w = self.w
        w.seal()
        rows, valid, adversary = w.rows, w.valid_batches, w.is_adv.tolist()
        n = self.opts.agents
        fanout = min(self.opts.world.fanout, len(w.peers[0]))
        order = list(range(n))
        revocation = (None if self.revocation_record is None
                      else 1 << int(w.ledger.column("batch")[self.revocation_record]))
        for _ in range(self.opts.world.rounds_per_night):
            # Daemons are not synchronised: within a round, agents start their exchanges in a
            # random order, so a record may cross several hops in one round, as in engine.py.
            self.gossip_rng.shuffle(order)
            for i in order:
                for j in self.gossip_rng.sample(w.peers[i], fanout):
                    mine, theirs = rows[i], rows[j]
                    if mine != theirs:
                        # Both leave holding the union; an honest side takes only valid records.
                        rows[i] = mine | theirs if adversary[i] else mine | (theirs & valid)
                        rows[j] = mine | theirs if adversary[j] else theirs | (mine & valid)
            if revocation is not None and self.revocation_rounds is None:
                self.rounds_since_revocation += 1
                if sum(1 for row in rows if row & revocation) / n >= 0.99:
                    self.revocation_rounds = self.rounds_since_revocation

    def _real_gossip(self, night: int) -> None:
        """The night's rounds through the real gossip engine; then what each store holds, as ledger indices."""
        w, engine = self.w, self.engine
        assert engine is not None
        engine.skip_to((_night_time(night) - EPOCH).total_seconds())
        revocation = None if self.revocation_record is None else holdings.digest_of(
            w.ledger.raw[self.revocation_record])
        for _ in range(self.opts.world.rounds_per_night):
            engine.run_round()
            if revocation is not None and self.revocation_rounds is None:
                self.rounds_since_revocation += 1
                holding = sum(holdings.holds(a.store.db, revocation) for a in engine.agents)
                if holding >= 0.99 * len(engine.agents):
                    self.revocation_rounds = self.rounds_since_revocation
        for i, agent in enumerate(engine.agents):
            for digest in holdings.digests(agent.store.db):
                rec = w.ledger.by_digest.get(digest)
                if rec is not None:
                    w.hold(i, rec)

    def note_holdings(self, night: int) -> None:
        """When each honest agent first held each lesson (the quarantine of ``vouched`` and ``earned`` runs from it).
        The night's gossip ran between two sleeps; the time noted is the sleep that follows it."""
        w, when = self.w, _night_time(night)
        w.refresh()
        for h in w.honest:
            first = w.agents[h].first_held
            for lesson in w.held_lessons(h):
                first.setdefault(lesson, when)

    # -- judging --------------------------------------------------------------------------

    def update_earned(self) -> None:
        """The policy ``earned`` for every honest agent at once (``commons.counted_origins``).

        Its evidence is the records that every honest agent holds (each holds at least those,
        and its own): one Evidence serves them all, and the scores of all agents are one
        matrix product per step.  A record reaches that evidence the night after every honest
        agent holds it, which delays an agent's trust by at most that, never enlarges it."""
        w = self.w
        les, _, _, valid = w.arrays
        n = len(les)
        if len(self._in_evidence) < n:
            self._in_evidence = np.concatenate([self._in_evidence, np.zeros(n - len(self._in_evidence), dtype=bool)])
        pending = np.flatnonzero(~self._in_evidence[:n] & valid)
        everyone = functools.reduce(operator.and_, (w.rows[h] for h in w.honest)) if w.honest else 0
        batch = w.ledger.column("batch")
        new = pending[bits(everyone, int(batch.max(initial=-1)) + 1)[batch[pending]]] if len(pending) else pending
        self._in_evidence[new] = True
        new = new[np.argsort(les[new], kind="stable")]
        made = np.asarray(w.batch_made)
        for group in np.split(new, np.flatnonzero(np.diff(les[new])) + 1) if len(new) else []:
            held = [(f, r) for r in group.tolist() if (f := w.ledger.facts[r]) is not None]
            # Claims are ordered by when they were held (the batch's night), as a daemon orders them by
            # when it received them: a record dated earlier than it was made takes no first claim.
            self.evidence.add_claims(w.lessons[int(les[group[0]])].hash,
                                     [self.evidence.index[f.origin] for f, _ in held], [f.kind for f, _ in held],
                                     [f.at.timestamp() for f, _ in held],
                                     made[batch[[r for _, r in held]]].tolist())
        result = standing(self.evidence, w.honest, self.trust_config)
        self._earned, self._corroborating = result.counted, result.corroborating
        self._earned_column = {h: k for k, h in enumerate(w.honest)}

    def counted(self, h: int) -> npt.NDArray[np.bool_]:
        """Which origins agent h's policy counts, one flag per origin."""
        w, trust = self.w, self.opts.trust
        flags = np.zeros(len(w.origins), dtype=bool)
        flags[h] = True
        if trust == "earned":
            assert self._earned is not None, "update_earned first"
            return self._earned[:, self._earned_column[h]].copy()
        if trust == "any":
            flags[:] = True
        elif trust == "peers":
            flags[w.peers[h]] = True
        else:
            agent = w.agents[h]
            les, origin, kind, valid = w.arrays
            n = len(w.ledger)
            support = w.held[h, :n] & valid & ((kind == LESSON) | (kind == CONFIRM))  # refutations support nothing
            verified = _by_origin(support & np.isin(les, list(agent.verified)), origin, les, w.origins)
            refuted = _by_origin(support & np.isin(les, list(agent.refuted)), origin, les, w.origins)
            counts = vouched(verified, refuted, resolved=len(agent.verified | agent.refuted), own=w.origins[h],
                             min_verified=self.opts.config.vouch_min_verified,
                             min_resolved=self.opts.config.vouch_min_resolved)
            for o, name in enumerate(w.origins):
                if name in verified:
                    flags[o] = counts(name)
        return flags

    def corroborating(self, h: int) -> npt.NDArray[np.bool_]:
        """Which origins corroborate for agent h (``earned`` only; no origin under the other policies)."""
        if self.opts.trust != "earned":
            return np.zeros(len(self.w.origins), dtype=bool)
        assert self._corroborating is not None, "update_earned first"
        return self._corroborating[:, self._earned_column[h]].copy()

    def judge_all(self, night: int, lessons_of_interest: set[int] | None = None, *,
                  frozen: bool = False) -> dict[int, dict[int, str]]:
        """Each honest agent's state of each lesson it holds records about (agent -> lesson -> state).

        ``frozen``: nothing but the clock changed since the last call (no records, no tests),
        so each agent's policy and the records it admits are taken from that call."""
        w, now = self.w, _night_time(night)
        w.refresh()
        les, origin, kind, valid = w.arrays
        n = len(w.ledger)
        cache: dict[tuple[Any, ...], str] = {}
        states: dict[int, dict[int, str]] = {}
        quarantine = self.opts.config.vouch_quarantine_days if self.opts.trust in ("vouched", "earned") else 0.0
        candidates = np.arange(n)
        if self.opts.trust == "earned" and not frozen:
            self.update_earned()
            assert self._earned is not None and self._corroborating is not None
            # Only records some honest agent may admit: the rest of the work is per agent.
            anyone = np.asarray(self._earned.any(axis=1) | self._corroborating.any(axis=1), dtype=bool)
            candidates = np.flatnonzero(valid & ((kind == LESSON) | (kind == REVOKE)
                                                 | ((kind == CONFIRM) & anyone[origin])))
        for h in w.honest:
            prepared = self._prepared.get(h) if frozen else None
            if prepared is None:
                flags, backing = self.counted(h), self.corroborating(h)
                c = candidates
                admitted = w.held.row(h)[c] & valid[c] & ((kind[c] == LESSON) | (kind[c] == REVOKE)
                                                      | ((kind[c] == CONFIRM) & (flags[origin[c]]
                                                                                 | backing[origin[c]])))
                idx = _few_corroborations(c[admitted], les, origin, kind, flags, self.cconfig.support_n)
                idx = idx[np.argsort(les[idx], kind="stable")]
                prepared = (flags, backing, np.split(idx, np.flatnonzero(np.diff(les[idx])) + 1) if len(idx) else [])
                self._prepared[h] = prepared
            flags, backing, groups = prepared
            agent = w.agents[h]
            mine: dict[int, str] = {}
            policy: Trust | None = None
            for group in groups:
                lesson = int(les[group[0]])
                if lessons_of_interest is not None and lesson not in lessons_of_interest:
                    continue
                tomb = agent.tombstones.get(lesson)
                who = origin[group]
                since = agent.first_held.get(lesson) if quarantine else None
                waiting = since is not None and now - since < timedelta(days=quarantine)
                key = (lesson, group.tobytes(), tomb, flags[who].tobytes(), backing[who].tobytes(), waiting)
                state = cache.get(key)
                if state is None:
                    policy = Trust(_flags_policy(flags, w.origins).__contains__,
                                   _flags_policy(backing, w.origins).__contains__) if policy is None else policy
                    verdict = judge([f for r in group.tolist() if (f := w.ledger.facts[r]) is not None],
                                    now=now, config=self.cconfig, counts=policy, tombstone=tomb,
                                    held_since=since, quarantine_days=quarantine)
                    state = verdict.state
                    if verdict.tombstone:
                        state = "+" + state  # the agent writes a tombstone (below)
                    cache[key] = state
                if state.startswith("+"):
                    state = state[1:]
                    agent.tombstones[lesson] = state
                mine[lesson] = state
            states[h] = mine
        return states


def _by_origin(selected: npt.NDArray[np.bool_], origin: npt.NDArray[np.int32], les: npt.NDArray[np.int32],
               names: list[str]) -> dict[str, int]:
    """For each origin, the number of distinct lessons among the selected records it signed."""
    pairs = np.unique(origin[selected].astype(np.int64) * (int(les.max(initial=0)) + 1) + les[selected])
    counts = np.bincount(pairs // (int(les.max(initial=0)) + 1), minlength=len(names))
    return {names[o]: int(counts[o]) for o in np.flatnonzero(counts)}


def _flags_policy(flags: npt.NDArray[np.bool_], origins: list[str]) -> set[str]:
    return {origins[o] for o in np.flatnonzero(flags)}


def _few_corroborations(idx: npt.NDArray[np.intp], les: npt.NDArray[np.int32], origin: npt.NDArray[np.int32],
                        kind: npt.NDArray[np.int8], flags: npt.NDArray[np.bool_], keep: int) -> npt.NDArray[np.intp]:
    """``idx`` without the confirmations of corroborating origins past the first ``keep`` such origins per lesson.

    A verdict depends on how many corroborating supporters a lesson has only up to ``support_n`` (they never move
    its clock nor revoke it, commons.judge), so dropping the others changes no state; it keeps a swarm of 7 000
    corroborating echoes from being judged at every agent."""
    extra = (kind[idx] == CONFIRM) & ~flags[origin[idx]]
    if not extra.any():
        return idx
    sub = idx[extra]
    pairs = les[sub].astype(np.int64) * (int(origin.max(initial=0)) + 1) + origin[sub]
    distinct = np.unique(pairs)  # each (lesson, origin) once, sorted by lesson
    lesson_of = distinct // (int(origin.max(initial=0)) + 1)
    starts = np.searchsorted(lesson_of, lesson_of, side="left")
    return np.concatenate([idx[~extra], sub[np.isin(pairs, distinct[np.arange(len(distinct)) - starts < keep])]])


# -- the experiment ----------------------------------------------------------------------


def run(opts: Options) -> dict[str, Any]:
    started = time.perf_counter()
    sim = Run(opts)
    try:
        return _run(sim, opts, started)
    finally:
        sim.close()


def _run(sim: Run, opts: Options, started: float) -> dict[str, Any]:
    w = sim.w
    revoke_night = opts.revoke_night if opts.revoke_night is not None else max(1, opts.nights // 2)
    honest = len(w.honest)
    true_share: list[list[float]] = []  # night -> per true lesson, share of honest agents where common
    false_peak: list[float] = []  # night -> share of honest agents where some false lesson is common
    last: dict[int, dict[int, str]] = {}
    with report.progress(opts.nights, f"commons N={opts.agents} {opts.strategy} trust={opts.trust}",
                         quiet=opts.quiet, unit="night") as bar:
        for night in range(1, opts.nights + 1):
            sim.live(night, revoke=night == revoke_night)
            last = sim.judge_all(night)
            common_at = {le: 0 for le in w.true}
            false_at = 0
            for h in w.honest:
                states = last[h]
                for le in w.true:
                    common_at[le] += states.get(le) == COMMON
                false_at += any(states.get(f) == COMMON for f in w.false)
            true_share.append([common_at[le] / honest for le in w.true])
            false_peak.append(false_at / honest)
            bar.update(1)
            bar.set_postfix(false=f"{false_at}", true=f"{sum(v >= 0.95 for v in true_share[-1])}/{len(w.true)}")
    counted_true = [i for i, le in enumerate(w.true) if le != sim.revoked_lesson]
    final = true_share[-1] if true_share else []
    false_common = sum(any(last[h].get(f) == COMMON for h in w.honest) for f in w.false)
    flags = {h: sim.counted(h) for h in w.honest}  # each honest agent's policy, after the last judging
    backing = {h: sim.corroborating(h) for h in w.honest}
    result: dict[str, Any] = {
        "experiment": "commons",
        "agents": opts.agents,
        "adversaries": opts.adversaries,
        "honest_agents": honest,
        "sybils": len(w.origins) - opts.agents,
        "trust": opts.trust,
        "corroboration": opts.trust_config.corroboration,
        "strategy": opts.strategy,
        "tactics": dict(opts.tactics.__dict__),
        "exchange": opts.exchange,
        "nights": opts.nights,
        "seed": opts.seed,
        "true_lessons": len(counted_true),
        "false_lessons": len(w.false),
        "true_common_fraction": (sum(final[i] >= 0.95 for i in counted_true) / len(counted_true)
                                 if counted_true else None),
        # The ceiling honest memories alone allow: the true lessons that at least support_n + 1 honest
        # agents met (a first publisher and support_n others), whatever the trust policy.
        "true_witnessed_fraction": (sum(sum(w.true[i] in w.agents[h].supported for h in w.honest)
                                        > sim.cconfig.support_n for i in counted_true) / len(counted_true)
                                    if counted_true else None),
        # The ceiling left once the policy has spoken: the true lessons that, at >= 95 % of honest agents,
        # more than support_n of the honest agents that met them count there (an agent counts itself), or
        # corroborate there beside support_n that count (commons.judge).
        "true_counted_fraction": (sum(_counted_share(sim, flags, backing, w.true[i]) >= 0.95 for i in counted_true)
                                  / len(counted_true) if counted_true else None),
        # Honest agents that fewer than 95 % of the other honest agents count (their support needs others')...
        "honest_uncounted": _uncounted(sim, flags),
        # ... and that fewer than 95 % count or corroborate: what they confirm is lost.
        "honest_unheard": _uncounted(sim, {h: flags[h] | backing[h] for h in w.honest}),
        "false_common": false_common,
        "false_common_peak_fraction": max(false_peak, default=0.0),
        "revocation_rounds": sim.revocation_rounds,
        "revoked_everywhere": (all(last[h].get(sim.revoked_lesson) in (None, "revoked") for h in w.honest)
                               if sim.revoked_lesson is not None else None),
        "records": len(w.ledger),
        "refutations": int((w.ledger.arrays()[2] == REFUTE).sum()),
        "forged_held_by_honest": w.invalid_held(w.honest),
        "true_common_by_night": [sum(v >= 0.95 for v in night_shares) / max(1, len(night_shares))
                                 for night_shares in true_share],
        "false_peak_by_night": false_peak,
        "world": dict(opts.world.__dict__),
    }
    if opts.fading:
        result["fading_nights"] = fading(sim, opts.nights)
    result["wall_s"] = time.perf_counter() - started
    if opts.out is not None:
        tactic = "" if opts.strategy == "collude" else f"-{opts.strategy}"
        result["plot"] = str(plot(result, opts.out / f"commons-n{opts.agents}-a{opts.adversaries:g}-{opts.trust}"
                                                     f"{tactic}-s{opts.seed}.png"))
    return result


def _counted_share(sim: Run, flags: dict[int, npt.NDArray[np.bool_]], backing: dict[int, npt.NDArray[np.bool_]],
                   lesson: int) -> float:
    """The share of honest agents at which more than support_n of the honest agents that supported
    ``lesson`` count, or at least support_n count and more than support_n count or corroborate
    (``flags``, ``backing``: each honest agent's policy, ``Run.counted`` and ``Run.corroborating``)."""
    w, n = sim.w, sim.cconfig.support_n
    supporters = [h for h in w.honest if lesson in w.agents[h].supported]
    enough = 0
    for h in w.honest:
        counted = sum(bool(flags[h][s]) for s in supporters)
        heard = sum(bool(flags[h][s] or backing[h][s]) for s in supporters)
        enough += counted > n or (counted >= n and heard > n)
    return enough / len(w.honest)


def _uncounted(sim: Run, flags: dict[int, npt.NDArray[np.bool_]]) -> int:
    """Honest agents that fewer than 95 % of the other honest agents count."""
    w = sim.w
    others = len(w.honest) - 1
    return sum(sum(bool(flags[h][j]) for h in w.honest if h != j) < 0.95 * others for j in w.honest) if others else 0


def fading(sim: Run, night: int) -> int | None:
    """Nights from a lesson's last new support until it is common at no honest agent any more
    (fading, or gone; an agent at which it never became common does not hold it up).

    The world stops after the last night (no sessions, no new records), and true lessons
    are judged night after night.  Only a few are
    followed, since every agent judges them every night: the figure is the largest of them.
    """
    w = sim.w
    tracked = [le for le in w.true if le != sim.revoked_lesson and le in sim.last_support][:5]
    if not tracked:
        return None
    worst = 0
    pending = set(tracked)
    limit = night + int(2 * sim.cconfig.window_days) + 2
    for later in range(night + 1, limit + 1):
        states = sim.judge_all(later, lessons_of_interest=pending, frozen=True)
        for le in sorted(pending):
            if not any(states[h].get(le) == COMMON for h in w.honest):
                pending.discard(le)
                worst = max(worst, (_night_time(later) - sim.last_support[le]).days)
        if not pending:
            return worst
    return None


def plot(result: dict[str, Any], path: Path) -> Path:
    def draw(ax: Any) -> None:
        nights = range(1, len(result["true_common_by_night"]) + 1)
        ax.plot(nights, result["true_common_by_night"], "o-", markersize=3,
                label="true lessons common at ≥ 95 % of honest agents")
        ax.plot(nights, result["false_peak_by_night"], "s-", markersize=3,
                label="honest agents with a false lesson common")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("night")
        ax.set_ylabel("fraction")
        ax.set_title(f"Commons, N = {result['agents']}, {result['adversaries']:.0%} adversaries "
                     f"({result['strategy']}), trust = {result['trust']}")
        ax.legend(loc="center right")

    return report.figure(path, draw)


def summary(result: dict[str, Any]) -> str:
    keys = ("agents", "adversaries", "sybils", "strategy", "trust", "exchange", "nights", "true_lessons",
            "false_lessons", "true_common_fraction", "true_witnessed_fraction", "true_counted_fraction",
            "honest_uncounted", "honest_unheard", "false_common",
            "false_common_peak_fraction", "revocation_rounds", "fading_nights", "refutations",
            "forged_held_by_honest", "records", "wall_s")
    return report.table([(k, result.get(k)) for k in keys], title=f"commons (seed {result['seed']})")
