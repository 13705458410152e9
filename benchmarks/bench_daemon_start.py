"""Benchmark: `neverestd` start (spawn → first 200 on GET /healthz) and stop (SIGTERM → exit).

Spawns the real daemon, ``--listen 127.0.0.1:0 --no-mdns``, in a fresh temporary home each time
(so every start creates its identity and store, as a first start does; ``--records N`` fills a store
of N signed records first and starts on a copy of it), reads the address it bound from its log on
standard error, polls ``/healthz`` until it answers 200, then sends SIGTERM and waits for the process
to exit.  Interleaved with a ``python -c pass`` spawn → exit in the same run, so the ratio survives
a busy machine.  Loopback only; every process it starts is reaped.

Targets (issue 26): start ≤ 1 s, stop ≤ 0.5 s.

    python benchmarks/bench_daemon_start.py [--runs 9] [--records 0] [--mdns] [--from-source] [--before DIR] [--json]

With ``--before DIR`` and ``--records N`` both trees start on copies of one store, made by this tree: a
tree with an older store schema refuses it (compare within one schema, or without ``--records``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ADDRESS = re.compile(rb"listening for peers on http://([0-9.]+):([0-9]+)")
START_TARGET_S = 1.0
STOP_TARGET_S = 0.5


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def healthy(host: str, port: int) -> http.client.HTTPConnection | None:
    """The connection that was answered 200 on /healthz, kept open (keep-alive), or None."""
    conn = http.client.HTTPConnection(host, port, timeout=1.0)
    try:
        conn.request("GET", "/healthz")
        response = conn.getresponse()
        response.read()
        if response.status == 200:
            return conn
    except OSError:
        pass
    conn.close()
    return None


def daemon_command(tree: Path | None) -> list[str]:
    """How to run ``neverestd``: this checkout's, or the one in ``tree`` (the editable install's import
    finder would otherwise win over PYTHONPATH, so it is taken out of that process's meta path)."""
    if tree is None:
        return [sys.executable, "-m", "neverest.daemon"]
    boot = ("import runpy, sys; sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in "
            f"getattr(f, '__module__', '')]; sys.path.insert(0, {str(tree.resolve())!r}); "
            "sys.argv[0] = 'neverestd'; runpy.run_module('neverest.daemon', run_name='__main__', alter_sys=True)")
    return [sys.executable, "-c", boot]


def one_daemon(home: Path, *, mdns: bool, env: dict[str, str], tree: Path | None = None) -> tuple[float, float]:
    """(start seconds, stop seconds) of one daemon on ``home``."""
    env = dict(env, NEVEREST_HOME=str(home))
    mdns_args = ["--mdns-interface", "127.0.0.1"] if mdns else ["--no-mdns"]
    t0 = time.perf_counter()
    proc = subprocess.Popen([*daemon_command(tree), "--listen", "127.0.0.1:0", *mdns_args],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    found: list[tuple[str, int]] = []
    seen = threading.Event()

    def read_log() -> None:  # drains stderr to the end, so the daemon never blocks on a full pipe
        assert proc.stderr is not None
        for line in proc.stderr:
            match = ADDRESS.search(line)
            if match and not found:
                found.append((match.group(1).decode(), int(match.group(2))))
                seen.set()

    reader = threading.Thread(target=read_log, daemon=True)
    reader.start()
    try:
        deadline = t0 + 60
        while not seen.wait(0.005):
            if proc.poll() is not None or time.perf_counter() > deadline:
                raise RuntimeError(f"neverestd did not start (exit {proc.returncode})")
        host, port = found[0]
        while (conn := healthy(host, port)) is None:
            if proc.poll() is not None or time.perf_counter() > deadline:
                raise RuntimeError("neverestd never answered /healthz")
            time.sleep(0.005)
        started = time.perf_counter() - t0
        # The stop is timed with that keep-alive connection still open, as a peer's client holds one
        # between rounds: a server that waits for its idle connections to go stops slowly.
        t1 = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        stopped = time.perf_counter() - t1
        conn.close()
        if code != 0:
            raise RuntimeError(f"neverestd exited {code} on SIGTERM")
        return started, stopped
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=5)


def one_pass(env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True, env=env)
    return time.perf_counter() - t0


def fill(home: Path, n: int) -> None:
    from datetime import UTC, datetime

    import nacl.signing

    from neverest.memory import holdings
    from neverest.memory.store import open_store
    from neverest.records import sign_lesson

    now = datetime(2026, 4, 2, tzinfo=UTC)
    keys = [nacl.signing.SigningKey(i.to_bytes(32, "big")) for i in range(1, 501)]
    with open_store(home) as store, store.write() as db:
        for i in range(n):
            record = sign_lesson(keys[i % 500], kind="error", text=f"Tool {i % 500} fails in case {i}", seen=1,
                                 strength=1.0, updated="2026-04-01T12:00:00.000000Z", seq=i // 500 + 1)
            holdings.put(db, record, source="bench", now=now)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--records", type=int, default=0, help="start on a store holding this many records")
    parser.add_argument("--mdns", action="store_true", help="zeroconf on, on 127.0.0.1 only (default --no-mdns)")
    parser.add_argument("--from-source", action="store_true",
                        help="keep PYTHONDONTWRITEBYTECODE as it is, so an editable install compiles neverest's "
                        "modules at every start (default: bytecode written once and used, as an installed package)")
    parser.add_argument("--before", metavar="DIR", type=Path,
                        help="also time the daemon of another tree (a folder holding its `neverest` package, e.g. "
                        "`git archive main neverest | tar -x -C DIR`), interleaved run by run with this one")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    if not args.from_source:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    starts: list[float] = []
    stops: list[float] = []
    before_starts: list[float] = []
    before_stops: list[float] = []
    passes: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        template = Path(tmp) / "template"
        if args.records:
            fill(template, args.records)
        warm = Path(tmp) / "warm"
        warm.mkdir()
        one_daemon(warm, mdns=args.mdns, env=env)  # untimed: writes the bytecode, warms the page cache
        if args.before is not None:
            shutil.rmtree(warm)
            warm.mkdir()
            one_daemon(warm, mdns=args.mdns, env=env, tree=args.before)
        for i in range(args.runs):
            passes.append(one_pass(env))
            home = Path(tmp) / f"home{i}"
            if args.records:
                shutil.copytree(template, home)
            else:
                home.mkdir()
            started, stopped = one_daemon(home, mdns=args.mdns, env=env)
            starts.append(started)
            stops.append(stopped)
            shutil.rmtree(home)
            if args.before is not None:
                if args.records:
                    shutil.copytree(template, home)
                else:
                    home.mkdir()
                started, stopped = one_daemon(home, mdns=args.mdns, env=env, tree=args.before)
                before_starts.append(started)
                before_stops.append(stopped)
                shutil.rmtree(home)
    base = statistics.median(passes)
    result = {
        "runs": args.runs, "records": args.records, "mdns": args.mdns, "from_source": args.from_source,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "start_p50_s": round(statistics.median(starts), 3), "start_p95_s": round(pct(starts, 0.95), 3),
        "stop_p50_s": round(statistics.median(stops), 3), "stop_p95_s": round(pct(stops, 0.95), 3),
        "python_pass_p50_s": round(base, 3), "python_pass_p95_s": round(pct(passes, 0.95), 3),
        "start_x_pass_p50": round(statistics.median(starts) / base, 1),
        "start_target_s": START_TARGET_S, "stop_target_s": STOP_TARGET_S,
    }
    if before_starts:
        result.update({
            "before_start_p50_s": round(statistics.median(before_starts), 3),
            "before_start_p95_s": round(pct(before_starts, 0.95), 3),
            "before_stop_p50_s": round(statistics.median(before_stops), 3),
            "before_stop_p95_s": round(pct(before_stops, 0.95), 3),
        })
    if args.json:
        print(json.dumps(result))
    else:
        print(f"neverestd start -> first 200 on /healthz ({args.runs} runs, {args.records} records, "
              f"{'mdns on 127.0.0.1' if args.mdns else '--no-mdns'}, "
              f"{'compiled from source' if args.from_source else 'bytecode cached'}): "
              f"p50 {result['start_p50_s'] * 1000:.0f} ms, p95 {result['start_p95_s'] * 1000:.0f} ms "
              f"(target <= {START_TARGET_S * 1000:.0f} ms)")
        print(f"neverestd SIGTERM -> exit: p50 {result['stop_p50_s'] * 1000:.0f} ms, "
              f"p95 {result['stop_p95_s'] * 1000:.0f} ms (target <= {STOP_TARGET_S * 1000:.0f} ms)")
        print(f"  baseline python -c pass: p50 {base * 1000:.0f} ms, p95 {result['python_pass_p95_s'] * 1000:.0f} ms;"
              f" start = {result['start_x_pass_p50']} x; load average {result['load_average']}")
        if before_starts:
            print(f"  before ({args.before}), interleaved: start p50 {result['before_start_p50_s'] * 1000:.0f} ms, "
                  f"p95 {result['before_start_p95_s'] * 1000:.0f} ms; stop p50 "
                  f"{result['before_stop_p50_s'] * 1000:.0f} ms, p95 {result['before_stop_p95_s'] * 1000:.0f} ms")
    met = result["start_p95_s"] <= START_TARGET_S and result["stop_p95_s"] <= STOP_TARGET_S
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
