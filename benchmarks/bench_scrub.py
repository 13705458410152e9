"""Benchmark: scrubbing (``neverest.memory.scrub``) on 1 000 real-looking lesson texts.

Every lesson shown to an agent passes through ``scrub.shown`` (renders, the hook, the MCP server, the
agent's memory file), every lesson published through ``withheld`` and every lesson received through
``scrub_check``, so each is timed per text.  The texts are built deterministically from templates of
the sentences phrasing.py writes: about half clean ("pip install fails without --no-build-isolation"),
half holding a path, URL, address, token, id or host name in one of the places they stand (quoted,
bracketed, after ``=`` or ``:``...).  The baseline, in the same run, is ``re.sub`` of one simple
pattern (runs of white space) over the same texts: the least any regex-based rewrite must do.  CPU
seconds (process time) are reported beside wall clock because the machine's cores are shared.

    python benchmarks/bench_scrub.py [--texts 1000] [--repeat 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from collections.abc import Callable
from typing import Any

from neverest.memory import scrub

PROGRAMS = ["pip install", "pytest", "npm run build", "cargo build", "docker compose up", "git push", "tsc", "make",
            "go test", "uv sync", "next build", "poetry install", "mypy", "ruff check", "gradle build", "cat"]
CLEAN = [
    "fails without --no-build-isolation", "hangs when the database container is down",
    "ModuleNotFoundError: No module named 'yaml'", "needs node v20.1.0 or later, found v18.19.0",
    "exit code 137 after the OOM killer ran", "fails: package.json has no \"build\" script",
    "times out after 600 seconds on the CI runner", "cannot resolve @types/node in next.config.mjs",
    "fails on Python 3.11 with TypeError: unhashable type: 'list'", "is refused: port 8080 is already in use",
]
DIRTY = [
    'cat: "/home/{u}/clients/{c}/config.yaml": No such file or directory',
    "fails in /Users/{u}/work/{c}/src/app/page.tsx:12:5",
    "cannot open '{w}' (permission denied)",
    "reads --config=~/{c}/settings.toml and fails",
    "clone https://{u}:s3cr3t@git.{c}.com/{c}/app.git fails with 403",
    "mail from {u}@{c}.com is rejected by the hook",
    "rejects token ghp_{tok} as expired",
    "job {uuid} failed at commit {hexid}",
    "connect to 10.0.{n}.{m}:5432 refused from {u}-macbook.local",
    "DATABASE_URL=postgres://app:pw@db.{c}.internal/app is not read",
    "route app/(protected)/{c}/layout.tsx renders twice",
    "deploy to build{n}.{c}.com times out",
]
USERS = ["ann", "bjorn", "chen", "dara", "eliska", "farid"]
CLIENTS = ["acme-corp", "globex", "initech", "umbrella", "hooli", "wayne-ent"]


def texts(n: int, seed: int = 7) -> list[str]:
    """``n`` lesson-like sentences, the same for a given seed."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        program = rnd.choice(PROGRAMS)
        if i % 2:
            u, c = rnd.choice(USERS), rnd.choice(CLIENTS)
            happened = rnd.choice(DIRTY).format(
                u=u, c=c, w=f"C:\\Users\\{u}\\{c}\\x.py", n=rnd.randrange(1, 250), m=rnd.randrange(1, 250),
                tok="".join(rnd.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
                            for _ in range(36)),
                uuid="-".join(f"{rnd.getrandbits(4 * d):0{d}x}" for d in (8, 4, 4, 4, 12)),
                hexid=f"{rnd.getrandbits(160):040x}")
        else:
            happened = rnd.choice(CLEAN)
        out.append(f"{program} {happened}" if i % 3 else f"An error recurs in {program}: {happened}")
    return out


_SPACES = re.compile(r"\s+")


def baseline(text: str) -> object:
    return _SPACES.sub(" ", text)


def per_text(items: list[str], fn: Callable[[str], object], repeat: int) -> tuple[float, float]:
    """(wall µs, CPU µs) per text of ``fn``, the best of five rounds of ``repeat`` passes."""
    best_wall = best_cpu = float("inf")
    for _ in range(5):
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(repeat):
            for text in items:
                fn(text)
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    calls = repeat * len(items)
    return best_wall / calls * 1e6, best_cpu / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    items = texts(args.texts)
    scrub.local_names()  # read once, as in a running process
    report: dict[str, Any] = {"texts": len(items), "load_average": os.getloadavg(), "timing_us": {}}
    for name, fn in (("baseline re.sub", baseline), ("scrub", scrub.scrub), ("scrub_check", scrub.scrub_check),
                     ("meaningful", scrub.meaningful), ("withheld", scrub.withheld)):
        wall, cpu = per_text(items, fn, args.repeat)
        report["timing_us"][name] = {"wall": wall, "cpu": cpu}
    for label, subset in (("clean", items[0::2]), ("dirty", items[1::2])):
        wall, cpu = per_text(subset, scrub.scrub, args.repeat)
        report["timing_us"][f"scrub ({label} half)"] = {"wall": wall, "cpu": cpu}
    changed = sum(scrub.scrub(t) != t for t in items)
    report["changed"] = changed
    report["refused_by_check"] = sum(scrub.scrub_check(t) is not None for t in items)
    report["load_average_after"] = os.getloadavg()
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
        return
    base = report["timing_us"]["baseline re.sub"]["cpu"]
    print(f"{len(items)} lesson texts ({changed} changed by scrub, {report['refused_by_check']} refused by "
          f"scrub_check); load average {report['load_average'][0]:.2f} -> {report['load_average_after'][0]:.2f}")
    for name, t in report["timing_us"].items():
        print(f"  {name:22} {t['cpu']:8.1f} µs CPU per text ({t['wall']:.1f} wall)  {t['cpu'] / base:6.1f}x baseline")
    print("  e.g.", json.dumps(items[1]), "->", json.dumps(scrub.scrub(items[1])))


if __name__ == "__main__":
    main()
