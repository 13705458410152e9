"""Idle gossip: N real ``neverestd`` processes on 127.0.0.1, gossiping every second, in sync.

Each daemon has its own home in a temporary folder, listens on its own loopback port, has
zeroconf off, and is given 3 random others as static ``peers`` (it meets the rest through peer
exchange).  After a warm-up, over a window of ``--seconds``, per daemon: CPU (``/proc/PID/stat``,
user + system) as a share of one core, open descriptors at the start and the end of the window,
and for the whole group the TCP sockets on their ports by state (``ss -tan``).  Baseline in the
same run: the same N daemons with ``gossip_every_s`` = 3600, which never gossip in the window
(what a daemon costs doing nothing).

Rounds are paced (``gossip/pace.py``): in sync round after round, a daemon's waits grow from the
period up to ``gossip_quiet_every_s`` (60 s).  The same daemons are also measured with pacing off
(``gossip_quiet_every_s`` = the period), and each row gives the exchanges a daemon started per second.

Target (issue 13): ≤ 1 % of a core each at N = 30 with a 1 s period; descriptors bounded.

    python benchmarks/bench_idle.py [--nodes 30] [--seconds 30] [--warmup 15] [--json]

Every process it starts is stopped at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from neverest.control import ask, running

TICKS = os.sysconf("SC_CLK_TCK")


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def socket_states(ports: set[int]) -> dict[str, int]:
    out = subprocess.run(["ss", "-tanH"], capture_output=True, text=True, check=False).stdout
    states: collections.Counter[str] = collections.Counter()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 5:
            continue
        if _port(parts[3]) in ports or _port(parts[4]) in ports:
            states[parts[0]] += 1
    return dict(states)


def _port(address: str) -> int | None:
    """The port of an ``ss`` address (``127.0.0.1:7428``, ``[::1]:7428``, ``*:*``), if it has one."""
    tail = address.rpartition(":")[2]
    return int(tail) if tail.isdigit() else None


def start(tmp: Path, ports: list[int], every_s: float, rng: random.Random, *,
          quiet_every_s: float) -> list[subprocess.Popen[bytes]]:
    procs = []
    for i, port in enumerate(ports):
        home = tmp / f"n{i}"
        home.mkdir(mode=0o700)
        others = rng.sample([p for p in ports if p != port], min(3, len(ports) - 1))
        peers = ", ".join(f'"http://127.0.0.1:{p}"' for p in others)
        (home / "config.toml").write_text(f"gossip_every_s = {every_s}\ngossip_quiet_every_s = {quiet_every_s}\n"
                                          f"mdns = false\npeers = [{peers}]\n"
                                          "ingest_every_s = 0.0\n")
        procs.append(subprocess.Popen([sys.executable, "-m", "neverest.daemon", "--home", str(home), "--listen",
                                       f"127.0.0.1:{port}", "--no-mdns", "--log-level", "warning"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs


def exchanges(homes: list[Path]) -> list[int]:
    """Exchanges each daemon started so far (its status over the control socket)."""
    out = []
    for home in homes:
        counts = ask(home, {"op": "status"})["status"]["exchanges"]
        out.append(int(counts.get("ok", 0)) + int(counts.get("failed", 0)))
    return out


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + 20
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def measure(nodes: int, every_s: float, warmup_s: float, window_s: float, seed: int, *,
            quiet_every_s: float = 60.0) -> dict[str, Any]:
    ports = free_ports(nodes)
    with tempfile.TemporaryDirectory() as tmp:
        procs = start(Path(tmp), ports, every_s, random.Random(seed), quiet_every_s=quiet_every_s)
        homes = [Path(tmp) / f"n{i}" for i in range(nodes)]
        try:
            # The warm-up counts from the moment every daemon answers: thirty start-ups on two
            # cores take a while, and their CPU must not fall into the window.
            deadline = time.monotonic() + 180
            while not all(running(home) for home in homes):
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    raise RuntimeError("the daemons did not all start")
                time.sleep(0.2)
            time.sleep(warmup_s)
            dead = [p.args for p in procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{len(dead)} daemon(s) exited during the warm-up")
            cpu0 = [cpu_s(p.pid) for p in procs]
            fds0 = [fds(p.pid) for p in procs]
            ex0 = exchanges(homes)
            t0 = time.monotonic()
            time.sleep(window_s)
            elapsed = time.monotonic() - t0
            cpu1 = [cpu_s(p.pid) for p in procs]
            fds1 = [fds(p.pid) for p in procs]
            ex1 = exchanges(homes)
            states = socket_states(set(ports))
        finally:
            stop(procs)
    shares = [(b - a) / elapsed * 100 for a, b in zip(cpu0, cpu1, strict=True)]
    rates = [(b - a) / elapsed for a, b in zip(ex0, ex1, strict=True)]
    return {"gossip_every_s": every_s, "nodes": nodes, "window_s": round(elapsed, 1),
            "cpu_pct_median": round(statistics.median(shares), 2), "cpu_pct_max": round(max(shares), 2),
            "fds_start_median": statistics.median(fds0), "fds_end_median": statistics.median(fds1),
            "fds_end_max": max(fds1), "sockets": states,
            "exchanges_per_s_median": round(statistics.median(rates), 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--period", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    baseline = measure(args.nodes, 3600.0, args.warmup, args.seconds, args.seed)
    gossiping = measure(args.nodes, args.period, args.warmup, args.seconds, args.seed)
    # The same daemons with pacing off (gossip_quiet_every_s = the period): every round at the full rate.
    unpaced = measure(args.nodes, args.period, args.warmup, args.seconds, args.seed, quiet_every_s=args.period)
    out = {"load": load, "baseline_no_gossip": baseline, "gossip": gossiping, "gossip_unpaced": unpaced,
           "target_cpu_pct": 1.0}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{args.nodes} idle daemons on 127.0.0.1, window {args.seconds:g} s after {args.warmup:g} s "
              f"(load {load:.2f}):")
        for name, row in (("no gossip (baseline)", baseline), (f"gossip every {args.period:g} s", gossiping),
                          ("the same, pacing off", unpaced)):
            print(f"  {name:22s} CPU per daemon: median {row['cpu_pct_median']:.2f} % of a core, max "
                  f"{row['cpu_pct_max']:.2f} %; descriptors median {row['fds_start_median']} -> "
                  f"{row['fds_end_median']} (max {row['fds_end_max']}); sockets {row['sockets']}; exchanges started "
                  f"{row['exchanges_per_s_median']}/s a daemon")
        print("  target: <= 1 % of a core each")
    return 0 if gossiping["cpu_pct_median"] <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
