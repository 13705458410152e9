"""`neverestctl --help`, `lessons`, `recall` and `status` as the whole process an agent or a person
runs, with no daemon and with a running ``neverestd`` for the home, against `python -c pass` in the
same run (p50 and p95 over interleaved runs).

Target (docs/figures.md, start-up): p95 ≤ 3 × `python -c pass`.
Run: python benchmarks/bench_cli.py [--runs N] [--no-daemon] [--before DIR]

``--before DIR`` also runs another tree's commands (a folder holding its ``neverest`` package, e.g.
``git archive 1699496 neverest | tar -x -C DIR``; compile it first with ``python -m compileall DIR``) in the
same loop, through ``PYTHONPATH``.  Every process runs in the benchmark's temporary folder: started from a
checkout, ``python -m`` would find that checkout's package before ``PYTHONPATH``'s.  Both trees use one home:
a tree with an older store schema refuses the store this one made (compare within one schema).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from neverest.client import running

BASELINE = "python -c pass"
COMMANDS: dict[str, list[str]] = {
    "--help": ["--help"], "lessons": ["lessons"], "recall": ["recall", "tool3 fails"], "status": ["status"],
}


def _timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                   cwd=env["NEVEREST_HOME"])
    return time.perf_counter() - start


def bytecode_note() -> str:
    """Whether neverest's modules run from cached bytecode, as an installed copy does: without it (an
    environment with PYTHONDONTWRITEBYTECODE and no earlier compile) every run compiles them from source,
    tens of milliseconds that `python -c pass` never pays."""
    import importlib.util

    import neverest.ctl

    cached = Path(importlib.util.cache_from_source(neverest.ctl.__file__)).exists()
    return "bytecode of neverest: " + ("cached" if cached else "NOT cached, each run compiles it from source "
                                       "(PYTHONDONTWRITEBYTECODE; run `python -m compileall neverest` first)")


def _quantile(values: list[float], q: float) -> float:
    return sorted(values)[max(0, round(q * len(values)) - 1)]


def _measure(ctl: list[str], env: dict[str, str], runs: int, before: str | None = None) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {BASELINE: []}
    for _ in range(runs):  # interleaved, so that a busy moment of the machine falls on every row alike
        times[BASELINE].append(_timed([sys.executable, "-c", "pass"], env))
        for name, words in COMMANDS.items():
            if before:
                times.setdefault(f"{name} (before)", []).append(
                    _timed([*ctl, *words], dict(env, PYTHONPATH=before)))
            times.setdefault(name, []).append(_timed([*ctl, *words], env))
    return times


def _report(title: str, times: dict[str, list[float]]) -> None:
    base50, base95 = _quantile(times[BASELINE], 0.5), _quantile(times[BASELINE], 0.95)
    print(title)
    for name, values in times.items():
        p50, p95 = _quantile(values, 0.5), _quantile(values, 0.95)
        ratio = "" if name == BASELINE else f"   = {p50 / base50:4.1f} x / {p95 / base95:4.1f} x baseline"
        print(f"  {name:<20} p50 {p50 * 1000:7.1f} ms   p95 {p95 * 1000:7.1f} ms{ratio}")


def _start_daemon(home: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "neverest.daemon", "--home", str(home), "--listen",
                             "127.0.0.1:0", "--no-mdns"], env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not running(home):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.terminate()
            raise RuntimeError("neverestd did not start")
        time.sleep(0.05)
    return proc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--no-daemon", action="store_true", help="measure without a running daemon only")
    parser.add_argument("--before", metavar="DIR", help="also time the neverest package found in DIR")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir(mode=0o700)
        (Path(tmp) / "user").mkdir()  # HOME too: no agent's sessions of the person running this are read
        env = dict(os.environ, HOME=str(Path(tmp) / "user"), NEVEREST_HOME=str(home),
                   NEVEREST_NOW="2026-03-01T03:00:00Z")
        # The daemon's nightly schedule and gossip stay out of the measured window.
        (home / "config.toml").write_text("gossip_every_s = 3600.0\n")
        ctl = [sys.executable, "-m", "neverest.ctl"]
        for i in range(50):  # a small memory: what is measured is the process, not the search
            subprocess.run([*ctl, "remember", "--kind", "error", "--title", f"tool{i % 10} run",
                            "--happened", f"fails with error {i}", "--session", f"s{i}"], env=env, check=True,
                           stdout=subprocess.DEVNULL)
        subprocess.run([*ctl, "sleep"], env=env, check=True, stdout=subprocess.DEVNULL)
        print(f"{args.runs} runs each, interleaved; ratios p50 / p95 against `{BASELINE}` (target p95 <= 3 x)")
        print(bytecode_note())
        before = str(Path(args.before).resolve()) if args.before else None
        _report("no daemon:", _measure(ctl, env, args.runs, before))
        if not args.no_daemon:
            proc = _start_daemon(home, env)
            try:
                _report("neverestd running for the home:", _measure(ctl, env, args.runs, before))
            finally:
                proc.terminate()
                proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
