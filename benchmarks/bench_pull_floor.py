"""Benchmark: what a pull of lessons new to the memory must cost at least, against issue 26's goal.

The goal: a pull into an empty store at >= 0.7 x one core's raw ``crypto_sign_open`` rate.  On a machine of
``cores`` CPUs that leaves ``cores / (0.7 x raw rate)`` of CPU a record, for everything both peers do
(``bench_gossip.py`` runs the serving peer in the same process).  This script measures, on the records of
``bench_gossip.py --distinct`` (20 000 lessons, each its own meaning), each part of the work that a new lesson
cannot skip, alone and in its cheapest form, the fastest of ``--repeats`` runs (a floor: the VM's
speed moves within a minute, and the baseline is taken the same way, so the budget is the strictest):

1. the Ed25519 check (the baseline itself, over the lines already cut);
2. every other check of the record (``records.check``: JSON, fields, lesson hash, the phrasing rule);
3. its sentence in the hashed space (``HashedEmbedder.embed``, 128 at a time, as a verifying process does);
4. reading the answer's records for their origin, seq and time (``gossip.core.screen``);
5. storing it: the record, the lesson with its vector, its full-text entry and its origin, one
   ``executemany`` a table for 2 000 at a time (no rule between the statements; the receive path runs
   them one record at a time, between its rules);
6. the merge rule's meaning check (``MeaningIndex``: each lesson planned, compared with those before it
   that its subject can join, then added).

Then the pull itself (``bench_gossip.pull_rate``): its CPU a record, to set against the sum.  The
difference is what the receive path spends besides: the Python of the rules between the statements, the
trips to the verifying processes and back, HTTP, the serving peer.

    python benchmarks/bench_pull_floor.py [--records 20000] [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_gossip  # the same folder: on sys.path when this script runs
import nacl.bindings

from neverest.gossip import core
from neverest.gossip.loopback import MemoryView
from neverest.memory import hashed, holdings
from neverest.memory.embed import HASHED_SPACE, HashedEmbedder, to_blobs
from neverest.memory.meaning import MeaningIndex, subject_words
from neverest.memory.store import open_store
from neverest.records import Record, check

GOAL_RATIO = 0.7
_TRANSACTION = 2_000  # records a transaction, as memory/receive.py commits them


def _per_record(work: Callable[[], Any], n: int) -> float:
    """µs of this thread's CPU a record for ``work`` over ``n`` records."""
    start = time.thread_time()
    work()
    return (time.thread_time() - start) * 1e6 / n


def raw_verify(recs: list[Record]) -> float:
    cut = [check(r.raw)[1:] for r in recs]
    return _per_record(lambda: [nacl.bindings.crypto_sign_open(m, k) for m, k in cut], len(recs))


def store_floor(home: Path, recs: list[Record], blobs: list[bytes]) -> float:
    """The four inserts of a new lesson, ``executemany`` a table, 2 000 records a transaction."""
    at = bench_gossip.AT

    def work() -> None:
        with open_store(home) as store:
            next_id = 1
            for k in range(0, len(recs), _TRANSACTION):
                part = range(k, min(k + _TRANSACTION, len(recs)))
                with store.write() as db:
                    db.executemany(
                        "INSERT INTO records (origin, seq, type, target, raw, source, received, at, digest, superseded)"
                        " VALUES (?, ?, ?, ?, ?, 'gossip:floor', ?, ?, ?, 0) ON CONFLICT DO NOTHING",
                        [(recs[j].origin, recs[j].seq, recs[j].type, recs[j].target, recs[j].raw, at, at,
                          holdings.digest_of(recs[j].raw)) for j in part])
                    rows = [(next_id + n, recs[j].target, recs[j].fields["text"], recs[j].origin, blobs[j])
                            for n, j in enumerate(part)]
                    db.executemany(
                        "INSERT INTO lessons (id, hash, kind, text, cwd, strength, seen, created, updated, origin, "
                        f"layer, space, embedding) VALUES (?, ?, 'error', ?, '', 0.5, 1, '{at}', '{at}', ?, 'common', "
                        f"'{HASHED_SPACE}', ?)", rows)
                    db.executemany("INSERT INTO lessons_fts (rowid, text) VALUES (?, ?)", [r[:3:2] for r in rows])
                    db.executemany("INSERT INTO lesson_origins (lesson_id, origin) VALUES (?, ?)",
                                   [(r[0], r[3]) for r in rows])
                    next_id += len(part)

    return _per_record(work, len(recs))


def meaning_rule(home: Path, recs: list[Record], vectors: Any) -> float:
    """The meaning check of every new lesson, as ``Receiver._store`` runs it (no lesson joins another here)."""

    def work() -> None:
        with open_store(home) as store:
            index = MeaningIndex(store.db)
            for k in range(0, len(recs), _TRANSACTION):
                part = range(k, min(k + _TRANSACTION, len(recs)))
                index.plan([(j, "error", vectors[j]) for j in part])
                for j in part:
                    subjects = subject_words(recs[j].fields["text"])
                    if index.same_meaning("error", vectors[j], subjects, j) is None:
                        index.add("error", j + 1, vectors[j], subjects)

    return _per_record(work, len(recs))


def measure(tmp: Path, n: int, repeats: int) -> dict[str, Any]:
    """Each part ``repeats`` times, its fastest kept: a floor, on a VM whose speed moves within a minute."""
    recs = bench_gossip.records(n // 40, 40, distinct=True)
    texts = [r.fields["text"] for r in recs]
    lines = [r.raw for r in recs]
    for line in lines[:64]:  # the modules and patterns a first lesson loads, loaded before timing
        check(line)
    embedder = HashedEmbedder()
    batches: list[Any] = []

    def embed_all() -> None:
        hashed._SLOTS.clear()  # every sentence's features unmet, as in a verifying process pulling new lessons
        batches[:] = [embedder.embed(texts[k:k + 128]) for k in range(0, n, 128)]

    verify = [raw_verify(recs) for _ in range(repeats)]
    parts: dict[str, list[float]] = {
        "checks (records.check)": [_per_record(lambda: [check(line) for line in lines], n) for _ in range(repeats)],
        "embedding, 128 a call": [_per_record(embed_all, n) for _ in range(repeats)],
        "reading the answer (screen)": [_per_record(
            lambda: core.screen(MemoryView(), lines, now=bench_gossip.NOW, future_tolerance_s=300.0), n)
            for _ in range(repeats)],
    }
    vectors = [v for batch in batches for v in batch]
    blobs = [b for batch in batches for b in to_blobs(batch)]
    parts["storing (4 inserts, executemany)"] = [store_floor(tmp / f"floor{k}", recs, blobs) for k in range(repeats)]
    rule = min(meaning_rule(tmp / f"meaning{k}", recs, vectors) for k in range(repeats))
    verify_us = min([*verify, raw_verify(recs)])  # once more after: the VM's speed drifts
    fastest = {name: min(times) for name, times in parts.items()}
    floor = verify_us + sum(fastest.values())
    pull = bench_gossip.pull_rate(tmp, n, alone=False, distinct=True)
    cores = os.cpu_count() or 1
    return {"records": n, "cores": cores, "repeats": repeats, "raw_verify_us": round(verify_us, 1),
            "budget_us": round(cores * verify_us / GOAL_RATIO, 1),
            "parts_us": {k: round(v, 1) for k, v in fastest.items()}, "floor_us": round(floor, 1),
            "meaning_rule_us": round(rule, 1), "floor_with_rule_us": round(floor + rule, 1),
            "pull_per_s": pull["pull_per_s"], "pull_ratio": pull["ratio"], "pull_cores_used": pull["cores_used"],
            "pull_cpu_us": round(pull["cores_used"] * 1e6 / pull["pull_per_s"], 1),
            "load": "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3, help="times each part is measured (its fastest kept)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        r = measure(Path(tmp), args.records, max(1, args.repeats))
    if args.json:
        print(json.dumps(r))
        return 0
    print(f"pull of {r['records']} lessons new to the memory, {r['cores']} cores (load {r['load']}): the goal "
          f"{GOAL_RATIO} x raw verify leaves {r['budget_us']} us of CPU a record; each part below the fastest of "
          f"{r['repeats']}")
    print(f"  {'Ed25519 check (raw crypto_sign_open, the baseline)':<52} {r['raw_verify_us']:7.1f} us")
    for name, us in r["parts_us"].items():
        print(f"  {name:<52} {us:7.1f} us")
    print(f"  {'= the floor, no rule and no overhead':<52} {r['floor_us']:7.1f} us"
          f"  ({r['floor_us'] / r['budget_us']:.2f} of the budget)")
    print(f"  {'+ the meaning check (MeaningIndex)':<52} {r['meaning_rule_us']:7.1f} us"
          f"  -> {r['floor_with_rule_us']:.1f} us ({r['floor_with_rule_us'] / r['budget_us']:.2f} of the budget)")
    print(f"  the pull measured (bench_gossip.py --distinct): {r['pull_per_s']} records/s = {r['pull_ratio']:.3f} x,"
          f" {r['pull_cores_used']} cores: {r['pull_cpu_us']} us of CPU a record")
    print(f"  left for everything else at the goal: {r['budget_us'] - r['floor_with_rule_us']:.1f} us a record;"
          f" spent today: {r['pull_cpu_us'] - r['floor_with_rule_us']:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
