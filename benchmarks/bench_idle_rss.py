"""Benchmark: resident memory of an idle neverestd holding 100 000 records.

Fills a fresh home with N signed records (stored directly, as the receive function
would store them), starts the real daemon on it (its gossip listener, control socket and
zeroconf on 127.0.0.1), lets it settle, and reads its VmRSS from /proc.  Then it asks that
daemon, over its control socket, for one gossip exchange with a second daemon holding a
copy of the same records, and reads its VmRSS again: an idle daemon alone has not called
a peer (the HTTP client side, httpx, is loaded by the first exchange), one in a cluster has.

Baselines in the same run, each a bare Python process that imports and sleeps:

- the libraries an idle daemon holds (trio, hypercorn, zeroconf, PyNaCl, msgpack, sqlite3):
  the floor under Neverest's own modules and state;
- the libraries of the daemon as a whole (trio, httpx, hypercorn, PyNaCl, msgpack, numpy),
  the baseline this benchmark printed before issue 26.

Target (docs/figures.md, issue 26): ≤ 40 MB.

    python benchmarks/bench_idle_rss.py [--records 100000] [--before DIR] [--json]

``--before DIR`` also measures the daemon of another tree (a folder holding its ``neverest``
package, e.g. ``git archive main neverest | tar -x -C DIR``) on the same store, right after.  A tree
with an older store schema refuses the store this one made: then run the whole script under each tree
instead (``PYTHONPATH=DIR python benchmarks/bench_idle_rss.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import nacl.signing

from neverest.client import ask
from neverest.control import running
from neverest.memory import holdings
from neverest.memory.store import open_store
from neverest.records import sign_lesson

sys.path.insert(0, str(Path(__file__).parent))
from bench_daemon_start import daemon_command

NOW = datetime(2026, 4, 2, tzinfo=UTC)
TARGET_MB = 40
FLOOR_IMPORTS = "trio, hypercorn.trio, zeroconf, nacl.signing, msgpack, sqlite3"
WHOLE_IMPORTS = "trio, httpx, hypercorn.trio, nacl.signing, msgpack, numpy"


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


def settle(cmd: list[str], env: dict[str, str], ready: Callable[[], bool] | None,
           then: Callable[[], object] | None = None) -> tuple[float, float | None]:
    """VmRSS (MB) 3 s after ``ready``, and 3 s after ``then`` when given (on the same process)."""
    log = tempfile.TemporaryFile()  # not a pipe: a daemon that logs much would block on a full one
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 120
        while ready is not None and not ready():
            if proc.poll() is not None:
                log.seek(0)
                raise SystemExit(f"{' '.join(cmd)} exited ({proc.returncode}): "
                                 f"{log.read().decode(errors='replace')[-600:]}")
            assert time.monotonic() < deadline, f"{' '.join(cmd)} was not ready in 120 s"
            time.sleep(0.1)
        time.sleep(3.0)
        idle = rss_mb(proc.pid)
        if then is None:
            return idle, None
        then()
        time.sleep(3.0)
        return idle, rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def bare(imports: str, env: dict[str, str]) -> float:
    return settle([sys.executable, "-c", f"import {imports}, time; time.sleep(60)"], env, None)[0]


def exchange_with(home: Path, peer_url: str) -> Callable[[], object]:
    """Ask the daemon of ``home`` for one gossip exchange with ``peer_url``; it must have succeeded."""
    def run() -> None:
        answer = ask(home, {"op": "gossip", "peer": peer_url}, timeout_s=60)
        rounds = answer.get("round") or []
        assert rounds and not any(r.get("error") for r in rounds), answer
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--before", metavar="DIR", type=Path, help="also measure the daemon of this tree")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        fill(home, args.records)
        # The peer: another home holding a copy of the same records (its own key), gossip only.
        peer_home = Path(tmp) / "peer"
        peer_home.mkdir(mode=0o700)
        shutil.copyfile(home / "memory.db", peer_home / "memory.db")
        peer_env = dict(os.environ, NEVEREST_HOME=str(peer_home))
        peer = subprocess.Popen([*daemon_command(None), "--listen", "127.0.0.1:0", "--no-mdns"], env=peer_env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while not running(peer_home):
                assert time.monotonic() < deadline and peer.poll() is None
                time.sleep(0.1)
            peer_url = ask(peer_home, {"op": "status"})["status"]["listen"][0]
            env = dict(os.environ, NEVEREST_HOME=str(home))
            daemon_args = ["--listen", "127.0.0.1:0", "--mdns-interface", "127.0.0.1"]
            daemon, gossiped = settle([*daemon_command(None), *daemon_args], env, lambda: running(home),
                                      exchange_with(home, peer_url))
            before = before_gossiped = None
            if args.before is not None:
                before, before_gossiped = settle([*daemon_command(args.before), *daemon_args], env,
                                                 lambda: running(home), exchange_with(home, peer_url))
        finally:
            peer.terminate()
            peer.wait(timeout=30)
        floor = bare(FLOOR_IMPORTS, env)
        whole = bare(WHOLE_IMPORTS, env)
        db_mb = (home / "memory.db").stat().st_size / 1e6
    assert gossiped is not None
    result = {"records": args.records, "daemon_rss_mb": round(daemon, 1), "after_exchange_rss_mb": round(gossiped, 1),
              "floor_imports_rss_mb": round(floor, 1), "baseline_imports_rss_mb": round(whole, 1),
              "store_mb": round(db_mb, 1), "target_mb": TARGET_MB,
              "load_average": [round(x, 2) for x in os.getloadavg()]}
    if before is not None and before_gossiped is not None:
        result["before_daemon_rss_mb"] = round(before, 1)
        result["before_after_exchange_rss_mb"] = round(before_gossiped, 1)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"idle neverestd holding {args.records} records ({db_mb:.0f} MB store): {daemon:.1f} MB RSS"
              f" (target <= {TARGET_MB} MB); after one gossip exchange with a peer: {gossiped:.1f} MB")
        print(f"  floor: bare Python importing the libraries an idle daemon holds ({FLOOR_IMPORTS}): "
              f"{floor:.1f} MB RSS; the daemon is {daemon - floor:.1f} MB over it")
        print(f"  bare Python importing the daemon's libraries as a whole ({WHOLE_IMPORTS}): {whole:.1f} MB RSS;"
              f" load average {result['load_average']}")
        if before is not None and before_gossiped is not None:
            print(f"  before ({args.before}), same store: {before:.1f} MB RSS; after one exchange: "
                  f"{before_gossiped:.1f} MB")
    return 0 if daemon <= TARGET_MB else 1


if __name__ == "__main__":
    sys.exit(main())
