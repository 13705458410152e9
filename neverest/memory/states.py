"""The commons state of the lessons this memory holds, judged from the records it holds.

The rules live in ``neverest.commons``; this module only gathers the facts (one per
record: its type, origin and signed time) and applies the verdicts that are final:
a lesson judged removed or revoked gets a tombstone, and the copies received from
other memories are archived, so that no slower path brings it back.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable
from datetime import datetime

from neverest.clock import parse_time
from neverest.commons import REMOVED, REVOKED, CommonsConfig, Fact, Trust, TrustConfig, Verdict, earned, judge, vouched
from neverest.config import Config
from neverest.memory import holdings
from neverest.memory.queries import lessons, predictions, status
from neverest.memory.queries import trust as trust_queries
from neverest.memory.store import Store


def commons_config(config: Config) -> CommonsConfig:
    return CommonsConfig(support_n=config.support_n, window_days=config.window_days,
                         revoke_quorum=config.revoke_quorum, future_tolerance_s=config.future_tolerance_s)


def config_named(config: Config) -> set[str]:
    """The origins named in the config (``trust_allow``)."""
    return {o.strip() for o in config.trust_allow.split(",") if o.strip()}


def named_origins(db: sqlite3.Connection, config: Config) -> set[str]:
    """The origins the owner named: ``neverestctl trust add`` (the store) and ``trust_allow`` (the config)."""
    return config_named(config) | trust_queries.named_origins(db)


def trust_filter(db: sqlite3.Connection, config: Config, own_origin: str) -> Callable[[str], bool]:
    """Which origins count as support under the configured trust policy (under ``earned``, a
    ``commons.Trust``, which also says which corroborate).  Named origins count under every policy;
    they are read from the store at every call, so a running daemon follows ``neverestctl trust``."""
    allowed = named_origins(db, config)
    if config.trust == "any":
        return lambda origin: True
    if config.trust == "peers":
        known = status.known_peer_origins(db) | allowed | {own_origin}
        return known.__contains__
    if config.trust == "vouched":
        return _vouched(db, config, own_origin, allowed)
    if config.trust == "earned":
        return _earned(db, config, own_origin, allowed)
    raise ValueError(f"trust policy {config.trust!r} is not one of any, peers, vouched, earned")


def trust_config(config: Config) -> TrustConfig:
    return TrustConfig(damping=config.trust_damping, steps=config.trust_steps)


def _earned(db: sqlite3.Connection, config: Config, own_origin: str, allowed: set[str]) -> Trust:
    return earned(earned_facts(db, own_origin), own=own_origin, config=trust_config(config),
                  allowed=frozenset(allowed))


def earned_facts(db: sqlite3.Connection, own_origin: str) -> dict[str, list[Fact]]:
    """The facts ``commons.earned`` judges by: every claim held (lessons, confirmations, refutations,
    as signed, with when each first reached this memory), and this memory's own tests as claims of
    its own (its own lessons when it learned them, its predictions that came true or were refuted
    when they were resolved), whether or not it shares them.  A prediction that failed for lack of an
    occasion claims nothing."""
    by_lesson: dict[str, list[Fact]] = {}
    for rtype, origin, target, at, received in holdings.claims(db):
        by_lesson.setdefault(target, []).append(Fact(kind=rtype, origin=origin, at=parse_time(at),  # type: ignore[arg-type]
                                                     held=parse_time(received)))
    for target, created in lessons.own_learned(db):
        by_lesson.setdefault(target, []).append(Fact(kind="lesson", origin=own_origin, at=parse_time(created)))
    for target, outcome, resolved in predictions.own_tests(db):
        kind = {"confirmed": "confirm", "refuted": "refute"}.get(outcome)
        if kind is not None:
            by_lesson.setdefault(target, []).append(Fact(kind=kind, origin=own_origin, at=parse_time(resolved)))  # type: ignore[arg-type]
    return by_lesson


def _vouched(db: sqlite3.Connection, config: Config, own_origin: str, allowed: set[str]) -> Callable[[str], bool]:
    by_verified, by_refuted, resolved = vouched_facts(db)
    return vouched(by_verified, by_refuted, resolved=resolved, own=own_origin,
                   min_verified=config.vouch_min_verified, min_resolved=config.vouch_min_resolved,
                   allowed=frozenset(allowed))


def vouched_facts(db: sqlite3.Connection) -> tuple[Counter[str], Counter[str], int]:
    """The facts ``commons.vouched`` judges by, from this memory's own tests: lessons each origin
    supported that were verified here, that were refuted here, and how many this memory resolved.

    Verified here: this memory's own lessons, and lessons with a prediction that came true.
    Refuted here: lessons whose predictions failed and never came true.  A real memory's
    prediction also fails when the situation simply did not come up within the window,
    so on a real machine this policy is stricter than in the simulator, where a failure
    is a test that went the other way.
    """
    outcomes = predictions.outcomes_by_hash(db)
    verified = {h for h, seen in outcomes.items() if "confirmed" in seen}
    verified |= lessons.own_hashes(db)
    refuted = {h for h, seen in outcomes.items() if "failed" in seen} - verified
    by_verified: Counter[str] = Counter()
    by_refuted: Counter[str] = Counter()
    for origin, target in holdings.supporters(db):
        if target in verified:
            by_verified[str(origin)] += 1
        elif target in refuted:
            by_refuted[str(origin)] += 1
    return by_verified, by_refuted, len(verified | refuted)


def facts(held: list[holdings.Held]) -> list[Fact]:
    return [Fact(kind=h.type, origin=h.origin, at=parse_time(h.at))  # type: ignore[arg-type]
            for h in held]


def verdict(db: sqlite3.Connection, target: str, *, now: datetime, config: Config, own_origin: str,
            counts: Callable[[str], bool] | None = None, held: list[holdings.Held] | None = None) -> Verdict:
    """The commons state of ``target``.  Callers judging many lessons pass the trust filter
    (``counts``) and, when they already read them, the records held (``held``)."""
    held = holdings.about(db, target) if held is None else held
    since = None
    if config.trust in ("vouched", "earned") and held:
        # From the first lesson, confirmation or revocation held: a refutation sent ahead of a lesson
        # must not start its quarantine early (it is no evidence for it).
        since = min((parse_time(h.received) for h in held if h.type != "refute"), default=None)
    return judge(facts(held), now=now, config=commons_config(config),
                 counts=trust_filter(db, config, own_origin) if counts is None else counts,
                 tombstone=holdings.tombstone(db, target), held_since=since,
                 quarantine_days=config.vouch_quarantine_days)


def commons_pass(store: Store, *, now: datetime, config: Config, own_origin: str) -> dict[str, int]:
    """Judge every lesson hash held in records; bury the ones whose state became final."""
    buried = {REMOVED: 0, REVOKED: 0}
    with store.write() as db:
        targets = holdings.unburied_targets(db)
        counts = trust_filter(db, config, own_origin)  # one policy for the whole pass
        for target in targets:
            v = verdict(db, target, now=now, config=config, own_origin=own_origin, counts=counts)
            if v.tombstone and v.state in buried:
                holdings.bury(db, target, v.state, now)
                # Received copies go; this memory's own lesson, learned from its own sessions, is
                # the personal layer, which the commons never overwrites (PROTOCOL.md §9).
                lessons.archive_received(db, target)
                buried[v.state] += 1
    return buried
