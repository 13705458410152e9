"""Benchmarks of gossip over real HTTP on 127.0.0.1 (hypercorn + httpx, the daemon's own code).

1. Bytes for an exchange between two peers already in sync, at 1 000 and 10 000 origins:
   message bodies as the exchange counts them, plus the HTTP headers of the request and
   the answer as sent.  Target (README, "Figures"): ≤ 1 KB.
2. Records per second pulled from one peer into an empty store (verification, storage
   and the merge rule included), against raw PyNaCl verification of the same records.
   Target: ≥ 0.7 × raw verify.

    python benchmarks/bench_gossip.py [--records 20000] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nacl.bindings
import nacl.signing
import trio

from neverest.clock import FixedClock
from neverest.config import Config
from neverest.gossip import http
from neverest.gossip.codec import MAX_MESSAGE_BYTES
from neverest.gossip.service import Gossip
from neverest.identity import Identity
from neverest.memory import holdings
from neverest.memory.store import open_store
from neverest.records import Record, sign_lesson

NOW = datetime(2026, 4, 2, tzinfo=UTC)
AT = "2026-04-01T12:00:00.000000Z"


def records(origins: int, per_origin: int) -> list[Record]:
    out = []
    for o in range(origins):
        key = nacl.signing.SigningKey((o + 1).to_bytes(32, "big"))
        for s in range(1, per_origin + 1):
            out.append(sign_lesson(key, kind="error", text=f"Tool {o} fails in case {s} on the runner", seen=1,
                                   strength=1.0, updated=AT, seq=s))
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


def pull_rate(tmp: Path, n: int) -> dict[str, float]:
    recs = records(500, max(1, n // 500))
    fill(tmp / "source", recs)
    pre = [(bytes.fromhex(r.fields["sig"]) + r.raw.replace(b',"sig":"' + r.fields["sig"].encode() + b'"', b""),
            bytes.fromhex(r.key)) for r in recs]
    start = time.perf_counter()
    for message, key in pre:
        nacl.bindings.crypto_sign_open(message, key)
    baseline = len(pre) / (time.perf_counter() - start)

    async def work(url: str, clock: FixedClock) -> float:
        me = Gossip(tmp / "empty", Config(), clock, Identity.from_seed(b"\x23" * 32), random.Random(3))
        try:
            start = time.perf_counter()
            got = 0
            for _ in range(1000):
                result = await me.exchange(url, None)
                got += result.applied.accepted
                if result.in_sync or result.error is not None:
                    break
            wall = time.perf_counter() - start
        finally:
            await me.aclose()
        assert got == len(recs), (got, len(recs))
        return got / wall

    rate = trio.run(serve_and, tmp / "source", b"\x24" * 32, work)
    return {"records": len(recs), "pull_per_s": round(rate), "baseline_crypto_sign_open_per_s": round(baseline),
            "ratio": round(rate / baseline, 3), "target_ratio": 0.7}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        sync = [in_sync_bytes(Path(tmp), n) for n in (1_000, 10_000)]
        pull = pull_rate(Path(tmp), args.records)
    result = {"in_sync": sync, "pull": pull}
    if args.json:
        print(json.dumps(result))
    else:
        for s in sync:
            print(f"in-sync exchange, {s['origins']:>6} origins: {s['total_bytes']} bytes on the wire "
                  f"({s['body_bytes']} message + {s['header_bytes']} HTTP headers)   (target <= 1024)")
        print(f"pull of {pull['records']} records over HTTP into an empty store: {pull['pull_per_s']} records/s"
              f" = {pull['ratio']:.3f} x raw crypto_sign_open ({pull['baseline_crypto_sign_open_per_s']}/s)"
              f"   (target >= 0.7)")
    return 0 if all(s["total_bytes"] <= 1024 for s in sync) and pull["ratio"] >= 0.7 else 1


if __name__ == "__main__":
    sys.exit(main())
