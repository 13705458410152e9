"""Benchmark: recall over 10 000 episodes and lessons.

Target (docs/figures.md): median ≤ 50 ms per query, touching included.  Baseline in the
same run: the bare numpy cosine ranking over the same vectors already in memory
(what recall costs beyond reading the store and scoring).

    python benchmarks/bench_recall.py [--episodes 10000] [--queries 50] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_episodes import FAILURES, TOOLS, events

from neverest.config import Config
from neverest.memory.embed import HashedEmbedder, stack
from neverest.memory.events import ingest
from neverest.memory.recall import recall
from neverest.memory.sleep import sleep
from neverest.memory.store import open_store

START = datetime(2026, 9, 1, tzinfo=UTC)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    embedder = HashedEmbedder()
    now = START + timedelta(days=30)
    queries = [f"{TOOLS[i % len(TOOLS)]} {FAILURES[i % len(FAILURES)]}" for i in range(args.queries)]
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp))
        ingest(store, events(args.episodes, START, 30, seed=3), now=now)
        sleep(store, now=now, embedder=embedder, config=Config())
        rows = store.db.execute(
            "SELECT count(*) FROM episodes WHERE archived = 0").fetchone()[0] + store.db.execute(
            "SELECT count(*) FROM lessons WHERE archived = 0").fetchone()[0]
        times = []
        for q in queries:
            start = time.perf_counter()
            hits = recall(store, q, now=now, embedder=embedder, k=5)
            times.append(time.perf_counter() - start)
            assert hits
        blobs = [r[0] for r in store.db.execute("SELECT embedding FROM episodes WHERE archived = 0")]
        matrix = stack(blobs, 256)
        base = []
        for q in queries:
            start = time.perf_counter()
            scores = matrix @ embedder.embed([q])[0]
            np.argpartition(-scores, 5)[:5]
            base.append(time.perf_counter() - start)
        store.close()
    result = {"rows": rows, "queries": args.queries, "median_ms": round(statistics.median(times) * 1000, 2),
              "p90_ms": round(sorted(times)[int(len(times) * 0.9)] * 1000, 2),
              "baseline_numpy_rank_median_ms": round(statistics.median(base) * 1000, 3), "target_median_ms": 50}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"recall over {rows} unarchived episodes and lessons, {args.queries} queries, k=5")
        print(f"  recall (store read, scoring, touch)  median {result['median_ms']:7.2f} ms"
              f"   p90 {result['p90_ms']:.2f} ms   (target median <= 50 ms)")
        print(f"  baseline: numpy ranking in memory    median {result['baseline_numpy_rank_median_ms']:7.3f} ms")
    return 0 if result["median_ms"] <= 50 else 1


if __name__ == "__main__":
    sys.exit(main())
