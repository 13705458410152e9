"""memory/hashed.py: the hashed space without numpy gives embed.py's vectors and numpy's cosines to the last bit."""

from __future__ import annotations

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
