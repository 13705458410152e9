"""The trust policy ``vouched`` and the quarantine: the rule (commons.py) and the store's facts (states.py)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from neverest.commons import CANDIDATE, COMMON, Fact, judge, vouched
from neverest.config import Config, ConfigError, load_config
from neverest.identity import Identity
from neverest.memory import holdings
from neverest.memory.states import trust_filter, verdict
from neverest.memory.store import open_store
from neverest.records import sign_confirm, sign_lesson

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)


def rule(verified: dict[str, int], refuted: dict[str, int], resolved: int) -> set[str]:
    counts = vouched(verified, refuted, resolved=resolved, own="me", min_verified=2, min_resolved=10)
    return {o for o in ("me", "a", "b", "c") if counts(o)}


def test_nobody_is_vouched_for_before_this_memory_tested_enough() -> None:
    assert rule({"a": 5}, {}, resolved=9) == {"me"}
    assert rule({"a": 5}, {}, resolved=10) == {"me", "a"}


def test_a_track_record_is_needed_and_one_refutation_loses_it() -> None:
    assert rule({"a": 2, "b": 1, "c": 9}, {"c": 1}, resolved=20) == {"me", "a"}


def test_allowed_origins_always_count() -> None:
    counts = vouched({}, {}, resolved=0, own="me", min_verified=2, min_resolved=10, allowed=frozenset({"b"}))
    assert counts("b") and counts("me") and not counts("a")


def test_quarantine_keeps_a_supported_lesson_a_candidate_until_it_has_been_held_long_enough() -> None:
    facts = [Fact("lesson", "p", T0), Fact("confirm", "a", T0), Fact("confirm", "b", T0), Fact("confirm", "c", T0)]
    now = T0 + DAY
    assert judge(facts, now=now).state == COMMON
    held = T0
    assert judge(facts, now=now, held_since=held, quarantine_days=7).state == CANDIDATE
    assert judge(facts, now=T0 + 7 * DAY, held_since=held, quarantine_days=7).state == COMMON
    assert judge(facts, now=now, held_since=held, quarantine_days=0).state == COMMON


def test_the_policy_is_a_config_choice_and_others_are_refused(tmp_path: Path) -> None:
    assert load_config(tmp_path, {"NEVEREST_TRUST": "vouched"}).trust == "vouched"
    with pytest.raises(ConfigError, match="vouched"):
        load_config(tmp_path, {"NEVEREST_TRUST": "everyone"})


def test_the_store_adapter_vouches_from_this_memorys_own_tests(tmp_path: Path) -> None:
    """Own lessons and predictions that came true are verifications; a failed one refutes."""
    me = Identity.from_seed(b"\x01" * 32)
    honest, liar, stranger = (Identity.from_seed(bytes([k]) * 32) for k in (2, 3, 4))
    config = Config(trust="vouched", vouch_min_verified=1, vouch_min_resolved=2)
    store = open_store(tmp_path)
    when = "2026-01-01T00:00:00.000000Z"
    with store.write() as db:
        for i, outcome in enumerate(("confirmed", "failed")):
            text = f"the cache of stack {i} goes stale after a rebase"
            rec = sign_lesson(liar.signing_key, kind="error", text=text, seen=1, strength=1.0, updated=when)
            holdings.put(db, rec, source="test", now=T0)
            if outcome == "confirmed":
                holdings.put(db, sign_confirm(honest.signing_key, rec.target, at=when), source="test", now=T0)
            lesson_id = db.execute(
                "INSERT INTO lessons (hash, kind, text, strength, seen, created, updated, origin) "
                "VALUES (?, 'error', ?, 1, 1, ?, ?, ?)", (rec.target, text, when, when, liar.origin)).lastrowid
            db.execute("INSERT INTO predictions (lesson_id, text, made, space, resolved, outcome) "
                       "VALUES (?, ?, ?, 'hashed', ?, ?)", (lesson_id, text, when, when, outcome))
        counts = trust_filter(db, config, me.origin)
    # The liar's first lesson came true here, its second failed: refuted once, so it never counts.
    assert counts(me.origin) and counts(honest.origin)
    assert not counts(liar.origin) and not counts(stranger.origin)
    store.close()


def test_states_verdict_applies_the_quarantine_from_when_the_records_were_received(tmp_path: Path) -> None:
    keys = [Identity.from_seed(bytes([k]) * 32) for k in range(10, 14)]
    config = Config(trust="vouched", vouch_min_verified=0, vouch_min_resolved=0, vouch_quarantine_days=7)
    store = open_store(tmp_path)
    when = "2026-01-01T00:00:00.000000Z"
    rec = sign_lesson(keys[0].signing_key, kind="error", text="the linter of stack 3 times out on big files",
                      seen=1, strength=1.0, updated=when)
    with store.write() as db:
        holdings.put(db, rec, source="test", now=T0)
        for k in keys[1:]:
            holdings.put(db, sign_confirm(k.signing_key, rec.target, at=when), source="test", now=T0)
        everyone = lambda origin: True  # noqa: E731 - the policy's own facts are tested above
        assert verdict(db, rec.target, now=T0 + DAY, config=config, own_origin="0" * 16,
                       counts=everyone).state == CANDIDATE
        assert verdict(db, rec.target, now=T0 + 8 * DAY, config=config, own_origin="0" * 16,
                       counts=everyone).state == COMMON
    store.close()


def test_leaving_out_confirmations_the_policy_does_not_count_changes_no_verdict() -> None:
    """What the simulator relies on to judge 700 agents quickly (simulations/commons.py)."""
    rng = random.Random(7)
    origins = [f"{i:016x}" for i in range(12)]
    for _ in range(300):
        facts = [Fact(rng.choice(("lesson", "confirm", "confirm", "revoke")), rng.choice(origins),
                      T0 + rng.randrange(0, 200) * DAY) for _ in range(rng.randrange(1, 15))]
        counted = set(rng.sample(origins, rng.randrange(0, 12)))
        now = T0 + rng.randrange(0, 300) * DAY
        kept = [f for f in facts if f.kind != "confirm" or f.origin in counted]
        assert judge(facts, now=now, counts=counted) == judge(kept, now=now, counts=counted)
