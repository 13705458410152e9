"""The commons states: every transition of the table, and the properties of the rule."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import nacl.signing
import pytest
from hypothesis import given
from hypothesis import strategies as st

from neverest.commons import (
    CANDIDATE,
    COMMON,
    FADING,
    REMOVED,
    REVOKED,
    STATES,
    TERMINAL,
    CommonsConfig,
    Fact,
    Verdict,
    fact_of,
    judge,
)
from neverest.records import sign_confirm, sign_lesson, sign_revoke

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)
W = 90 * DAY
TICK = timedelta(microseconds=1)
CONFIG = CommonsConfig()


def at(days: float) -> datetime:
    return T0 + days * DAY


def lesson(origin: str, days: float = 0) -> Fact:
    return Fact("lesson", origin, at(days))


def confirm(origin: str, days: float = 0) -> Fact:
    return Fact("confirm", origin, at(days))


def revoke(origin: str, days: float = 0) -> Fact:
    return Fact("revoke", origin, at(days))


def common_lesson() -> list[Fact]:
    """Published by a on day 0, confirmed by b, c and d on days 1, 2 and 3."""
    return [lesson("a"), confirm("b", 1), confirm("c", 2), confirm("d", 3)]


# -- candidate and common -----------------------------------------------------------------


def test_candidate_becomes_common_at_exactly_n_supporters() -> None:
    facts = [lesson("a"), confirm("b", 1), confirm("c", 2)]
    two = judge(facts, now=at(5), config=CONFIG)
    assert (two.state, two.support, two.tombstone) == (CANDIDATE, 2, False)
    three = judge([*facts, confirm("d", 3)], now=at(5), config=CONFIG)
    assert (three.state, three.support, three.supporters) == (COMMON, 3, ("b", "c", "d"))
    assert three.first_publisher == "a" and three.first_published == at(0) and three.last_support == at(3)


def test_support_n_is_configurable() -> None:
    verdict = judge(common_lesson(), now=at(5), config=CommonsConfig(support_n=4))
    assert (verdict.state, verdict.support) == (CANDIDATE, 3)


def test_one_origin_confirming_a_hundred_times_counts_once() -> None:
    facts = [lesson("a"), *(confirm("b", 1 + i / 10) for i in range(100))]
    verdict = judge(facts, now=at(20), config=CONFIG)
    assert (verdict.state, verdict.supporters, verdict.last_support) == (CANDIDATE, ("b",), at(1))


def test_own_confirmations_never_count() -> None:
    facts = [lesson("a"), *(confirm("a", i) for i in range(1, 10)), confirm("b", 1), confirm("c", 2)]
    verdict = judge(facts, now=at(20), config=CONFIG)
    assert (verdict.state, verdict.supporters) == (CANDIDATE, ("b", "c"))


def test_a_second_publisher_counts_as_support() -> None:
    facts = [lesson("a"), lesson("b", 1), confirm("c", 2), confirm("d", 3)]
    verdict = judge(facts, now=at(5), config=CONFIG)
    assert (verdict.state, verdict.supporters, verdict.publishers) == (COMMON, ("b", "c", "d"), ("a", "b"))


def test_publishing_and_confirming_is_one_supporter_at_its_earliest_record() -> None:
    facts = [lesson("a"), confirm("b", 2), lesson("b", 7), confirm("c", 3)]
    verdict = judge(facts, now=at(10), config=CONFIG)
    assert (verdict.supporters, verdict.last_support) == (("b", "c"), at(3))


def test_first_publisher_tie_break_is_the_lowest_origin() -> None:
    facts = [lesson("b"), lesson("a"), confirm("c", 1)]
    for order in (facts, facts[::-1]):
        verdict = judge(order, now=at(5), config=CONFIG)
        assert (verdict.first_publisher, verdict.supporters) == ("a", ("b", "c"))


def test_first_publisher_is_the_earliest_first_record() -> None:
    # b re-signed its lesson late, but its first record is the earliest of all.
    facts = [lesson("a", 5), lesson("b", 1), lesson("b", 30)]
    verdict = judge(facts, now=at(40), config=CONFIG)
    assert (verdict.first_publisher, verdict.first_published, verdict.supporters) == ("b", at(1), ("a",))


def test_confirmations_without_the_lesson_wait_for_it() -> None:
    held = [confirm("b", 1), confirm("c", 2), confirm("d", 3), revoke("b", 4)]
    orphan = judge(held, now=at(500), config=CONFIG)
    assert orphan == Verdict(state=CANDIDATE, supporters=(), publishers=(), first_publisher=None,
                             first_published=None, last_support=None, revoked_by=(), tombstone=False)
    assert judge([*held, lesson("a")], now=at(5), config=CONFIG).state == COMMON


# -- fading and removed -------------------------------------------------------------------


def test_common_fades_after_w_without_new_support() -> None:
    last = at(3)
    assert judge(common_lesson(), now=last + W - TICK, config=CONFIG).state == COMMON
    assert judge(common_lesson(), now=last + W, config=CONFIG).state == FADING


def test_a_counted_supporter_confirming_again_does_not_refresh_the_clock() -> None:
    facts = [*common_lesson(), confirm("b", 100), lesson("c", 100), lesson("a", 100), confirm("a", 100)]
    verdict = judge(facts, now=at(3) + W + DAY, config=CONFIG)
    assert (verdict.state, verdict.last_support) == (FADING, at(3))


def test_fading_is_common_again_on_a_new_supporter() -> None:
    fading_since = at(3) + W
    facts = [*common_lesson(), confirm("e", 100)]
    assert judge(common_lesson(), now=fading_since + 10 * DAY, config=CONFIG).state == FADING
    verdict = judge(facts, now=fading_since + 10 * DAY, config=CONFIG)
    assert (verdict.state, verdict.support, verdict.last_support) == (COMMON, 4, at(100))


def test_late_support_counts_at_its_signed_time() -> None:
    # e's confirmation, signed on day 80, arrives while the lesson fades: the lesson
    # was supported on day 80, so it is common until day 170, and not one day longer.
    facts = [*common_lesson(), confirm("e", 80)]
    assert judge(facts, now=at(150), config=CONFIG).state == COMMON
    assert judge(facts, now=at(170), config=CONFIG).state == FADING


def test_candidate_reaching_n_through_old_support_is_fading() -> None:
    facts = [lesson("a"), confirm("b", 1), confirm("c", 2)]
    assert judge(facts, now=at(100), config=CONFIG).state == CANDIDATE
    assert judge([*facts, confirm("d", 5)], now=at(100), config=CONFIG).state == FADING


def test_removed_after_2w_without_new_support() -> None:
    last = at(3)
    assert judge(common_lesson(), now=last + 2 * W - TICK, config=CONFIG).state == FADING
    verdict = judge(common_lesson(), now=last + 2 * W, config=CONFIG)
    assert (verdict.state, verdict.tombstone, verdict.support) == (REMOVED, True, 3)


def test_common_straight_to_removed_when_not_judged_in_between() -> None:
    assert judge(common_lesson(), now=at(3), config=CONFIG).state == COMMON
    assert judge(common_lesson(), now=at(3) + 3 * W, config=CONFIG).state == REMOVED


def test_unconfirmed_candidate_is_removed_after_2w() -> None:
    # Re-signing its own lesson does not keep it alive: the clock runs from its first record.
    facts = [lesson("a"), lesson("a", 100), confirm("a", 150)]
    assert judge(facts, now=at(0) + 2 * W - TICK, config=CONFIG).state == CANDIDATE
    verdict = judge(facts, now=at(0) + 2 * W, config=CONFIG)
    assert (verdict.state, verdict.tombstone) == (REMOVED, True)


def test_candidate_clock_runs_from_its_last_new_supporter() -> None:
    facts = [lesson("a"), confirm("b", 30), confirm("c", 50)]
    assert judge(facts, now=at(50) + 2 * W - TICK, config=CONFIG).state == CANDIDATE
    assert judge(facts, now=at(50) + 2 * W, config=CONFIG).state == REMOVED


def test_window_is_configurable() -> None:
    config = CommonsConfig(window_days=10)
    assert judge(common_lesson(), now=at(13), config=config).state == FADING
    assert judge(common_lesson(), now=at(23), config=config).state == REMOVED


# -- revoked ------------------------------------------------------------------------------


def test_revoked_by_its_only_publisher() -> None:
    verdict = judge([*common_lesson(), revoke("a", 10)], now=at(11), config=CONFIG)
    assert (verdict.state, verdict.revoked_by, verdict.tombstone) == (REVOKED, ("a",), True)


def test_revoked_only_when_every_publisher_revoked() -> None:
    facts = [*common_lesson(), lesson("e", 4), revoke("a", 10)]
    one = judge(facts, now=at(11), config=CONFIG)
    assert (one.state, one.revoked_by) == (COMMON, ("a",))
    both = judge([*facts, revoke("e", 12)], now=at(13), config=CONFIG)
    assert (both.state, both.revoked_by) == (REVOKED, ("a", "e"))


def test_revoked_by_a_quorum_of_supporters() -> None:
    facts = [*common_lesson(), revoke("b", 10), revoke("c", 10)]
    two = judge(facts, now=at(11), config=CONFIG)
    assert (two.state, two.revoked_by, two.support) == (COMMON, ("b", "c"), 3)
    three = judge([*facts, revoke("d", 11)], now=at(12), config=CONFIG)
    assert (three.state, three.revoked_by) == (REVOKED, ("b", "c", "d"))


def test_revoke_quorum_is_configurable() -> None:
    facts = [*common_lesson(), revoke("b", 10), revoke("c", 10)]
    assert judge(facts, now=at(11), config=CommonsConfig(revoke_quorum=2)).state == REVOKED


def test_a_candidate_can_be_revoked() -> None:
    assert judge([lesson("a"), revoke("a", 1)], now=at(2), config=CONFIG).state == REVOKED


def test_revocation_from_a_stranger_does_nothing() -> None:
    facts = [*common_lesson(), *(revoke(s, 10) for s in ("x", "y", "z"))]
    verdict = judge(facts, now=at(11), config=CONFIG)
    assert (verdict.state, verdict.revoked_by) == (COMMON, ())


def test_revocation_signed_before_the_lesson_still_counts() -> None:
    early = revoke("a", -1)
    assert judge([early], now=at(5), config=CONFIG).state == CANDIDATE
    assert judge([early, *common_lesson()], now=at(5), config=CONFIG).state == REVOKED


def test_revoked_wins_over_removed() -> None:
    verdict = judge([lesson("a"), revoke("a", 1)], now=at(500), config=CONFIG)
    assert verdict.state == REVOKED


# -- tombstones ---------------------------------------------------------------------------


def test_a_removed_tombstone_is_final() -> None:
    later = [*common_lesson(), confirm("e", 300), confirm("f", 301), lesson("a", 302)]
    verdict = judge(later, now=at(303), config=CONFIG, tombstone=REMOVED)
    assert (verdict.state, verdict.tombstone, verdict.support) == (REMOVED, False, 5)
    assert judge([*later, revoke("a", 304)], now=at(305), config=CONFIG, tombstone=REMOVED).state == REMOVED


def test_a_revoked_tombstone_is_final_even_against_a_newer_publication() -> None:
    facts = [*common_lesson(), revoke("a", 10), lesson("a", 20), confirm("e", 21)]
    assert judge(facts, now=at(22), config=CONFIG).state == REVOKED
    verdict = judge([*facts, lesson("f", 23)], now=at(24), config=CONFIG, tombstone=REVOKED)
    assert (verdict.state, verdict.tombstone) == (REVOKED, False)


def test_a_tombstone_without_records_keeps_its_state() -> None:
    assert judge([], now=at(0), config=CONFIG, tombstone=REVOKED).state == REVOKED


# -- future-dated records -----------------------------------------------------------------


def test_future_dated_facts_are_ignored_until_now_catches_up() -> None:
    now = at(5)
    ahead = Fact("confirm", "d", now + timedelta(seconds=601))
    facts = [lesson("a"), confirm("b", 1), confirm("c", 2), ahead]
    assert judge(facts, now=now, config=CONFIG).support == 2
    assert judge(facts, now=now + timedelta(seconds=1), config=CONFIG).state == COMMON
    within = Fact("confirm", "d", now + timedelta(seconds=600))
    assert judge([*facts[:3], within], now=now, config=CONFIG).state == COMMON


def test_a_future_dated_revocation_is_ignored() -> None:
    facts = [*common_lesson(), Fact("revoke", "a", at(5) + timedelta(hours=1))]
    assert judge(facts, now=at(5), config=CONFIG).state == COMMON
    assert judge(facts, now=at(5), config=CommonsConfig(future_tolerance_s=7200)).state == REVOKED


def test_a_future_dated_lesson_is_not_held_yet() -> None:
    verdict = judge([lesson("a", 30), confirm("b", 1)], now=at(1), config=CONFIG)
    assert (verdict.first_publisher, verdict.support) == (None, 0)


# -- the trust policy ---------------------------------------------------------------------


def test_a_trust_policy_set_reduces_support() -> None:
    verdict = judge(common_lesson(), now=at(5), config=CONFIG, counts={"a", "b", "c"})
    assert (verdict.state, verdict.supporters) == (CANDIDATE, ("b", "c"))


def test_a_trust_policy_predicate_reduces_support() -> None:
    verdict = judge(common_lesson(), now=at(5), config=CONFIG, counts=lambda origin: origin != "d")
    assert verdict.supporters == ("b", "c")


def test_uncounted_revocations_do_not_make_a_quorum() -> None:
    facts = [*common_lesson(), confirm("e", 4), *(revoke(o, 10) for o in "bcd")]
    verdict = judge(facts, now=at(11), config=CONFIG, counts={"a", "c", "d", "e"})
    assert (verdict.state, verdict.revoked_by) == (COMMON, ("c", "d"))


def test_an_uncounted_publisher_cannot_block_a_revocation() -> None:
    facts = [*common_lesson(), lesson("x", 4), revoke("a", 10)]
    assert judge(facts, now=at(11), config=CONFIG).state == COMMON
    assert judge(facts, now=at(11), config=CONFIG, counts={"a", "b", "c", "d"}).state == REVOKED


def test_an_uncounted_first_publisher_can_revoke_its_own_lesson() -> None:
    facts = [lesson("x"), confirm("b", 1)]
    assert judge(facts, now=at(3), config=CONFIG, counts={"b"}).state == CANDIDATE
    verdict = judge([*facts, revoke("x", 2)], now=at(3), config=CONFIG, counts={"b"})
    assert (verdict.first_publisher, verdict.state, verdict.revoked_by) == ("x", REVOKED, ("x",))


# -- inputs -------------------------------------------------------------------------------


def test_fact_of_reads_each_record_type() -> None:
    key = nacl.signing.SigningKey(bytes(range(32)))
    stamp = "2026-11-21T03:00:00.000000Z"
    published = sign_lesson(key, kind="error", text="The cache directory fills up after a week", seen=1,
                            strength=1.0, updated=stamp)
    when = datetime(2026, 11, 21, 3, tzinfo=UTC)
    assert fact_of(published) == Fact("lesson", published.origin, when)
    assert fact_of(sign_confirm(key, published.target, at=stamp)) == Fact("confirm", published.origin, when)
    assert fact_of(sign_revoke(key, published.target, at=stamp)) == Fact("revoke", published.origin, when)


@pytest.mark.parametrize(
    "make",
    [
        lambda: judge([], now=datetime(2026, 1, 1), config=CONFIG),
        lambda: judge([], now=T0, config=CONFIG, tombstone=FADING),
        lambda: Fact("lesson", "a", datetime(2026, 1, 1)),
        lambda: Fact("endorse", "a", T0),  # type: ignore[arg-type]
        lambda: CommonsConfig(support_n=0),
        lambda: CommonsConfig(revoke_quorum=0),
        lambda: CommonsConfig(window_days=0),
        lambda: CommonsConfig(future_tolerance_s=-1),
    ],
)
def test_bad_inputs_are_refused(make: Callable[[], object]) -> None:
    with pytest.raises(ValueError):
        make()


# -- properties ---------------------------------------------------------------------------

ORIGINS = "abcde"
# Whole hours over 400 days: ties between signed times are frequent, which is where
# order-dependence would hide.
times = st.integers(0, 400 * 24).map(lambda h: T0 + timedelta(hours=h))
facts_st = st.builds(Fact, kind=st.sampled_from(["lesson", "confirm", "revoke"]),
                     origin=st.sampled_from(ORIGINS), at=times)
fact_lists = st.lists(facts_st, max_size=14)
policies = st.none() | st.frozensets(st.sampled_from(ORIGINS))
nows = st.integers(0, 500).map(lambda d: T0 + timedelta(days=d))
configs = st.builds(CommonsConfig, support_n=st.integers(1, 4), window_days=st.sampled_from([10.0, 90.0]),
                    revoke_quorum=st.integers(1, 4))


@given(fact_lists.flatmap(st.permutations).flatmap(lambda p: st.tuples(st.just(p), st.permutations(p))),
       nows, configs, policies)
def test_the_verdict_does_not_depend_on_the_order_of_facts(
    pair: tuple[Sequence[Fact], Sequence[Fact]], now: datetime, config: CommonsConfig, counts: frozenset[str] | None
) -> None:
    one, other = pair
    assert judge(one, now=now, config=config, counts=counts) == judge(other, now=now, config=config, counts=counts)


@given(fact_lists.filter(bool), st.data(), nows, configs, policies)
def test_duplicating_a_fact_changes_nothing(
    facts: list[Fact], data: st.DataObject, now: datetime, config: CommonsConfig, counts: frozenset[str] | None
) -> None:
    copy = data.draw(st.sampled_from(facts))
    assert judge([*facts, copy], now=now, config=config, counts=counts) == judge(
        facts, now=now, config=config, counts=counts
    )


@given(fact_lists, st.sampled_from(ORIGINS), times, nows, configs, policies)
def test_a_confirmation_never_lowers_support(
    facts: list[Fact], origin: str, when: datetime, now: datetime, config: CommonsConfig,
    counts: frozenset[str] | None,
) -> None:
    before = judge(facts, now=now, config=config, counts=counts)
    after = judge([*facts, Fact("confirm", origin, when)], now=now, config=config, counts=counts)
    assert after.support >= before.support


@given(fact_lists, st.sampled_from(["lesson", "confirm"]), st.sampled_from(ORIGINS), times, nows)
def test_under_policy_any_no_publication_or_confirmation_lowers_support(
    facts: list[Fact], kind: str, origin: str, when: datetime, now: datetime
) -> None:
    before = judge(facts, now=now, config=CONFIG)
    after = judge([*facts, Fact(kind, origin, when)], now=now, config=CONFIG)  # type: ignore[arg-type]
    assert after.support >= before.support


# With the records fixed, time alone moves a lesson only forward along the table.
_AS_TIME_PASSES = {
    CANDIDATE: {CANDIDATE, REMOVED},
    COMMON: {COMMON, FADING, REMOVED},
    FADING: {FADING, REMOVED},
    REMOVED: {REMOVED},
    REVOKED: {REVOKED},
}


@given(fact_lists, nows, st.integers(0, 300), configs, policies)
def test_time_alone_only_moves_forward_along_the_table(
    facts: list[Fact], now: datetime, later_days: int, config: CommonsConfig, counts: frozenset[str] | None
) -> None:
    held = [f for f in facts if f.at <= now]
    before = judge(held, now=now, config=config, counts=counts).state
    after = judge(held, now=now + timedelta(days=later_days), config=config, counts=counts).state
    assert after in _AS_TIME_PASSES[before]


@given(fact_lists, nows, configs, policies)
def test_verdict_invariants(
    facts: list[Fact], now: datetime, config: CommonsConfig, counts: frozenset[str] | None
) -> None:
    verdict = judge(facts, now=now, config=config, counts=counts)
    assert verdict.state in STATES
    assert verdict.tombstone == (verdict.state in TERMINAL)
    assert verdict.first_publisher not in verdict.supporters
    assert counts is None or set(verdict.supporters) <= counts
    assert verdict.supporters == tuple(sorted(set(verdict.supporters)))
    if verdict.state == COMMON or verdict.state == FADING:
        assert verdict.support >= config.support_n


@given(fact_lists, nows, st.sampled_from(sorted(TERMINAL)), policies)
def test_a_tombstone_holds_whatever_arrives(
    facts: list[Fact], now: datetime, tombstone: str, counts: frozenset[str] | None
) -> None:
    verdict = judge(facts, now=now, config=CONFIG, counts=counts, tombstone=tombstone)
    assert (verdict.state, verdict.tombstone) == (tombstone, False)
