"""An honest in-sync exchange while attackers flood the same daemon with invalid requests.

A real ``neverestd`` (127.0.0.1, no zeroconf) holding ``--origins`` records; this process
holds the same records and runs in-sync exchanges with it one after the other, timing each
(wall clock).  Attackers are separate processes, each with one keep-alive connection from
127.0.0.2 (another loopback address, as another machine would be), posting as fast as the
daemon answers a well-formed SYNC addressed to the daemon, with a fresh timestamp and a
signature that does not verify (so every one costs the daemon a decode and an Ed25519
check).  When the daemon cuts an attacker off it answers 429 and closes the connection;
the attacker reconnects at once and goes on.

Measured, in one run: the median exchange with no attacker (the baseline), then with 1
and with 4 attackers; also with the cut-off disabled (``gossip_cutoff_after`` huge), which
shows what the checks before the store lock do alone.  Target: with 1 attacker, median
≤ 1.25 × the baseline.

    python benchmarks/bench_flood.py [--origins 1000] [--exchanges 200] [--attackers 1 4] [--json]
                                     [--attacker-address 127.0.0.1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).parent))
from bench_gossip import fill, records

from neverest.clock import SystemClock
from neverest.config import Config
from neverest.control import ask, running
from neverest.gossip.service import Gossip
from neverest.identity import Identity, load_or_create

ATTACKER = r"""
import sys, time, httpx, nacl.signing
from dataclasses import replace
from neverest.gossip import peer_auth
from neverest.gossip.codec import Auth, MessageType, Sync, encode, encode_body
url, to, seconds, local = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
key = nacl.signing.SigningKey(b"\x66" * 32)
body = encode_body(Sync(b"\x00" * 8, revision=2))
auth = peer_auth.sign(key, MessageType.SYNC, body, to=to, ts=int(time.time()), nonce=b"\x01" * 16)
bad = encode(MessageType.SYNC, replace(auth, sig=bytes(64)), body)  # well formed; does not verify
sent = refused = cut = 0
deadline = time.monotonic() + seconds
transport = httpx.HTTPTransport(local_address=local, retries=0)
with httpx.Client(transport=transport, timeout=5) as http:
    while time.monotonic() < deadline:
        try:
            status = http.post(url + "/gossip/v1/exchange", content=bad).status_code
        except httpx.HTTPError:
            continue
        sent += 1
        refused += status == 400
        cut += status == 429
print(sent, refused, cut)
"""


def start_daemon(home: Path, cutoff_after: int) -> tuple[subprocess.Popen[bytes], str, str]:
    # Both budgets: the attackers' requests do not verify, so they strike their address only.
    (home / "config.toml").write_text(f"gossip_every_s = 3600.0\ngossip_cutoff_after = {cutoff_after}\n"
                                      f"gossip_cutoff_address_after = {cutoff_after * 4}\n")
    proc = subprocess.Popen([sys.executable, "-m", "neverest.daemon", "--home", str(home), "--listen",
                             "127.0.0.1:0", "--no-mdns"], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not running(home):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            raise RuntimeError("neverestd did not start")
        time.sleep(0.05)
    status = ask(home, {"op": "status"})["status"]
    return proc, "http://" + status["listen"][0].split("//")[-1], status["origin"]


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def honest_exchanges(mine: Path, url: str, n: int, attackers: int, to: str, local: str) -> dict[str, Any]:
    """Median wall time of ``n`` in-sync exchanges while ``attackers`` processes flood ``url`` from ``local``."""
    flood = [subprocess.Popen([sys.executable, "-c", ATTACKER, url, to, "3600", local], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL) for _ in range(attackers)]
    try:
        time.sleep(1.0 if attackers else 0)  # the flood under way (and any cut-off already in force)

        async def main() -> list[float]:
            # The daemon runs on the real clock, and every run needs fresh nonces (else: replay).
            me = Gossip(mine, Config(), SystemClock(), Identity.from_seed(b"\x21" * 32), random.SystemRandom())
            times = []
            try:
                # Addressed to the daemon's origin, as a peer that knows it from its peer table: a first
                # contact (to no origin) carries no verified signature, so a cut-off address gets 429 for it.
                first = await me.exchange(url, to)
                for _ in range(n):
                    start = time.perf_counter()
                    result = await me.exchange(url, first.peer)
                    times.append(time.perf_counter() - start)
                    assert result.in_sync and result.error is None, result.to_json()
            finally:
                await me.aclose()
            return times

        times = trio.run(main)
    finally:
        for proc in flood:
            proc.terminate()
        for proc in flood:
            proc.wait(timeout=20)
    return {"attackers": attackers, "median_ms": round(statistics.median(times) * 1000, 3),
            "p90_ms": round(sorted(times)[int(len(times) * 0.9)] * 1000, 3)}


def run(tmp: Path, origins: int, n: int, attackers: list[int], cutoff_after: int,
        local: str = "127.0.0.2") -> list[dict[str, Any]]:
    home = tmp / f"daemon{cutoff_after}"
    recs = records(origins, 1)
    fill(home, recs)
    load_or_create(home)
    mine = tmp / f"me{cutoff_after}"
    fill(mine, recs)
    proc, url, origin = start_daemon(home, cutoff_after)
    try:
        # The row without attackers comes first: the honest peer has exchanged from 127.0.0.1 before any
        # flood (what lets it through when the attackers share its address, --attacker-address 127.0.0.1).
        rows = [honest_exchanges(mine, url, n, a, origin, local) for a in [0, *attackers]]
    finally:
        stop(proc)
    base = rows[0]["median_ms"]
    for row in rows:
        row["ratio"] = round(row["median_ms"] / base, 3)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--origins", type=int, default=1000)
    parser.add_argument("--exchanges", type=int, default=200)
    parser.add_argument("--attackers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--attacker-address", default="127.0.0.2",
                        help="where the attackers post from; 127.0.0.1: behind the honest peer's address (as one NAT)")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        with_cutoff = run(Path(tmp), args.origins, args.exchanges, args.attackers, Config().gossip_cutoff_after,
                          args.attacker_address)
        without = run(Path(tmp), args.origins, args.exchanges, args.attackers, 10**9, args.attacker_address)
    out = {"origins": args.origins, "exchanges": args.exchanges, "load": load, "cutoff": with_cutoff,
           "attacker_address": args.attacker_address,
           "no_cutoff": without, "target_ratio_1_attacker": 1.25}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"honest in-sync exchange under a flood of invalid requests from {args.attacker_address} "
              f"({args.origins} origins, {args.exchanges} exchanges each, load {load:.2f}):")
        for name, rows in (("cut-off on (default)", with_cutoff), ("cut-off off", without)):
            for row in rows:
                print(f"  {name:21s} {row['attackers']} attacker(s): median {row['median_ms']:7.3f} ms, "
                      f"p90 {row['p90_ms']:7.3f} ms = {row['ratio']:.2f} x no attacker"
                      + ("   (target <= 1.25)" if row["attackers"] == 1 else ""))
    one = [r for r in with_cutoff if r["attackers"] == 1]
    return 0 if not one or one[0]["ratio"] <= 1.25 else 1


if __name__ == "__main__":
    sys.exit(main())
