"""memory/hashed.py: the hashed space without numpy gives embed.py's vectors and numpy's cosines to the last bit."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neverest.memory import hashed
from neverest.memory.embed import hashed_vector, to_blob, unit

WORDS = st.sampled_from(["pip", "install", "fails", "npm", "ci", "cache", "error", "don't", "Straße", "x_y", "42",
                         "--no-build-isolation", "ＦＵＬＬ", "timeout", "retry", "the", "a"])
TEXTS = st.one_of(st.text(max_size=80), st.lists(WORDS, max_size=40).map(" ".join))


@given(TEXTS)
def test_a_texts_entries_are_its_hashed_vector(text: str) -> None:
    vector = hashed_vector(text)
    assert hashed.entries(text) == [(int(i), float(vector[i])) for i in np.flatnonzero(vector)]


def _dense_row(seed: int) -> bytes:
    """A hashed-space row stored dense (more non-zero entries than a sparse blob is smaller for)."""
    row = unit(np.random.default_rng(seed).normal(size=hashed.DIM))
    blob = to_blob(row)
    assert len(blob) == 4 * hashed.DIM
    return blob


@settings(max_examples=200)
@given(TEXTS, st.lists(TEXTS, max_size=30), st.integers(0, 3))
def test_the_cosines_are_numpys_to_the_last_bit(query: str, rows: list[str], dense: int) -> None:
    blobs = [to_blob(hashed_vector(text)) for text in rows] + [_dense_row(seed) for seed in range(dense)]
    entries = hashed.entries(query)
    here = hashed._cosines_here(blobs, entries)
    assert here == hashed._cosines_numpy(blobs, entries)
    # And they are the cosines: what a float32 product gives, but for its rounding.
    product = (np.vstack([np.zeros((0, hashed.DIM), np.float32)] + [hashed_vector(t) for t in rows])
               @ hashed_vector(query)).tolist()
    assert all(abs(a - b) < 1e-6 for a, b in zip(here, product, strict=False))


def test_a_row_that_is_no_stored_vector_is_refused() -> None:
    for blob, message in ((b"\0" * 8, "256 float32 numbers"), (b"\0" * 6, "whole number of entries")):
        for cosines in (hashed._cosines_here, hashed._cosines_numpy):
            with pytest.raises(ValueError, match=message):
                cosines([blob], hashed.entries("pip install"))


def test_the_features_met_before_are_remembered_and_forgotten_without_changing_a_vector(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``features`` keeps the slots it hashed (a word's at weight 1, a bigram's at 0.5) and empties that
    store when full: the features are those BLAKE2b gives, whatever the store held before."""
    texts = ["pip install fails on the runner", "install pip", "fails fails fails", "npm ci cache error again"]

    def fresh(text: str) -> list[tuple[int, float]]:
        tokens = hashed.words(text)
        found = [hashed.slot(word) for word in tokens]
        return found + [(i, 0.5 * s) for i, s in map(hashed.slot, map(" ".join, pairwise(tokens)))]

    # The slot of one feature, computed without the copied hasher: BLAKE2b-64 personalised, little-endian.
    from hashlib import blake2b
    value = int.from_bytes(blake2b(b"pip install", digest_size=8, person=b"neverest-h256").digest(), "little")
    assert hashed.slot("pip install") == (value % hashed.DIM, 1.0 if (value >> 8) & 1 else -1.0)
    monkeypatch.setattr(hashed, "_SLOT_CACHE_SIZE", 3)
    hashed._SLOTS.clear()
    for _ in range(2):  # the second time round, some features are remembered and the store fills up again
        for text in texts:
            assert hashed.features(text) == fresh(text)
            assert len(hashed._SLOTS) <= 3
    hashed._SLOTS.clear()
