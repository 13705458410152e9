"""``python -m simulations commons``: do true lessons become common, and false ones never?

Agents, honest and adversarial (world.py), live ``nights`` nights.  Each night:

1. **sessions**: honest agents meet true phenomena and test the lessons they hold
   (world.py); what they learn is signed with the real ``records`` functions at their
   sleep: their own lesson, or a confirmation of a received one.  Adversaries publish,
   confirm, echo and forge (world.py).
2. **gossip**: ``rounds_per_night`` rounds in which each agent exchanges with ``fanout``
   peers of its table.  Records move as the ideal anti-entropy moves them (both sides
   leave holding the union), which the ``dissemination`` experiment shows the real gossip
   matches; by default the real gossip core is not run, because 1 000 full stores of
   ~70 000 records each is ~1 000 times what one memory does, beyond one machine in
   minutes.  ``exchange="real"`` (``--exchange real``) runs it instead, for smaller
   networks: every record then moves through ``engine.Simulation`` (real stores, real
   exchanges over the same peer tables, the receive function), and what each store holds
   is read back after the night's rounds.  Every record is verified once by the real
   ``records.parse`` (the result is a pure function of its bytes); an honest agent never
   holds one that fails, so forged records stay with the adversaries.  A replayed record
   has the bytes of one already held: it changes nothing.
3. **judging**: every honest agent judges every lesson it holds records about with the
   real ``neverest.commons.judge``, under its trust policy, and keeps the tombstones the
   verdicts ask for, as ``memory/states.commons_pass`` does.

Policies: ``any`` (the protocol's default: every origin counts), ``peers`` (the origins
in the agent's peer table), ``vouched`` (``neverest.commons.vouched``: origins whose claims
this agent tested itself, none refuted, once it has tested ``vouch_min_resolved`` lessons;
and a lesson held here less than ``vouch_quarantine_days`` is not common here yet).

Judging every lesson at 700 agents is the slow part; verdicts are cached per night by
exactly what they depend on (the records admitted, the tombstone and which publishers
count), which changes nothing in what ``judge`` returns.  Confirmations from origins the
policy does not count are left out before judging: ``judge`` ignores them (commons.py).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from neverest.clock import iso
from neverest.commons import COMMON, CommonsConfig, Fact, fact_of, judge, vouched
from neverest.config import Config
from neverest.identity import Identity
from neverest.memory import holdings
from neverest.records import Record, RecordError, parse, sign_confirm, sign_lesson, sign_revoke
from simulations import report
from simulations.engine import EPOCH, Simulation, stream
from simulations.world import KIND, Lesson, WorldOptions, lessons

POLICIES = ("any", "peers", "vouched")
LESSON, CONFIRM, REVOKE = 0, 1, 2


@dataclass
class Options:
    agents: int
    adversaries: float
    nights: int
    trust: str = "vouched"
    seed: int = 1
    world: WorldOptions = field(default_factory=WorldOptions)
    config: Config = field(default_factory=Config)
    revoke_night: int | None = None  # default: the middle of the run
    fading: bool = True  # measure fading_nights after the last night
    exchange: str = "ideal"  # how records move: "ideal" anti-entropy, or "real": the gossip engine (engine.py)
    out: Path | None = None
    quiet: bool = False


class Ledger:
    """Every record made in the run, verified once, with what judging needs about it."""

    def __init__(self) -> None:
        self.raw: list[bytes] = []
        self.facts: list[Fact | None] = []  # None: refused by records.parse
        self.lesson: list[int] = []
        self.origin: list[int] = []
        self.kind: list[int] = []
        self.by_digest: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.raw)

    def add(self, raw: bytes, lesson: int, origin: int, *, record: Record | None = None) -> int:
        """Verify ``raw`` with the real ``records.parse``, or take ``record``, which the signing
        functions return only after parsing the bytes they signed, exactly as a receiver would."""
        try:
            record = parse(raw) if record is None else record
            fact: Fact | None = fact_of(record)
            kind = {"lesson": LESSON, "confirm": CONFIRM, "revoke": REVOKE}[record.type]
        except RecordError:
            fact, kind = None, CONFIRM
        self.by_digest[holdings.digest_of(raw)] = len(self.raw)
        self.raw.append(raw)
        self.facts.append(fact)
        self.lesson.append(lesson)
        self.origin.append(origin)
        self.kind.append(kind)
        return len(self.raw) - 1

    def arrays(self) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.int8],
                              npt.NDArray[np.bool_]]:
        return (np.array(self.lesson, dtype=np.int32), np.array(self.origin, dtype=np.int32),
                np.array(self.kind, dtype=np.int8), np.array([f is not None for f in self.facts], dtype=bool))


@dataclass
class Honest:
    contexts: list[int]
    verified: set[int] = field(default_factory=set)
    refuted: set[int] = field(default_factory=set)
    supported: set[int] = field(default_factory=set)  # lessons it published or confirmed
    first_held: dict[int, datetime] = field(default_factory=dict)  # lesson -> when it first held a copy
    tombstones: dict[int, str] = field(default_factory=dict)


class World:
    def __init__(self, opts: Options) -> None:
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
        n_syb = n_adv * w.sybils_per_adversary
        self.keys = [_identity(opts.seed, i) for i in range(n + n_syb)]
        self.origins = [k.origin for k in self.keys]
        self.sybils_of = {a: [n + k * n_adv + j for k in range(w.sybils_per_adversary)]
                          for j, a in enumerate(self.adversaries)}
        self.lessons: list[Lesson] = lessons(w, round(w.false_per_adversary * n_adv), rng)
        self.true = [le.index for le in self.lessons if le.true]
        self.false = [le.index for le in self.lessons if not le.true]
        self.by_context: dict[int, list[int]] = {}
        for le in self.lessons:
            self.by_context.setdefault(le.context, []).append(le.index)
        self.agents = {h: Honest(sorted(rng.sample(range(w.contexts), w.contexts_per_agent))) for h in self.honest}
        self.peers = [rng.sample([j for j in range(n) if j != i], min(w.peers_per_agent, n - 1)) for i in range(n)]
        self.false_author = {f: rng.choice(self.adversaries) for f in self.false} if self.adversaries else {}
        self.false_night = {f: 1 + rng.randrange(max(1, w.false_publish_nights)) for f in self.false}
        # Lessons each adversary key (the adversary's own and its Sybils') has supported.
        self.adv_supported: dict[int, set[int]] = {k: set() for a in self.adversaries for k in (a, *self.sybils_of[a])}
        self.ledger = Ledger()
        self.held = np.zeros((n, 1024), dtype=bool)
        self.seq = [0] * len(self.keys)  # each key's last seq: gossip moves records by (origin, seq)
        self.on_hold: Callable[[int, Record, datetime], None] | None = None  # the real engine's stores
        self.refresh()

    # -- records --------------------------------------------------------------------------

    def _hold(self, agent: int, rec: int) -> None:
        if rec >= self.held.shape[1]:
            grown = np.zeros((self.held.shape[0], self.held.shape[1] * 2), dtype=bool)
            grown[:, :self.held.shape[1]] = self.held
            self.held = grown
        self.held[agent, rec] = True

    def sign(self, signer: int, holder: int, kind: int, lesson: int, when: datetime) -> int:
        key = self.keys[signer].signing_key
        le = self.lessons[lesson]
        self.seq[signer] += 1
        seq = self.seq[signer]
        if kind == LESSON:
            record = sign_lesson(key, kind=KIND, text=le.text, seen=1, strength=1.0, updated=iso(when), seq=seq)
        elif kind == CONFIRM:
            record = sign_confirm(key, le.hash, at=iso(when), seq=seq)
        else:
            record = sign_revoke(key, le.hash, at=iso(when), seq=seq)
        rec = self.ledger.add(record.raw, lesson, signer, record=record)
        self._hold(holder, rec)
        if self.on_hold is not None:
            self.on_hold(holder, record, when)
        return rec

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
        rec = self.ledger.add(raw, lesson, victim)
        self._hold(adversary, rec)
        return rec

    def held_lessons(self, agent: int) -> set[int]:
        """Lessons the agent holds a valid lesson record of."""
        les, _, kind, valid = self.arrays
        n = len(les)  # the records as of the last refresh: what was signed since is not held yet
        mask = self.held[agent, :n] & valid & (kind == LESSON)
        return set(np.unique(les[mask]).tolist())

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
        self.w = World(opts)
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
        self._prepared: dict[int, tuple[npt.NDArray[np.bool_], list[npt.NDArray[np.intp]]]] = {}
        self.engine: Simulation | None = None
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
                            agent.refuted.add(lesson)  # the prediction failed here
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
        w, when = self.w, _night_time(night)
        w.refresh()
        for f, author in w.false_author.items():
            if w.false_night[f] == night:
                w.sign(author, author, LESSON, f, when)
                w.adv_supported[author].add(f)
        w.refresh()
        for a in w.adversaries:
            holding = w.held_lessons(a)
            for signer in (a, *w.sybils_of[a]):
                for lesson in sorted(holding - w.adv_supported[signer]):
                    w.sign(signer, a, CONFIRM, lesson, when)  # echo the true, confirm the false
                    w.adv_supported[signer].add(lesson)
            if w.false and w.honest:
                w.forge(a, self.rng.choice(w.false), self.rng.choice(w.honest), when)

    def revoke(self, night: int) -> None:
        """The first publisher of the most widely held true lesson withdraws it."""
        w = self.w
        w.refresh()
        les, _, kind, valid = w.arrays
        n = len(w.ledger)
        counts = w.held[:, :n][:, (kind == LESSON) & valid].sum(axis=0)
        lesson_ids = les[(kind == LESSON) & valid]
        best: dict[int, int] = {}
        for lesson, c in zip(lesson_ids.tolist(), counts.tolist(), strict=True):
            if w.lessons[lesson].true:
                best[lesson] = best.get(lesson, 0) + c
        if not best:
            return
        lesson = max(best, key=lambda k: (best[k], -k))
        facts = [(w.ledger.facts[r], r) for r in range(n) if w.ledger.lesson[r] == lesson
                 and w.ledger.kind[r] == LESSON and w.ledger.facts[r] is not None]
        first = min(facts, key=lambda fr: (fr[0].at, fr[0].origin))[1]  # type: ignore[union-attr]
        publisher = w.ledger.origin[first]
        self.revoked_lesson = lesson
        self.revocation_record = w.sign(publisher, publisher, REVOKE, lesson, _night_time(night))

    def gossip(self, night: int) -> None:
        if self.engine is not None:
            self._real_gossip(night)
            return
        w = self.w
        w.refresh()
        valid = w.arrays[3]
        held = w.held[:, :len(valid)]
        n = self.opts.agents
        fanout = min(self.opts.world.fanout, len(w.peers[0]))
        order = list(range(n))
        for _ in range(self.opts.world.rounds_per_night):
            # Daemons are not synchronised: within a round, agents start their exchanges in a
            # random order, so a record may cross several hops in one round, as in engine.py.
            self.gossip_rng.shuffle(order)
            for i in order:
                for j in self.gossip_rng.sample(w.peers[i], fanout):
                    both = held[i] | held[j]
                    held[i] = both if w.is_adv[i] else held[i] | (held[j] & valid)
                    held[j] = both if w.is_adv[j] else held[j] | (held[i] & valid)
            if self.revocation_record is not None and self.revocation_rounds is None:
                self.rounds_since_revocation += 1
                if held[:, self.revocation_record].mean() >= 0.99:
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
                    w.held[i, rec] = True

    def note_holdings(self, night: int) -> None:
        """When each honest agent first held each lesson (the quarantine of ``vouched`` runs from it).
        The night's gossip ran between two sleeps; the time noted is the sleep that follows it."""
        w, when = self.w, _night_time(night)
        w.refresh()
        for h in w.honest:
            first = w.agents[h].first_held
            for lesson in w.held_lessons(h):
                first.setdefault(lesson, when)

    # -- judging --------------------------------------------------------------------------

    def counted(self, h: int) -> npt.NDArray[np.bool_]:
        """Which origins agent h's policy counts, one flag per origin."""
        w, trust = self.w, self.opts.trust
        flags = np.zeros(len(w.origins), dtype=bool)
        flags[h] = True
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
        quarantine = self.opts.config.vouch_quarantine_days if self.opts.trust == "vouched" else 0.0
        for h in w.honest:
            prepared = self._prepared.get(h) if frozen else None
            if prepared is None:
                flags = self.counted(h)
                admitted = w.held[h, :n] & valid & ((kind != CONFIRM) | flags[origin])
                idx = np.nonzero(admitted)[0]
                idx = idx[np.argsort(les[idx], kind="stable")]
                prepared = (flags, np.split(idx, np.flatnonzero(np.diff(les[idx])) + 1) if len(idx) else [])
                self._prepared[h] = prepared
            flags, groups = prepared
            agent = w.agents[h]
            mine: dict[int, str] = {}
            policy: set[str] | None = None
            for group in groups:
                lesson = int(les[group[0]])
                if lessons_of_interest is not None and lesson not in lessons_of_interest:
                    continue
                tomb = agent.tombstones.get(lesson)
                pubs = origin[group][kind[group] == LESSON]
                since = agent.first_held.get(lesson) if quarantine else None
                waiting = since is not None and now - since < timedelta(days=quarantine)
                key = (lesson, group.tobytes(), tomb, flags[pubs].tobytes(), waiting)
                state = cache.get(key)
                if state is None:
                    policy = _flags_policy(flags, w.origins) if policy is None else policy
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
    with report.progress(opts.nights, f"commons N={opts.agents} trust={opts.trust}", quiet=opts.quiet,
                         unit="night") as bar:
        for night in range(1, opts.nights + 1):
            sim.sessions(night)
            sim.adversaries(night)
            if night == revoke_night:
                sim.revoke(night)
            sim.gossip(night)
            sim.note_holdings(night)
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
    result: dict[str, Any] = {
        "experiment": "commons",
        "agents": opts.agents,
        "adversaries": opts.adversaries,
        "honest_agents": honest,
        "sybils": len(w.origins) - opts.agents,
        "trust": opts.trust,
        "exchange": opts.exchange,
        "nights": opts.nights,
        "seed": opts.seed,
        "true_lessons": len(counted_true),
        "false_lessons": len(w.false),
        "true_common_fraction": (sum(final[i] >= 0.95 for i in counted_true) / len(counted_true)
                                 if counted_true else None),
        "false_common": false_common,
        "false_common_peak_fraction": max(false_peak, default=0.0),
        "revocation_rounds": sim.revocation_rounds,
        "revoked_everywhere": (all(last[h].get(sim.revoked_lesson) in (None, "revoked") for h in w.honest)
                               if sim.revoked_lesson is not None else None),
        "records": len(w.ledger),
        "forged_held_by_honest": int(w.held[w.honest, :len(w.arrays[3])][:, ~w.arrays[3]].sum()),
        "true_common_by_night": [sum(v >= 0.95 for v in night_shares) / max(1, len(night_shares))
                                 for night_shares in true_share],
        "false_peak_by_night": false_peak,
        "world": dict(opts.world.__dict__),
    }
    if opts.fading:
        result["fading_nights"] = fading(sim, opts.nights)
    result["wall_s"] = time.perf_counter() - started
    if opts.out is not None:
        result["plot"] = str(plot(result, opts.out / f"commons-n{opts.agents}-a{opts.adversaries:g}-{opts.trust}"
                                                     f"-s{opts.seed}.png"))
    return result


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
        ax.set_title(f"Commons, N = {result['agents']}, {result['adversaries']:.0%} adversaries, "
                     f"trust = {result['trust']}")
        ax.legend(loc="center right")

    return report.figure(path, draw)


def summary(result: dict[str, Any]) -> str:
    keys = ("agents", "adversaries", "sybils", "trust", "exchange", "nights", "true_lessons", "false_lessons",
            "true_common_fraction", "false_common", "false_common_peak_fraction", "revocation_rounds",
            "fading_nights", "forged_held_by_honest", "records", "wall_s")
    return report.table([(k, result.get(k)) for k in keys], title=f"commons (seed {result['seed']})")
