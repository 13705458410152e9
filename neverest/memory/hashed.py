"""The hashed space without numpy: a text's features, a query's sparse vector, and cosines with stored rows.

``embed.py`` computes hashed vectors for many texts at once with numpy; recall needs one query's vector
and its cosine with every stored row, which the standard library does quicker than numpy is imported
(60-110 ms) for the tens of thousands of rows a memory holds.  Both give the same numbers to the last bit, by
construction, and tests hold them to it:

- a vector's entries are sums of ±1 (a word) and ±0.5 (a bigram), exact in float64 in any order; the
  norm is the square root of a sum of exact quarter-integers, so exact before one correctly rounded
  ``sqrt``; each entry is divided by it (one correctly rounded division) and rounded to float32, as
  ``embed.unit`` does;
- a cosine is the float64 sum, in ascending order of dimension, of the products of the query's and the
  row's float32 entries (a product of two float32 is exact in float64).  numpy's path (``cosines``
  when numpy is already loaded, as in the daemon, or the rows are many) adds the same products in the
  same order, one dimension of the query at a time, so its sums are the same floats.

The words and feature slots are defined here and used by ``embed.py``, so the two cannot drift apart.
"""

from __future__ import annotations

import math
import re
import struct
import sys
from array import array
from collections.abc import Sequence
from itertools import pairwise
from typing import Final

from neverest.hashes import blake2b
from neverest.memory.space import DIM

# A bigram counts half a word: enough that word order counts ("cache hides error" and "error
# hides cache" are at cosine 0.86, not 1), not so much that one shared phrase outweighs the words.
# Every weight is a multiple of 1/2, so every sum below is exact in float64 and a vector is
# bit-identical whatever order numpy or the CPU adds in.
BIGRAM_WEIGHT: Final = 0.5
# The hashed space's name pins this function: a change to tokens, weights or hashing must
# come with a new HASHED_SPACE, or old and new vectors would be compared as if alike.
_HASH_PERSON: Final = b"neverest-h256"
_SLOT_CACHE_SIZE: Final = 65536
_HASHER: Final = blake2b(digest_size=8, person=_HASH_PERSON)  # copied for each feature (``slot``)
# Words: runs of letters, digits, _, ' and - that begin and end with a letter, digit or _, so
# that "--no-build-isolation" and "no-build-isolation" are one word, "don't" is one, and a
# lone dash or quote is none.
_WORD: Final = re.compile(r"\w(?:[\w'-]*\w)?")
# Typographic apostrophes and hyphens (a person's macOS keyboard) read as the ASCII ones.
_FOLD: Final = str.maketrans({"\u2018": "'", "\u2019": "'", "\u02bc": "'", "\u2010": "-"})
_ENTRY: Final = struct.Struct("<Bf")  # a stored sparse entry (embed.to_blob): uint8 dimension, float32 value
_FLOAT32: Final = struct.Struct("<f")
# Above this many rows numpy's loop is quicker than this module's even counting numpy's import (measured:
# 1.5 µs a row here, 0.35 µs with numpy, whose import takes 60-110 ms).
NUMPY_ABOVE_ROWS: Final = 50_000

Entries = Sequence[tuple[int, float]]  # a sparse vector: (dimension, value), ascending dimensions


def words(text: str) -> list[str]:
    """The words the hashed space sees in ``text``, folded as it folds them."""
    if text.isascii():  # the common case, where the three steps below are just lower()
        return _WORD.findall(text.lower())
    # NFKC makes the composed and decomposed forms of a letter one (macOS writes file names
    # decomposed); casefold is the Unicode way to ignore case ("Straße" = "STRASSE").  Imported here:
    # the hook, which runs before every tool call, rarely meets a text that is not ASCII.
    import unicodedata

    return _WORD.findall(unicodedata.normalize("NFKC", text).translate(_FOLD).casefold())


def slot(feature: str) -> tuple[int, float]:
    """The dimension and sign of a feature.

    BLAKE2b, never Python's ``hash()``, which is salted per process.  The sign comes from
    another bit of the digest: colliding features then cancel as often as they add, so
    collisions add noise around zero instead of a bias towards similarity.
    """
    hasher = _HASHER.copy()  # a copy of one made with the personalisation: 0.26 µs, a new one 0.72
    hasher.update(feature.encode("utf-8"))
    value = int.from_bytes(hasher.digest(), "little")
    return value % DIM, (1.0 if (value >> 8) & 1 else -1.0)


# Features met before, with their weighted slot: a word's (index, ±1), a bigram's (index, ±0.5) (a bigram
# holds a space, a word never does).  A dict emptied when full, not an LRU: most features of a pull of
# sentences never met are new, and an ``lru_cache`` miss that evicts cost 0.6 µs on top of the 0.8 µs of
# hashing (1.4 µs a bigram, 17 features a sentence); a look-up that hits costs the same either way.
_SLOTS: dict[str, tuple[int, float]] = {}


def _weighted(feature: str, weight: float) -> tuple[int, float]:
    if len(_SLOTS) >= _SLOT_CACHE_SIZE:
        _SLOTS.clear()
    index, sign = slot(feature)
    found = _SLOTS[feature] = (index, weight * sign)
    return found


def features(text: str) -> list[tuple[int, float]]:
    """The text's features as (dimension, weight): each word, then each adjacent pair at half weight."""
    tokens = words(text)
    known = _SLOTS.get
    found = [known(word) or _weighted(word, 1.0) for word in tokens]
    for first, second in pairwise(tokens):
        bigram = f"{first} {second}"  # words hold no space, so a bigram feature never equals a word feature
        found.append(known(bigram) or _weighted(bigram, BIGRAM_WEIGHT))
    return found


def entries(text: str) -> list[tuple[int, float]]:
    """The text's hashed vector as its non-zero entries, ascending: the values ``embed.hashed_vector``
    holds there (float32, as Python floats); empty for a text without words."""
    counts: dict[int, float] = {}
    for index, weight in features(text):
        counts[index] = counts.get(index, 0.0) + weight
    norm = math.sqrt(math.fsum(v * v for v in counts.values()))  # exact either way: quarter-integers
    if norm == 0.0:
        return []
    return sorted((i, _FLOAT32.unpack(_FLOAT32.pack(v / norm))[0]) for i, v in counts.items() if v != 0.0)


def row_entries(blob: bytes) -> Entries:
    """A stored row's non-zero entries, ascending (``embed.to_blob``: sparse, or dense float32)."""
    if len(blob) % 4 == 0:
        if len(blob) != 4 * DIM:
            raise ValueError(f"a blob has {len(blob)} bytes, not {4 * DIM} ({DIM} float32 numbers)")
        values = array("f")
        values.frombytes(blob)
        if sys.byteorder != "little":  # pragma: no cover - stored little-endian
            values.byteswap()
        return [(i, v) for i, v in enumerate(values) if v != 0.0]
    if len(blob) % 5:
        raise ValueError("a sparse blob is not a whole number of entries")
    # Ascending as written, the last entry possibly twice (embed.to_blob); a dict keeps one of each.
    found = dict(_ENTRY.iter_unpack(blob))  # a uint8 dimension: never beyond the 256
    return sorted((i, v) for i, v in found.items() if v != 0.0)  # a zero vector is stored as one 0.0 entry


def _cosines_here(blobs: Sequence[bytes], query: Entries) -> list[float]:
    # The query's weight in every dimension, 0.0 outside it: adding a zero product leaves a sum as it
    # is, so the products that count are added in ascending order, as _cosines_numpy adds them.
    weights = [0.0] * DIM
    for index, weight in query:
        weights[index] = weight
    out: list[float] = []
    for blob in blobs:
        total = 0.0
        if len(blob) % 4 and not len(blob) % 5:  # sparse: ascending dimensions
            # The last entry may be written twice (embed.to_blob; dimensions otherwise never repeat): once counts.
            view = memoryview(blob)[:-5] if blob[-5:] == blob[-10:-5] else blob
            for index, value in _ENTRY.iter_unpack(view):
                total += value * weights[index]
        else:
            for index, value in row_entries(blob):  # dense, or refused as no stored vector
                total += value * weights[index]
        out.append(total)
    return out


def _cosines_numpy(blobs: Sequence[bytes], query: Entries) -> list[float]:
    import numpy as np

    from neverest.memory.embed import stack

    rows = stack(blobs, DIM)
    total = np.zeros(len(blobs), dtype=np.float64)
    for index, weight in query:  # ascending: the same sums, in the same order, as _cosines_here
        total += rows[:, index].astype(np.float64) * weight
    result: list[float] = total.tolist()
    return result


def cosines(blobs: Sequence[bytes], query: Entries) -> list[float]:
    """The cosine of the unit ``query`` (``entries``) with each stored hashed row, the same floats
    whichever way they are computed: with numpy when it is loaded already or the rows are many."""
    if "numpy" in sys.modules or len(blobs) > NUMPY_ABOVE_ROWS:
        return _cosines_numpy(blobs, query)
    return _cosines_here(blobs, query)
