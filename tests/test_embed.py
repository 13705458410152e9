"""The hashed space, the thresholds, the blob helpers and the embedder factory."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest

from neverest.memory.embed import (
    BIGRAM_WEIGHT,
    DIM,
    HASHED_SPACE,
    VERIFY_COSINE,
    Embedded,
    Embedder,
    HashedEmbedder,
    ModelEmbedder,
    cosine,
    from_blob,
    hashed_vector,
    join_threshold,
    load_embedder,
    stack,
    to_blob,
    to_blobs,
    unit,
)

PIP = "pip install fails without --no-build-isolation"
PIP_AGAIN = "pip install fails without build isolation flag"
TABS = "the person prefers tabs"


def sim(a: str, b: str) -> float:
    return cosine(hashed_vector(a), hashed_vector(b))


def test_shape_type_and_unit_norm() -> None:
    vector = hashed_vector(PIP)
    assert vector.dtype == np.float32 and vector.shape == (DIM,)
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-6


@pytest.mark.parametrize("text", ["", "   ", "!!! -- ''", "\n\t"])
def test_no_words_is_the_zero_vector(text: str) -> None:
    vector = hashed_vector(text)
    assert vector.shape == (DIM,) and not vector.any()
    assert cosine(vector, hashed_vector(PIP)) == 0.0


def test_pinned_value() -> None:
    """The hashed space's name stands for exactly this function: if this fails, bump HASHED_SPACE."""
    assert HASHED_SPACE == "hashed-256"
    digest = hashlib.sha256(hashed_vector(PIP).astype("<f4").tobytes()).hexdigest()
    assert digest == "acdf549a58e5dc0bf8cbca26e2b4839d6d6f6ea115c4cbbceef3100b5e003880"


def test_same_bytes_in_fresh_processes() -> None:
    """Stable across processes: no salted hash(), whatever PYTHONHASHSEED is."""
    texts = [PIP, TABS, "Ошибка сборки: нет модуля numpy", "naïve café ✓"]
    code = ("import sys; from neverest.memory.embed import HashedEmbedder; "
            "sys.stdout.write(HashedEmbedder().embed(sys.argv[1:]).tobytes().hex())")
    here = HashedEmbedder().embed(texts).tobytes().hex()
    for seed in ("1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", code, *texts], env=env, check=True, capture_output=True, text=True)
        assert out.stdout == here


def test_one_text_or_many_gives_the_same_bits() -> None:
    texts = [PIP, "", TABS]
    matrix = HashedEmbedder().embed(texts)
    for row, text in zip(matrix, texts, strict=True):
        assert row.tobytes() == hashed_vector(text).tobytes()


def test_similar_sentences_are_closer_than_unrelated_ones() -> None:
    # Measured: 0.665, -0.094, 0.0.  Four shared words and three shared bigrams put the
    # paraphrase above the 0.55 join threshold; the unrelated sentences share no feature,
    # so only hash collisions (here one, of opposite signs) move them off zero.
    assert sim(PIP, PIP_AGAIN) > join_threshold(HASHED_SPACE)
    assert abs(sim(PIP, TABS)) < 0.15
    assert abs(sim(PIP_AGAIN, TABS)) < 0.15
    # Measured 0.676: the same event in other words still joins.
    assert sim("pytest hangs when the database container is not running",
               "pytest hangs if the database container is down") > 0.55


def test_case_punctuation_and_unicode_forms_do_not_matter() -> None:
    assert sim("PIP Install FAILS!", "pip install fails") == pytest.approx(1.0)
    assert sim("--no-build-isolation", "no-build-isolation") == pytest.approx(1.0)
    assert sim("the person said don’t", "the person said don't") == pytest.approx(1.0)
    assert np.array_equal(hashed_vector("Straße Café"), hashed_vector("STRASSE Cafe\u0301"))  # casefold, NFKC
    assert sim("ошибка сборки", "Ошибка сборки!") == pytest.approx(1.0)


def test_bigrams_weigh_half_a_word() -> None:
    # "a b": features a, b (weight 1) and "a b" (0.5), in three distinct dimensions.
    vector = hashed_vector("a b")
    assert sorted(np.abs(vector[vector != 0]).tolist()) == pytest.approx([0.5 / 1.5, 1 / 1.5, 1 / 1.5])
    assert BIGRAM_WEIGHT == 0.5


def test_word_order_counts_through_bigrams() -> None:
    # The same three words with no bigram in common: cosine 3 / (3 + 2 × 0.5²) exactly.
    assert sim("cache hides error", "error hides cache") == pytest.approx(3 / 3.5, abs=1e-6)


def test_thresholds() -> None:
    assert join_threshold(HASHED_SPACE) == 0.55
    assert join_threshold("model:nomic-embed-text") == 0.62
    assert VERIFY_COSINE == 0.5
    with pytest.raises(ValueError):
        join_threshold("hashed-512")


def test_hashed_embedder() -> None:
    embedder: Embedder = HashedEmbedder()
    assert embedder.probe() == embedder.space == HASHED_SPACE
    assert embedder.dim == DIM and embedder.last_error is None
    got = embedder.embed_with_space([PIP, TABS])
    assert got == Embedded(HASHED_SPACE, got.vectors) and got.vectors.shape == (2, DIM)
    assert embedder.embed([]).shape == (0, DIM)
    with pytest.raises(TypeError):
        embedder.embed(PIP)
    embedder.close()


def test_blob_round_trip() -> None:
    vector = hashed_vector(PIP)
    blob = to_blob(vector)
    # A hashed vector is stored sparse: far smaller than 256 float32 numbers.
    assert len(blob) % 4 != 0 and len(blob) < DIM
    back = from_blob(blob)
    assert back.dtype == np.float32 and np.array_equal(back, vector)
    back[0] = 2.0  # a writable copy, not a view of the bytes
    dense = np.linspace(-1, 1, 768, dtype=np.float32)  # a model's vector: stored dense
    assert to_blob(dense) == dense.astype("<f4").tobytes() and np.array_equal(from_blob(to_blob(dense)), dense)
    full = np.ones(DIM, dtype=np.float32)  # no zero entries: dense is smaller, so dense
    assert len(to_blob(full)) == 4 * DIM and np.array_equal(from_blob(to_blob(full)), full)
    for nonzero in range(0, 12):  # every padding case decodes
        v = np.zeros(DIM, dtype=np.float32)
        v[:nonzero] = np.arange(1, nonzero + 1)
        assert np.array_equal(from_blob(to_blob(v)), v)
    with pytest.raises(ValueError):
        to_blob(np.zeros((2, 2)))
    with pytest.raises(ValueError):
        stack([to_blob(dense)], DIM)


def test_blobs_of_a_matrix_are_those_of_each_row() -> None:
    # Every case to_blob has: entry counts on and off a multiple of 4 (the last entry written twice), a zero
    # vector, NaN (not zero), rows on either side of the sparse/dense boundary, and hashed sentences.
    rng = np.random.default_rng(3)
    rows = [hashed_vector(PIP), hashed_vector(TABS), np.zeros(DIM, dtype=np.float32),
            np.full(DIM, np.nan, dtype=np.float32), np.ones(DIM, dtype=np.float32)]
    for nonzero in [*range(1, 13), 203, 204, 205, 206]:
        row = np.zeros(DIM, dtype=np.float32)
        row[np.sort(rng.choice(DIM, nonzero, replace=False))] = rng.standard_normal(nonzero)
        rows.append(row)
    rows[7][5] = np.nan
    matrix = np.stack(rows)
    assert to_blobs(matrix) == [to_blob(row) for row in matrix]
    assert to_blobs(np.zeros((0, DIM), dtype=np.float32)) == []
    assert to_blobs(matrix[4:5]) == [to_blob(matrix[4])]  # dense rows only
    with pytest.raises(ValueError):
        to_blobs(np.zeros((2, 2)))


def test_stack_mixes_sparse_and_dense_rows() -> None:
    rows = [hashed_vector(PIP), np.ones(DIM, dtype=np.float32), np.zeros(DIM, dtype=np.float32)]
    assert np.array_equal(stack([to_blob(r) for r in rows], DIM), np.stack(rows))


def test_stack_of_ten_thousand_blobs() -> None:
    texts = [f"episode {i} pip install fails on worker {i % 7}" for i in range(10_000)]
    matrix = HashedEmbedder().embed(texts)
    stacked = stack([to_blob(row) for row in matrix], DIM)
    assert stacked.shape == (10_000, DIM) and stacked.dtype == np.float32
    assert np.array_equal(stacked, matrix)
    scores = stacked @ hashed_vector("pip install fails on worker 3")
    assert int(np.argmax(scores)) % 7 == 3
    assert stack([], DIM).shape == (0, DIM)


def test_stack_refuses_a_blob_of_another_length() -> None:
    blobs = [to_blob(hashed_vector(PIP)), to_blob(np.zeros(DIM - 1)), to_blob(hashed_vector(TABS))]
    with pytest.raises(ValueError, match="blob 1 has 1020 bytes"):
        stack(blobs, DIM)


def test_cosine_and_unit() -> None:
    assert cosine([1.0, 0.0], [2.0, 0.0]) == 1.0
    assert cosine([1.0, 0.0], [-3.0, 0.0]) == -1.0
    assert cosine([1.0, 0.0], [0.0, 0.0]) == 0.0
    with pytest.raises(ValueError):
        cosine([1.0, 0.0], [1.0, 0.0, 0.0])
    assert unit([3.0, 4.0]).tolist() == [0.6000000238418579, 0.800000011920929]
    rows = unit([[3.0, 4.0], [0.0, 0.0]])
    assert rows.dtype == np.float32 and rows.tolist() == [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]


def test_load_embedder() -> None:
    assert isinstance(load_embedder(None, None), HashedEmbedder)
    model = load_embedder("http://127.0.0.1:11434/v1", "nomic-embed-text", batch_size=8)
    assert isinstance(model, ModelEmbedder) and model.space == "model:nomic-embed-text"
    model.close()
    with pytest.raises(ValueError):
        load_embedder("http://127.0.0.1:11434/v1", None)
    with pytest.raises(ValueError):
        load_embedder(None, "nomic-embed-text")
    with pytest.raises(ValueError):
        load_embedder("localhost:11434", "nomic-embed-text")


def test_the_model_embedder_reaches_its_model_through_an_injected_transport() -> None:
    import json

    import httpx

    from neverest.memory.embed import ModelEmbedder
    from neverest.memory.model import Endpoint

    asked: list[str] = []

    def model(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        texts = json.loads(request.content)["input"]
        return httpx.Response(200, json={"data": [{"index": i, "embedding": [1.0, float(i)]}
                                                  for i in range(len(texts))]})

    embedder = ModelEmbedder(Endpoint("http://model.invalid/v1", "tiny"), transport=httpx.MockTransport(model))
    vectors = embedder.embed(["a b", "c d"])
    assert asked == ["/v1/embeddings"] and vectors.shape == (2, 2) and embedder.space != "hashed-256"
