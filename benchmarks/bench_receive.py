"""Benchmark: receiving records from a shared folder into the store, against raw PyNaCl verification.

Builds a folder of files from 500 origins holding N signed records in all (lessons, and
confirmations of them), then runs `neverest.transports.folder.read_others` into fresh stores:
bounded line reading, verification, storing the bytes received and the merge rule, committed
in batches.  Twice, in the same run:

- in this process only (``verify_processes = 0``): the per-core figure;
- with one verifying process per CPU (the default): the machine's rate.

Baseline in the same run: libsodium's Ed25519 check (`crypto_sign_open`) over the same records,
already cut and decoded, on one core.  Each figure is given by wall clock and by CPU seconds
(this process and its verifying processes): the VM is shared, and CPU seconds say what the
work costs whatever the others leave us.  Peak RSS of the receiving process is reported to
show memory stays bounded.

``--threshold`` also measures, for batches of 1 to 256 lines, a batch verified here against
the same batch sent to a verifying process and back: where the trip starts to pay
(``memory.receive.POOL_MIN_LINES``).

Target (docs/figures.md): >= 0.7 x the raw verify rate per core.

``--distinct N`` measures instead a pull of N lessons that all differ in meaning, fed to one
``Receiver`` 2 500 lines at a time with the verifying processes on: each becomes a candidate, so
the same-meaning check compares it with every lesson held so far.  It prints the receiving thread's
CPU a record for each chunk of 2 500 (held lessons 0, 2 500, 5 000...): flat when that check costs
the same whatever the store holds.  With ``--before DIR`` the chunks are alternated as above.

``--before DIR`` runs the whole benchmark ``--rounds`` times in fresh processes, alternating this
tree's ``neverest`` with the one in ``DIR`` (a folder holding another tree's ``neverest``), and prints
each run's figures side by side: before and after on the same busy machine.

    python benchmarks/bench_receive.py [--records 100000] [--threshold] [--before DIR [--rounds 3]] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import cputime
import nacl.bindings
import nacl.signing
from alternate import alternate, medians  # the same folder: on sys.path when this script runs

from neverest import verify_pool
from neverest.config import Config
from neverest.identity import Identity
from neverest.memory.embed import HashedEmbedder
from neverest.memory.receive import Receiver, _verdicts
from neverest.memory.store import open_store
from neverest.records import lesson_hash, parse_many, sign_confirm, sign_lesson
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


def cut(lines: list[bytes]) -> list[tuple[bytes, bytes]]:
    pre = []
    for raw in lines:
        fields = json.loads(raw)
        sig = fields["sig"]
        pre.append((bytes.fromhex(sig) + raw.replace(b',"sig":"' + sig.encode() + b'"', b""),
                    bytes.fromhex(fields["key"])))
    return pre


def baseline(pre: list[tuple[bytes, bytes]]) -> dict[str, float]:
    """Raw crypto_sign_open on one core: records per wall second and per CPU second."""
    wall, cpu = time.perf_counter(), time.process_time()
    for message, key in pre:
        nacl.bindings.crypto_sign_open(message, key)
    return {"wall": len(pre) / (time.perf_counter() - wall), "cpu": len(pre) / (time.process_time() - cpu)}


def receive_once(folder: Path, home: Path, processes: int) -> dict[str, Any]:
    pool = verify_pool.shared(max(processes, 1)) if processes else None
    if pool is not None:  # started before timing: a daemon starts them once, not per sync
        jobs = [pool.submit("receive-batch", []) for _ in range(pool.processes)]
        for job in jobs:
            job.result()
    pids = pool.pids() if pool is not None else []
    store = open_store(home)
    me = Identity.from_seed(b"\x99" * 32)
    # The storage budget off: this measures the receive path, and one folder sync of 100 000 records
    # from strangers would otherwise stop at received_exchange_budget_bytes (bench_flood_storage.py
    # measures the budget).
    config = Config(verify_processes=processes, received_budget_bytes=0, received_origin_budget_bytes=0,
                    received_peer_budget_bytes=0, received_exchange_budget_bytes=0)
    wall, cpu = time.perf_counter(), cputime.total(pids)
    results = read_others(store, me, folder, config, NOW)
    wall, cpu = time.perf_counter() - wall, cputime.total(pids) - cpu
    accepted = sum(r.accepted for r in results.values())
    start = time.perf_counter()  # the next sync reads the same files again: all already held
    again = read_others(store, me, folder, config, NOW)
    resync = time.perf_counter() - start
    assert sum(r.duplicates for r in again.values()) == accepted
    store.close()
    return {"records": accepted, "files": len(results), "wall_s": wall, "cpu_s": cpu, "resync_s": resync,
            "per_s": accepted / wall, "per_cpu_s": accepted / cpu, "cores_used": cpu / wall}


def threshold(lines: list[bytes], pool: verify_pool.VerifyPool, repeat: int = 20) -> list[dict[str, float]]:
    """One batch verified here (and its lessons embedded) against the same batch sent to a verifying
    process, waited for and read back: the wall time (the latency a small exchange sees) and the
    receiving thread's CPU time (what the trip leaves this process for storing)."""
    out = []
    for n in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        batch = lines[:n]
        here, there, here_cpu, there_cpu = float("inf"), float("inf"), float("inf"), float("inf")
        for _ in range(repeat):
            start, cpu = time.perf_counter(), time.thread_time()
            records = [r for _, r in parse_many((None, line) for line in batch)]
            HashedEmbedder().embed([r.fields["text"] for r in records if r.type == "lesson"])  # type: ignore[union-attr]
            here, here_cpu = min(here, time.perf_counter() - start), min(here_cpu, time.thread_time() - cpu)
            start, cpu = time.perf_counter(), time.thread_time()
            list(_verdicts(list(batch), pool.submit("receive-batch", batch).result()))
            there, there_cpu = min(there, time.perf_counter() - start), min(there_cpu, time.thread_time() - cpu)
        out.append({"lines": n, "here_us": here * 1e6, "pool_us": there * 1e6, "here_cpu_us": here_cpu * 1e6,
                    "pool_cpu_us": there_cpu * 1e6})
    return out


def distinct(home: Path, n: int, chunk: int = 2_500) -> dict[str, Any]:
    """A pull of ``n`` lessons distinct in meaning (words of random letters, 250 origins), ``chunk`` lines at a
    time into one Receiver: the receiving thread's CPU a record for each chunk."""
    import random
    import string

    rng = random.Random(1)
    keys = [nacl.signing.SigningKey(i.to_bytes(32, "big")) for i in range(1, 251)]
    lines = [sign_lesson(keys[k % 250], kind="error", seen=1, strength=1.0, updated=AT, seq=k // 250 + 1,
                         text=" ".join("".join(rng.choices(string.ascii_lowercase, k=8)) for _ in range(5))).raw
             for k in range(n)]
    pool = verify_pool.shared(os.cpu_count() or 1)
    for job in [pool.submit("receive-batch", []) for _ in range(pool.processes)]:
        job.result()
    HashedEmbedder().embed(["numpy imported before timing"])
    config = Config(received_budget_bytes=0, received_origin_budget_bytes=0, received_peer_budget_bytes=0,
                    received_exchange_budget_bytes=0)
    store = open_store(home)
    per_chunk = []
    candidates = 0
    with Receiver(store, own_origin=Identity.from_seed(b"\x99" * 32).origin, config=config, now=NOW) as receiver:
        for at in range(0, n, chunk):
            cpu = time.thread_time()
            result = receiver.receive(lines[at:at + chunk], source="bench")
            receiver.flush()
            per_chunk.append(round((time.thread_time() - cpu) / len(lines[at:at + chunk]) * 1e6, 1))
            candidates += result.candidates
    store.close()
    return {"records": n, "candidates": candidates, "held_before_chunk": list(range(0, n, chunk)),
            "receiving_thread_us_per_record": per_chunk, "load": cputime.load()}


def _describe_distinct(r: dict[str, Any]) -> str:
    return (f"{r['candidates']} candidates; receiving thread us a record by chunk "
            f"{r['receiving_thread_us_per_record']}; {r['load']}")


def _describe_run(r: dict[str, Any], processes: int) -> str:
    return (f"here {r['alone_per_s']} records/s = {r['alone_ratio']:.3f} x, per CPU second "
            f"{r['alone_cpu_ratio']:.3f} x; {processes} processes {r['pool_per_s']} records/s = "
            f"{r['pool_ratio']:.3f} x ({r['pool_cores_used']} cores, per CPU second {r['pool_cpu_ratio']:.3f} x); "
            f"raw {r['baseline_crypto_sign_open_per_s']}/s; {r['load']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1,
                        help="verifying processes for the second run (default: one per CPU)")
    parser.add_argument("--threshold", action="store_true", help="also measure where the pool starts to pay")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--before", metavar="DIR", type=Path, help="also run with the neverest in DIR, alternated")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each tree with --before")
    parser.add_argument("--distinct", type=int, metavar="N", help="a pull of N lessons distinct in meaning instead")
    args = parser.parse_args(argv)
    if args.distinct is not None:
        if args.before is not None:
            alternate(__file__, ["--json", "--distinct", str(args.distinct)], args.before, args.rounds,
                      describe=_describe_distinct)
            return 0
        with tempfile.TemporaryDirectory() as tmp:
            out = distinct(Path(tmp) / "home", args.distinct)
        print(json.dumps(out) if args.json else _describe_distinct(out))
        return 0
    if args.before is not None:
        runs = alternate(__file__, ["--json", "--records", str(args.records), "--processes", str(args.processes)],
                         args.before, args.rounds, describe=lambda r: _describe_run(r, args.processes))
        summary = medians(runs, ("alone_per_s", "alone_ratio", "alone_cpu_ratio", "pool_per_s", "pool_ratio",
                                 "pool_cpu_ratio", "pool_cores_used", "baseline_crypto_sign_open_per_s"))
        if args.json:
            print(json.dumps({"rounds": runs, "median": summary}))
        else:
            for name, m in summary.items():
                print(f"{name:>6} ({len(runs[name])} rounds, medians): here {m['alone_per_s']:.0f} records/s ="
                      f" {m['alone_ratio']:.3f} x (per CPU second {m['alone_cpu_ratio']:.3f} x);"
                      f" {args.processes} processes {m['pool_per_s']:.0f} records/s = {m['pool_ratio']:.3f} x,"
                      f" {m['pool_cores_used']:.2f} cores, per CPU second {m['pool_cpu_ratio']:.3f} x;"
                      f" raw {m['baseline_crypto_sign_open_per_s']:.0f}/s")
        return 0
    load_before = cputime.load()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "shared"
        folder.mkdir()
        lines = build(folder, args.records)
        pre = cut(lines[: min(len(lines), 20_000)])
        base = baseline(pre)
        sample = lines[:256]
        del lines, pre
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        alone = receive_once(folder, Path(tmp) / "home1", 0)
        pooled = receive_once(folder, Path(tmp) / "home2", args.processes)
        base_after = baseline(cut(sample * 40))  # the baseline again, after: the VM's speed drifts
        rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        sweep = threshold(sample, verify_pool.shared(args.processes)) if args.threshold else []
    base_wall = (base["wall"] + base_after["wall"]) / 2
    base_cpu = (base["cpu"] + base_after["cpu"]) / 2
    result = {
        "records": alone["records"], "files": alone["files"], "load": load_before, "load_after": cputime.load(),
        "baseline_crypto_sign_open_per_s": round(base_wall), "baseline_per_cpu_s": round(base_cpu),
        "alone_per_s": round(alone["per_s"]), "alone_ratio": round(alone["per_s"] / base_wall, 3),
        "alone_per_cpu_s": round(alone["per_cpu_s"]), "alone_cpu_ratio": round(alone["per_cpu_s"] / base_cpu, 3),
        "processes": args.processes,
        "pool_per_s": round(pooled["per_s"]), "pool_ratio": round(pooled["per_s"] / base_wall, 3),
        "pool_per_cpu_s": round(pooled["per_cpu_s"]), "pool_cpu_ratio": round(pooled["per_cpu_s"] / base_cpu, 3),
        "pool_cores_used": round(pooled["cores_used"], 2),
        "target_ratio_per_core": 0.7,
        "resync_per_s": round(pooled["records"] / pooled["resync_s"]),
        "peak_rss_mb_before": round(rss_before, 1), "peak_rss_mb_after": round(rss_after, 1),
        "threshold": [{k: round(v) for k, v in row.items()} for row in sweep],
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"received {result['records']} records from {result['files']} files ({load_before})")
        print(f"  raw PyNaCl crypto_sign_open, one core  {result['baseline_crypto_sign_open_per_s']:>7} records/s"
              f"  ({result['baseline_per_cpu_s']} per CPU second)  (baseline)")
        print(f"  receive, this process only            {result['alone_per_s']:>7} records/s"
              f" = {result['alone_ratio']:.3f} x; per CPU second {result['alone_per_cpu_s']}"
              f" = {result['alone_cpu_ratio']:.3f} x   (target per core >= 0.7)")
        print(f"  receive, {args.processes} verifying processes       {result['pool_per_s']:>7} records/s"
              f" = {result['pool_ratio']:.3f} x one core, using {result['pool_cores_used']} cores;"
              f" per CPU second {result['pool_per_cpu_s']} = {result['pool_cpu_ratio']:.3f} x")
        print(f"  the same folder read again (all held): {result['resync_per_s']} records/s")
        print(f"  peak RSS {rss_before:.0f} MB before receiving (records built in memory), {rss_after:.0f} MB after"
              f" (the verifying processes not included)")
        for row in result["threshold"]:
            print(f"  a batch of {row['lines']:>3} lines: here {row['here_us']:>6} us ({row['here_cpu_us']:>6} us CPU),"
                  f" through a verifying process {row['pool_us']:>6} us ({row['pool_cpu_us']:>6} us CPU here)")
        print(f"  ({result['load_after']} at the end)")
    return 0 if alone["per_cpu_s"] / base_cpu >= 0.7 else 1


if __name__ == "__main__":
    sys.exit(main())
