"""Benchmark: one sleep over 10 000 episodes, then a sleep after 100 more.

Targets (docs/figures.md): the first sleep ≤ 30 s and ≤ 300 MB peak RSS; the second does
work in proportion to the 100 new episodes, not the 10 000.  Each sleep runs as
the real command (`neverestctl sleep --json`) in a child process, so the peak
RSS is that process's own.  Baseline in the same run: `neverestctl lessons` on
the same store (process start, imports, opening the store).

    python benchmarks/bench_sleep.py [--episodes 10000] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_episodes import events

from neverest.memory.events import ingest
from neverest.memory.store import open_store

START = datetime(2026, 9, 1, tzinfo=UTC)


def run_child(args: list[str], home: Path, now: datetime) -> tuple[float, float, dict[str, object] | None]:
    """(wall seconds, peak RSS MB of this child, parsed JSON) for one neverestctl command."""
    env = dict(os.environ, NEVEREST_HOME=str(home), NEVEREST_NOW=now.isoformat())
    code = ("import resource, sys; from neverest.ctl import main; status = main(sys.argv[1:]); "
            "print('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); sys.exit(status)")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{args} failed: {done.stderr}")
    rss_kb = int(next(line.split()[1] for line in done.stderr.splitlines() if line.startswith("RSS")))
    out = json.loads(done.stdout) if "--json" in args and args[0] == "sleep" else None
    return wall, rss_kb / 1024, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        now = START + timedelta(days=60)
        with open_store(home) as store:
            ingest(store, events(args.episodes, START, 60, seed=1), now=now)
        base_wall, base_rss, _ = run_child(["lessons"], home, now)
        wall1, rss1, rep1 = run_child(["sleep", "--json"], home, now)
        with open_store(home) as store:
            added = ingest(store, events(100, now, 1, seed=2), now=now + timedelta(hours=2)).stored
        wall2, rss2, rep2 = run_child(["sleep", "--json"], home, now + timedelta(hours=3))
    assert rep1 is not None and rep2 is not None
    result = {
        "episodes": args.episodes,
        "baseline_lessons_cmd_s": round(base_wall, 3), "baseline_rss_mb": round(base_rss, 1),
        "first_sleep_s": round(wall1, 2), "first_sleep_rss_mb": round(rss1, 1),
        "first_considered": rep1["considered"], "first_learned": len(rep1["learned"]),  # type: ignore[arg-type]
        "second_sleep_s": round(wall2, 3), "second_sleep_rss_mb": round(rss2, 1),
        "second_considered": rep2["considered"], "second_embedded": rep2["embedded"],
        "targets": {"first_sleep_s": 30, "first_sleep_rss_mb": 300},
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.episodes} episodes over 60 days")
        print(f"  baseline: `neverestctl lessons`   {base_wall:6.2f} s  {base_rss:6.1f} MB peak RSS")
        print(f"  first sleep                        {wall1:6.2f} s  {rss1:6.1f} MB   (targets <= 30 s, <= 300 MB)"
              f"   considered {result['first_considered']}, learned {result['first_learned']}")
        print(f"  second sleep after {added} new          {wall2:6.2f} s  {rss2:6.1f} MB"
              f"   considered {result['second_considered']}, embedded {result['second_embedded']}")
    ok = wall1 <= 30 and rss1 <= 300 and rep2["considered"] == added
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
