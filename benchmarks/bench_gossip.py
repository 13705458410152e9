"""Benchmarks of gossip over real HTTP on 127.0.0.1 (hypercorn + httpx, the daemon's own code).

1. Bytes for an exchange between two peers already in sync, at 1 000 and 10 000 origins:
   message bodies as the exchange counts them, plus the HTTP headers of the request and
   the answer as sent.  Target (docs/figures.md): ≤ 1 KB.
2. Records per second pulled from one peer into an empty store (verification, storage
   and the merge rule included), against raw PyNaCl verification of the same records on one
   core, twice: verified in this process only, and with one verifying process per CPU
   (``verify_pool``, the default).  The rate, the rate per core used (CPU seconds of this
   process and its verifying processes over the wall time), and records per CPU second.
   Targets: ≥ 0.7 × raw verify per core, and ≥ 5 000 records/s.  The records are lessons whose texts
   all mean the same (one candidate, then corroborations), or with ``--distinct`` lessons that each
   mean something else (a candidate per record, compared with every lesson stored before it): what
   fetching a whole memory one never met costs.

``--before DIR`` runs the pull (section 2, as without it) ``--rounds`` times in fresh processes,
alternating this tree's ``neverest`` with the one in ``DIR`` (a folder holding another tree's
``neverest``, e.g. ``git archive main neverest | tar -x -C DIR``), each against its own raw verify
measured in the same process: before and after on the same busy machine, minutes apart at most.

    python benchmarks/bench_gossip.py [--records 20000] [--pull-only] [--distinct] [--before DIR [--rounds 3]] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import cputime
import nacl.bindings
import nacl.signing
import trio
from alternate import alternate, medians  # the same folder: on sys.path when this script runs

from neverest import verify_pool
from neverest.clock import FixedClock
from neverest.config import Config
from neverest.gossip import http
from neverest.gossip.codec import MAX_MESSAGE_BYTES
from neverest.gossip.service import Gossip
from neverest.identity import Identity
from neverest.memory import holdings
from neverest.memory.embed import HashedEmbedder
from neverest.memory.store import open_store
from neverest.peers import table
from neverest.records import Record, sign_lesson

NOW = datetime(2026, 4, 2, tzinfo=UTC)
AT = "2026-04-01T12:00:00.000000Z"


def distinct_texts(n: int) -> list[str]:
    """``n`` texts that mean different things in the hashed space: nine words each, drawn from 5 000
    words made of syllables (no word reads as an instruction, none looks like a path or a token).  Two
    of them share a word or two at most, far under the join cosine; the pull then creates a candidate
    per record, as it does when it fetches a memory whose lessons it never met."""
    rng = random.Random(7)
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "ze", "pi", "su", "de", "fa", "go", "hu", "ji", "by"]
    words = sorted({"".join(rng.choice(syllables) for _ in range(3)) for _ in range(5000)})
    return [" ".join(rng.choice(words) for _ in range(9)) for _ in range(n)]


def records(origins: int, per_origin: int, *, distinct: bool = False) -> list[Record]:
    """``origins`` × ``per_origin`` lesson records.  By default their texts differ by two numbers only, so
    they all mean the same in the hashed space: the pull makes one candidate, which every other record
    corroborates (the figures of docs/figures.md before the sixth round).  ``distinct``: each its own."""
    texts = distinct_texts(origins * per_origin) if distinct else None
    out = []
    for o in range(origins):
        key = nacl.signing.SigningKey((o + 1).to_bytes(32, "big"))
        for s in range(1, per_origin + 1):
            text = texts[o * per_origin + s - 1] if texts else f"Tool {o} fails in case {s} on the runner"
            out.append(sign_lesson(key, kind="error", text=text, seen=1, strength=1.0, updated=AT, seq=s))
    return out


def fill(home: Path, recs: list[Record]) -> None:
    with open_store(home) as store, store.write() as db:
        for r in recs:
            holdings.put(db, r, source="bench", now=NOW)


async def serve_and(home: Path, seed: bytes, work: Any) -> Any:
    clock = FixedClock(NOW)
    server = Gossip(home, Config(), clock, Identity.from_seed(seed), random.Random(1))
    try:
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(http.serve, http.GossipApp(server.respond, max_body_bytes=MAX_MESSAGE_BYTES),
                                        "127.0.0.1:0")
            result = await work("http://" + binds[0].split("//")[-1], clock)
            nursery.cancel_scope.cancel()
        return result
    finally:
        await server.aclose()


def in_sync_bytes(tmp: Path, origins: int) -> dict[str, int]:
    recs = records(origins, 1)
    fill(tmp / f"a{origins}", recs)
    fill(tmp / f"b{origins}", recs)
    headers: list[int] = []

    async def count(request: Any) -> None:
        headers.append(sum(len(k) + len(v) + 4 for k, v in request.headers.raw) + len(request.url.raw_path) + 20)

    async def count_response(response: Any) -> None:
        headers.append(sum(len(k) + len(v) + 4 for k, v in response.headers.raw) + 17)

    async def work(url: str, clock: FixedClock) -> dict[str, int]:
        me = Gossip(tmp / f"a{origins}", Config(), clock, Identity.from_seed(b"\x21" * 32), random.Random(2))
        try:
            me.http.event_hooks = {"request": [count], "response": [count_response]}
            await me.exchange(url, None)  # first contact: learns the peer's origin
            headers.clear()
            result = await me.exchange(url, Identity.from_seed(b"\x22" * 32).origin)
        finally:
            await me.aclose()
        assert result.in_sync and result.round_trips == 1, result
        body = result.bytes_sent + result.bytes_received
        return {"origins": origins, "body_bytes": body, "header_bytes": sum(headers),
                "total_bytes": body + sum(headers)}

    return trio.run(serve_and, tmp / f"b{origins}", b"\x22" * 32, work)


def pull_rate(tmp: Path, n: int, *, alone: bool = True, distinct: bool = False) -> dict[str, Any]:
    recs = records(500, max(1, n // 500), distinct=distinct)
    fill(tmp / "source", recs)
    pre = [(bytes.fromhex(r.fields["sig"]) + r.raw.replace(b',"sig":"' + r.fields["sig"].encode() + b'"', b""),
            bytes.fromhex(r.key)) for r in recs]

    def baseline() -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        for message, key in pre:
            nacl.bindings.crypto_sign_open(message, key)
        return len(pre) / (time.perf_counter() - wall), len(pre) / (time.process_time() - cpu)

    def pull(home: Path, processes: int) -> dict[str, float]:
        pool = verify_pool.shared(os.cpu_count() or 1) if processes else None
        if pool is not None:  # started before timing: a daemon starts them once, not per exchange
            for job in [pool.submit("receive-batch", []) for _ in range(pool.processes)]:
                job.result()
        pids = pool.pids() if pool is not None else []
        HashedEmbedder().embed(["numpy imported before timing, as a daemon's first receive did long ago"])

        async def work(url: str, clock: FixedClock) -> dict[str, float]:
            # A peer added by hand (`neverestctl peers add`), as one pulls a whole memory from: a stranger's
            # records would stop at the storage budget's 2 MB bound (admission.py).
            with open_store(home) as store, store.write() as db:
                table.add(db, url, source="manual", now=NOW)
            me = Gossip(home, Config(verify_processes=processes), clock, Identity.from_seed(b"\x23" * 32),
                        random.Random(3))
            try:
                start, cpu = time.perf_counter(), cputime.total(pids)
                got = 0
                for _ in range(1000):
                    result = await me.exchange(url, None)
                    got += result.applied.accepted
                    if result.in_sync or result.error is not None:
                        break
                wall, cpu = time.perf_counter() - start, cputime.total(pids) - cpu
            finally:
                await me.aclose()
            assert got == len(recs), (got, len(recs))
            return {"per_s": got / wall, "per_cpu_s": got / cpu, "cores": cpu / wall}

        return trio.run(serve_and, tmp / "source", b"\x24" * 32, work)  # type: ignore[no-any-return]

    base_wall, base_cpu = baseline()
    here = pull(tmp / "empty1", 0) if alone else None
    pooled = pull(tmp / "empty2", -1)
    after_wall, after_cpu = baseline()  # again after: the VM's speed drifts
    base_wall, base_cpu = (base_wall + after_wall) / 2, (base_cpu + after_cpu) / 2
    out: dict[str, Any] = {"records": len(recs), "distinct": distinct,
                           "baseline_crypto_sign_open_per_s": round(base_wall), "baseline_per_cpu_s": round(base_cpu)}
    if here is not None:
        out.update(alone_per_s=round(here["per_s"]), alone_ratio=round(here["per_s"] / base_wall, 3),
                   alone_cpu_ratio=round(here["per_cpu_s"] / base_cpu, 3))
    return out | {
            "pull_per_s": round(pooled["per_s"]), "ratio": round(pooled["per_s"] / base_wall, 3),
            "per_core_ratio": round(pooled["per_s"] / base_wall / pooled["cores"], 3),
            "cpu_ratio": round(pooled["per_cpu_s"] / base_cpu, 3), "cores_used": round(pooled["cores"], 2),
            "target_ratio": 0.7, "target_per_s": 5000, "load": "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())}


def _describe_pull(pull: dict[str, Any]) -> str:
    return (f"{pull['pull_per_s']} records/s = {pull['ratio']:.3f} x raw "
            f"({pull['baseline_crypto_sign_open_per_s']}/s), {pull['cores_used']} cores, "
            f"per CPU second {pull['cpu_ratio']:.3f} x; load {pull['load']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--pull-only", action="store_true", help="skip section 1")
    parser.add_argument("--pooled-only", action="store_true", help="skip the pull verified in this process only")
    parser.add_argument("--distinct", action="store_true",
                        help="pull lessons that each mean something else (a candidate per record), not one meaning")
    parser.add_argument("--before", metavar="DIR", type=Path, help="also pull with the neverest in DIR, alternated")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each tree with --before")
    args = parser.parse_args(argv)
    if args.before is not None:
        runs = alternate(__file__, ["--pull-only", "--json", "--records", str(args.records)]
                         + (["--distinct"] if args.distinct else []), args.before,
                         args.rounds, describe=_describe_pull, pick=lambda out: out["pull"])
        summary = medians(runs, ("pull_per_s", "ratio", "cpu_ratio", "cores_used", "baseline_crypto_sign_open_per_s"))
        if args.json:
            print(json.dumps({"rounds": runs, "median": summary}))
        else:
            for name, m in summary.items():
                print(f"{name:>6} ({len(runs[name])} rounds, medians): {m['pull_per_s']:.0f} records/s = "
                      f"{m['ratio']:.3f} x one core's raw verify ({m['baseline_crypto_sign_open_per_s']:.0f}/s), "
                      f"{m['cores_used']:.2f} cores, per CPU second {m['cpu_ratio']:.3f} x")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        sync = [] if args.pull_only else [in_sync_bytes(Path(tmp), n) for n in (1_000, 10_000)]
        pull = pull_rate(Path(tmp), args.records, alone=not args.pooled_only, distinct=args.distinct)
    result = {"in_sync": sync, "pull": pull}
    if args.json:
        print(json.dumps(result))
    else:
        for s in sync:
            print(f"in-sync exchange, {s['origins']:>6} origins: {s['total_bytes']} bytes on the wire "
                  f"({s['body_bytes']} message + {s['header_bytes']} HTTP headers)   (target <= 1024)")
        print(f"pull of {pull['records']} records over HTTP into an empty store,"
              f" {'each lesson its own meaning' if pull['distinct'] else 'all of one meaning'}"
              f" (load average {pull['load']}),"
              f" raw crypto_sign_open {pull['baseline_crypto_sign_open_per_s']}/s on one core"
              f" ({pull['baseline_per_cpu_s']} per CPU second):")
        if "alone_per_s" in pull:
            print(f"  verified in this process only: {pull['alone_per_s']} records/s = {pull['alone_ratio']:.3f} x;"
                  f" per CPU second {pull['alone_cpu_ratio']:.3f} x")
        print(f"  with one verifying process per CPU: {pull['pull_per_s']} records/s (target >= 5000)"
              f" = {pull['ratio']:.3f} x one core's raw verify, using {pull['cores_used']} cores:"
              f" {pull['per_core_ratio']:.3f} x per core used (target >= 0.7);"
              f" per CPU second {pull['cpu_ratio']:.3f} x")
        print("  (both peers run in this process: the serving side's CPU is counted too)")
    return 0 if all(s["total_bytes"] <= 1024 for s in sync) and pull["per_core_ratio"] >= 0.7 \
        and pull["pull_per_s"] >= 5000 else 1


if __name__ == "__main__":
    sys.exit(main())
