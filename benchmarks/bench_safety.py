"""Benchmark: safety rule 1 (``neverest.safety.imperative_reason``) over its evaluation set.

The set is ``tests/data/safety_eval.jsonl``: prompt-injection strings from public corpora (each line
names its source and licence), lesson-like advice, and lesson-like observations of build, CI and
tooling.  A line labelled "inject" or "advice" should be refused (the positive class), one labelled
"observation" accepted.  Lines marked ``"split": "held"`` were written before the detector was
tuned on the "dev" lines and not looked at one by one while tuning; both splits are reported.
Lines whose source names a public or Neverest session (issue 22: Claude Code and Codex harness messages
quoted verbatim, and lesson-like texts built from the errors and tool messages of real sessions) are
also reported on their own, as "sessions".

Time per lesson is measured against a baseline in the same run: ``str.lower`` and ``str.split``
of the same texts, the least any word-based check must do.  CPU seconds (process time) are
reported beside wall clock because the machine's 2 cores are shared.

    python benchmarks/bench_safety.py [--repeat 200] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from neverest.safety import imperative_reason

EVAL_SET = Path(__file__).resolve().parent.parent / "tests" / "data" / "safety_eval.jsonl"
REFUSED_LABELS = frozenset({"inject", "advice"})


def load(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def score(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Precision and recall of refusal over `rows`, with the misses and false refusals."""
    tp = fp = fn = tn = 0
    missed: list[str] = []
    false_refusals: list[tuple[str, str]] = []
    for row in rows:
        reason = imperative_reason(row["text"])
        positive = row["label"] in REFUSED_LABELS
        if reason is not None and positive:
            tp += 1
        elif reason is not None:
            fp += 1
            false_refusals.append((row["text"], reason))
        elif positive:
            fn += 1
            missed.append(row["text"])
        else:
            tn += 1
    return {
        "lines": len(rows),
        "tp": tp, "fp": fp, "fn": fn, "tn": tn,
        "precision": tp / (tp + fp) if tp + fp else 1.0,
        "recall": tp / (tp + fn) if tp + fn else 1.0,
        "missed": missed,
        "false_refusals": false_refusals,
    }


def per_lesson(texts: list[str], check: Callable[[str], object], repeat: int) -> tuple[float, float]:
    """(wall µs, CPU µs) per text of `check`, the best of five rounds of `repeat` passes."""
    best_wall = best_cpu = float("inf")
    for _ in range(5):
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(repeat):
            for text in texts:
                check(text)
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    calls = repeat * len(texts)
    return best_wall / calls * 1e6, best_cpu / calls * 1e6


def baseline(text: str) -> object:
    return text.lower().split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = load(EVAL_SET)
    texts = [row["text"] for row in rows]
    report: dict[str, Any] = {"load_average": os.getloadavg()}
    for name, subset in (
        ("all", rows),
        ("dev", [r for r in rows if r.get("split") == "dev"]),
        ("held", [r for r in rows if r.get("split") == "held"]),
        ("sessions", [r for r in rows if "session" in r["source"]]),
        ("inject", [r for r in rows if r["label"] == "inject" or r["label"] == "observation"]),
    ):
        report[name] = score(subset)
    wall, cpu = per_lesson(texts, imperative_reason, args.repeat)
    base_wall, base_cpu = per_lesson(texts, baseline, args.repeat)
    longest = max(texts, key=len)
    long_wall, long_cpu = per_lesson([longest], imperative_reason, args.repeat * 10)
    report["timing_us"] = {
        "detector_wall": wall, "detector_cpu": cpu,
        "baseline_wall": base_wall, "baseline_cpu": base_cpu,
        "ratio_cpu": cpu / base_cpu if base_cpu else float("inf"),
        "longest_text_chars": len(longest), "longest_wall": long_wall, "longest_cpu": long_cpu,
    }
    report["load_average_after"] = os.getloadavg()
    if args.json:
        json.dump(report, sys.stdout, indent=1, ensure_ascii=False)
        print()
        return
    print(f"{EVAL_SET.name}: {len(rows)} lines; load average {report['load_average'][0]:.2f} "
          f"-> {report['load_average_after'][0]:.2f}")
    for name in ("all", "dev", "held", "sessions", "inject"):
        s = report[name]
        label = {"inject": "injections vs observations", "sessions": "session lines"}.get(name, f"split {name}")
        print(f"  {label:28} lines {s['lines']:4}  precision {s['precision']:.3f}  recall {s['recall']:.3f}  "
              f"(tp {s['tp']} fp {s['fp']} fn {s['fn']} tn {s['tn']})")
    t = report["timing_us"]
    print(f"  per lesson: detector {t['detector_cpu']:.1f} µs CPU ({t['detector_wall']:.1f} wall), "
          f"baseline lower+split {t['baseline_cpu']:.2f} µs CPU ({t['baseline_wall']:.2f} wall), "
          f"ratio {t['ratio_cpu']:.0f}x; longest text ({t['longest_text_chars']} chars) "
          f"{t['longest_cpu']:.1f} µs CPU")
    print("  missed (should be refused):")
    for text in report["all"]["missed"]:
        print("    -", json.dumps(text, ensure_ascii=False)[:150])
    print("  false refusals (observations refused):")
    for text, reason in report["all"]["false_refusals"]:
        print("    -", json.dumps(text, ensure_ascii=False)[:110], "--", reason)


if __name__ == "__main__":
    main()
