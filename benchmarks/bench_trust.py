"""Benchmark: what the trust policy ``earned`` costs a memory, against judging the same lessons.

A memory works out ``earned`` once per commons pass (``memory/states.commons_pass``): it reads
every claim it holds into a ``commons.Evidence`` and scores the origins trust reaches.  The
baseline, in the same run, is the rest of that pass: ``commons.judge`` of every lesson held,
under a fixed policy.  Three memories:

- *team*: 50 origins, 1 000 lessons, each claimed by 1 publisher and 2–10 others (a LAN);
- *commons*: 2 000 origins, 10 000 lessons, the same shape (a large HTTP commons);
- *flood*: the team, plus 50 000 keys that each confirm, and refute, lessons at random
  (what a Sybil flood that got past the storage budgets would hold).

Figures: milliseconds per pass for Evidence building, for scoring, and for the judge baseline;
and the number of origins the scores were computed over (the reachable ones), which is what
keeps the flood from costing a matrix of every key.

    python benchmarks/bench_trust.py [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from neverest.commons import Evidence, Fact, TrustConfig, counted_origins, judge

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def world(origins: int, lessons: int, flood: int, seed: int) -> dict[str, list[Fact]]:
    rng = random.Random(seed)
    names = ["me"] + [f"o{k}" for k in range(origins - 1)]
    out: dict[str, list[Fact]] = {}
    for k in range(lessons):
        day = rng.uniform(0, 60)
        publisher, *others = rng.sample(names, 1 + rng.randint(2, 10))
        facts = [Fact("lesson", publisher, T0 + timedelta(days=day))]
        facts += [Fact("confirm", o, T0 + timedelta(days=day + rng.uniform(0.5, 20))) for o in others]
        out[f"L{k}"] = facts
    keys = [f"s{k}" for k in range(flood)]
    for key in keys:
        target = f"L{rng.randrange(lessons)}"
        out[target].append(Fact(rng.choice(("confirm", "refute")), key, T0 + timedelta(days=rng.uniform(0, 80))))
    return out


def measure(name: str, facts: dict[str, list[Fact]], repeat: int) -> dict[str, Any]:
    build, score, base = [], [], []
    reached = 0
    for _ in range(repeat):
        t = time.perf_counter()
        evidence = Evidence(["me"])
        for lesson, group in facts.items():
            evidence.add_lesson(lesson, group)
        build.append(time.perf_counter() - t)
        t = time.perf_counter()
        flags = counted_origins(evidence, [0], TrustConfig())
        score.append(time.perf_counter() - t)
        reached = len(evidence.reachable(np.array([0]), TrustConfig().steps))
        counted = {evidence.origins[i] for i in np.flatnonzero(flags[:, 0])}
        t = time.perf_counter()
        now = T0 + timedelta(days=90)
        for group in facts.values():
            judge(group, now=now, counts=counted)
        base.append(time.perf_counter() - t)
    ms = lambda xs: 1000 * min(xs)  # noqa: E731 - the least disturbed run on a shared machine
    return {"memory": name, "lessons": len(facts), "claims": sum(map(len, facts.values())),
            "origins": len(evidence), "origins_scored": reached, "counted": int(flags.sum()),
            "evidence_ms": ms(build), "scores_ms": ms(score), "judge_baseline_ms": ms(base)}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    rows = [measure("team", world(50, 1000, 0, 1), args.repeat),
            measure("commons", world(2000, 10_000, 0, 2), args.repeat),
            measure("flood", world(50, 1000, 50_000, 3), args.repeat)]
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
        return 0
    print(f"{'memory':8} {'lessons':>8} {'claims':>8} {'origins':>8} {'scored':>7} {'counted':>8} "
          f"{'evidence ms':>12} {'scores ms':>10} {'judge ms (baseline)':>20}")
    for r in rows:
        print(f"{r['memory']:8} {r['lessons']:>8} {r['claims']:>8} {r['origins']:>8} {r['origins_scored']:>7} "
              f"{r['counted']:>8} {r['evidence_ms']:>12.1f} {r['scores_ms']:>10.1f} {r['judge_baseline_ms']:>20.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
