"""Corroboration under ``earned`` (commons.py): what an origin that only confirms can add, and what it
cannot; and named origins pre-trusted with this memory."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from neverest.commons import CommonsConfig, Fact, Trust, TrustConfig, earned, judge

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)
ME = "me"
SYBILS = [f"s{k}" for k in range(200)]


def at(day: float) -> datetime:
    return T0 + day * DAY


def lesson(origin: str, day: float) -> Fact:
    return Fact("lesson", origin, at(day))


def confirm(origin: str, day: float) -> Fact:
    return Fact("confirm", origin, at(day))


def refute(origin: str, day: float) -> Fact:
    return Fact("refute", origin, at(day))


def revoke(origin: str, day: float) -> Fact:
    return Fact("revoke", origin, at(day))


# p and q earned trust here (this memory bore out their first claims); c is an honest memory that only ever
# confirms: it bore out p's first claim on L1, after this memory did, so nobody credits it.  The sybils
# echoed L1 and L2 as soon as they appeared.
HISTORY = {
    "L1": [lesson("p", 0), confirm(ME, 3), confirm("c", 4), *(confirm(s, 0.5) for s in SYBILS)],
    "L2": [lesson("q", 0), confirm(ME, 3), *(confirm(s, 0.5) for s in SYBILS)],
}


def test_an_origin_that_only_confirms_corroborates_but_is_not_counted() -> None:
    trust = earned(HISTORY, own=ME)
    assert isinstance(trust, Trust)
    assert trust("p") and trust("q") and not trust("c") and not any(trust(s) for s in SYBILS)
    assert trust.corroborating("c") and all(trust.corroborating(s) for s in SYBILS)  # an echo is free
    off = earned(HISTORY, own=ME, config=TrustConfig(corroboration=0))
    assert not off.corroborating("c")


def test_a_corroborating_supporter_completes_a_lesson_that_enough_counted_claimants_back() -> None:
    """X: published by p, confirmed by q and this memory (three counted claimants, two counted supporters),
    and by c.  c is the third supporter; without corroboration X stays a candidate."""
    facts = {**HISTORY, "X": [lesson("p", 10), confirm("q", 11), confirm(ME, 12), confirm("c", 13)]}
    now = at(30)
    v = judge(facts["X"], now=now, counts=earned(facts, own=ME))
    assert (v.state, v.supporters, v.corroborators) == ("common", ("c", ME, "q"), ("c",))
    without = judge(facts["X"], now=now, counts=earned(facts, own=ME, config=TrustConfig(corroboration=0)))
    assert (without.state, without.support) == ("candidate", 2)
    # Its clock is the last counted supporter's: a corroborating confirmation never refreshes it.
    assert v.last_support == at(12)


def test_corroborating_keys_never_make_a_lie_common() -> None:
    """A liar with no trust, or with as much as p, and 200 corroborating keys: fewer than support_n
    counted claimants back the lie, so the keys' support does not count at all."""
    for author, backers in (("liar", []), ("p", []), ("p", [confirm("q", 11)])):
        lie = [lesson(author, 10), *backers, *(confirm(s, 10.5) for s in SYBILS)]
        facts = {**HISTORY, "F": lie}
        v = judge(lie, now=at(30), counts=earned(facts, own=ME))
        assert v.state == "candidate" and v.corroborators == (), (author, v)


def test_corroborators_neither_revoke_nor_keep_a_lesson_alive() -> None:
    facts = {**HISTORY, "X": [lesson("p", 10), confirm("q", 11), confirm(ME, 12), confirm("c", 13),
                              *(revoke(s, 14) for s in SYBILS[:5]), *(confirm(s, 95) for s in SYBILS[:5])]}
    trust = earned(facts, own=ME)
    v = judge(facts["X"], now=at(20), counts=trust)
    assert v.state == "common" and v.revoked_by == ()  # five corroborating revocations are no quorum
    # 90 days after the last counted supporter it fades, though corroborating keys confirmed on day 95.
    assert judge(facts["X"], now=at(103), counts=trust).state == "fading"


def test_a_contradicted_origin_does_not_corroborate() -> None:
    """c supported a lesson this memory refuted: contradicted first-hand, it corroborates no more; k echoed
    a lie that r, whom this memory trusts, refuted."""
    facts = {**HISTORY,
             "F": [lesson("liar", 5), confirm("c", 6), refute(ME, 7)],
             "L3": [lesson("r", 0), confirm(ME, 3), confirm("k", 4)],
             "G": [lesson("liar", 5), confirm("k", 6), refute("r", 7)]}
    trust = earned(facts, own=ME)
    assert trust("r") and not trust.corroborating("c") and not trust.corroborating("k")


def test_named_origins_count_and_pass_their_trust_on() -> None:
    """n is named here; n bore out x's first claim, so x holds trust here, passed on by n; y, whom nobody
    trusted credits, has none."""
    facts = {"L1": [lesson("x", 0), confirm("n", 3)], "L2": [lesson("y", 0), confirm("z", 3)]}
    plain = earned(facts, own=ME)
    assert not plain("n") and not plain("x")
    named = earned(facts, own=ME, allowed=frozenset({"n"}))
    assert named("n") and named("x") and not named("y") and not named("z")


def test_a_team_of_named_origins_makes_a_lesson_common() -> None:
    """Three named supporters suffice under any CommonsConfig with support_n 3, first claims or not."""
    facts = {"X": [lesson("a", 0), confirm("b", 1), confirm("c", 1), confirm("d", 1)]}
    team = earned(facts, own=ME, allowed=frozenset("bcd"))
    assert judge(facts["X"], now=at(20), config=CommonsConfig(), counts=team).state == "common"
    assert judge(facts["X"], now=at(20), counts=earned(facts, own=ME)).state == "candidate"
