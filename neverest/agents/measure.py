"""Whether the memory helps, by day: ``neverestctl measure``.

- **repeat-yourself rate**: of the day's corrections, the share whose meaning repeats an earlier
  correction (cosine with one of them at or above the join threshold of their space): the
  person having to say the same thing again.
- **repeated-error rate**: of the day's errors, the share that match a lesson the memory already
  held when the error happened (an episode that would have joined it): a mistake it knew of.
- **prediction accuracy**: of the predictions resolved that day, the share confirmed.
- the first two again for the sessions that got lessons injected against the sessions held out
  (the hooks log both), when the store has that log.

Vectors are compared only within one space; an episode stored without a vector is compared by
its hashed vector.  Days are UTC days.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, Final

import numpy as np

from neverest.clock import iso
from neverest.memory.embed import HASHED_SPACE, FloatArray, from_blob, hashed_vector, join_threshold
from neverest.memory.queries import measure as queries
from neverest.memory.service import Memory

_CHUNK: Final = 512  # rows compared at once: bounds the similarity matrix to 512 × n floats


@dataclass
class Rate:
    count: int = 0
    hits: int = 0

    @property
    def rate(self) -> float | None:
        return None if self.count == 0 else round(self.hits / self.count, 4)

    def add(self, hit: bool) -> None:
        self.count += 1
        self.hits += int(hit)


@dataclass
class Day:
    corrections: Rate
    errors: Rate
    predictions: Rate
    split: dict[str, dict[str, Rate]] | None  # "injected" / "held_out" → "corrections" / "errors"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "corrections": self.corrections.count, "repeated_corrections": self.corrections.hits,
            "repeat_rate": self.corrections.rate,
            "errors": self.errors.count, "repeated_errors": self.errors.hits,
            "repeated_error_rate": self.errors.rate,
            "predictions_resolved": self.predictions.count, "predictions_confirmed": self.predictions.hits,
            "prediction_accuracy": self.predictions.rate,
        }
        if self.split is not None:
            for group, rates in self.split.items():
                out[group] = {"corrections": rates["corrections"].count, "repeat_rate": rates["corrections"].rate,
                              "errors": rates["errors"].count, "repeated_error_rate": rates["errors"].rate}
        return out


def _new_day(split: bool) -> Day:
    groups = {g: {"corrections": Rate(), "errors": Rate()} for g in ("injected", "held_out")} if split else None
    return Day(Rate(), Rate(), Rate(), groups)


def _vectors(items: Sequence[queries.Said]) -> dict[str, tuple[list[int], FloatArray]]:
    """By space: the items' positions and their unit vectors (the hashed one when none is stored)."""
    rows: dict[str, tuple[list[int], list[FloatArray]]] = defaultdict(lambda: ([], []))
    for i, item in enumerate(items):
        if item.space is not None and item.embedding is not None:
            space, vector = item.space, from_blob(item.embedding)
        else:
            space, vector = HASHED_SPACE, hashed_vector(item.gist)
        positions, vectors = rows[space]
        if vectors and vectors[0].shape != vector.shape:
            continue  # a damaged vector of another dimension: not comparable, not counted as a repeat
        positions.append(i)
        vectors.append(vector)
    return {space: (positions, np.vstack(vectors).astype(np.float32)) for space, (positions, vectors) in rows.items()}


def repeats(items: Sequence[queries.Said]) -> list[bool]:
    """For each item (oldest first), whether it repeats the meaning of an earlier one."""
    out = [False] * len(items)
    for space, (positions, matrix) in _vectors(items).items():
        threshold = join_threshold(space)
        for start in range(0, len(positions), _CHUNK):
            block = matrix[start:start + _CHUNK] @ matrix[:start + _CHUNK].T
            for row in range(block.shape[0]):
                index = start + row
                if index and float(block[row, :index].max()) >= threshold:
                    out[positions[index]] = True
    return out


def known(items: Sequence[queries.Said], lessons: Iterable[queries.LessonVector]) -> list[bool]:
    """For each item, whether a lesson made before it happened would have taken it in."""
    out = [False] * len(items)
    by_space: dict[str, list[queries.LessonVector]] = defaultdict(list)
    for lesson in lessons:
        by_space[lesson.space].append(lesson)
    for space, (positions, matrix) in _vectors(items).items():
        held = [lesson for lesson in by_space.get(space, ()) if len(from_blob(lesson.vector)) == matrix.shape[1]]
        if not held:
            continue
        vectors = np.vstack([from_blob(lesson.vector) for lesson in held])
        created = np.array([lesson.created for lesson in held])
        threshold = join_threshold(space)
        for start in range(0, len(positions), _CHUNK):
            scores = matrix[start:start + _CHUNK] @ vectors.T
            for row in range(scores.shape[0]):
                item = items[positions[start + row]]
                before = created < item.at
                if before.any() and float(scores[row][before].max()) >= threshold:
                    out[positions[start + row]] = True
    return out


def measure(memory: Memory, *, days: int, until: date | None = None) -> dict[str, Any]:
    """The rates of the ``days`` UTC days ending with ``until`` (default: today), and their total.

    The days start no earlier than the first day the memory holds something to measure (a
    correction, an error or a resolved prediction): a young memory asked for 500 days has no
    500 days to show.  At least the last day is always there."""
    last = until or memory.clock.now().date()
    first = last - timedelta(days=days - 1)
    since = iso(datetime(first.year, first.month, first.day, tzinfo=memory.clock.now().tzinfo))
    db = memory.store.db
    with memory.store.read():
        corrections = queries.episodes_of(db, "correction")
        errors = queries.episodes_of(db, "error")
        lessons = queries.lesson_vectors(db)
        resolved = queries.resolved_predictions(db, since)
        split = queries.injection_sessions(db)
    held_from = min([items[0].at[:10] for items in (corrections, errors) if items] + [at[:10] for at, _ in resolved],
                    default=None)
    if held_from is not None:
        first = max(first, min(date.fromisoformat(held_from), last))
    else:
        first = last
    days = (last - first).days + 1
    by_day = {first + timedelta(days=i): _new_day(split is not None) for i in range(days)}
    total = _new_day(split is not None)

    def count(items: Sequence[queries.Said], hits: list[bool], name: str) -> None:
        for item, hit in zip(items, hits, strict=True):
            day = by_day.get(date.fromisoformat(item.at[:10]))
            if day is None:
                continue
            for target in (day, total):
                getattr(target, name).add(hit)
                if split is not None and target.split is not None:
                    group = "injected" if item.session in split[0] else "held_out" if item.session in split[1] \
                        else None
                    if group:
                        target.split[group][name].add(hit)

    count(corrections, repeats(corrections), "corrections")
    count(errors, known(errors, lessons), "errors")
    for at, outcome in resolved:
        day = by_day.get(date.fromisoformat(at[:10]))
        if day is not None:
            day.predictions.add(outcome == "confirmed")
            total.predictions.add(outcome == "confirmed")
    return {
        "days": [{"day": d.isoformat()} | v.to_json() for d, v in sorted(by_day.items())],
        "total": {"from": first.isoformat(), "to": last.isoformat()} | total.to_json(),
        "split": "available" if split is not None else
        "unavailable: the hooks have seen no session yet (`neverestctl setup` wires them)",
    }


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def last_day_summary(memory: Memory) -> str:
    """One markdown line for the morning report: the last full UTC day's rates."""
    yesterday = memory.clock.now().date() - timedelta(days=1)
    day = measure(memory, days=1, until=yesterday)["days"][0]
    line = (f"- measure, {day['day']}: repeat-yourself {_pct(day['repeat_rate'])} of {day['corrections']} "
            f"correction(s); repeated errors {_pct(day['repeated_error_rate'])} of {day['errors']}; "
            f"predictions {_pct(day['prediction_accuracy'])} of {day['predictions_resolved']} confirmed")
    if "injected" in day:
        line += (f"; injected sessions: repeats {_pct(day['injected']['repeat_rate'])}, errors "
                 f"{_pct(day['injected']['repeated_error_rate'])}; held out: repeats "
                 f"{_pct(day['held_out']['repeat_rate'])}, errors {_pct(day['held_out']['repeated_error_rate'])}")
    return line
