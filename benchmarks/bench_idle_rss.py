"""Benchmark: resident memory of an idle neverestd holding 100 000 records.

Fills a fresh home with N signed records (stored directly, as the receive function
would store them), starts the real daemon on it, lets it settle, and reads its
VmRSS from /proc.  Baseline in the same run: a bare Python process that imports
the same libraries (trio, httpx, hypercorn, PyNaCl, msgpack, numpy) and sleeps.

Target (docs/figures.md): ≤ 80 MB.

    python benchmarks/bench_idle_rss.py [--records 100000] [--before DIR] [--json]

``--before DIR`` also measures the daemon of another tree (a folder holding its ``neverest``
package, e.g. ``git archive main neverest | tar -x -C DIR``) on the same store, right after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import nacl.signing

from neverest.control import running
from neverest.memory import holdings
from neverest.memory.store import open_store
from neverest.records import sign_lesson

sys.path.insert(0, str(Path(__file__).parent))
from bench_daemon_start import daemon_command

NOW = datetime(2026, 4, 2, tzinfo=UTC)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def fill(home: Path, n: int) -> None:
    keys = [nacl.signing.SigningKey(i.to_bytes(32, "big")) for i in range(1, 501)]
    with open_store(home) as store, store.write() as db:
        for i in range(n):
            record = sign_lesson(keys[i % 500], kind="error", text=f"Tool {i % 500} fails in case {i}", seen=1,
                                 strength=1.0, updated="2026-04-01T12:00:00.000000Z", seq=i // 500 + 1)
            holdings.put(db, record, source="bench", now=NOW)


def settle(cmd: list[str], env: dict[str, str], ready: Callable[[], bool] | None) -> float:
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while ready is not None and not ready():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        time.sleep(3.0)
        return rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--before", metavar="DIR", type=Path, help="also measure the daemon of this tree")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        fill(home, args.records)
        env = dict(os.environ, NEVEREST_HOME=str(home))
        daemon_args = ["--listen", "127.0.0.1:0", "--mdns-interface", "127.0.0.1"]
        daemon = settle([*daemon_command(None), *daemon_args], env, lambda: running(home))
        before = None
        if args.before is not None:
            before = settle([*daemon_command(args.before), *daemon_args], env, lambda: running(home))
        base = settle([sys.executable, "-c", "import trio, httpx, hypercorn.trio, nacl.signing, msgpack, numpy, time; "
                       "time.sleep(60)"], env, None)
        db_mb = (home / "memory.db").stat().st_size / 1e6
    result = {"records": args.records, "daemon_rss_mb": round(daemon, 1), "baseline_imports_rss_mb": round(base, 1),
              "store_mb": round(db_mb, 1), "target_mb": 80, "load_average": [round(x, 2) for x in os.getloadavg()]}
    if before is not None:
        result["before_daemon_rss_mb"] = round(before, 1)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"idle neverestd holding {args.records} records ({db_mb:.0f} MB store): {daemon:.1f} MB RSS"
              f" (target <= 80 MB)")
        print(f"  baseline: bare Python importing the same libraries: {base:.1f} MB RSS; load average "
              f"{result['load_average']}")
        if before is not None:
            print(f"  before ({args.before}), same store: {before:.1f} MB RSS")
    return 0 if daemon <= 80 else 1


if __name__ == "__main__":
    sys.exit(main())
