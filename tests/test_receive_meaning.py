"""The same-meaning check (memory/meaning.py): a planned batch held to the record-by-record lookup by a
differential test, and both, with the subject index of the lessons added, to the rule computed by brute force
(the same lessons joined, the same candidates made)."""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import nacl.signing
import numpy as np
import pytest

from neverest.config import Config
from neverest.memory import meaning as meaning_module
from neverest.memory.embed import DIM, HASHED_JOIN_COSINE, HASHED_SPACE, HashedEmbedder, VectorRows, stack, to_blob
from neverest.memory.meaning import MeaningIndex, subject_words, subjects_agree
from neverest.memory.queries import lessons as lesson_queries
from neverest.memory.receive import receive
from neverest.memory.store import Store, open_store
from neverest.peers import table
from neverest.records import lesson_hash, sign_confirm, sign_lesson, sign_revoke

KINDS = ("error", "correction", "surprise")
WORDS = ("pip", "install", "fails", "without", "build", "isolation", "pytest", "hangs", "database", "container",
         "down", "npm", "pnpm", "lockfile", "docker", "compose", "port", "busy", "timeout", "proxy")


def _texts(rng: random.Random, n: int) -> list[str]:
    # Few words from a small vocabulary: many pairs land near the join threshold, some on it.
    return [" ".join(rng.sample(WORDS, rng.randint(2, 6))) for _ in range(n)]


def _near(rng: random.Random, base: np.ndarray, cosine: float) -> np.ndarray:
    """A unit vector whose cosine with the unit vector ``base`` is ``cosine`` (to float32 rounding)."""
    other = np.asarray([rng.gauss(0, 1) for _ in range(DIM)], dtype=np.float64)
    other -= other @ base * base
    other /= np.linalg.norm(other)
    return (cosine * base + np.sqrt(1 - cosine * cosine) * other).astype(np.float32)


Lesson = tuple[str, np.ndarray, str]  # kind, vector, sentence


def _vectors(seed: int, n: int, *, nan: bool = True) -> list[Lesson]:
    rng = random.Random(seed)
    texts = _texts(rng, n)
    vectors = list(HashedEmbedder().embed(texts))
    out: list[Lesson] = []
    for text, vector in zip(texts, vectors, strict=True):
        kind = rng.choice(KINDS)
        roll = rng.random()
        if roll < 0.1 and out:  # a copy of an earlier lesson: exact ties
            kind, vector, text = rng.choice(out)
        elif roll < 0.25 and out:  # on the threshold, give or take a few float32 steps, often of the same subject
            kind, base, base_text = rng.choice(out)
            text = base_text if rng.random() < 0.7 else text
            if np.linalg.norm(base) > 0:
                vector = _near(rng, base.astype(np.float64) / np.linalg.norm(base),
                               HASHED_JOIN_COSINE + rng.choice((-2e-7, -6e-8, 0.0, 6e-8, 2e-7, 1e-4, -1e-4)))
        elif roll < 0.27:
            vector = np.zeros(DIM, np.float32)  # a sentence without words
        elif roll < 0.28 and nan:
            vector = np.full(DIM, np.nan, np.float32)  # what a lying worker might send
        elif roll < 0.30:
            vector = (vector * 3).astype(np.float32)  # longer than a unit row
        out.append((kind, np.asarray(vector, np.float32), text))
    return out


def _held(store: Store, seed: int, n: int) -> list[Lesson]:
    """``n`` lessons created in the store (the held lessons a receive reads), as (kind, vector, sentence)."""
    made = _vectors(seed, n, nan=False)
    with store.write() as db:
        for k, (kind, vector, text) in enumerate(made):
            lesson_queries.create(db, lesson_queries.NewLesson(
                hash=lesson_hash(kind, f"{text} {seed} {k}"), kind=kind, text=text, cwd="", strength=0.5, seen=1,
                created="2026-04-01T00:00:00.000000Z", origin="a" * 16, layer="common", space=HASHED_SPACE,
                embedding=to_blob(vector), centroid=None))
    return made


def _decide(index: MeaningIndex, batches: list[list[Lesson]], *, planned: bool) -> list[int | None]:
    """What receive does with each lesson, batch by batch: join the lesson found, or add a candidate."""
    decisions: list[int | None] = []
    new_id = 10**6
    for batch in batches:
        if planned:
            index.plan([(k, kind, vector) for k, (kind, vector, _) in enumerate(batch)])
        for k, (kind, vector, text) in enumerate(batch):
            subjects = subject_words(text)
            found = index.same_meaning(kind, vector, subjects, k if planned else None)
            decisions.append(found)
            if found is None:
                new_id += 1
                index.add(kind, new_id, vector, subjects)
    return decisions


def _batches(lessons: list[Lesson], sizes: list[int]) -> list[list[Lesson]]:
    batches, at = [], 0
    for size in sizes:
        batches.append(lessons[at:at + size])
        at += size
    return batches


@pytest.mark.parametrize("seed", range(6))
def test_the_batch_decides_as_the_record_by_record_lookup(tmp_path: Path, seed: int) -> None:
    store = open_store(tmp_path)
    _held(store, seed, 150 if seed % 2 else 0)
    batches = _batches(_vectors(1000 + seed, 900), [1, 7, 500, 392])  # as the receiver cuts them, and odd ones
    reference = _decide(MeaningIndex(store.db), batches, planned=False)
    batched = MeaningIndex(store.db)
    assert batched.held() == (150 if seed % 2 else 0)
    assert _decide(batched, batches, planned=True) == reference
    joined = sum(d is not None for d in reference)
    assert len(reference) // 20 < joined < len(reference) - len(reference) // 20  # both outcomes, often


def _rule(held: list[tuple[int, Lesson]], lesson: Lesson) -> tuple[set[int | None], float]:
    """The rule by brute force, in float64: of the held lessons of the kind whose subject agrees, the highest
    cosine at the threshold or above (those of one cosine: hashed words of one weight make exact ties, which
    float32 rounding breaks either way), else None.  Also how near the decision is to changing with float32
    rounding: the least distance of an agreeing cosine to the threshold, or of the best to the next best."""
    kind, vector, text = lesson
    subjects = subject_words(text)
    scores = [(float(np.dot(v.astype(np.float64), vector.astype(np.float64))), lesson_id)
              for lesson_id, (k, v, t) in held if k == kind and subjects_agree(subjects, subject_words(t))]
    above = sorted((score for score, _ in scores if score >= HASHED_JOIN_COSINE), reverse=True)
    if not above:
        return {None}, min((abs(score - HASHED_JOIN_COSINE) for score, _ in scores), default=1.0)
    # Within 1e-6: the same cosine but for the float32 rounding of the vectors (about 6e-8 a number).
    best = {lesson_id for score, lesson_id in scores if abs(score - above[0]) < 1e-6}
    below = [above[0] - score for score in above if above[0] - score >= 1e-6]
    return best, min([abs(score - HASHED_JOIN_COSINE) for score, _ in scores] + below)


@pytest.mark.parametrize(("seed", "vocabulary", "sizes"), [(0, 20, [300, 1, 500, 599]), (1, 20, [300, 1, 1099]),
                                                           (2, 400, [300, 1, 500, 599]), (3, 400, [300, 1, 1099])])
def test_the_index_decides_as_the_rule(tmp_path: Path, seed: int, vocabulary: int, sizes: list[int],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # Sentences of 1-6 words from a vocabulary of 20 (the subjects of most lessons added agree with many: the
    # index hands them to one product) or of 400 (few agree: the index alone finds them), some lessons held
    # in the store, the others received in batches, some without subject words, some the same sentence with
    # a word more: every decision is the rule's, computed by brute force.  In the runs with a large last batch
    # the lessons read join the index once 256 lessons of their kind were planned (the default, 1 000, is for
    # pulls larger than this test's 1 400 lessons); in the others they are scored by the plan's product.
    rng = random.Random(seed)
    words = [f"w{k}x" for k in range(vocabulary)]
    texts = [" ".join(rng.sample(words, rng.randint(1, 6))) for _ in range(1300)]
    texts += [texts[k] + " " + rng.choice(words) for k in rng.sample(range(1300), 300)]
    rng.shuffle(texts)
    # Among those received, 1 in 20 names nothing the subject check counts (it agrees with every lesson), and
    # 1 in 20 that and one word more.
    bare = ["it failed again after 30 runs", "still not working on 2 runs", "could not make it work 9 of 10"]
    for k in rng.sample(range(200, 1600), 140):
        texts[k] = rng.choice(bare) + (" " + rng.choice(words)) * (k % 2)
    lessons = [(rng.choice(KINDS[:2]), v, t) for v, t in zip(HashedEmbedder().embed(texts), texts, strict=True)]
    store = open_store(tmp_path)
    with store.write() as db:
        for k, (kind, vector, text) in enumerate(lessons[:200]):
            lesson_queries.create(db, lesson_queries.NewLesson(
                hash=lesson_hash(kind, f"{text} {k}"), kind=kind, text=text, cwd="", strength=0.5, seen=1,
                created="2026-04-01T00:00:00.000000Z", origin="a" * 16, layer="common", space=HASHED_SPACE,
                embedding=to_blob(vector), centroid=None))
    held = [(int(r[0]), lessons[k]) for k, r in enumerate(store.db.execute("SELECT id FROM lessons ORDER BY id"))]
    expected: list[set[int | None]] = []
    new_id = 10**6
    for lesson in lessons[200:]:
        found, edge = _rule(held, lesson)
        assert edge > 1e-5  # no decision on the edge of float32 rounding, where the computations may differ
        expected.append(found)
        if found == {None}:
            new_id += 1
            held.append((new_id, lesson))
    if max(sizes) > 1000:
        monkeypatch.setattr(meaning_module, "_INDEX_READ_AT", 256)
    index = MeaningIndex(store.db)
    decided = _decide(index, _batches(lessons[200:], sizes), planned=True)
    assert [d in e for d, e in zip(decided, expected, strict=True)] == [True] * len(expected)
    firsts = [held.first for held in index._kinds.values()]
    assert (firsts == [0, 0]) if max(sizes) > 1000 else (len(firsts) == 2 and min(firsts) > 0)
    joined = sum(e != {None} for e in expected)
    assert 100 < joined < 1300  # both outcomes, often
    # The lessons added were compared through the index, not by a product over all of them, in the large
    # vocabulary; in the small one most lessons agree with many others, and a product compares them.
    # (A sentence without subject words agrees with every lesson: a product compares it, in both.)
    assert (index.lookups < len(decided) / 4) if vocabulary == 400 else (index.lookups > len(decided) / 5)


@pytest.mark.parametrize("seed", range(3))
def test_the_batch_decides_as_the_lookup_with_subjects_too(tmp_path: Path, seed: int) -> None:
    # Sentences of a small vocabulary (many over the threshold, many naming words the other does not): the
    # planned batch and the record-by-record lookup make the same decisions, with lessons held in the store.
    rng = random.Random(seed)
    texts = _texts(rng, 600)
    lessons = [("error", v, t) for v, t in zip(HashedEmbedder().embed(texts), texts, strict=True)]
    stores = {name: open_store(tmp_path / name) for name in ("reference", "planned", "plain")}
    for store in stores.values():
        _held(store, seed, 120)
    batches = _batches(lessons, [250, 350])
    reference = _decide(MeaningIndex(stores["reference"].db), batches, planned=False)
    assert _decide(MeaningIndex(stores["planned"].db), batches, planned=True) == reference
    # Without subject words every sentence agrees with every lesson: the subject check kept some apart.
    plain = _decide(MeaningIndex(stores["plain"].db), [[(k, v, "") for k, v, _ in b] for b in batches], planned=False)
    assert sum(d is None for d in reference) > sum(d is None for d in plain)


def _random_words(rng: random.Random, n: int) -> list[str]:
    return [" ".join("".join(rng.choices(string.ascii_lowercase, k=9)) for _ in range(4)) for _ in range(n)]


def test_distinct_lessons_need_no_lookup_one_by_one(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    rng = np.random.default_rng(7)
    held = rng.standard_normal((300, DIM)).astype(np.float32)
    with store.write() as db:
        for k, vector in enumerate(held / np.linalg.norm(held, axis=1, keepdims=True)):
            text = f"held {k}"
            lesson_queries.create(db, lesson_queries.NewLesson(
                hash=lesson_hash("error", text), kind="error", text=text, cwd="", strength=0.5, seen=1,
                created="2026-04-01T00:00:00.000000Z", origin="a" * 16, layer="common", space=HASHED_SPACE,
                embedding=to_blob(vector), centroid=None))
    fresh = rng.standard_normal((500, DIM)).astype(np.float32)
    fresh /= np.linalg.norm(fresh, axis=1, keepdims=True)  # random directions: cosines near 0
    texts = _random_words(random.Random(7), 500)  # no two share a word
    index = MeaningIndex(store.db)
    assert _decide(index, [[("error", v, t) for v, t in zip(fresh, texts, strict=True)]], planned=True) == [None] * 500
    assert index.lookups == 0  # the plan answered for the lessons read, the subject index for those added


def test_a_pull_of_distinct_lessons_makes_each_a_candidate(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    key = nacl.signing.SigningKey(b"\x05" * 32)
    rng = random.Random(5)
    # Words of random letters: no two lessons share one, so none means what another says.
    texts = [" ".join("".join(rng.choices(string.ascii_lowercase, k=9)) for _ in range(4)) for _ in range(600)]
    texts.append(texts[3] + " again")  # means what lesson 3 says
    lines = [sign_lesson(key, kind="error", text=text, seen=1, strength=1.0, updated="2026-04-01T00:00:00.000000Z",
                         seq=k + 1).raw for k, text in enumerate(texts)]
    # What the record-by-record lookup makes of them, in a store of its own.
    reference = _decide(MeaningIndex(open_store(tmp_path / "reference").db),
                        [[("error", v, t) for v, t in zip(HashedEmbedder().embed(texts), texts, strict=True)]],
                        planned=False)
    result = receive(store, lines, source="test", own_origin="f" * 16, config=Config(verify_processes=0),
                     now=datetime(2026, 4, 1, 12, tzinfo=UTC))
    made = {str(r[0]) for r in store.db.execute("SELECT hash FROM lessons")}
    assert made == {lesson_hash("error", text) for text, d in zip(texts, reference, strict=True) if d is None}
    assert result.accepted == 601 and result.candidates == len(made) and result.corroborated == 0
    assert reference[-1] is not None and len(made) > 590  # the last joined lesson 3; nearly all are new


def test_lines_verified_ahead_are_taken_only_as_they_would_have_been_sent(tmp_path: Path) -> None:
    from neverest.memory.receive import Lookahead, Receiver
    from neverest.verify_pool import VerifyPool

    key = nacl.signing.SigningKey(b"\x06" * 32)
    rng = random.Random(6)
    lines = [sign_lesson(key, kind="error", seen=1, strength=1.0, updated="2026-04-01T00:00:00.000000Z", seq=k + 1,
                         text=" ".join("".join(rng.choices(string.ascii_lowercase, k=7)) for _ in range(4))).raw
             for k in range(300)]
    now = datetime(2026, 4, 1, 12, tzinfo=UTC)
    pool = VerifyPool(2)  # room for the three batches at once (two requests a process)
    try:
        stores = {name: open_store(tmp_path / name) for name in ("plain", "ahead")}
        for store in stores.values():  # one line of the second batch held already: that batch is sent without it
            receive(store, [lines[130]], source="test", own_origin="f" * 16, config=Config(verify_processes=0),
                    now=now)
        ahead = Lookahead(lines)
        ahead.send(pool, most=8, min_lines=32)
        ahead.send(pool, most=8, min_lines=32)  # nothing left to send: no batch twice
        results = {}
        for name, store in stores.items():
            with Receiver(store, own_origin="f" * 16, config=Config(), now=now, pool=pool) as receiver:
                results[name] = receiver.receive(lines, source="test",
                                                 verified_ahead=ahead if name == "ahead" else None)
        # The first and third batches were taken from the lookahead; the second (a line held) was sent again.
        assert ahead.take(0, lines[:128]) is None and ahead.take(256, lines[256:]) is None
        assert ahead.take(128, lines[128:256]) is not None
        assert results["ahead"].to_json() == results["plain"].to_json()
        assert results["ahead"].accepted == 299 and results["ahead"].duplicates == 1
        tables = [[store.db.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in ("records", "lessons")]
                  for store in stores.values()]
        strip = [[[row[:7] for row in rows] for rows in t] for t in tables]  # ids, hashes, texts, origins...
        assert strip[0] == strip[1]
    finally:
        pool.close()


def test_best_cosines_in_slices_are_those_of_the_whole_product() -> None:
    # Held rows across several slices of the plan, one of them NaN in a kind of its own: the maxima per
    # batch row are the same numbers as the whole product's, and a NaN row makes every maximum NaN.
    rng = np.random.default_rng(5)
    held = rng.standard_normal((2 * meaning_module._PLAN_ROWS + 37, DIM)).astype(np.float32)
    batch = rng.standard_normal((50, DIM)).astype(np.float32)
    assert np.array_equal(meaning_module._best_cosines(held, batch), (held @ batch.T).max(axis=0))
    held[meaning_module._PLAN_ROWS + 3] = np.nan
    assert np.isnan(meaning_module._best_cosines(held, batch)).all()


def test_only_a_lesson_to_compare_reads_the_held_lessons_vectors(tmp_path: Path) -> None:
    # Reading every held lesson's vector costs a receive time and memory in proportion to the store; a
    # receive of confirmations (or of records held already) has no lesson to compare and reads none.
    store = open_store(tmp_path)
    _held(store, 3, 100)
    key = nacl.signing.SigningKey(b"\x06" * 32)
    at = "2026-04-01T00:00:00.000000Z"
    statements: list[str] = []
    store.db.set_trace_callback(statements.append)

    def reads() -> int:
        return sum("COALESCE(centroid, embedding)" in s for s in statements)

    def take(line: bytes) -> None:
        receive(store, [line], source="test", own_origin="f" * 16, config=Config(verify_processes=0),
                now=datetime(2026, 4, 1, 12, tzinfo=UTC))

    take(sign_confirm(key, "ab" * 16, at=at, seq=1).raw)
    assert reads() == 0 and store.db.execute("SELECT count(*) FROM records").fetchone()[0] == 1
    lesson = sign_lesson(key, kind="error", text="the build cache goes stale after switching branches", seen=1,
                         strength=1.0, updated=at, seq=2).raw
    take(lesson)
    assert reads() == 1 and store.db.execute("SELECT count(*) FROM lessons").fetchone()[0] == 101
    take(lesson)  # held already: skipped before it is verified
    assert reads() == 1


def test_rows_read_with_room_to_spare_grow_in_place_then_beyond() -> None:
    rows = stack([to_blob(np.eye(DIM, dtype=np.float32)[k]) for k in range(3)], DIM, spare_rows=2)
    held = VectorRows(DIM, [10, 11, 12], rows)
    assert held.matrix.shape == (3, DIM) and held.ids == [10, 11, 12]
    for k in range(3, 70):  # two into the room read with them, then past it
        held.add(10 + k, np.eye(DIM, dtype=np.float32)[k])
    assert held.ids == list(range(10, 80))
    assert np.array_equal(held.matrix, np.eye(DIM, dtype=np.float32)[:70])


def test_a_first_batch_into_an_empty_store_is_compared_by_subject_words(tmp_path: Path) -> None:
    # Nothing held: each lesson of the batch is compared only with those before it whose subject can agree
    # (here none), not looked up against all those before it (a pull into an empty store).
    rng = np.random.default_rng(8)
    fresh = rng.standard_normal((500, DIM)).astype(np.float32)
    fresh /= np.linalg.norm(fresh, axis=1, keepdims=True)
    texts = _random_words(random.Random(8), 500)
    index = MeaningIndex(open_store(tmp_path).db)
    assert _decide(index, [[("error", v, t) for v, t in zip(fresh, texts, strict=True)]], planned=True) == [None] * 500
    assert index.lookups == 0 and index.held() == 500


def _lessons_signed(key_byte: bytes, seed: int, n: int) -> list[bytes]:
    """``n`` lessons of words no other shares, signed by the key of ``key_byte``."""
    key = nacl.signing.SigningKey(key_byte * 32)
    return [sign_lesson(key, kind="error", text=text, seen=1, strength=1.0, updated="2026-04-01T00:00:00.000000Z",
                        seq=k + 1).raw for k, text in enumerate(_random_words(random.Random(seed), n))]


def _vector_reads(store: Store) -> Callable[[], int]:
    """A count of the times the held lessons' vectors are read through ``store``'s connection from now on."""
    statements: list[str] = []
    store.db.set_trace_callback(statements.append)
    return lambda: sum("SELECT id, kind, COALESCE(centroid, embedding)" in s for s in statements)


def test_a_pull_hands_its_meaning_index_from_one_answer_to_the_next(tmp_path: Path) -> None:
    # Inside ``keeping_meaning`` (one exchange), each receive goes on with the index the one before left,
    # unless something wrote in between; outside it, or after a write, the held lessons are read again.
    from neverest.gossip.view import SqliteView

    store = open_store(tmp_path)
    _held(store, 3, 100)
    view = SqliteView(store, own_origin="f" * 16, config=Config(verify_processes=0))
    lines = _lessons_signed(b"\x07", 9, 60)
    reads = _vector_reads(store)
    now = datetime(2026, 4, 1, 12, tzinfo=UTC)
    with view.keeping_meaning():
        for start in (0, 10, 20):
            assert view.receive(lines[start:start + 10], source="test", now=now).result.candidates == 10
            before = store.data_version()  # a write the view is told touched no record or lesson (a peer's)
            with store.write() as db:
                table.add(db, f"http://127.0.0.1:{9000 + start}", source="manual", now=now)
            view.unchanged(before, store.data_version())
        assert reads() == 1
        with store.write() as db:  # anything written in between: the next receive reads the lessons again
            db.execute("UPDATE lessons SET strength = 0.4 WHERE id = 1")
        view.receive(lines[30:40], source="test", now=now)
        assert reads() == 2
    view.receive(lines[40:50], source="test", now=now)
    view.receive(lines[50:60], source="test", now=now)
    assert reads() == 4
    assert store.db.execute("SELECT count(*) FROM lessons").fetchone()[0] == 160


def test_a_lesson_archived_by_a_receive_is_not_met_by_the_next_one(tmp_path: Path) -> None:
    # A receive that archived a lesson (its origin revoked it) leaves an index that still holds it: the next
    # receive of the pull reads the lessons again, and a lesson meaning the revoked one is a candidate of its own.
    from neverest.gossip.view import SqliteView

    key, other = nacl.signing.SigningKey(b"\x08" * 32), nacl.signing.SigningKey(b"\x09" * 32)
    at = "2026-04-01T00:00:00.000000Z"
    text = "the zylofrob cache goes stale after switching qwerbranch"
    lesson = sign_lesson(key, kind="error", text=text, seen=1, strength=1.0, updated=at, seq=1)
    revoke = sign_revoke(key, lesson.target, at=at, seq=2)
    again = sign_lesson(other, kind="error", text=text + " again", seen=1, strength=1.0, updated=at, seq=1)
    now = datetime(2026, 4, 1, 12, tzinfo=UTC)
    store = open_store(tmp_path)
    view = SqliteView(store, own_origin="f" * 16, config=Config(verify_processes=0))
    with view.keeping_meaning():
        first = view.receive([lesson.raw, revoke.raw], source="test", now=now).result
        assert first.candidates == 1 and first.revoked == 1
        second = view.receive([again.raw], source="test", now=now).result
    assert second.candidates == 1 and second.corroborated == 0
    assert [r[0] for r in store.db.execute("SELECT archived FROM lessons ORDER BY id")] == [1, 0]


def test_a_commit_by_another_connection_during_a_receive_ends_the_handover(tmp_path: Path) -> None:
    # Another process (a night, a command) may commit while a receive runs: what it changed is not in the
    # index, so the next receive reads the lessons again, even though their count comes out the same here.
    from neverest.gossip.view import SqliteView

    store = open_store(tmp_path)
    _held(store, 4, 20)
    other = open_store(tmp_path)
    view = SqliteView(store, own_origin="f" * 16, config=Config(verify_processes=0))
    lines = _lessons_signed(b"\x0a", 10, 20)
    reads = _vector_reads(store)
    now = datetime(2026, 4, 1, 12, tzinfo=UTC)

    class Meddling(list[bytes]):
        def __iter__(self):  # type: ignore[no-untyped-def]
            with other.write() as db:  # while the receive reads its lines: one lesson archived, one added
                db.execute("UPDATE lessons SET archived = 1 WHERE id = 2")
                lesson_queries.create(db, lesson_queries.NewLesson(
                    hash=lesson_hash("error", "added meanwhile"), kind="error", text="added meanwhile", cwd="",
                    strength=0.5, seen=1, created="2026-04-01T00:00:00.000000Z", origin="b" * 16, layer="common",
                    space=HASHED_SPACE, embedding=to_blob(np.ones(DIM, np.float32) / 16), centroid=None))
            return super().__iter__()

    with view.keeping_meaning():
        view.receive(lines[:10], source="test", now=now)
        view.receive(Meddling(lines[10:15]), source="test", now=now)
        view.receive(lines[15:], source="test", now=now)
    assert reads() == 2
    other.close()


def test_a_nan_row_found_by_the_subject_index_hides_no_other() -> None:
    # A row a lying worker's NaN vector made is never joined, and the rows beside it are still compared.
    matrix = np.zeros((4, DIM), np.float32)
    matrix[0] = np.nan
    matrix[1, 0], matrix[2, 0], matrix[3, 0] = 0.9, 0.95, 0.95  # rows 2 and 3 tie: the first is joined
    vector = np.zeros(DIM, np.float32)
    vector[0] = 1.0
    assert meaning_module._closest_of(matrix, [0, 1, 2, 3], vector, HASHED_JOIN_COSINE) == (pytest.approx(0.95), 2)
    assert meaning_module._closest_of(matrix, [0], vector, HASHED_JOIN_COSINE) is None
    assert meaning_module._closest_of(matrix, [0, 1], vector, 0.91) is None
