"""What one record costs to receive into a memory that holds many lessons already.

Gossip brings a few records at a time once memories are in step, and a store grows to thousands of
lessons. A lesson no one here has met is compared with every lesson held (the same-meaning rule,
PROTOCOL.md §9), so its receive reads every held lesson's vector; a confirmation has nothing to
compare. This prints, for a store of ``--lessons`` lessons (each its own meaning), the wall time and
the peak of memory allocated (tracemalloc) of:

- a receive of one new lesson, verified in this process (each receive a fresh ``Receiver``, as an
  exchange makes one);
- a receive of one confirmation: the baseline, everything but the comparison;

and their ratio. ``--before DIR`` runs it alternately with the ``neverest`` in DIR, in fresh processes.

    python benchmarks/bench_receive_one.py [--lessons 20000] [--repeats 5] [--before DIR [--rounds 3]] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nacl.signing
from alternate import alternate, medians  # the same folder: on sys.path when this script runs
from bench_gossip import distinct_texts

from neverest.config import Config
from neverest.memory.embed import HASHED_SPACE, HashedEmbedder, to_blob
from neverest.memory.queries import lessons
from neverest.memory.receive import receive
from neverest.memory.store import Store, open_store
from neverest.records import lesson_hash, sign_confirm, sign_lesson

NOW = datetime(2026, 4, 2, tzinfo=UTC)
AT = "2026-04-01T12:00:00.000000Z"


def fill(store: Store, texts: list[str]) -> None:
    """Lessons received from another memory earlier, each with its sentence's vector, as receive stores them."""
    vectors = HashedEmbedder().embed(texts)
    with store.write() as db:
        for text, vector in zip(texts, vectors, strict=True):
            lessons.create(db, lessons.NewLesson(
                hash=lesson_hash("error", text), kind="error", text=text, cwd="", strength=0.5, seen=1,
                created=AT, origin="a" * 16, layer="common", space=HASHED_SPACE, embedding=to_blob(vector),
                centroid=None, origins=["a" * 16]))


def one(store: Store, line: bytes) -> tuple[float, float]:
    """(seconds, peak MB allocated) of receiving ``line``."""
    tracemalloc.start()
    start = time.perf_counter()
    result = receive(store, [line], source="gossip:" + "b" * 16, own_origin="f" * 16,
                     config=Config(verify_processes=0), now=NOW)
    wall = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    assert result.accepted == 1, result
    return wall, peak


def run(n: int, repeats: int) -> dict[str, Any]:
    texts = distinct_texts(n + repeats)
    key = nacl.signing.SigningKey(b"\x31" * 32)
    with tempfile.TemporaryDirectory() as tmp, open_store(Path(tmp)) as store:
        fill(store, texts[:n])
        new = [one(store, sign_lesson(key, kind="error", text=text, seen=1, strength=1.0, updated=AT,
                                      seq=k + 1).raw) for k, text in enumerate(texts[n:])]
        confirms = [one(store, sign_confirm(key, lesson_hash("error", texts[k]), at=AT, seq=repeats + k + 1).raw)
                    for k in range(repeats)]
    lesson_ms = statistics.median(w for w, _ in new) * 1000
    confirm_ms = statistics.median(w for w, _ in confirms) * 1000
    return {"lessons": n, "lesson_ms": round(lesson_ms, 2), "lesson_peak_mb": round(max(p for _, p in new), 1),
            "confirm_ms": round(confirm_ms, 2), "confirm_peak_mb": round(max(p for _, p in confirms), 1),
            "ratio": round(lesson_ms / confirm_ms, 1)}


def _describe(out: dict[str, Any]) -> str:
    return (f"one new lesson into {out['lessons']} lessons {out['lesson_ms']} ms, peak {out['lesson_peak_mb']} MB; "
            f"one confirmation {out['confirm_ms']} ms, peak {out['confirm_peak_mb']} MB ({out['ratio']} x)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lessons", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--before", metavar="DIR", type=Path, help="also run with the neverest in DIR, alternated")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.lessons < 0 or args.repeats < 1:
        parser.error("--lessons must be 0 or more and --repeats 1 or more")
    if args.before is not None:
        runs = alternate(__file__, ["--json", "--lessons", str(args.lessons), "--repeats", str(args.repeats)],
                         args.before, args.rounds, describe=_describe)
        keys = ("lesson_ms", "lesson_peak_mb", "confirm_ms", "confirm_peak_mb", "ratio")
        for name, m in medians(runs, keys).items():
            print(f"{name:>6} ({args.rounds} rounds, medians): one new lesson {m['lesson_ms']:.1f} ms, peak "
                  f"{m['lesson_peak_mb']:.1f} MB; one confirmation {m['confirm_ms']:.1f} ms, peak "
                  f"{m['confirm_peak_mb']:.1f} MB")
        return 0
    out = run(args.lessons, args.repeats)
    print(json.dumps(out) if args.json else _describe(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
