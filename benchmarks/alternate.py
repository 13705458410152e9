"""Before and after in one run: a benchmark script run alternately with this tree's ``neverest`` and with
another tree's (a folder holding its ``neverest`` package, e.g. ``git archive 1699496 neverest | tar -x -C DIR``),
each run in a fresh process, so that a busy minute of the machine falls on both alike.

Used by ``bench_gossip.py --before DIR`` and ``bench_receive.py --before DIR``: each run prints one JSON object
on standard output, and the medians of its numeric fields are compared.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

TREES = ("after", "before")


def alternate(script: str, argv: Sequence[str], before: Path, rounds: int,
              describe: Callable[[dict[str, Any]], str],
              pick: Callable[[dict[str, Any]], dict[str, Any]] = lambda out: out) -> dict[str, list[dict[str, Any]]]:
    """``python script *argv`` under each tree, ``rounds`` times each, the order swapped every round; the
    object ``pick`` takes from each run's JSON, by tree.  ``describe`` says one run in a progress line."""
    # A script's own folder comes first on sys.path, not the working directory, so PYTHONPATH decides
    # which neverest it imports (the checkout's editable install comes after it).
    if not (before / "neverest" / "__init__.py").is_file():
        # Else PYTHONPATH would name nothing, the checkout's own package would be imported, and "before"
        # would be this tree measured twice.
        raise SystemExit(f"{before} holds no neverest package (make it with: git archive REV neverest | tar -x -C DIR)")
    trees = {"after": Path(script).resolve().parents[1], "before": before.resolve()}
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in TREES}
    for k in range(rounds):
        for name in (TREES[::-1] if k % 2 else TREES):
            done = subprocess.run([sys.executable, script, *argv], env=dict(os.environ, PYTHONPATH=str(trees[name])),
                                  capture_output=True, text=True, check=False)
            if not done.stdout.strip():
                raise SystemExit(f"the {name} tree's run failed:\n{done.stderr}")
            run = pick(json.loads(done.stdout))
            out[name].append(run)
            print(f"  round {k + 1} {name:>6}: {describe(run)}", file=sys.stderr, flush=True)
    return out


def medians(runs: dict[str, list[dict[str, Any]]], keys: Sequence[str]) -> dict[str, dict[str, float]]:
    """The median of each of ``keys`` over each tree's runs."""
    return {name: {key: statistics.median(run[key] for run in rs) for key in keys} for name, rs in runs.items()}
