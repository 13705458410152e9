"""The held lessons' meanings, for the receive path's rule "a lesson that means what a held one says
corroborates it" (receive.py, PROTOCOL.md §9): the cosine of its sentence with a held lesson's sources is
at least the join threshold, in the hashed space.

``MeaningIndex`` answers that for every lesson received.  The rule (``same_meaning``): of the held lessons
of its kind whose subject agrees with it and whose cosine reaches the threshold, the closest; none if none.
Two ways keep it from costing a matrix-vector product over every held lesson per record: the lessons added
during the receive are indexed by their subject words, so only those whose subject can agree are compared (a
pull into an empty store compares each new lesson with the few that share a word, not with every lesson
before it), and so are the lessons read from the store once a receive has compared many lessons; until then
a batch is planned against those (one matrix product per kind; a lesson whose score is clearly under the
threshold is answered from it).

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
import sys
from collections.abc import Callable, Sequence
from itertools import combinations
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


Subjects = frozenset[str]


def subject_words(text: str) -> Subjects:
    """The words of a lesson's sentence that can say what it is about: the hashed space's words, without
    filler and the words generic to failures (``keyterms.GENERIC``), numbers and single letters (a time
    out after 1013 or 30000 milliseconds is one lesson)."""
    return frozenset(w for w in words(text) if len(w) > 1 and w not in GENERIC and not w.isdigit())


def subjects_agree(one: Subjects, other: Subjects) -> bool:
    """Whether two sentences' ``subject_words`` allow them to be one lesson: at most one names what the other
    does not."""
    return one <= other or other <= one


class MeaningIndex:
    """The held lessons' vectors (hashed space) by kind, read once per Receiver, when a lesson first needs them,
    and the lessons added since, with their subject words.

    Looking up "the same meaning" for every received lesson against matrices kept in memory, instead of
    reading every lesson's vector from the store each time, keeps receiving linear in the records read.

    Compared one by one, every received lesson would cost a matrix-vector product over every held lesson
    of its kind: a pull of distinct lessons into a large store paid that for each (207 µs a record at
    10 000 lessons, docs/figures.md).  The lessons added during the receive (a pull into an empty store adds
    thousands) are indexed by their subject words: a lesson can join only one whose subject agrees with its
    own, and such a subject shares a word with it, holds no word at all, or holds only words of it, which the
    index finds without a product over the rest.  The lessons read from the store join that index once
    ``_INDEX_READ_AT`` lessons of their kind were planned; before, ``plan`` scores each batch against them in
    one matrix product per kind, and a record whose best score is clearly under the threshold is answered
    from that; only one at or near it is compared as before (a receive of a few records, the common case of
    memories in step, reads no sentence).  Either way the decision is the rule's (``same_meaning``), never an
    approximation of it.
    """

    # How far under the join threshold a batch score must be to answer "none" from it.  Both
    # products compute the same cosines in float32 with different summation orders; for rows
    # of norm at most 1 over 256 dimensions they differ by at most about 3e-5 (twice the
    # rounding bound 256 × 2^-24), so 1e-3 leaves a wide margin (scaled for longer rows).
    _MARGIN: Final = 1e-3
    # A kind with fewer lessons read and arriving together than this is compared record by record: its
    # product is cheaper than the plan's bookkeeping (about 1 µs a record), the common case of memories
    # in step, where a few records arrive at once.
    _PLAN_MIN_ROWS: Final = 64

    def __init__(self, db: sqlite3.Connection) -> None:
        self._kinds: dict[str, _Held] = {}
        self._plans: dict[str, _KindPlan] = {}
        self._slots: dict[int, tuple[str, int]] = {}  # the caller's key of a planned lesson -> (kind, column)
        self.lookups = 0  # matrix-vector products made (what the plan and the subject index save)
        self._db = db
        self._unread = True  # the held vectors, until a lesson first needs them (``_read``)
        self._read_subjects: dict[int, Subjects] = {}  # the lessons read: their subjects, as a join needs them

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
            vectors = matrix[:len(kind_blobs)]
            norms = np.sqrt(np.einsum("ij,ij->i", vectors, vectors))
            norms = norms[~np.isnan(norms)]  # a NaN row's NaN scores send its batch to the exact lookup anyway
            self._kinds[kind] = _Held(VectorRows(DIM, [row[0] for row in mine], matrix),
                                      float(norms.max()) if len(norms) else 0.0)

    def held(self) -> int:
        """Lessons held, of every kind."""
        self._read()
        return sum(len(held.rows) for held in self._kinds.values())

    def current(self) -> bool:
        """Whether the index holds exactly the lessons a new one would read from the store now, so that the
        next receive may go on with it (``gossip.view``; nothing may write between them).  A receive only adds
        lessons (each one to the index too) or archives and deletes them (left in the index): the same count
        means the same lessons.  Unread, it reads them when needed, as a new one would."""
        return self._unread or self.held() == lessons.meaning_count(self._db, HASHED_SPACE)

    def add(self, kind: str, lesson_id: int, vector: npt.NDArray[np.float32], subjects: Subjects) -> None:
        """A lesson held from now on, with its sentence's ``subject_words``."""
        self._read()
        held = self._kinds.get(kind)
        if held is None:
            held = self._kinds[kind] = _Held(VectorRows(DIM), 0.0)
        held.add(lesson_id, vector, subjects)

    def plan(self, batch: Sequence[tuple[int, str, npt.NDArray[np.float32]]]) -> None:
        """Score a batch of lessons about to be applied, as (key, kind, vector), against the lessons read,
        replacing the last plan: ``same_meaning(..., key=key)`` then compares a lesson with the lessons read
        only when its score is not clearly under the threshold.  Once ``_INDEX_READ_AT`` lessons of a kind were
        planned, the lessons of that kind read join the subject index instead, and are no longer scored here."""
        self._plans, self._slots = {}, {}
        if not batch:
            return
        self._read()
        by_kind: dict[str, list[tuple[int, npt.NDArray[np.float32]]]] = {}
        for key, kind, vector in batch:
            by_kind.setdefault(kind, []).append((key, vector))
        for kind, items in by_kind.items():
            held = self._kinds.get(kind)
            if held is not None and held.first:
                held.planned += len(items)
                if held.planned >= _INDEX_READ_AT:
                    # Many lessons compared: the lessons read join the subject index (their sentences read and
                    # indexed once, 10 µs a lesson) instead of each being scored against every one of them.
                    held.index_first(self._subjects_read(kind, held.rows.ids[:held.first]))
            read = held.first if held is not None else 0
            vectors = np.stack([v for _, v in items]).astype(np.float32, copy=False)
            read_best, margin = None, 0.0
            if held is not None and read and read + len(items) >= self._PLAN_MIN_ROWS:
                norms = np.sqrt((vectors * vectors).sum(axis=1))
                longest = max(1.0, float(np.max(norms)) if not np.isnan(norms).any() else np.inf, held.read_longest)
                read_best = _best_cosines(held.rows.matrix[:read], vectors)
                margin = self._MARGIN * longest * longest
            self._plans[kind] = _KindPlan(vectors, read_best, margin)
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

    def same_meaning(self, kind: str, vector: npt.NDArray[np.float32], subjects: Subjects,
                     key: int | None = None) -> int | None:
        """The held lesson of ``kind`` that the lesson of ``vector`` and ``subjects`` (its sentence's
        ``subject_words``) means: of those whose subject agrees with it (``subjects_agree``) and whose cosine
        reaches the join threshold, the highest, the first held on a tie; None if none.  ``key``: the
        lesson's key in the last ``plan``, whose scores may answer for the lessons read."""
        self._read()
        held = self._kinds.get(kind)
        if held is None or not len(held.rows):
            return None
        threshold = join_threshold(HASHED_SPACE)
        best: tuple[float, int] | None = None  # (cosine, row)
        if held.first:
            planned = self._planned(kind, key)
            if planned is None or not planned[0].clear(planned[1], threshold):
                self.lookups += 1
                best = _closest(held.rows.matrix[:held.first] @ vector, 0, threshold,
                                lambda row: subjects_agree(subjects, self._subject_of(int(held.rows.ids[row]))))
        if len(held.rows) > held.first:
            rows = held.agreeing(subjects)
            if rows is None:  # a word most of them hold: one product, then the subjects of those at the threshold
                self.lookups += 1
                found = _closest(held.rows.matrix[held.first:] @ vector, held.first, threshold,
                                 lambda row: subjects_agree(subjects, frozenset(held.subjects[row - held.first])))
            else:
                found = _closest_of(held.rows.matrix, rows, vector, threshold) if rows else None
            if found is not None and (best is None or found[0] > best[0]):  # rows read come first: a tie is theirs
                best = found
        return None if best is None else int(held.rows.ids[best[1]])

    def _subjects_read(self, kind: str, ids: Sequence[int]) -> list[Subjects]:
        """The subjects of lessons read, of ``kind``, taken out of ``_read_subjects`` (they are indexed now):
        the sentences not met yet in one query, not one a lesson."""
        known = self._read_subjects
        texts = {} if all(i in known for i in ids) else lessons.texts_of_kind(self._db, kind, HASHED_SPACE)
        out: list[Subjects] = []
        for lesson_id in ids:
            found = known.pop(lesson_id, None)
            if found is None:  # (one archived since the read is not among ``texts``: read alone)
                found = self._subject_of_text(texts.get(lesson_id) or lessons.text_of(self._db, int(lesson_id)))
            out.append(found)
        return out

    def _subject_of(self, lesson_id: int) -> Subjects:
        found = self._read_subjects.get(lesson_id)
        if found is None:
            found = self._read_subjects[lesson_id] = self._subject_of_text(lessons.text_of(self._db, lesson_id))
        return found

    @staticmethod
    def _subject_of_text(text: str | None) -> Subjects:
        return subject_words(text) if text is not None else frozenset()


def _closest(scores: npt.NDArray[np.float32], first: int, threshold: float,
             agrees: Callable[[int], bool]) -> tuple[float, int] | None:
    """The (score, row) of the highest score at ``threshold`` or above whose row ``agrees``, the first row on a
    tie; ``scores[k]`` is row ``first + k``'s.  A NaN score is never at the threshold."""
    above = np.flatnonzero(scores >= threshold)
    if not len(above):
        return None
    # Highest first, ties by row; the closest agrees in the common case, one look.
    for k in above[np.argsort(-scores[above], kind="stable")].tolist():
        if agrees(first + k):
            return float(scores[k]), first + k
    return None


def _closest_of(matrix: npt.NDArray[np.float32], rows: list[int], vector: npt.NDArray[np.float32],
                threshold: float) -> tuple[float, int] | None:
    """As ``_closest`` for ``rows`` (ascending) of ``matrix`` that all agree.  (A product of the few rows an
    index finds costs more in numpy's calls than in arithmetic: one row is one dot product, and the maximum
    is taken without a masked copy unless a NaN row is among them.)"""
    if len(rows) == 1:
        score = float(matrix[rows[0]] @ vector)
        return (score, rows[0]) if score >= threshold else None
    scores = matrix.take(rows, axis=0) @ vector
    best = int(scores.argmax())  # the first of the highest; the first NaN if any (a row a lying worker sent)
    if math.isnan(scores[best]):
        scores[np.isnan(scores)] = -np.inf
        best = int(scores.argmax())
    return (float(scores[best]), rows[best]) if scores[best] >= threshold else None


# The rows that agree are compared one by one only while they are at most this share of the lessons added (and
# more than a few): a sentence naming only "python", in a memory of Python projects, agrees with most of them,
# and then one product over all of them is quicker.  A sentence of more subject words than ``_PAIRED_WORDS``
# is compared with every lesson added too: the index looks up each pair of its words.
_INDEXED_SHARE: Final = 0.25
_INDEXED_ALWAYS: Final = 64
_PAIRED_WORDS: Final = 24
_ANSWERS_KEPT: Final = 4096  # ``_Held._answers`` at most (a pull that only joins asks many, and adds nothing)
_UNANSWERED: Final = object()
# Once this many lessons of a kind were planned, the lessons of that kind read from the store join the subject
# index (``MeaningIndex.plan``).  Indexing a lesson read costs 10 µs (its sentence read, its subject words and the
# index's lists: 200 ms at 20 000); scoring one lesson against it, 256 multiply-adds (6 ns): the index pays for
# itself after about 1 700 lessons, and a receive that has planned 1 000 is most likely a pull with more to come.
_INDEX_READ_AT: Final = 1000


def _sorted_words(subjects: Subjects) -> tuple[str, ...]:
    """A subject as the index keeps it: its words sorted, each string held once (``sys.intern``)."""
    return tuple(sorted(map(sys.intern, subjects)))


class _Held:
    """One kind's held lessons: their vectors, the first ``first`` of them read from the store (their subjects
    read when a join needs them), and for the rows indexed, their subject words."""

    def __init__(self, rows: VectorRows, read_longest: float) -> None:
        self.rows = rows
        # The rows before ``first`` (those read) are compared by a product, their subjects read as a join needs
        # them; those from it on, by the subject index.  ``index_first`` brings the first ones into the index.
        self.first = len(rows)
        self.planned = 0  # lessons of the kind planned while rows were compared by a product
        self.read_longest = read_longest  # the longest row read (the plan's margin scales with it)
        # Of row first + k, for each row indexed: its subject words, sorted, each string held once (``sys.intern``).
        # Tuples and lists, not sets: at 20 000 lessons added the index took 37 MB with sets, 10 now
        # (beside 23 MB of vectors).
        self.subjects: list[tuple[str, ...]] = []
        self._words: dict[str, list[int]] = {}  # subject word -> the rows indexed whose subject holds it, ascending
        self._single: dict[str, list[int]] = {}  # word -> the rows indexed whose subject is that word alone
        self._pairs: dict[tuple[str, str], list[int]] = {}  # the first two words of a subject (sorted) -> rows
        self._bare: list[int] = []  # rows indexed without a subject word: they agree with every sentence
        # ``agreeing``'s answers since a row was last added, by subject: lessons of one meaning from many
        # origins (numbers aside) ask the same question until one of them becomes a candidate.
        self._answers: dict[Subjects, list[int] | None] = {}

    def add(self, lesson_id: int, vector: npt.NDArray[np.float32], subjects: Subjects) -> None:
        row = len(self.rows)
        self.rows.add(lesson_id, vector)
        if self._answers:
            self._answers.clear()
        self._index(row, _sorted_words(subjects))

    def index_first(self, subjects: Sequence[Subjects]) -> None:
        """Bring the rows before ``first`` into the subject index, given their ``subjects`` in order: every row
        is then compared through it.  The index is made again in row order, as if each row had been added."""
        if len(subjects) != self.first:
            raise ValueError(f"{len(subjects)} subjects for {self.first} rows")
        indexed = self.subjects
        self.first, self.subjects = 0, []
        self._words, self._single, self._pairs, self._bare, self._answers = {}, {}, {}, [], {}
        for row, sorted_words in enumerate([*map(_sorted_words, subjects), *indexed]):
            self._index(row, sorted_words)

    def _index(self, row: int, words: tuple[str, ...]) -> None:
        self.subjects.append(words)
        if not words:
            self._bare.append(row)
            return
        for word in words:
            self._words.setdefault(word, []).append(row)
        if len(words) == 1:
            self._single.setdefault(words[0], []).append(row)
        else:
            self._pairs.setdefault((words[0], words[1]), []).append(row)

    def agreeing(self, subjects: Subjects) -> list[int] | None:
        """The rows indexed whose subject agrees with ``subjects``, ascending; None when the rows to compare are
        too many for the index (every row agrees with a sentence without subject words).

        A subject agrees when it holds every word of ``subjects`` (the rows in each of their words' lists),
        when it holds only words of them (then its one word, or its first two, are among them), or when it
        holds none (``_bare``).  Dict look-ups and one set intersection: 7.5 µs a lesson in a pull of 20 000
        new ones."""
        if not subjects or len(subjects) > _PAIRED_WORDS:
            return None
        answer = self._answers.get(subjects, _UNANSWERED)
        if answer is _UNANSWERED:
            if len(self._answers) >= _ANSWERS_KEPT:
                self._answers.clear()
            answer = self._answers[subjects] = self._agreeing(subjects)
        return answer  # type: ignore[return-value]  # (not _UNANSWERED here)

    def _agreeing(self, subjects: Subjects) -> list[int] | None:
        found: list[int] = []
        holding: list[list[int]] = []
        for word in subjects:
            rows = self._words.get(word)
            if rows is None:  # a word no lesson added holds: none holds all of them
                break
            holding.append(rows)
        else:
            holding.sort(key=len)
            if len(holding) == 1:
                found += holding[0]
            else:
                common = set(holding[0]).intersection(holding[1])
                for rows in holding[2:]:
                    if not common:
                        break
                    common.intersection_update(rows)
                found += common
        # The look-ups in C (map, filter, combinations): a Python loop over a sentence's pairs cost 4 µs.
        for rows_of_one in filter(None, map(self._single.get, subjects)):
            found += rows_of_one
        if self._pairs:
            mine, first = self.subjects, self.first
            for paired in filter(None, map(self._pairs.get, combinations(sorted(subjects), 2))):
                found += [row for row in paired if subjects.issuperset(mine[row - first])]
        found += self._bare
        if not found:
            return found
        agreeing = sorted(set(found))
        return agreeing if len(agreeing) <= max(_INDEXED_ALWAYS, len(self.subjects) * _INDEXED_SHARE) else None


# Rows read scored at a time: the product of every row with the batch would be a temporary of
# rows × batch floats (144 MB at 18 000 lessons and a batch of 2 000); 2 048 rows keep it at 16 MB,
# and the maxima are the same numbers (each cosine is computed alike, and max is exact).
_PLAN_ROWS: Final = 2048


def _best_cosines(held: npt.NDArray[np.float32], vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Per row of ``vectors``, its largest dot product with a row of ``held`` (NaN if any is NaN)."""
    best = np.full(len(vectors), -np.inf, dtype=np.float32)
    for start in range(0, len(held), _PLAN_ROWS):
        np.maximum(best, (held[start:start + _PLAN_ROWS] @ vectors.T).max(axis=0), out=best)
    return best


class _KindPlan:
    """One kind's lessons in a planned batch (``MeaningIndex.plan``)."""

    def __init__(self, vectors: npt.NDArray[np.float32], read_best: npt.NDArray[np.float32] | None,
                 margin: float) -> None:
        self.vectors = vectors
        # Per planned lesson, its best cosine with the lessons read (NaN if any was NaN), when scored.
        self.read_best = read_best
        self.margin = margin
        self._blobs: list[bytes] | None = None

    def clear(self, column: int, threshold: float) -> bool:
        """Whether the planned lesson at ``column`` is clearly under ``threshold`` with every lesson read
        (False for NaN: then the exact lookup decides)."""
        return self.read_best is not None and float(self.read_best[column]) < threshold - self.margin

    def blob(self, column: int) -> bytes:
        """The planned lesson's vector as the store keeps it: those of every planned lesson, made the first
        time one becomes a candidate (``embed.to_blobs``, 1.2 µs a lesson against 4 for ``to_blob``)."""
        if self._blobs is None:
            self._blobs = to_blobs(self.vectors)
        return self._blobs[column]
