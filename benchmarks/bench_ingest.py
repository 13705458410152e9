"""Benchmark of transcript ingest (``neverestctl ingest``): Claude Code sessions into episodes.

Generates ``--sessions`` session files of ``--turns`` turns each (default 1 000 × 200) in a
temporary folder, in the Claude Code format: per round of four turns a person's prompt, an
assistant message streamed over two lines (text, then a Bash call), the tool's result, and
the assistant's answer; one result in ten is an error, one prompt in twenty-five a
correction, one answer in twenty a surprise.  Then, on a fresh memory:

1. a full ingest: turns/s.  Target (docs/figures.md): ≥ 20 000 turns/s;
2. a second ingest with nothing new: seconds.  Target: ≤ 1 s;
3. the baseline: reading the same files and ``json.loads`` of every line, nothing else.

    python benchmarks/bench_ingest.py [--sessions 1000] [--turns 200] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from neverest.agents.ingest import ingest_transcripts
from neverest.clock import FixedClock
from neverest.config import Config
from neverest.memory.service import Memory

TARGET_TURNS_PER_S = 20_000
TARGET_NOTHING_NEW_S = 1.0


def _line(sid: str, kind: str, content: object, n: int, mid: str | None = None) -> str:
    message: dict[str, Any] = {"role": kind, "content": content}
    if mid:
        message["id"] = mid
    at = f"2026-11-30T10:{n // 600 % 60:02d}:{n // 10 % 60:02d}Z"
    return json.dumps({"type": kind, "uuid": f"{sid}-{n}", "parentUuid": f"{sid}-{n - 1}", "sessionId": sid,
                       "cwd": "/home/ann/src/shop", "timestamp": at,
                       "isSidechain": False, "userType": "external", "version": "2.0.1", "gitBranch": "main",
                       "message": message})


def session_lines(sid: str, turns: int) -> list[str]:
    lines: list[str] = []
    n = 0
    for r in range(turns // 4):
        n += 1
        prompt = "No, don't change the schema, keep it as it was" if r % 25 == 24 else \
            f"Step {r}: make the refund path handle partial captures and add a test for it"
        lines.append(_line(sid, "user", prompt, n))
        mid = f"msg-{sid}-{r}"
        n += 1
        lines.append(_line(sid, "assistant", [{"type": "text", "text": f"Running the tests for step {r}."}], n, mid))
        n += 1
        lines.append(_line(sid, "assistant", [{"type": "tool_use", "id": f"t{r}", "name": "Bash",
                                                "input": {"command": f"tool{r % 7} -q tests/test_refund.py"}}], n, mid))
        n += 1
        error = r % 10 == 9
        output = ("Exit code 1\nE   AssertionError: expected 3 captures, got 2\n" if error else
                  "..........                                  [100%]\n10 passed in 0.41s\n") * 3
        lines.append(_line(sid, "user", [{"type": "tool_result", "tool_use_id": f"t{r}", "content": output,
                                           "is_error": error}], n))
        n += 1
        answer = "Surprisingly, the capture total was rounded twice." if r % 20 == 19 else \
            f"Step {r} is done: the refund path handles partial captures and the new test passes."
        lines.append(_line(sid, "assistant", [{"type": "text", "text": answer}], n, f"msg-{sid}-{r}-b"))
    return lines


def generate(root: Path, sessions: int, turns: int) -> int:
    for s in range(sessions):
        sid = f"{s:08x}-0000-4000-8000-000000000000"
        folder = root / f"-home-ann-src-project{s % 20}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{sid}.jsonl").write_text("".join(line + "\n" for line in session_lines(sid, turns)))
    return sum(1 for _ in root.rglob("*.jsonl"))


def baseline(root: Path) -> tuple[float, int]:
    start = time.perf_counter()
    lines = 0
    for path in sorted(root.rglob("*.jsonl")):
        with open(path, "rb") as f:
            for raw in f:
                json.loads(raw)
                lines += 1
    return time.perf_counter() - start, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        root = Path(tmp) / "claude"
        generate(root, args.sessions, args.turns)
        home = Path(tmp) / "home"
        home.mkdir(mode=0o700)
        base_s, lines = baseline(root)
        with Memory.open(home, Config(), FixedClock(datetime(2026, 12, 1, tzinfo=UTC))) as memory:
            start = time.perf_counter()
            full = ingest_transcripts(memory, claude=root, codex=None)
            full_s = time.perf_counter() - start
            start = time.perf_counter()
            again = ingest_transcripts(memory, claude=root, codex=None)
            again_s = time.perf_counter() - start
    turns_per_s = full.turns / full_s
    out = {
        "sessions": args.sessions, "turns": full.turns, "lines": lines, "bytes": full.bytes,
        "stored": full.stored, "detected": dict(full.detected),
        "full_s": round(full_s, 3), "turns_per_s": round(turns_per_s),
        "target_turns_per_s": TARGET_TURNS_PER_S,
        "nothing_new_s": round(again_s, 3), "nothing_new_read": again.read,
        "target_nothing_new_s": TARGET_NOTHING_NEW_S,
        "baseline_json_loads_s": round(base_s, 3), "baseline_lines_per_s": round(lines / base_s),
        "ok": turns_per_s >= TARGET_TURNS_PER_S and again_s <= TARGET_NOTHING_NEW_S,
    }
    if args.json:
        print(json.dumps(out, sort_keys=True))
    else:
        print(f"{args.sessions} sessions, {full.turns} turns, {lines} lines, {full.bytes / 1e6:.1f} MB; "
              f"{full.stored} episodes stored {dict(full.detected)}")
        print(f"full ingest:        {full_s:.2f} s = {turns_per_s:,.0f} turns/s "
              f"(target ≥ {TARGET_TURNS_PER_S:,}) {'ok' if turns_per_s >= TARGET_TURNS_PER_S else 'MISSED'}")
        print(f"nothing new:        {again_s:.3f} s, {again.read} files read "
              f"(target ≤ {TARGET_NOTHING_NEW_S} s) {'ok' if again_s <= TARGET_NOTHING_NEW_S else 'MISSED'}")
        print(f"baseline json.loads of every line: {base_s:.2f} s = {lines / base_s:,.0f} lines/s, "
              f"{full.turns / base_s:,.0f} turns/s")
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
