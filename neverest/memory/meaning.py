"""The held lessons' meanings, for the receive path's rule "a lesson that means what a held one says
corroborates it" (receive.py, PROTOCOL.md §9): the cosine of its sentence with a held lesson's sources is
at least the join threshold, in the hashed space.

``MeaningIndex`` answers that for every lesson received, exactly as one lookup per lesson would (one
matrix-vector product over the held lessons of its kind), but plans a whole batch at once: one matrix
product per kind scores the batch against the lessons held, and a lesson whose score is clearly under
the threshold is answered from it.

A cosine over words cannot tell two lessons written from one template apart: "rg is not installed here
(command not found); find works instead" and "python is not installed here (command not found); python3
works instead", two lessons the memory made from the public session corpus, are at cosine 0.80.  The
night keeps such error lessons apart by their subject (``phrasing.error_signature``, read from the
episodes); a received lesson is a sentence only, so here two sentences can be one lesson only when their
subjects agree (``subjects_agree``): at most one of them names something the other does not.  One that
adds a clause ("; find works instead", "on CI") still joins; two that each name their own program,
module or fix do not, and the received one becomes a candidate of its own.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from neverest.memory.embed import DIM, HASHED_SPACE, VectorRows, join_threshold, stack, to_blob, to_blobs
from neverest.memory.hashed import words
from neverest.memory.keyterms import GENERIC
from neverest.memory.queries import lessons

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    # numpy on first use: a receive of confirmations, revocations or duplicates alone never needs it.
    from neverest.lazy_numpy import numpy_for

    np = numpy_for(__name__)


def subject_words(text: str) -> frozenset[str]:
    """The words of a lesson's sentence that can say what it is about: the hashed space's words, without
    filler and the words generic to failures (``keyterms.GENERIC``), numbers and single letters (a time
    out after 1013 or 30000 milliseconds is one lesson)."""
    return frozenset(w for w in words(text) if len(w) > 1 and w not in GENERIC and not w.isdigit())


def subjects_agree(one: frozenset[str], other: frozenset[str]) -> bool:
    """Whether two sentences' ``subject_words`` allow them to be one lesson: at most one names what the other
    does not."""
    return one <= other or other <= one


class MeaningIndex:
    """The held lessons' vectors (hashed space) by kind, read once per Receiver, when a lesson first needs them.

    Looking up "the same meaning" for every received lesson against a matrix kept in
    memory, instead of reading every lesson's vector from the store each time, keeps
    receiving linear in the number of records read from the store.

    ``same_meaning`` alone is one matrix-vector product over every held lesson of the kind
    per record: a pull of distinct lessons into a large store pays that for each of them
    (207 µs a record at 10 000 lessons, docs/figures.md).  So ``plan`` scores a whole batch
    first, one matrix product per kind (the held lessons against the batch's vectors, and
    the batch against itself for the candidates it will add), and a record whose best score
    is clearly under the join threshold is answered from that; only a record at or near it
    is looked up as before, with the same product on the same rows, so the decisions (the
    lesson joined, or none) are those of the record-by-record lookup, never approximations.
    """

    # How far under the join threshold a batch score must be to answer "none" from it.  Both
    # products compute the same cosines in float32 with different summation orders; for rows
    # of norm at most 1 over 256 dimensions they differ by at most about 3e-5 (twice the
    # rounding bound 256 × 2^-24), so 1e-3 leaves a wide margin (scaled for longer rows).
    _MARGIN: Final = 1e-3
    # A kind with fewer lessons held and arriving together than this is looked up record by record: its
    # product is cheaper than the plan's bookkeeping (about 1 µs a record), the common case of memories
    # in step, where a few records arrive at once.  A large batch is planned even with few or no lessons
    # of its kind held, its lessons then compared with one another in one product: a pull into an empty
    # store looked up its first 2 000 lessons one by one, each against all those before it (10 µs a
    # lesson in a pull of 5 000).
    _PLAN_MIN_ROWS: Final = 64

    def __init__(self, db: sqlite3.Connection) -> None:
        self._rows: dict[str, VectorRows] = {}
        self._plans: dict[str, _KindPlan] = {}
        self._longest: dict[str, float] = {}  # the longest held row's norm by kind (the margin scales with it)
        self._slots: dict[int, tuple[str, int]] = {}  # the caller's key of a planned lesson -> (kind, column)
        self.lookups = 0  # matrix-vector lookups made (the plan answers the rest): what the batch saves
        self._db = db
        self._unread = True  # the held vectors, until a lesson first needs them (``_read``)
        self._subjects: dict[int, frozenset[str]] = {}  # held lessons' subject words, read as a join needs them

    def _read(self) -> None:
        """Read the held lessons' vectors, the first time a lesson needs them.  A receive of confirmations,
        revocations, refutations or duplicates only never reads them: at 20 000 lessons held they cost
        30-80 ms and a 20 MB matrix (1 KB a lesson) for the receive's duration, one record or many.
        Read inside the write transaction, they leave out what it deleted or archived before (an origin
        the storage budget evicted, a revocation earlier in the batch); a lesson archived after the read
        stays in the index until the receive ends, as when they were read at its start."""
        if not self._unread:
            return
        self._unread = False
        rows = lessons.meaning_vectors(self._db, HASHED_SPACE)
        kinds = {kind for _, kind, _ in rows}  # a handful: one pass per kind, in list comprehensions
        # One matrix per kind, decoded in a few numpy steps and taken as it is, with a quarter more rows of
        # room for the candidates the receive adds (no copy, no temporary of the same size): a Receiver is
        # made for every exchange, and a store holds thousands of lessons.
        for kind in sorted(kinds):
            mine = rows if len(kinds) == 1 else [row for row in rows if row[1] == kind]
            kind_blobs = [row[2] for row in mine]
            matrix = stack(kind_blobs, DIM, spare_rows=max(64, len(kind_blobs) // 4))
            self._rows[kind] = VectorRows(DIM, [row[0] for row in mine], matrix)
            vectors = matrix[:len(kind_blobs)]
            norms = np.sqrt(np.einsum("ij,ij->i", vectors, vectors))
            norms = norms[~np.isnan(norms)]  # as ``add`` leaves a NaN row out of the bound
            self._longest[kind] = float(norms.max()) if len(norms) else 0.0

    def held(self) -> int:
        """Lessons held, of every kind."""
        self._read()
        return sum(len(rows) for rows in self._rows.values())

    def add(self, kind: str, lesson_id: int, vector: npt.NDArray[np.float32], key: int | None = None,
            text: str | None = None) -> None:
        """A lesson held from now on; ``key``: the planned lesson it was made from (``plan``); ``text``: its
        sentence (else read from the store when a join needs it)."""
        self._read()
        if text is not None:
            self._subjects[lesson_id] = subject_words(text)
        rows = self._rows.get(kind)
        if rows is None:
            rows = self._rows[kind] = VectorRows(DIM)
        rows.add(lesson_id, vector)
        norm = float(np.sqrt(vector @ vector))
        # (A NaN row needs no bound: its NaN scores send the whole kind to the exact lookup.)
        self._longest[kind] = max(self._longest.get(kind, 0.0), norm)
        planned = self._planned(kind, key)
        if planned is not None:
            planned[0].added(planned[1])
        elif kind in self._plans:  # a row the plan did not score: its answers would miss it, so the exact lookup
            del self._plans[kind]  # decides

    def plan(self, batch: Sequence[tuple[int, str, npt.NDArray[np.float32]]]) -> None:
        """Score a batch of lessons about to be applied, as (key, kind, vector), replacing the last
        plan: ``same_meaning(..., key=key)`` is then answered from these scores when they are clearly
        under the threshold.  The lessons of the batch that become candidates must be ``add``ed with
        their key, in order, as ``same_meaning`` would see them."""
        self._plans, self._slots = {}, {}
        if not batch:
            return
        self._read()
        by_kind: dict[str, list[tuple[int, npt.NDArray[np.float32]]]] = {}
        for key, kind, vector in batch:
            by_kind.setdefault(kind, []).append((key, vector))
        for kind, items in by_kind.items():
            rows = self._rows.get(kind)
            if (len(rows) if rows is not None else 0) + len(items) < self._PLAN_MIN_ROWS:
                continue
            vectors = np.stack([v for _, v in items]).astype(np.float32, copy=False)
            held = rows.matrix if rows is not None else np.zeros((0, DIM), dtype=np.float32)
            norms = np.sqrt((vectors * vectors).sum(axis=1))
            longest = max(1.0, float(np.max(norms)) if not np.isnan(norms).any() else np.inf,
                          self._longest.get(kind, 0.0))
            self._plans[kind] = _KindPlan(_best_cosines(held, vectors), vectors, self._MARGIN * longest * longest)
            for column, (key, _) in enumerate(items):
                self._slots[key] = (kind, column)

    def _planned(self, kind: str, key: int | None) -> tuple[_KindPlan, int] | None:
        """The plan of ``kind`` and the lesson's column in it, if the last ``plan`` scored the lesson of ``key``."""
        plan = self._plans.get(kind)
        slot = self._slots.get(key) if key is not None and plan is not None else None
        return (plan, slot[1]) if plan is not None and slot is not None and slot[0] == kind else None

    def blob(self, kind: str, vector: npt.NDArray[np.float32], key: int | None = None) -> bytes:
        """``to_blob(vector)``: from its plan, which makes those of its whole batch at once, when ``key`` is in it."""
        planned = self._planned(kind, key)
        return planned[0].blob(planned[1]) if planned is not None else to_blob(vector)

    def same_meaning(self, kind: str, vector: npt.NDArray[np.float32], key: int | None = None,
                     text: str | None = None) -> int | None:
        """A held lesson of ``kind`` whose sources (or sentence) mean what ``vector`` says: the one of highest
        cosine at or above the join threshold, and, given the sentence ``text``, whose subject agrees with it
        (``subjects_agree``).  ``key``: the lesson's key in the last ``plan``, whose scores may answer for it."""
        self._read()
        rows = self._rows.get(kind)
        if rows is None or not len(rows):
            return None
        threshold = join_threshold(HASHED_SPACE)
        planned = self._planned(kind, key)
        # False for NaN (and for a margin made infinite by one): then the exact lookup decides.
        if planned is not None and planned[0].bound(planned[1]) < threshold - planned[0].margin:
            return None
        self.lookups += 1
        scores = rows.matrix @ vector
        best_row = int(scores.argmax())  # the first of the highest; a NaN row if any, whose score is not at it
        if not scores[best_row] >= threshold:
            return None
        best = int(rows.ids[best_row])
        if text is None:
            return best
        mine = subject_words(text)
        if subjects_agree(mine, self._subject_of(best)):  # the common case: one look, as without the check
            return best
        # The closest names something else: the next closest at the threshold whose subject agrees.
        above = np.flatnonzero(scores >= threshold)
        for row in above[np.argsort(-scores[above], kind="stable")].tolist()[1:]:  # highest first, ties by row
            lesson_id = int(rows.ids[row])
            if subjects_agree(mine, self._subject_of(lesson_id)):
                return lesson_id
        return None

    def _subject_of(self, lesson_id: int) -> frozenset[str]:
        found = self._subjects.get(lesson_id)
        if found is None:
            text = lessons.text_of(self._db, lesson_id)
            found = self._subjects[lesson_id] = subject_words(text) if text is not None else frozenset()
        return found


# Held rows scored at a time: the product of every held row with the batch would be a temporary of
# held × batch floats (144 MB at 18 000 lessons and a batch of 2 000); 2 048 rows keep it at 16 MB,
# and the maxima are the same numbers (each cosine is computed alike, and max is exact).
_PLAN_ROWS: Final = 2048


def _best_cosines(held: npt.NDArray[np.float32], vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Per row of ``vectors``, its largest dot product with a row of ``held`` (NaN if any is NaN)."""
    best = np.full(len(vectors), -np.inf, dtype=np.float32)
    for start in range(0, len(held), _PLAN_ROWS):
        np.maximum(best, (held[start:start + _PLAN_ROWS] @ vectors.T).max(axis=0), out=best)
    return best


class _KindPlan:
    """One kind's scores in a planned batch (``MeaningIndex.plan``)."""

    def __init__(self, held_best: npt.NDArray[np.float32], vectors: npt.NDArray[np.float32], margin: float) -> None:
        # Per planned lesson, its best cosine with the lessons held when the batch was planned.  A NaN
        # (a maximum keeps one) sends that lesson to the exact lookup.
        self.held_best = held_best
        self.vectors = vectors
        self.margin = margin
        self._earlier: npt.NDArray[np.float32] | None = None  # with the planned lessons before each
        self._last_added = -1  # the column of the last planned lesson added
        self._blobs: list[bytes] | None = None

    def bound(self, column: int) -> float:
        """At least the best cosine of the planned lesson at ``column`` with every lesson held now, or NaN
        when the plan cannot tell (a lesson at or after it was added first: the exact lookup decides).

        Once a planned lesson is held, the bound counts every planned lesson before ``column``, added or not
        (they joined a held one): a superset of what is held, so a bound under the threshold still means
        none is at it.  Exact would take a maximum over the batch at every lesson added (11 µs a lesson in
        a pull of new ones, docs/figures.md); the superset is one product per batch, and only a lesson
        whose bound reaches the margin is looked up, with the same product as before."""
        held = float(self.held_best[column])
        if self._last_added < 0:
            return held
        if self._last_added >= column:
            return math.nan
        if self._earlier is None:
            self._earlier = _best_earlier(self.vectors)
        earlier = float(self._earlier[column])
        return earlier if earlier > held or math.isnan(earlier) else held  # NaN if either is

    def added(self, column: int) -> None:
        """The planned lesson at ``column`` is held from now on."""
        self._last_added = max(self._last_added, column)

    def blob(self, column: int) -> bytes:
        """The planned lesson's vector as the store keeps it: those of every planned lesson, made the first
        time one becomes a candidate (``embed.to_blobs``, 1.2 µs a lesson against 4 for ``to_blob``)."""
        if self._blobs is None:
            self._blobs = to_blobs(self.vectors)
        return self._blobs[column]


# Planned lessons compared with those before them this many at a time: a square block's lower half is
# computed and thrown away, so smaller blocks waste less (half of the whole product is needed).
_EARLIER_BLOCK: Final = 256


def _best_earlier(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Per row of ``vectors``, its largest dot product with a row before it (-inf for the first; NaN if any is)."""
    n = len(vectors)
    best = np.full(n, -np.inf, dtype=np.float32)
    later = np.tril(np.ones((_EARLIER_BLOCK, _EARLIER_BLOCK), dtype=bool))  # row >= column: not before it
    for start in range(0, n, _EARLIER_BLOCK):
        end = min(n, start + _EARLIER_BLOCK)
        block = vectors[:end] @ vectors[start:end].T
        block[start:end][later[:end - start, :end - start]] = -np.inf
        best[start:end] = block.max(axis=0)
    return best
