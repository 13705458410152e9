"""Generate realistic synthetic events for the memory benchmarks (deterministic from a seed)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

from neverest.clock import iso

TOOLS = ["pip install", "npm ci", "cargo build", "pytest", "docker compose up", "make", "go test", "mvn package",
         "terraform apply", "kubectl apply", "git push", "poetry lock", "tsc", "eslint", "mypy", "ruff check"]
FAILURES = ["fails without network access", "times out after ten minutes", "needs root on this host",
            "breaks when LANG is unset", "hangs on a cold cache", "rejects the lock file", "runs out of memory",
            "cannot find the compiler", "fails on the second run", "reports a stale schema",
            "loses the environment variables", "picks the wrong Python", "fails when the disk is full",
            "fails behind the proxy", "crashes with a segmentation fault", "is slow on the shared runner"]
SAID = ["use tabs not spaces in this repository", "don't commit generated files", "keep the commits small",
        "the staging database is read-only", "ask before running migrations", "never force push to main",
        "write the changelog entry in English", "stop reformatting unrelated files"]


def events(n: int, start: datetime, days: int, seed: int = 1) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        at = iso(start + timedelta(seconds=rng.uniform(0, days * 86400)))
        roll = rng.random()
        session = f"s{rng.randrange(n // 4 + 1)}"
        if roll < 0.55:
            tool = rng.choice(TOOLS)
            failure = rng.choice(FAILURES)
            out.append({"kind": "error", "title": f"{tool} --flag{i % 5} ./dir{i % 9}", "happened": failure,
                        "session": session, "agent": f"agent{i % 3}", "at": at, "cwd": f"/src/proj{i % 7}"})
        elif roll < 0.65:
            out.append({"kind": "correction", "said": rng.choice(SAID) + f" ({rng.randrange(50)})",
                        "session": session, "at": at})
        elif roll < 0.8:
            out.append({"kind": "surprise", "expected": f"{rng.choice(TOOLS)} to pass",
                        "happened": rng.choice(FAILURES), "session": session, "at": at})
        elif roll < 0.9:
            out.append({"kind": "environment", "text": f"runner {i % 40} has {rng.choice(['4', '8', '16'])} cores",
                        "session": session, "at": at})
        else:
            out.append({"kind": "note", "text": f"note {i}: {rng.choice(FAILURES)}", "session": session, "at": at})
    return out
