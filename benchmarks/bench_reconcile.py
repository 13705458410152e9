"""Benchmark: what one exchange costs when two memories differ by a few records (issue 13, item 1).

Two memories share n − 10 origins (n = 10^3 to 10^6) and differ by d records (1 or 10), each record
of an origin only one of them holds; half the differences sit on each side (for d = 1: once
the responder holds it, a pull, once the initiator, a push).  One exchange runs through
the real ``Initiator`` and ``Responder`` (sans-IO, signed messages, msgpack as on the wire)
between two ``loopback.MemoryView``s: dicts rather than SQLite, so that 10^6 origins fit and
what is measured is the protocol, not the store or signature checks.

For each case it reports the median over repetitions (different origins each time, so
different ranges) of: message bytes of the whole exchange (both directions, records
included), the same without the records' own bytes (what reconciliation costs), round
trips (median and worst), and CPU seconds of both ends together.  Beside it, in the same
run, today's exchange (``Settings(reconcile=False)``: whole digests) and the in-sync
exchange.  HTTP headers are not counted (about 350 bytes per round trip on the real edge,
benchmarks/bench_gossip.py).

Targets (issue 13): 1 difference among 10^4 ≤ 2 KB, among 10^5 ≤ 3 KB, ≤ 3 round trips;
in sync ≤ 1 KB in 1 round trip.  Issue 26: 1 difference among 10^4 ≤ 1.5 KB without the record
(revision 3, "compact"; revision 2 beside it in the same run).

    python benchmarks/bench_reconcile.py [--max 1000000] [--repeat 7] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from datetime import UTC, datetime
from typing import Any

import nacl.signing

from neverest.clock import iso
from neverest.gossip import codec
from neverest.gossip.core import ExchangeResult, Initiator, Responder, Settings, drive
from neverest.gossip.loopback import MemoryView
from neverest.records import origin_of

NOW = datetime(2026, 4, 1, 12, tzinfo=UTC)
A_KEY, B_KEY = nacl.signing.SigningKey(b"\x41" * 32), nacl.signing.SigningKey(b"\x42" * 32)
B_ORIGIN = origin_of(bytes(B_KEY.verify_key))


def record(origin: str, seq: int) -> bytes:
    """A record as gossip reads it, 380 bytes: about the size of a signed lesson."""
    return json.dumps({"origin": origin, "seq": seq, "at": iso(NOW), "text": "x" * 300},
                      separators=(",", ":")).encode()


def build(n: int, seed: int) -> tuple[MemoryView, MemoryView]:
    chance = random.Random(seed)
    a, b = MemoryView(), MemoryView()
    for _ in range(n):
        origin = f"{chance.getrandbits(64):016x}"
        entry = (chance.randrange(1, 50), chance.randbytes(8))
        a.assume(origin, entry)
        b.assume(origin, entry)
    return a, b


def exchange(a: MemoryView, b: MemoryView, settings: Settings, seed: int) -> tuple[ExchangeResult, int, float]:
    """One exchange; the result, the bytes of the records it carried, and CPU seconds."""
    carried = 0

    def count(data: bytes) -> None:
        nonlocal carried
        envelope = codec.decode(data)
        body = codec.decode_body(envelope.type, envelope.body)
        carried += sum(len(r) + 3 for r in getattr(body, "records", None) or ())

    responder = Responder(b, B_KEY, settings=settings)
    chance = random.Random(seed + 1)
    messages: list[bytes] = []

    def post(request: bytes) -> bytes | None:
        messages.append(request)
        reply = responder.respond(request, now=NOW, rng=chance).data
        if reply is not None:
            messages.append(reply)
        return reply

    start = time.process_time()
    result = drive(Initiator(a, A_KEY, B_ORIGIN, now=NOW, rng=random.Random(seed), settings=settings), post)
    cpu = time.process_time() - start
    for data in messages:
        count(data)
    return result, carried, cpu


def case(a: MemoryView, b: MemoryView, d: int, side: str, settings: Settings, repeat: int, seed: int) -> dict[str, Any]:
    """Median figures of ``repeat`` exchanges with d fresh records (then dropped again)."""
    totals, bare, trips, cpus = [], [], [], []
    for r in range(repeat):
        chance = random.Random(seed * 1000 + r)
        fresh = [f"{chance.getrandbits(64):016x}" for _ in range(d)]
        for i, origin in enumerate(fresh):
            holder = {"pull": b, "push": a}.get(side) or (b if i % 2 == 0 else a)
            holder.put(record(origin, 1))
        result, carried, cpu = exchange(a, b, settings, seed + r)
        if result.error is not None:
            for origin in fresh:
                a.drop(origin)
                b.drop(origin)
            return {"error": f"{result.error.who} {result.error.code}: {result.error.message[:80]}"}
        assert result.records_sent + result.records_received == d and a.index().root == b.index().root, result
        total = result.bytes_sent + result.bytes_received
        totals.append(total)
        bare.append(total - carried)
        trips.append(result.round_trips)
        cpus.append(cpu)
        for origin in fresh:
            a.drop(origin)
            b.drop(origin)
    return {"bytes": statistics.median(totals), "bytes_without_records": statistics.median(bare),
            "round_trips": statistics.median(trips), "round_trips_max": max(trips),
            "cpu_ms": round(1000 * statistics.median(cpus), 2)}


def in_sync(a: MemoryView, b: MemoryView, settings: Settings) -> dict[str, Any]:
    result, _, cpu = exchange(a, b, settings, 7)
    assert result.in_sync, result
    return {"bytes": result.bytes_sent + result.bytes_received, "round_trips": result.round_trips,
            "cpu_ms": round(1000 * cpu, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=1_000_000, help="largest number of origins (powers of 10)")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    sizes = [n for n in (1_000, 10_000, 100_000, 1_000_000) if n <= args.max]
    # Revision 3 (compact, the default since issue 26), against revision 2 and revision 1 in the same run.
    revision3, revision2, revision1 = Settings(), Settings(compact=False), Settings(reconcile=False)
    rows: list[dict[str, Any]] = []
    for n in sizes:
        # n less the differences shared, so that the union holds at most n origins: today's
        # exchange cannot name more than MAX_ORIGINS (10^5) in a digest.
        a, b = build(n - 10, seed=n)
        repeat = args.repeat if n < 1_000_000 else max(3, args.repeat // 2)
        for label, settings, reps in (("compact", revision3, repeat), ("reconcile r2", revision2, repeat),
                                      ("full digest", revision1, 3)):
            if settings is revision1 and n > codec.MAX_ORIGINS:
                rows.append({"origins": n, "exchange": label, "case": "any",
                             "error": f"over MAX_ORIGINS ({codec.MAX_ORIGINS}): a digest cannot name them"})
                continue
            rows.append({"origins": n, "exchange": label, "case": "in sync", **in_sync(a, b, settings)})
            for d, side in ((1, "pull"), (1, "push"), (10, "both")):
                rows.append({"origins": n, "exchange": label, "case": f"{d} diff ({side})",
                             **case(a, b, d, side, settings, reps, seed=n + d)})
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return 0
    print(f"{'origins':>9} {'exchange':<12} {'case':<15} {'bytes':>9} {'w/o rec':>9} {'RT':>4} {'RTmax':>5} "
          f"{'cpu ms':>8}")
    for row in rows:
        if "error" in row:
            print(f"{row['origins']:>9} {row['exchange']:<12} {row['case']:<15} {row['error']}")
            continue
        print(f"{row['origins']:>9} {row['exchange']:<12} {row['case']:<15} {row['bytes']:>9.0f} "
              f"{row.get('bytes_without_records', row['bytes']):>9.0f} {row['round_trips']:>4.0f} "
              f"{row.get('round_trips_max', row['round_trips']):>5} {row['cpu_ms']:>8}")
    print("bytes: message bytes both ways (no HTTP headers); w/o rec: less the records' own bytes "
          "(380 + 3 each); medians over repetitions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
