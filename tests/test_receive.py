"""The one receive function: verification, dedup, supersede, forks, the merge rule, hostile folders."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nacl.signing
import pytest

from neverest.clock import iso
from neverest.config import Config
from neverest.memory import holdings
from neverest.memory.embed import HASHED_SPACE, hashed_vector, to_blob
from neverest.memory.queries import lessons as lesson_queries
from neverest.memory.receive import receive
from neverest.memory.store import Store, open_store
from neverest.records import canonical, lesson_hash, origin_of, sign_confirm, sign_lesson, sign_revoke

NOW = datetime(2026, 4, 1, 12, tzinfo=UTC)
CONFIG = Config()
KEYS = [nacl.signing.SigningKey(bytes([i]) * 32) for i in range(1, 8)]
OWN = "f" * 16
TEXT = "pytest hangs when the database container is down"
HASH = lesson_hash("error", TEXT)


def lesson(key: nacl.signing.SigningKey = KEYS[0], text: str = TEXT, seq: int | None = 1, seen: int = 2,
           at: datetime = NOW) -> bytes:
    return sign_lesson(key, kind="error", text=text, seen=seen, strength=1.0, updated=iso(at), seq=seq).raw


def confirm(key: nacl.signing.SigningKey, seq: int | None = None, target: str = HASH, at: datetime = NOW) -> bytes:
    return sign_confirm(key, target, at=iso(at), seq=seq).raw


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(tmp_path)


def take(store: Store, *lines: bytes | None, source: str = "test") -> dict[str, object]:
    return receive(store, list(lines), source=source, own_origin=OWN, config=CONFIG, now=NOW).to_json()


def row(store: Store) -> tuple[float, list[str], int]:
    lesson_id, strength, archived = store.db.execute(
        "SELECT id, strength, archived FROM lessons WHERE hash = ?", (HASH,)).fetchone()
    return strength, lesson_queries.origins(store.db, lesson_id), archived


def test_a_received_lesson_becomes_a_candidate(store: Store) -> None:
    result = take(store, lesson())
    assert result["accepted"] == 1 and result["candidates"] == 1
    strength, origins, archived = row(store)
    assert strength == 0.5 and len(origins) == 1 and archived == 0
    layer, origin = store.db.execute("SELECT layer, origin FROM lessons").fetchone()
    assert layer == "common" and origin != ""


def test_replayed_records_are_duplicates(store: Store) -> None:
    take(store, lesson())
    assert take(store, lesson(), lesson())["duplicates"] == 2
    assert store.db.execute("SELECT count(*) FROM records").fetchone()[0] == 1


def test_a_newer_version_supersedes_and_an_older_one_does_not(store: Store) -> None:
    take(store, lesson(seq=2, seen=3))
    result = take(store, lesson(seq=1, seen=2))
    assert result["older"] == 1
    current = [h for h in holdings.about(store.db, HASH) if not h.superseded]
    assert len(current) == 1 and json.loads(current[0].raw)["seen"] == 3
    take(store, lesson(seq=5, seen=9))
    current = [h for h in holdings.about(store.db, HASH) if not h.superseded]
    assert json.loads(current[0].raw)["seq"] == 5
    assert store.db.execute("SELECT seen FROM lessons WHERE hash = ?", (HASH,)).fetchone()[0] == 9


def test_a_fork_is_kept_as_evidence_and_changes_nothing(store: Store) -> None:
    take(store, lesson(seq=4))
    result = take(store, lesson(text="The staging database is read-only on weekends", seq=4))
    assert result["forks"] == 1 and result["accepted"] == 0
    assert store.db.execute("SELECT count(*) FROM forks").fetchone()[0] == 1
    assert store.db.execute("SELECT count(*) FROM lessons").fetchone()[0] == 1


def test_forged_tampered_and_oversized_records_are_refused_and_counted(store: Store) -> None:
    good = lesson()
    fields = json.loads(good)
    fields["text"] = fields["text"].upper()  # the hash still matches (normalised), the signature does not
    tampered = canonical(fields)
    forged = dict(fields, key=bytes(KEYS[1].verify_key).hex())  # another key, origin unchanged
    result = take(store, tampered, canonical(forged), b"x" * 20_000, None, b"{", source="folder:evil.jsonl")
    assert result["accepted"] == 0
    assert result["refused"] == {"bad-signature": 1, "origin-mismatch": 1, "too-large": 2, "not-json": 1}
    counts = dict(((s, r), n) for s, r, n in store.db.execute("SELECT source, reason, count FROM refusals"))
    assert counts[("folder:evil.jsonl", "too-large")] == 2
    assert store.db.execute("SELECT count(*) FROM records").fetchone()[0] == 0


def test_one_origin_confirming_100_times_counts_once(store: Store) -> None:
    take(store, lesson())
    result = take(store, *[confirm(KEYS[1], seq=i) for i in range(1, 101)])
    assert result["accepted"] == 100 and result["confirmed"] == 1
    strength, origins, _ = row(store)
    assert strength == 0.5 + CONFIG.confirm_step and len(origins) == 2


def test_an_origin_confirming_its_own_lesson_does_not_count(store: Store) -> None:
    take(store, lesson())
    assert take(store, confirm(KEYS[0], seq=2))["confirmed"] == 0
    assert row(store)[0] == 0.5


def test_a_confirmation_for_an_unknown_hash_is_kept_and_applied_when_the_lesson_arrives(store: Store) -> None:
    assert take(store, confirm(KEYS[1]), confirm(KEYS[2]))["accepted"] == 2
    assert store.db.execute("SELECT count(*) FROM lessons").fetchone()[0] == 0
    result = take(store, lesson())
    assert result["candidates"] == 1 and result["confirmed"] == 2
    assert row(store)[0] == 0.5 + 2 * CONFIG.confirm_step


def test_the_same_hash_or_meaning_from_another_origin_corroborates_once(store: Store) -> None:
    take(store, lesson())
    assert take(store, lesson(key=KEYS[1]))["corroborated"] == 1
    # The same meaning in other words, from the same second origin: it already counted.
    similar = "pytest hangs when the database container is down on CI"
    assert take(store, lesson(key=KEYS[1], text=similar, seq=2))["corroborated"] == 0
    # From a third origin it counts, and makes no second lesson.
    assert take(store, lesson(key=KEYS[2], text=similar))["corroborated"] == 1
    assert store.db.execute("SELECT count(*) FROM lessons WHERE archived = 0").fetchone()[0] == 1
    assert row(store)[0] == 0.5 + 2 * CONFIG.confirm_step
    # Unrelated text from a fourth origin is a lesson of its own.
    assert take(store, lesson(key=KEYS[3], text="The staging database is read-only on weekends"))["candidates"] == 1


def test_a_lesson_that_names_another_subject_is_a_lesson_of_its_own(store: Store) -> None:
    # Two sentences of one template at cosine 0.80: each names its own program, so the second is no support
    # for the first (lessons the night made from tests/data/sessions; tests/test_corpus_episodes.py).
    rg = "rg is not installed here (command not found); find works instead"
    python = "python is not installed here (command not found); python3 works instead"
    take(store, lesson(text=rg))
    result = take(store, lesson(key=KEYS[1], text=python))
    assert result["candidates"] == 1 and result["corroborated"] == 0
    # Only numbers differ, or one adds a clause the other lacks: one lesson, supported by each origin.
    timeout = "Several programs fail on the network or time out: command timed out after {} milliseconds"
    take(store, lesson(key=KEYS[2], text=timeout.format(1013)))
    assert take(store, lesson(key=KEYS[3], text=timeout.format(30000)))["corroborated"] == 1
    assert take(store, lesson(key=KEYS[3], text="rg is not installed here (command not found)", seq=2)
                )["corroborated"] == 1
    texts = [str(r[0]) for r in store.db.execute("SELECT text FROM lessons ORDER BY id")]
    assert texts == [rg, python, timeout.format(1013)]


def _own_lessons(store: Store, *texts: str) -> None:
    """Error lessons of this memory's own, in the hashed space, made as a night would hold them."""
    with store.write() as db:
        for text in texts:
            lesson_queries.create(db, lesson_queries.NewLesson(
                hash=lesson_hash("error", text), kind="error", text=text, cwd="", strength=0.5, seen=1,
                created=iso(NOW), origin=OWN, layer="personal", space=HASHED_SPACE,
                embedding=to_blob(hashed_vector(text)), centroid=None, origins=[OWN]))


def test_a_join_passes_over_a_closer_lesson_that_names_something_else(store: Store) -> None:
    # Held: one lesson with a fix ("find"), one without; received: the same mistake with another fix ("fd").
    # The first is closer (cosine 0.91 against 0.85) but names a fix the received one does not: the
    # received one joins the second, whose words it holds all of.
    _own_lessons(store, "rg is not installed here (command not found); find works instead",
                 "rg is not installed here (command not found)")
    fd = "rg is not installed here (command not found); fd works instead"
    assert take(store, lesson(key=KEYS[1], text=fd))["corroborated"] == 1
    joined = store.db.execute("SELECT l.text FROM lessons l JOIN lesson_origins o ON o.lesson_id = l.id "
                              "WHERE o.origin != ?", (OWN,)).fetchall()
    assert joined == [("rg is not installed here (command not found)",)]
    # Of two that agree, the closer: held now after them, the received lesson's own sentence.
    _own_lessons(store, fd)
    assert take(store, lesson(key=KEYS[2], text=fd + " again"))["corroborated"] == 1
    fd_id = int(store.db.execute("SELECT id FROM lessons WHERE text = ?", (fd,)).fetchone()[0])
    assert lesson_queries.origins(store.db, fd_id) == sorted([OWN, origin_of(bytes(KEYS[2].verify_key))])


def test_a_revocation_by_the_origin_removes_its_lesson(store: Store) -> None:
    take(store, lesson())
    assert take(store, sign_revoke(KEYS[0], HASH, at=iso(NOW), seq=2).raw)["revoked"] == 1
    assert row(store)[2] == 1


def test_a_revocation_by_someone_else_removes_nothing(store: Store) -> None:
    take(store, lesson())
    assert take(store, sign_revoke(KEYS[3], HASH, at=iso(NOW)).raw)["revoked"] == 0
    assert row(store)[2] == 0


def test_a_revocation_that_arrives_before_its_lesson(store: Store) -> None:
    take(store, sign_revoke(KEYS[0], HASH, at=iso(NOW), seq=2).raw)
    result = take(store, lesson(seq=1))
    assert result["accepted"] == 1 and result["candidates"] == 0
    assert store.db.execute("SELECT count(*) FROM lessons").fetchone()[0] == 0


def test_records_dated_beyond_the_tolerance_are_refused(store: Store) -> None:
    soon = NOW + timedelta(seconds=CONFIG.future_tolerance_s - 1)
    later = NOW + timedelta(seconds=CONFIG.future_tolerance_s + 1)
    result = take(store, lesson(at=soon), lesson(key=KEYS[1], at=later))
    assert result["accepted"] == 1 and result["refused"] == {"future": 1}


def test_this_memorys_own_records_read_back_change_nothing(store: Store) -> None:
    own_key = KEYS[6]
    own = bytes(own_key.verify_key)
    from neverest.records import origin_of
    result = receive(store, [lesson(key=own_key)], source="folder", own_origin=origin_of(own), config=CONFIG, now=NOW)
    assert result.accepted == 1 and result.candidates == 0
