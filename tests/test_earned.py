"""The trust policy ``earned``: the pure rule (commons.Evidence, counted_origins, earned) and the store's facts."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from neverest.commons import Evidence, Fact, TrustConfig, counted_origins, earned
from neverest.config import Config, load_config
from neverest.identity import Identity
from neverest.memory import holdings
from neverest.memory.states import trust_filter
from neverest.memory.store import open_store
from neverest.records import sign_confirm, sign_lesson, sign_refute

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)
ME = "me"


def at(day: float) -> datetime:
    return T0 + day * DAY


def lesson(origin: str, day: float) -> Fact:
    return Fact("lesson", origin, at(day))


def confirm(origin: str, day: float) -> Fact:
    return Fact("confirm", origin, at(day))


def refute(origin: str, day: float) -> Fact:
    return Fact("refute", origin, at(day))


def test_an_origin_whose_first_claim_came_true_here_counts_and_a_stranger_does_not() -> None:
    counts = earned({"L1": [lesson("b", 0), confirm(ME, 5)]}, own=ME)
    assert counts(ME) and counts("b") and not counts("stranger")


def test_trust_is_passed_along_and_bounded_by_the_steps() -> None:
    """me bore out b's lesson, b bore out c's, c bore out d's: d is three hops away."""
    facts = {"L1": [lesson("b", 0), confirm(ME, 5)],
             "L2": [lesson("c", 0), confirm("b", 5)],
             "L3": [lesson("d", 0), confirm("c", 5)]}
    counts = earned(facts, own=ME)
    assert counts("b") and counts("c") and counts("d")
    near = earned(facts, own=ME, config=TrustConfig(steps=2))
    assert near("b") and near("c") and not near("d")


def test_echoes_and_sybil_keys_earn_nothing_however_many() -> None:
    """1 000 keys that confirm every lesson as soon as it appears, and each other's, earn no trust: only
    a first claim that someone trusted bore out later does."""
    sybils = [f"s{k}" for k in range(1000)]
    facts = {"L1": [lesson("b", 0), confirm(ME, 5), *(confirm(s, 1) for s in sybils)],
             "F": [lesson(sybils[0], 2), *(confirm(s, 3) for s in sybils[1:])]}
    counts = earned(facts, own=ME)
    assert counts("b")
    assert not any(counts(s) for s in sybils)


def test_a_first_hand_contradiction_discredits_for_good() -> None:
    facts = {"L1": [lesson("b", 0), confirm(ME, 5)],  # b earned trust here...
             "F": [lesson("b", 6), refute(ME, 9)]}  # ...then lied about a situation this memory met
    counts = earned(facts, own=ME)
    assert not counts("b")


def test_a_lie_caught_by_a_trusted_origin_discredits_the_liar_here_too() -> None:
    """me never met F; r, whom me trusts more than the liar, met it and refuted it."""
    facts = {"L1": [lesson("r", 0), confirm(ME, 5)],
             "L2": [lesson("r", 1), confirm(ME, 6)],
             "L3": [lesson("liar", 0), confirm("r", 4)],  # the liar earned a little trust, through r
             "F": [lesson("liar", 7), refute("r", 8)]}
    counts = earned(facts, own=ME)
    assert counts("r") and not counts("liar")


def test_refutation_spam_from_keys_without_trust_discredits_nobody() -> None:
    spam = [f"s{k}" for k in range(500)]
    facts = {"L1": [lesson("b", 0), confirm(ME, 5), *(refute(s, 1) for s in spam)],
             "L2": [lesson("c", 0), confirm("b", 3), *(refute(s, 1) for s in spam)]}
    counts = earned(facts, own=ME)
    assert counts("b") and counts("c")
    assert not any(counts(s) for s in spam)


def test_a_publisher_cannot_refute_its_own_lesson() -> None:
    """Its lesson record is its claim; a refutation by it changes nothing (receive refuses one, and the rule
    ignores one that arrived before the lesson)."""
    with_refutation = Evidence([ME, "b"])
    with_refutation.add_lesson("L1", [refute("b", 0), lesson("b", 1), confirm(ME, 5)])
    plain = Evidence([ME, "b"])
    plain.add_lesson("L1", [lesson("b", 1), confirm(ME, 5)])
    for got, want in zip(with_refutation.matrices(), plain.matrices(), strict=True):
        assert np.array_equal(got, want)
    assert with_refutation.matrices()[1].sum() == 0


def test_the_evidence_depends_on_the_set_of_claims_not_their_order_or_batches() -> None:
    rng = random.Random(3)
    origins = [ME, *(f"o{k}" for k in range(8))]
    facts = [(f"L{rng.randrange(6)}", Fact(rng.choice(("lesson", "confirm", "refute", "revoke")),
                                           rng.choice(origins), at(rng.randrange(20)))) for _ in range(120)]
    reference = Evidence(origins)
    for target, fact in facts:
        reference.add_lesson(target, [fact])
    for _ in range(5):
        rng.shuffle(facts)
        shuffled = Evidence(origins)
        cut = rng.randrange(len(facts))
        for part in (facts[:cut], facts[cut:]):
            by: dict[str, list[Fact]] = {}
            for target, fact in part:
                by.setdefault(target, []).append(fact)
            for target, group in by.items():
                shuffled.add_lesson(target, group)
        for got, want in zip(shuffled.matrices(), reference.matrices(), strict=True):
            assert np.array_equal(got, want)
        assert np.array_equal(counted_origins(shuffled, [0, 1, 2]), counted_origins(reference, [0, 1, 2]))


def test_scores_for_many_roots_at_once_are_each_roots_own() -> None:
    """The simulator computes every honest agent's policy in one call; it must equal one call per agent."""
    rng = random.Random(11)
    origins = [f"o{k}" for k in range(15)]
    ev = Evidence(origins)
    for k in range(30):
        ev.add_lesson(f"L{k}", [Fact(rng.choice(("lesson", "confirm", "refute")), rng.choice(origins),
                                     at(rng.randrange(30))) for _ in range(6)])
    together = counted_origins(ev, list(range(15)))
    for r in range(15):
        assert np.array_equal(together[:, r], counted_origins(ev, [r])[:, 0])


def test_trust_config_is_checked() -> None:
    with pytest.raises(ValueError):
        TrustConfig(damping=0.0)
    with pytest.raises(ValueError):
        TrustConfig(steps=0)


def test_the_store_adapter_reads_claims_and_this_memorys_own_tests(tmp_path: Path) -> None:
    """A received lesson whose prediction came true here earns its publisher trust; a liar's lesson refuted by
    this memory's own test discredits it; the default policy is earned."""
    assert load_config(tmp_path, {}).trust == "earned"
    me, honest, liar = (Identity.from_seed(bytes([k]) * 32) for k in (1, 2, 3))
    config = Config(trust="earned")
    store = open_store(tmp_path)
    stamp = lambda d: (T0 + d * DAY).strftime("%Y-%m-%dT%H:%M:%S.000000Z")  # noqa: E731
    with store.write() as db:
        for k, (author, outcome) in enumerate(((honest, "confirmed"), (liar, "confirmed"), (liar, "refuted"))):
            text = f"the cache of stack {k} goes stale after a rebase"
            rec = sign_lesson(author.signing_key, kind="error", text=text, seen=1, strength=1.0, updated=stamp(k))
            holdings.put(db, rec, source="test", now=T0 + k * DAY)
            lesson_id = db.execute(
                "INSERT INTO lessons (hash, kind, text, strength, seen, created, updated, origin) "
                "VALUES (?, 'error', ?, 1, 1, ?, ?, ?)", (rec.target, text, stamp(k), stamp(k), author.origin)
            ).lastrowid
            db.execute("INSERT INTO predictions (lesson_id, text, made, space, resolved, outcome) "
                       "VALUES (?, ?, ?, 'hashed', ?, ?)", (lesson_id, text, stamp(k), stamp(k + 5), outcome))
        counts = trust_filter(db, config, me.origin)
        assert counts(me.origin) and counts(honest.origin) and not counts(liar.origin)
        # A refutation received from the honest origin about a lesson only the liar supports: it is a claim too.
        other = sign_lesson(liar.signing_key, kind="error", text="the linter of stack 9 hangs on big files",
                            seen=1, strength=1.0, updated=stamp(20))
        holdings.put(db, other, source="test", now=T0 + 20 * DAY)
        holdings.put(db, sign_refute(honest.signing_key, other.target, at=stamp(21)), source="test",
                     now=T0 + 21 * DAY)
        holdings.put(db, sign_confirm(liar.signing_key, other.target, at=stamp(21)), source="test",
                     now=T0 + 21 * DAY)
        assert trust_filter(db, config, me.origin)(honest.origin)
    store.close()


def test_a_flood_of_keys_is_never_in_the_computation_unless_trust_reaches_it() -> None:
    """20 000 keys claiming about one lesson: the scores are computed over the origins trust can reach
    (here 2), never over a matrix of every key (which would be 20 000 x 20 000)."""
    flood = [f"k{n}" for n in range(20_000)]
    ev = Evidence([ME])
    ev.add_lesson("L1", [lesson("b", 0), confirm(ME, 5)])
    ev.add_lesson("F", [lesson(flood[0], 0), *(confirm(k, 1) for k in flood[1:])])
    assert sorted(ev.origins[i] for i in ev.reachable(np.array([0]), hops=6)) == ["b", ME]
    flags = counted_origins(ev, [0])[:, 0]
    assert {ev.origins[i] for i in np.flatnonzero(flags)} == {ME, "b"}


def test_a_claim_signed_before_the_lesson_existed_takes_no_first_claim_credit() -> None:
    """A confirmation back-dated to before the lesson's first publication is no claim (no honest memory can
    confirm a lesson before it exists); otherwise it would take the publisher's credit from everyone."""
    facts = {"L1": [lesson("b", 10), confirm("early", 1), confirm(ME, 15)]}
    counts = earned(facts, own=ME)
    assert counts("b") and not counts("early")
    # And a lesson with no publication held is no evidence yet.
    assert not earned({"L2": [confirm("x", 1), confirm(ME, 5)]}, own=ME)("x")


def test_a_copy_dated_before_the_original_but_received_after_it_takes_no_first_claim_credit() -> None:
    """A copy of b's lesson that says it was signed a minute before b's, but reached this memory hours after
    b's: the first claim is the one held here first.  By signed time alone the copy would take b's credit."""
    def held(fact: Fact, day: float) -> Fact:
        return Fact(fact.kind, fact.origin, fact.at, held=at(day))

    original, copy = lesson("b", 10), Fact("lesson", "thief", at(10) - timedelta(minutes=1))
    facts = {"L1": [held(original, 10.1), held(copy, 10.3), held(confirm("c", 11), 11.1), confirm(ME, 12)]}
    counts = earned(facts, own=ME)
    assert counts("b") and not counts("thief")
    unheld = earned({"L1": [original, copy, confirm("c", 11), confirm(ME, 12)]}, own=ME)
    assert unheld("thief") and not unheld("b")  # what the receipt time defends against
    # Received together, the earlier signed one is first: a copy delivered with the original still wins there.
    together = earned({"L1": [held(original, 10.1), held(copy, 10.1), confirm(ME, 12)]}, own=ME)
    assert together("thief") and not together("b")


def test_the_store_adapter_orders_claims_by_when_they_were_received(tmp_path: Path) -> None:
    """Through the store: b's lesson received on day 1, a back-dated copy of it received on day 3; this
    memory's own test came true on day 5.  b counts, the copier does not."""
    me, b, thief = (Identity.from_seed(bytes([k]) * 32) for k in (4, 5, 6))
    stamp = lambda d: (T0 + d * DAY).strftime("%Y-%m-%dT%H:%M:%S.000000Z")  # noqa: E731
    text = "the cache of stack 4 goes stale after a rebase"
    store = open_store(tmp_path)
    with store.write() as db:
        rec = sign_lesson(b.signing_key, kind="error", text=text, seen=1, strength=1.0, updated=stamp(1))
        holdings.put(db, rec, source="test", now=T0 + 1 * DAY)
        copy = sign_lesson(thief.signing_key, kind="error", text=text, seen=1, strength=1.0, updated=stamp(0.5))
        holdings.put(db, copy, source="test", now=T0 + 3 * DAY)
        lesson_id = db.execute(
            "INSERT INTO lessons (hash, kind, text, strength, seen, created, updated, origin) "
            "VALUES (?, 'error', ?, 1, 1, ?, ?, ?)", (rec.target, text, stamp(1), stamp(1), b.origin)).lastrowid
        db.execute("INSERT INTO predictions (lesson_id, text, made, space, resolved, outcome) "
                   "VALUES (?, ?, ?, 'hashed', ?, 'confirmed')", (lesson_id, text, stamp(1), stamp(5)))
        counts = trust_filter(db, Config(trust="earned"), me.origin)
        assert counts(b.origin) and not counts(thief.origin)
    store.close()
