"""Refutations through the one receive function, on real stores: held like confirmations and moving
nothing, and the bad input of issue 14 (malformed, forged, the lesson's own publisher, the future, a
flood from one origin) refused or bounded, counted, and never stopping the rest of a batch."""

from __future__ import annotations

import hashlib
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nacl.signing
import pytest

from neverest.clock import FixedClock, iso
from neverest.config import Config
from neverest.identity import Identity
from neverest.memory import holdings
from neverest.memory import receive as receive_module
from neverest.memory.receive import REFUTE_FLOOD, REFUTE_PUBLISHER, Receiver, receive
from neverest.memory.service import Memory
from neverest.memory.states import verdict
from neverest.memory.store import Store, open_store
from neverest.records import lesson_hash, origin_of, sign_confirm, sign_lesson, sign_refute
from tests.conftest import VECTORS

NOW = datetime(2026, 4, 1, 12, tzinfo=UTC)
CONFIG = Config()
KEYS = [nacl.signing.SigningKey(bytes([i]) * 32) for i in range(1, 8)]
ORIGINS = [origin_of(bytes(k.verify_key)) for k in KEYS]
OWN = "f" * 16
TEXT = "pytest hangs when the database container is down"
HASH = lesson_hash("error", TEXT)
VECTOR_CASES = [json.loads(line) for line in (VECTORS / "refutations.jsonl").read_text().splitlines() if line]


def words(k: int) -> str:
    """A sentence of its own for lesson ``k`` (sentences sharing words would corroborate one lesson)."""
    return " ".join(hashlib.blake2b(f"{k}/{i}".encode(), digest_size=4).hexdigest() for i in range(8))


def lesson(key: nacl.signing.SigningKey = KEYS[0], text: str = TEXT, seq: int | None = 1) -> bytes:
    return sign_lesson(key, kind="error", text=text, seen=2, strength=1.0, updated=iso(NOW), seq=seq).raw


def refute(key: nacl.signing.SigningKey, target: str = HASH, seq: int | None = None, at: datetime = NOW) -> bytes:
    return sign_refute(key, target, at=iso(at), seq=seq).raw


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(tmp_path)


def take(store: Store, *lines: bytes | str | None, source: str = "test", config: Config = CONFIG) -> dict[str, Any]:
    return receive(store, list(lines), source=source, own_origin=OWN, config=config, now=NOW).to_json()


def held(store: Store, kind: str = "refute") -> int:
    return int(store.db.execute("SELECT count(*) FROM records WHERE type = ?", (kind,)).fetchone()[0])


def lesson_row(store: Store) -> tuple[float, int]:
    strength, archived = store.db.execute("SELECT strength, archived FROM lessons WHERE hash = ?", (HASH,)).fetchone()
    return float(strength), int(archived)


def refusals(store: Store) -> dict[tuple[str, str], int]:
    return {(r.source, r.reason): r.count for r in holdings.refusals(store.db)}


def test_a_refutation_is_held_once_and_moves_nothing(store: Store) -> None:
    take(store, lesson())
    before = lesson_row(store)
    result = take(store, refute(KEYS[1]), refute(KEYS[1]))
    assert result["accepted"] == 1 and result["duplicates"] == 1 and result["refutations"] == 1
    assert result["refused"] == {} and held(store) == 1
    assert lesson_row(store) == before  # neither weakened nor archived: it informs trust, nothing more
    assert holdings.refuters(store.db, HASH) == [ORIGINS[1]]
    # Counted by the source that delivered it, like any record (the storage budget's accounting).
    assert store.db.execute("SELECT records FROM received_usage WHERE origin = ? AND peer = 'test'",
                            (ORIGINS[1],)).fetchone() == (1,)


def test_a_refutation_of_a_hash_never_held_is_kept(store: Store) -> None:
    other = lesson_hash("error", "a lesson this memory has not met")
    assert take(store, refute(KEYS[1], other))["refutations"] == 1
    assert holdings.refuters(store.db, other) == [ORIGINS[1]]
    # The lesson arriving later is a candidate as usual: a refutation revokes nothing by itself.
    result = take(store, lesson(text="a lesson this memory has not met"))
    assert result["candidates"] == 1


@pytest.mark.parametrize("case", [c for c in VECTOR_CASES if c["expect"] == "refuse"], ids=lambda c: c["name"])
def test_a_malformed_or_forged_refutation_is_refused_and_the_batch_goes_on(store: Store, case: dict[str, Any]) -> None:
    result = take(store, case["line"], lesson(), refute(KEYS[2]), source="folder:x")
    assert result["refused"] == {case["code"]: 1}
    assert result["candidates"] == 1 and result["refutations"] == 1
    assert refusals(store) == {("folder:x", case["code"]): 1}


def test_a_publishers_refutation_of_its_own_lesson_is_refused_when_the_lesson_is_held(store: Store) -> None:
    take(store, lesson(KEYS[0], seq=1))
    result = take(store, refute(KEYS[0], seq=2), lesson(KEYS[3], text="another lesson entirely", seq=1),
                  source="gossip:relay")
    assert result["refused"] == {REFUTE_PUBLISHER: 1} and result["candidates"] == 1
    assert held(store) == 0 and lesson_row(store) == (0.5, 0)  # and the lesson stays as it was
    assert refusals(store) == {("gossip:relay", REFUTE_PUBLISHER): 1}
    # Another origin's refutation of the same lesson is kept.
    assert take(store, refute(KEYS[1]))["refutations"] == 1


def test_a_publishers_refutation_sent_ahead_of_its_lesson_is_kept_and_archives_nothing(store: Store) -> None:
    """Held (the trust rule ignores a publisher's refutation of its own lesson); the lesson that follows
    is a candidate as usual.  Before refutations had a branch of their own, one was applied as a
    revocation, and a publisher's archived its own lesson."""
    assert take(store, refute(KEYS[0], seq=1))["refutations"] == 1
    assert take(store, lesson(KEYS[0], seq=2))["candidates"] == 1
    assert lesson_row(store) == (0.5, 0)
    assert take(store, refute(KEYS[0], seq=3))["refused"] == {REFUTE_PUBLISHER: 1}


def test_a_refutation_from_the_future_is_refused_like_any_record(store: Store) -> None:
    ahead = timedelta(seconds=CONFIG.future_tolerance_s)
    result = take(store, refute(KEYS[1], at=NOW + ahead + timedelta(seconds=1)), refute(KEYS[2], at=NOW + ahead))
    assert result["refused"] == {"future": 1} and result["refutations"] == 1
    assert holdings.refuters(store.db, HASH) == [ORIGINS[2]]


def test_a_flood_of_refutations_from_one_origin_is_bounded_counted_and_stops_nothing(store: Store) -> None:
    """10 000 refutations from one origin, with honest records of others among them: the first
    ``refute_origin_max`` are held, the rest refused as refute-flood and counted by source, and every
    honest record is applied; and the flood costs signatures only up to the bound (and a little past it)."""
    flooder, bound, flood = KEYS[5], CONFIG.refute_origin_max, 10_000
    targets = [lesson_hash("error", f"lesson number {i}") for i in range(flood)]
    honest = [lesson(KEYS[k % 3], text=words(k), seq=None) for k in range(20)]
    lines: list[bytes] = []
    for i, target in enumerate(targets):
        lines.append(refute(flooder, target, seq=i + 1))
        if i % 500 == 0:
            lines.append(honest[i // 500])
    lines.append(sign_confirm(KEYS[4], lesson_hash("error", words(0)), at=iso(NOW)).raw)
    lines.append(refute(KEYS[1]))  # an honest refutation after the flood
    started = time.perf_counter()
    result = take(store, *lines, source="gossip:flooder")
    elapsed = time.perf_counter() - started
    assert result["candidates"] == 20 and result["confirmed"] == 1
    assert result["refused"] == {REFUTE_FLOOD: flood - bound}
    assert store.db.execute("SELECT count(*) FROM records WHERE type = 'refute' AND origin = ?",
                            (origin_of(bytes(flooder.verify_key)),)).fetchone() == (bound,)
    # The first ones received are the ones kept.
    kept = {str(r[0]) for r in store.db.execute("SELECT target FROM records WHERE type = 'refute' AND origin = ?",
                                                (origin_of(bytes(flooder.verify_key)),))}
    assert kept == set(targets[:bound])
    assert holdings.refuters(store.db, HASH) == [ORIGINS[1]]
    assert refusals(store) == {("gossip:flooder", REFUTE_FLOOD): flood - bound}
    # Sent again (a peer that holds them), they are refused again, counted again, held no more.
    again = take(store, *lines[-200:], source="gossip:other")  # 198 of the flood, then two held already
    assert again["refused"] == {REFUTE_FLOOD: 198} and again["duplicates"] == 2 and held(store) == bound + 1
    print(f"\n10 000-refutation flood received in {elapsed:.2f} s")


def test_past_the_bound_a_flooders_lines_are_refused_before_their_signature_is_checked(store: Store) -> None:
    """Once an origin is found at the bound, its further refutations in that receive are refused unverified:
    a forged one is counted as refute-flood, not bad-signature (valid or not, it would be refused).  The
    origin is found there once the first transaction is stored: the flood is longer than one."""
    flooder = KEYS[5]
    config = Config(refute_origin_max=3)
    flood = receive_module._BATCH + 100
    forged = json.loads(refute(flooder, lesson_hash("error", "forged one"), seq=flood))
    forged["sig"] = "00" * 64
    forged_line = json.dumps(forged, separators=(",", ":"), sort_keys=True).encode()
    lines = [refute(flooder, lesson_hash("error", f"n {i}"), seq=i + 1) for i in range(flood)] + [forged_line]
    with Receiver(store, own_origin=OWN, config=config, now=NOW, pool=None) as receiver:
        result = receiver.receive(lines, source="gossip:flooder")
    assert result.refused == {REFUTE_FLOOD: flood - 2} and held(store) == 3
    # And in the next receive (the next exchange), from its first line on.
    again = receive(store, [forged_line], source="gossip:flooder", own_origin=OWN, config=config, now=NOW)
    assert again.refused == {REFUTE_FLOOD: 1}
    # An origin below the bound is verified as usual: its forged line is refused for its signature.
    forged["origin"], forged["key"] = ORIGINS[1], bytes(KEYS[1].verify_key).hex()
    other = json.dumps(forged, separators=(",", ":"), sort_keys=True).encode()
    assert receive(store, [other], source="x", own_origin=OWN, config=config, now=NOW).refused == {"bad-signature": 1}


def test_the_bound_is_a_setting_and_0_turns_it_off(store: Store) -> None:
    lines = [refute(KEYS[1], lesson_hash("error", f"n {i}")) for i in range(40)]
    assert take(store, *lines[:20], config=Config(refute_origin_max=5))["refused"] == {REFUTE_FLOOD: 15}
    assert take(store, *lines[20:], config=Config(refute_origin_max=0))["refutations"] == 20
    assert held(store) == 25


def test_this_memorys_own_refutations_handed_back_are_never_bounded(store: Store, tmp_path: Path) -> None:
    me = Identity.from_seed(b"\x09" * 32)
    lines = [refute(me.signing_key, lesson_hash("error", f"n {i}"), seq=i + 1) for i in range(10)]
    result = receive(store, lines, source="folder:restore", own_origin=me.origin, config=Config(refute_origin_max=2),
                     now=NOW)
    assert result.refused == {} and held(store) == 10


def test_status_counts_refutations_held_and_refused(tmp_path: Path) -> None:
    memory = Memory.open(tmp_path / "home", Config(refute_origin_max=2), FixedClock(NOW))
    with memory:
        lines = [lesson(KEYS[0], seq=1), refute(KEYS[0], seq=2)] + [
            refute(KEYS[1], lesson_hash("error", f"n {i}")) for i in range(5)]
        receive(memory.store, lines, source="commons:x", own_origin=memory.identity.origin, config=memory.config,
                now=NOW)
        status = memory.status()
    assert status["refutations"] == {"held": 2, "refused": {REFUTE_PUBLISHER: 1, REFUTE_FLOOD: 3}}
    assert {(r["source"], r["reason"], r["count"]) for r in status["refused"]} == {
        ("commons:x", REFUTE_PUBLISHER, 1), ("commons:x", REFUTE_FLOOD, 3)}


def test_a_refutation_sent_ahead_of_a_lesson_does_not_start_its_quarantine(store: Store) -> None:
    """Under ``vouched`` a lesson is not common here before it has been held ``vouch_quarantine_days``: from
    its first lesson or confirmation received, not from a refutation that came ahead of it."""
    confirmers = KEYS[2:5]
    config = Config(trust_allow=",".join(ORIGINS[2:5]))
    day = timedelta(days=1)
    with store.write() as db:
        holdings.put(db, sign_refute(KEYS[1], HASH, at=iso(NOW)), source="test", now=NOW)
        later = NOW + 10 * day
        holdings.put(db, sign_lesson(KEYS[0], kind="error", text=TEXT, seen=2, strength=1.0, updated=iso(later)),
                     source="test", now=later)
        for key in confirmers:
            holdings.put(db, sign_confirm(key, HASH, at=iso(later)), source="test", now=later)
    judged = NOW + 15 * day  # 15 days after the refutation, 5 after the lesson
    assert verdict(store.db, HASH, now=judged, config=config, own_origin=OWN).state == "candidate"
    assert verdict(store.db, HASH, now=later + 14 * day, config=config, own_origin=OWN).state == "common"
