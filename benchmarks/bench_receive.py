"""Benchmark: receiving 100 000 records from a shared folder, against raw PyNaCl verification.

Builds a folder of files from 500 origins holding 100 000 signed records in all
(lessons, and confirmations of them), then runs `neverest.transports.folder.read_others`
into a fresh store: bounded line reading, verification, storing the bytes received
and the merge rule, committed in batches.  Baseline in the same run: libsodium's
Ed25519 check (`crypto_sign_open`) over the same records, already cut and decoded.
Peak RSS of the receiving process is reported to show memory stays bounded.

Target (README, "Figures"): ≥ 0.7 × the raw verify rate.

    python benchmarks/bench_receive.py [--records 100000] [--json]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import nacl.bindings
import nacl.signing

from neverest.config import Config
from neverest.identity import Identity
from neverest.memory.store import open_store
from neverest.records import lesson_hash, sign_confirm, sign_lesson
from neverest.transports.folder import read_others

AT = "2026-04-01T12:00:00.000000Z"
NOW = datetime(2026, 4, 2, tzinfo=UTC)


def build(folder: Path, n: int, origins: int = 500) -> list[bytes]:
    keys = [nacl.signing.SigningKey(i.to_bytes(32, "big")) for i in range(1, origins + 1)]
    per = n // origins
    out: list[bytes] = []
    for o, key in enumerate(keys):
        lines = []
        for i in range(per):
            if i % 2 == 0:  # a lesson of its own
                text = f"Tool {o} fails in case {i} when the cache is cold"
                raw = sign_lesson(key, kind="error", text=text, seen=1, strength=1.0, updated=AT, seq=i + 1).raw
            else:  # a confirmation of another origin's lesson
                target = lesson_hash("error", f"Tool {(o + 1) % origins} fails in case {i - 1} when the cache is cold")
                raw = sign_confirm(key, target, at=AT, seq=i + 1).raw
            lines.append(raw)
        (folder / f"{Identity.from_seed(bytes(key)).origin}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
        out.extend(lines)
    return out


def baseline_rate(lines: list[bytes]) -> float:
    pre = []
    for raw in lines:
        fields = json.loads(raw)
        sig = fields["sig"]
        pre.append((bytes.fromhex(sig) + raw.replace(b',"sig":"' + sig.encode() + b'"', b""),
                    bytes.fromhex(fields["key"])))
    start = time.perf_counter()
    for message, key in pre:
        nacl.bindings.crypto_sign_open(message, key)
    return len(pre) / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder, home = Path(tmp) / "shared", Path(tmp) / "home"
        folder.mkdir()
        lines = build(folder, args.records)
        base = baseline_rate(lines[: min(len(lines), 20_000)])
        del lines
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        store = open_store(home)
        me = Identity.from_seed(b"\x99" * 32)
        start = time.perf_counter()
        results = read_others(store, me, folder, Config(), NOW)
        wall = time.perf_counter() - start
        accepted = sum(r.accepted for r in results.values())
        rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        start = time.perf_counter()  # the next sync reads the same files again: all already held
        again = read_others(store, me, folder, Config(), NOW)
        resync = time.perf_counter() - start
        assert sum(r.duplicates for r in again.values()) == accepted
        store.close()
    rate = accepted / wall
    result = {"records": accepted, "files": len(results), "receive_per_s": round(rate),
              "baseline_crypto_sign_open_per_s": round(base), "ratio": round(rate / base, 3), "target_ratio": 0.7,
              "wall_s": round(wall, 1), "peak_rss_mb_before": round(rss_before, 1),
              "peak_rss_mb_after": round(rss_after, 1), "resync_s": round(resync, 2),
              "resync_per_s": round(accepted / resync)}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"received {accepted} records from {len(results)} files in {wall:.1f} s")
        print(f"  raw PyNaCl crypto_sign_open   {result['baseline_crypto_sign_open_per_s']:>8} records/s  (baseline)")
        print(f"  folder receive into the store {result['receive_per_s']:>8} records/s  = {result['ratio']:.3f} x"
              f" baseline (target >= 0.7)")
        print(f"  the same folder read again (all held): {result['resync_per_s']} records/s, {resync:.1f} s")
        print(f"  peak RSS {rss_before:.0f} MB before receiving (records built in memory), {rss_after:.0f} MB after")
    return 0 if rate / base >= 0.7 else 1


if __name__ == "__main__":
    sys.exit(main())
