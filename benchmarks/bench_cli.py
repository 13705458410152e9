"""`neverestctl recall` and `neverestctl lessons` as the whole process an agent or a person runs,
against `python -c pass` in the same run (p95 over interleaved runs).

Target (docs/figures.md): p95 ≤ 3 × `python -c pass`.  Run: python benchmarks/bench_cli.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def _p95(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.95 * len(values)) - 1)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir(mode=0o700)
        env = dict(os.environ, NEVEREST_HOME=str(home), NEVEREST_NOW="2026-03-01T03:00:00Z")
        ctl = [sys.executable, "-m", "neverest.ctl"]
        for i in range(50):  # a small memory: what is measured is the process, not the search
            subprocess.run([*ctl, "remember", "--kind", "error", "--title", f"tool{i % 10} run",
                            "--happened", f"fails with error {i}", "--session", f"s{i}"], env=env, check=True,
                           stdout=subprocess.DEVNULL)
        subprocess.run([*ctl, "sleep"], env=env, check=True, stdout=subprocess.DEVNULL)
        times: dict[str, list[float]] = {"python -c pass": [], "recall": [], "lessons": []}
        for _ in range(args.runs):
            times["python -c pass"].append(_timed([sys.executable, "-c", "pass"], env))
            times["recall"].append(_timed([*ctl, "recall", "tool3 fails"], env))
            times["lessons"].append(_timed([*ctl, "lessons"], env))
    base = _p95(times["python -c pass"])
    print(f"{args.runs} runs each, interleaved")
    for name, values in times.items():
        p95 = _p95(values)
        print(f"  {name:<16} median {statistics.median(values) * 1000:7.1f} ms   p95 {p95 * 1000:7.1f} ms"
              + ("" if name == "python -c pass" else f"   = {p95 / base:.1f} x baseline (target <= 3 x)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
