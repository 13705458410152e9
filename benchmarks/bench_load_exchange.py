"""Benchmark: the CPU of one real exchange, the unit the load experiment is sized by (issue 13, item 4).

Two memories share n origins (10^3, 10^4) and differ by d records (0, 1, 20: half on each side, of origins
both hold, as in the load experiment where lessons are new seqs of known origins).  One exchange runs
through the real ``Initiator`` and ``Responder`` (signed msgpack messages, revision 2) between two
``simulations.overlay.OverlayView``s (what ``python -m simulations load`` uses), and, in the same run,
between two ``loopback.MemoryView``s (plain dicts and a ``RangeIndex``): the baseline, so that the
ratio says what the shared overlay costs.  Figures: median CPU ms of both ends together over
repetitions, and ms per record delivered.

    python benchmarks/bench_load_exchange.py [--repeat 9] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import nacl.signing

from neverest.clock import iso
from neverest.gossip.core import Initiator, Responder, StoreView, drive
from neverest.gossip.loopback import MemoryView
from neverest.records import origin_of
from simulations.overlay import Library, OverlayView

NOW = datetime(2026, 1, 1, tzinfo=UTC)
A_KEY, B_KEY = nacl.signing.SigningKey(b"\x41" * 32), nacl.signing.SigningKey(b"\x42" * 32)
B_ORIGIN = origin_of(bytes(B_KEY.verify_key))


def record(origin: str, seq: int) -> bytes:
    """About the size of a signed lesson (470 bytes in the load experiment)."""
    return json.dumps({"origin": origin, "seq": seq, "at": iso(NOW), "text": "x" * 380},
                      separators=(",", ":")).encode()


def pair(kind: str, lib: Library, origins: list[str]) -> tuple[StoreView, StoreView, Callable[[StoreView, bytes], Any]]:
    if kind == "overlay":
        return OverlayView(lib, 0), OverlayView(lib, 1), lambda view, raw: view.hold(raw)  # type: ignore[attr-defined]
    a, b = MemoryView(), MemoryView()
    for origin in origins:
        a.put(lib.raw[origin, 1])
        b.put(lib.raw[origin, 1])
    return a, b, lambda view, raw: view.put(raw)  # type: ignore[attr-defined]


def measure(kind: str, n: int, d: int, repeat: int) -> dict[str, Any]:
    chance = random.Random(n * 100 + d)
    lib = Library()
    origins = [f"{chance.getrandbits(64):016x}" for _ in range(n)]
    for origin in origins:
        lib.settle(record(origin, 1))
    cpus, sizes, trips = [], [], []
    for r in range(repeat):
        a, b, hold = pair(kind, lib, origins)
        for k, origin in enumerate(origins[r * d:(r + 1) * d]):
            raw = lib.raw.get((origin, 2)) or (lib.add(record(origin, 2)) and lib.raw[origin, 2])
            hold(a if k % 2 else b, raw)
        responder = Responder(b, B_KEY)
        rng = random.Random(r)
        start = time.process_time()
        result = drive(Initiator(a, A_KEY, B_ORIGIN, now=NOW, rng=rng),
                       lambda req, responder=responder, rng=rng: responder.respond(req, now=NOW, rng=rng).data)
        cpus.append(time.process_time() - start)
        assert result.error is None and result.records_sent + result.records_received == d, result
        assert a.index().root == b.index().root
        sizes.append(result.bytes_sent + result.bytes_received)
        trips.append(result.round_trips)
    ms = 1000 * statistics.median(cpus)
    return {"view": kind, "origins": n, "differences": d, "cpu_ms": round(ms, 3),
            "ms_per_record": round(ms / d, 3) if d else None, "bytes": statistics.median(sizes),
            "round_trips": statistics.median(trips)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for n in (1_000, 10_000):
        for d in (0, 1, 20):
            base = measure("memoryview", n, d, args.repeat)
            mine = measure("overlay", n, d, args.repeat)
            mine["over_baseline"] = round(mine["cpu_ms"] / base["cpu_ms"], 2)
            rows += [base, mine]
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return 0
    print(f"{'origins':>8} {'diff':>5} {'view':<11} {'cpu ms':>8} {'ms/rec':>7} {'bytes':>8} {'RT':>3} {'x base':>7}")
    for row in rows:
        print(f"{row['origins']:>8} {row['differences']:>5} {row['view']:<11} {row['cpu_ms']:>8.3f} "
              f"{row['ms_per_record'] or 0:>7.3f} {row['bytes']:>8.0f} {row['round_trips']:>3.0f} "
              f"{row.get('over_baseline', ''):>7}")
    print("cpu ms: both ends of one exchange (median); x base: overlay over MemoryView in this run")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
