"""Benchmark: a stranger's flood against the storage budget, and what the budget check costs.

1. **The attack** (issue 13): a peer with a fresh key holds 15 000 valid records from 1 000 origins it
   made (about 1.3 KB each, 19.5 MB) and pushes them to a memory through the real gossip core
   (``gossip.loopback``: real stores, the real ``Initiator``/``Responder`` bytes and receive function),
   exchange after exchange until one carries nothing.  Run three times in one process: with the
   budget off (``received_*_budget_bytes = 0``: today's behaviour, the baseline), with the default
   config, and with a tight one.  Reported: records and bytes stored, exchanges that carried records,
   seconds, and whether the last exchange was one round trip in sync (the flood does not loop).
2. **The cost per received record** of the budget check: 3 000 new small records from 300 origins
   received (``memory.receive``, 200 records per call as gossip messages come) into a store already
   holding 20 000 records of 2 000 origins, with the default budget against today's plain receive (budget
   off and the usage triggers dropped), best of 3 runs each, interleaved; the figure is the ratio and
   the difference in microseconds, beside raw PyNaCl verification of the same records.

    python benchmarks/bench_flood_storage.py [--quick] [--json] [--no-cost] [--identities N [--pool-mb MB]]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nacl.signing

from neverest.clock import iso
from neverest.config import Config
from neverest.gossip.loopback import Cluster, Node
from neverest.memory import holdings
from neverest.memory.queries import budget
from neverest.memory.receive import receive
from neverest.memory.store import open_store
from neverest.records import WIRE_VERSION, canonical, lesson_hash, origin_of, parse

NOW = datetime(2026, 4, 1, 12, tzinfo=UTC)
OFF = Config(received_budget_bytes=0, received_origin_budget_bytes=0, received_peer_budget_bytes=0,
             received_exchange_budget_bytes=0, received_untrusted_budget_bytes=0,
             received_stranger_peer_budget_bytes=0)
TIGHT = Config(received_budget_bytes=8 * 1024 * 1024, received_origin_budget_bytes=16 * 1024,
               received_peer_budget_bytes=4 * 1024 * 1024, received_exchange_budget_bytes=1024 * 1024)


def key(n: int) -> nacl.signing.SigningKey:
    return nacl.signing.SigningKey(n.to_bytes(4, "big") * 8)


def record(k: nacl.signing.SigningKey, seq: int) -> bytes:
    """A valid lesson of about 1.3 KB with words of its own (so that each is a new candidate)."""
    seed = hashlib.blake2b(bytes(k.verify_key) + seq.to_bytes(4, "big"), digest_size=32).digest()
    words = " ".join(hashlib.blake2b(seed + bytes([i]), digest_size=4).hexdigest() for i in range(110))
    return _signed(k, seq, f"pytest hangs when cache {seq} is cold, seen with {words}")


def flood(origins: int, per: int, first: int = 10_000) -> list[bytes]:
    return [record(key(first + o), s) for o in range(origins) for s in range(1, per + 1)]


def plant(store_home: Path, raws: list[bytes], source: str = "bench") -> None:
    with open_store(store_home) as store, store.write() as db:
        for raw in raws:
            holdings.put(db, parse(raw), source=source, now=NOW)


def attack(root: Path, raws: list[bytes], config: Config, name: str, identities: int = 1) -> dict[str, Any]:
    """The flood pushed by ``identities`` attackers, each a fresh key with its share of the origins
    (keys are free: issue 26), one after the other, each until an exchange carries nothing."""
    share = -(-len(raws) // identities)
    parts = [raws[k:k + share] for k in range(0, len(raws), share)]
    cluster = Cluster(root, 0)
    victim = Node(root / "victim", bytes([1]) * 32, config=config)
    cluster.nodes.append(victim)
    for k, part in enumerate(parts):
        plant(root / f"attacker{k}", part)
        cluster.nodes.append(Node(root / f"attacker{k}", (99 + k).to_bytes(2, "big") * 16, config=OFF))
    rng = random.Random(7)
    start = time.perf_counter()
    carried = 0
    try:
        for a in range(1, len(cluster.nodes)):
            for _ in range(400):
                result = cluster.exchange(a, 0, now=NOW, rng=rng)
                if result.error is not None:
                    raise SystemExit(f"{name}: the exchange failed: {result.error}")
                if not result.records_sent + result.records_received:
                    break
                carried += 1
        seconds = time.perf_counter() - start
        last = cluster.exchange(1, 0, now=NOW, rng=rng)
        n, size = budget.received_bytes(victim.store.db, victim.origin)
        by_peer: dict[str, int] = {}
        for row in budget.usage(victim.store.db, victim.origin):
            by_peer[row.peer] = by_peer.get(row.peer, 0) + row.size
        # Both budget reasons (the pool shared by untrusted origins has its own, untrusted-full).
        over = sum(r.count for r in holdings.refusals(victim.store.db) if r.reason in ("over-budget", "untrusted-full"))
        return {"config": name, "identities": len(parts), "budget_bytes": config.received_budget_bytes,
                "peer_budget_bytes": config.received_peer_budget_bytes,
                "stranger_peer_budget_bytes": config.received_stranger_peer_budget_bytes,
                "untrusted_budget_bytes": config.received_untrusted_budget_bytes, "offered": len(raws), "stored": n,
                "stored_bytes": size, "most_bytes_one_identity": max(by_peer.values(), default=0),
                "refused_over_budget": over, "exchanges_with_records": carried, "seconds": round(seconds, 2),
                # With several identities the victim holds what the first one lacks: not in sync then.
                "then_in_sync_in_one_round_trip": last.in_sync and last.round_trips == 1}
    finally:
        cluster.close()


def short_record(k: nacl.signing.SigningKey, seq: int) -> bytes:
    """A small valid lesson (as bench_receive.py's), so that the receive path is not dominated by
    embedding a long text and the budget's share shows."""
    return _signed(k, seq, f"Tool {bytes(k.verify_key)[:4].hex()} fails in case {seq} when the cache is cold")


def _signed(k: nacl.signing.SigningKey, seq: int, text: str) -> bytes:
    """The signed bytes of an error lesson with ``text`` at ``seq``."""
    public = bytes(k.verify_key)
    fields: dict[str, Any] = {"hash": lesson_hash("error", text), "kind": "error", "text": text, "seen": 1,
                              "strength": 1.0, "updated": iso(NOW), "seq": seq, "v": WIRE_VERSION,
                              "key": public.hex(), "origin": origin_of(public)}
    fields["sig"] = k.sign(canonical(fields)).signature.hex()
    return canonical(fields)


def _plain(home: Path) -> None:
    """Today's receive path: no usage triggers (the budget is off as well)."""
    with open_store(home) as store, store.write() as db:
        # IF EXISTS: the usage has since been written once per batch (only a delete trigger may be left).
        db.execute("DROP TRIGGER IF EXISTS records_usage_in")
        db.execute("DROP TRIGGER IF EXISTS records_usage_out")


def cost(root: Path, held: int, incoming: int, repeats: int) -> dict[str, Any]:
    """Microseconds per received record with the budget on (default config) and with today's plain
    receive, into copies of one pre-filled store; the best of ``repeats`` runs of each, interleaved."""
    base = root / "base"
    plant(base, [short_record(key(50_000 + o), s) for o in range(held // 10) for s in range(1, 11)],
          source="gossip:prefill")
    fresh = [short_record(key(90_000 + o), s) for o in range(incoming // 10) for s in range(1, 11)]
    best: dict[str, float] = {}
    for run in range(repeats):
        for name, config in (("plain", OFF), ("budget", Config())):
            home = root / f"{name}{run}"
            shutil.copytree(base, home)
            if name == "plain":
                _plain(home)
            with open_store(home) as store:
                start = time.perf_counter()
                for i in range(0, len(fresh), 200):
                    receive(store, fresh[i:i + 200], source="gossip:bench", own_origin="f" * 16, config=config,
                            now=NOW)
                took = (time.perf_counter() - start) / len(fresh) * 1e6
                assert holdings.count(store.db) == held + incoming, "every record should have been admitted"
            best[name] = min(best.get(name, took), took)
            shutil.rmtree(home)
    pre = [(parse(r), r) for r in fresh]
    start = time.perf_counter()
    for rec, raw in pre:
        obj = json.loads(raw)
        sig = bytes.fromhex(obj.pop("sig"))
        nacl.signing.VerifyKey(bytes.fromhex(rec.key)).verify(canonical(obj), sig)
    return {"held_records": held, "incoming_records": incoming, "repeats": repeats,
            "us_per_record_plain": round(best["plain"], 1), "us_per_record_budget": round(best["budget"], 1),
            "us_per_record_budget_check": round(best["budget"] - best["plain"], 1),
            "budget_over_plain": round(best["budget"] / best["plain"], 3),
            "us_per_record_raw_verify": round((time.perf_counter() - start) / len(pre) * 1e6, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200 origins in the flood, a smaller store")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-cost", action="store_true", help="the attacks only, not the cost per record")
    parser.add_argument("--identities", type=int, default=0,
                        help="also push the flood from this many fresh keys (the default config but the pool)")
    parser.add_argument("--pool-mb", type=int, default=8, help="the untrusted pool for --identities, in MB")
    args = parser.parse_args()
    origins = 200 if args.quick else 1000
    raws = flood(origins, 15)
    report: dict[str, Any] = {"load_average": os.getloadavg()[0], "attacks": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name, config in (("budget off (baseline)", OFF), ("default config", Config()), ("tight config", TIGHT)):
            root = Path(tmp) / name.split()[0]
            report["attacks"].append(attack(root, raws, config, name))
        if args.identities > 1:  # the same flood from many fresh keys, against a pool small enough to fill
            name = f"{args.identities} identities, pool {args.pool_mb} MB"
            config = Config(received_untrusted_budget_bytes=args.pool_mb * 1_000_000)
            report["attacks"].append(attack(Path(tmp) / "identities", raws, config, name, args.identities))
        report["cost"] = None if args.no_cost else cost(Path(tmp) / "cost", 4_000 if args.quick else 20_000,
                                                        1_000 if args.quick else 3_000, 2 if args.quick else 3)
    report["load_average_after"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(report))
        return
    print(f"flood: {len(raws)} records from {origins} origins, {sum(map(len, raws)) / 1e6:.1f} MB "
          f"(load average {report['load_average']:.2f})")
    for a in report["attacks"]:
        print(f"  {a['config']:<22} stored {a['stored']:>6} records, {a['stored_bytes'] / 1e6:6.2f} MB, at most "
              f"{a['most_bytes_one_identity'] / 1e6:.2f} MB from one identity (budget {a['budget_bytes'] / 2**20:.0f} "
              f"MiB, per peer {a['peer_budget_bytes'] / 2**20:.0f} MiB, per stranger peer "
              f"{a['stranger_peer_budget_bytes'] / 1e6:.1f} MB, untrusted pool {a['untrusted_budget_bytes'] / 1e6:.0f} "
              f"MB); "
              f"refused {a['refused_over_budget']}; {a['exchanges_with_records']} exchanges, {a['seconds']} s; "
              f"then in sync in 1 round trip: {a['then_in_sync_in_one_round_trip']}")
    c = report["cost"]
    if c is None:
        return
    print(f"receive of {c['incoming_records']} small records into a store of {c['held_records']}, best of "
          f"{c['repeats']}: plain {c['us_per_record_plain']} us/record, with the budget {c['us_per_record_budget']} "
          f"us/record ({c['budget_over_plain']} x; the check costs {c['us_per_record_budget_check']} us/record); "
          f"raw PyNaCl verify {c['us_per_record_raw_verify']} us/record "
          f"(load average after {report['load_average_after']:.2f})")


if __name__ == "__main__":
    sys.exit(main())
