"""The same-meaning check of a batch in one matrix product (receive.MeaningIndex.plan), held to the
record-by-record lookup by a differential test: the same lessons joined, the same candidates made."""

from __future__ import annotations

import random
import string
from datetime import UTC, datetime
from pathlib import Path

import nacl.signing
import numpy as np
import pytest

from neverest.config import Config
from neverest.memory import meaning as meaning_module
from neverest.memory.embed import DIM, HASHED_JOIN_COSINE, HASHED_SPACE, HashedEmbedder, VectorRows, stack, to_blob
from neverest.memory.meaning import MeaningIndex
from neverest.memory.queries import lessons as lesson_queries
from neverest.memory.receive import receive
from neverest.memory.store import Store, open_store
from neverest.records import lesson_hash, sign_confirm, sign_lesson

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


def _vectors(seed: int, n: int, *, nan: bool = True) -> list[tuple[str, np.ndarray]]:
    rng = random.Random(seed)
    texts = _texts(rng, n)
    vectors = list(HashedEmbedder().embed(texts))
    out: list[tuple[str, np.ndarray]] = []
    for k, vector in enumerate(vectors):
        kind = rng.choice(KINDS)
        roll = rng.random()
        if roll < 0.1 and out:  # a copy of an earlier vector: exact ties
            kind, vector = rng.choice(out)
        elif roll < 0.25 and out:  # on the threshold, give or take a few float32 steps
            _, base = rng.choice(out)
            if np.linalg.norm(base) > 0:
                vector = _near(rng, base.astype(np.float64) / np.linalg.norm(base),
                               HASHED_JOIN_COSINE + rng.choice((-2e-7, -6e-8, 0.0, 6e-8, 2e-7, 1e-4, -1e-4)))
        elif roll < 0.27:
            vector = np.zeros(DIM, np.float32)  # a sentence without words
        elif roll < 0.28 and nan:
            vector = np.full(DIM, np.nan, np.float32)  # what a lying worker might send
        elif roll < 0.30:
            vector = (vector * 3).astype(np.float32)  # longer than a unit row
        out.append((kind, np.asarray(vector, np.float32)))
        del k
    return out


def _held(store: Store, seed: int, n: int) -> None:
    with store.write() as db:
        # No NaN among them: one held NaN row makes every lookup of its kind find nothing (argmax picks it).
        for k, (kind, vector) in enumerate(_vectors(seed, n, nan=False)):
            text = f"held lesson {seed} {k}"
            lesson_queries.create(db, lesson_queries.NewLesson(
                hash=lesson_hash(kind, text), kind=kind, text=text, cwd="", strength=0.5, seen=1,
                created="2026-04-01T00:00:00.000000Z", origin="a" * 16, layer="common", space=HASHED_SPACE,
                embedding=to_blob(vector), centroid=None))


def _decide(index: MeaningIndex, batches: list[list[tuple[str, np.ndarray]]], *, planned: bool,
            texts: list[str] | None = None) -> list[int | None]:
    """What receive does with each lesson, batch by batch: join the lesson found, or add a candidate.
    ``texts``: the lessons' sentences, in order, for the subject check (the held ones' are read from the store)."""
    decisions: list[int | None] = []
    new_id = 10**6
    for batch in batches:
        if planned:
            index.plan([(k, kind, vector) for k, (kind, vector) in enumerate(batch)])
        for k, (kind, vector) in enumerate(batch):
            text = texts[len(decisions)] if texts is not None else None
            found = index.same_meaning(kind, vector, k if planned else None, text)
            decisions.append(found)
            if found is None:
                new_id += 1
                index.add(kind, new_id, vector, k if planned else None, text)
    return decisions


@pytest.mark.parametrize("seed", range(6))
def test_the_batch_decides_as_the_record_by_record_lookup(tmp_path: Path, seed: int) -> None:
    store = open_store(tmp_path)
    _held(store, seed, 150 if seed % 2 else 0)
    incoming = _vectors(1000 + seed, 900)
    sizes = [1, 7, 500, 392]  # batches as the receiver cuts them, and odd ones
    batches, at = [], 0
    for size in sizes:
        batches.append(incoming[at:at + size])
        at += size
    reference = _decide(MeaningIndex(store.db), batches, planned=False)
    batched = MeaningIndex(store.db)
    assert batched.held() == (150 if seed % 2 else 0)
    assert _decide(batched, batches, planned=True) == reference
    joined = sum(d is not None for d in reference)
    assert len(reference) // 20 < joined < len(reference) - len(reference) // 20  # both outcomes, often


@pytest.mark.parametrize("seed", range(3))
def test_the_batch_decides_as_the_lookup_with_subjects_too(tmp_path: Path, seed: int) -> None:
    # Sentences of a small vocabulary (many over the threshold, many naming words the other does not): the
    # planned batch and the record-by-record lookup, each given the sentences, make the same decisions.
    rng = random.Random(seed)
    texts = _texts(rng, 600)
    vectors = list(HashedEmbedder().embed(texts))
    batches = [[("error", v) for v in vectors[:250]], [("error", v) for v in vectors[250:]]]
    reference = _decide(MeaningIndex(open_store(tmp_path / "reference").db), batches, planned=False, texts=texts)
    assert _decide(MeaningIndex(open_store(tmp_path / "planned").db), batches, planned=True, texts=texts) == reference
    plain = _decide(MeaningIndex(open_store(tmp_path / "plain").db), batches, planned=False)
    assert sum(d is None for d in reference) > sum(d is None for d in plain)  # the subject check kept some apart


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
    index = MeaningIndex(store.db)
    assert _decide(index, [[("error", v) for v in fresh]], planned=True) == [None] * 500
    assert index.lookups == 0


def test_a_row_added_outside_the_plan_sends_its_kind_back_to_the_exact_lookup(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    index = MeaningIndex(store.db)
    vector = HashedEmbedder().embed(["pip install fails without build isolation"])[0]
    index.add("error", 1, vector)
    index.plan([(0, "error", vector)])
    index.add("error", 2, vector)  # no key: the plan never scored this row
    assert index.same_meaning("error", vector, 0) == 1 and index.lookups == 1


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
                        [[("error", v) for v in HashedEmbedder().embed(texts)]], planned=False, texts=texts)
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


def test_best_earlier_is_each_rows_maximum_over_the_rows_before_it() -> None:
    # Across several blocks and a last short one; a NaN row makes its maximum and those of the rows after it NaN.
    rng = np.random.default_rng(9)
    vectors = rng.standard_normal((3 * meaning_module._EARLIER_BLOCK + 41, DIM)).astype(np.float32)
    whole = vectors @ vectors.T
    expected = np.array([-np.inf] + [whole[:j, j].max() for j in range(1, len(vectors))], dtype=np.float32)
    assert np.array_equal(meaning_module._best_earlier(vectors), expected)
    vectors[meaning_module._EARLIER_BLOCK + 5] = np.nan
    best = meaning_module._best_earlier(vectors)
    assert not np.isnan(best[:meaning_module._EARLIER_BLOCK + 5]).any()
    assert np.isnan(best[meaning_module._EARLIER_BLOCK + 5:]).all()


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


def test_a_first_batch_into_an_empty_store_is_planned_too(tmp_path: Path) -> None:
    # Nothing held: the batch's lessons are compared with one another in one product, not each looked up
    # against all those before it (a pull into an empty store).
    rng = np.random.default_rng(8)
    fresh = rng.standard_normal((500, DIM)).astype(np.float32)
    fresh /= np.linalg.norm(fresh, axis=1, keepdims=True)
    index = MeaningIndex(open_store(tmp_path).db)
    assert _decide(index, [[("error", v) for v in fresh]], planned=True) == [None] * 500
    assert index.lookups == 0 and index.held() == 500
