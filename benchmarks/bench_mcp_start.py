"""`neverestctl mcp` from spawn to the first tool result, as an agent starting a session meets it:
spawn, ``initialize``, ``notifications/initialized``, then one ``tools/call`` (``lessons``) and its
result; against `python -c pass` in the same run (p50 and p95 over interleaved runs).

Target (docs/figures.md, start-up): spawn → first tool result ≤ 0.5 s.
Run: python benchmarks/bench_mcp_start.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_cli import _quantile, bytecode_note  # the same folder: on sys.path when this script runs

BASELINE = "python -c pass"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
CALL = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "lessons", "arguments": {}}}


def _answer(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> dict[str, Any]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()
    if not select.select([proc.stdout], [], [], 60)[0]:
        raise RuntimeError(f"no answer to {message['method']}")
    answer: dict[str, Any] = json.loads(proc.stdout.readline())
    if "error" in answer:
        raise RuntimeError(f"{message['method']}: {answer['error']}")
    return answer


def _first_result(env: dict[str, str]) -> tuple[float, float]:
    """(seconds to the initialize answer, seconds to the first tool result), both from spawn."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "neverest.ctl", "mcp"], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        _answer(proc, INITIALIZE)
        initialized = time.perf_counter() - start
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(INITIALIZED).encode() + b"\n")
        _answer(proc, CALL)
        return initialized, time.perf_counter() - start
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        if proc.wait(20) != 0:
            raise RuntimeError("neverestctl mcp did not exit cleanly")


def _timed_pass(env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir(mode=0o700)
        (Path(tmp) / "user").mkdir()
        env = dict(os.environ, HOME=str(Path(tmp) / "user"), NEVEREST_HOME=str(home),
                   NEVEREST_NOW="2026-03-01T03:00:00Z")
        ctl = [sys.executable, "-m", "neverest.ctl"]
        for i in range(50):  # a few lessons to list: what is measured is the start, not the query
            subprocess.run([*ctl, "remember", "--kind", "error", "--title", f"tool{i % 10} run",
                            "--happened", f"fails with error {i}", "--session", f"s{i}"], env=env, check=True,
                           stdout=subprocess.DEVNULL)
        subprocess.run([*ctl, "sleep"], env=env, check=True, stdout=subprocess.DEVNULL)
        base: list[float] = []
        initialize: list[float] = []
        first: list[float] = []
        for _ in range(args.runs):
            base.append(_timed_pass(env))
            init_s, first_s = _first_result(env)
            initialize.append(init_s)
            first.append(first_s)
    b50, b95 = _quantile(base, 0.5), _quantile(base, 0.95)
    print(f"{args.runs} runs each, interleaved (target: first tool result <= 0.5 s)")
    print(bytecode_note())
    for name, values in ((BASELINE, base), ("initialize answered", initialize), ("first tool result", first)):
        p50, p95 = _quantile(values, 0.5), _quantile(values, 0.95)
        ratio = "" if values is base else f"   = {p50 / b50:4.1f} x / {p95 / b95:4.1f} x baseline"
        print(f"  {name:<20} p50 {p50 * 1000:7.1f} ms   p95 {p95 * 1000:7.1f} ms{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
