"""What the memory learns from the public session corpus (tests/data/sessions): episodes by kind,
lessons by kind, and the gates every lesson text must pass, with the lessons themselves.

    python benchmarks/corpus_lessons.py [--corpus DIR] [--json]

The corpus is copied into a temporary folder, ingested into a throwaway memory, and slept on twice
(the second night a day later, so errors met in two sessions can join).  The gates:

- ``length``: at most 200 characters;
- ``instruction``: safety rule 1 (``neverest.safety.imperative_reason``) finds no order in it;
- ``identifying``: no path, e-mail, URL, long hex id or token left (a fixed, conservative pattern
  set, the same before and after a change of the scrubber, so the figure compares);
- ``escapes``: no terminal escape or control character.

It runs on any version of Neverest that has ``Memory.open``, ``ingest_transcripts`` and
``Memory.night``, so the same script measures the code before and after a change.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from neverest.agents.ingest import ingest_transcripts
from neverest.clock import FixedClock
from neverest.config import Config
from neverest.memory.service import Memory
from neverest.safety import imperative_reason

IDENTIFYING = re.compile(
    r"(?:^|[\s\"'(=:`])(?:~|\.{1,2})?/(?:[\w.@+-]+/)+[\w.@+-]*|\b[A-Za-z]:\\|"
    r"\b[\w.+-]+@[\w-]+\.[\w.-]+\b|\b[a-z][a-z0-9+.-]*://\S+|\b[0-9a-f]{12,}\b|"
    r"\b(?:sk|ghp|gho|xoxb|xoxp|AKIA)[-_A-Za-z0-9]{12,}")
ESCAPES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def gates(text: str) -> list[str]:
    failed = []
    if len(text) > 200:
        failed.append("length")
    if imperative_reason(text) is not None:
        failed.append("instruction")
    if IDENTIFYING.search(text):
        failed.append("identifying")
    if ESCAPES.search(text):
        failed.append("escapes")
    return failed


def measure(corpus: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="neverest-corpus-") as tmp:
        root = Path(tmp)
        shutil.copytree(corpus / "claude", root / "claude")
        shutil.copytree(corpus / "codex", root / "codex")
        home = root / "home"
        home.mkdir(mode=0o700)
        now = datetime(2027, 1, 1, 3, 0, tzinfo=UTC)
        clock = FixedClock(now)
        with Memory.open(home, Config(), clock) as memory:
            report = ingest_transcripts(memory, claude=root / "claude" / "projects", codex=root / "codex" / "sessions")
            memory.night()
            clock.set(now + timedelta(days=1))
            memory.night()
            db = memory.store.db
            episodes = Counter(str(r[0]) for r in db.execute("SELECT kind FROM episodes"))
            lessons = [(str(r[0]), str(r[1])) for r in db.execute(
                "SELECT kind, text FROM lessons WHERE archived = 0 ORDER BY kind, id")]
    failures = Counter(g for _, text in lessons for g in gates(text))
    return {"files": report.files, "turns": report.turns, "episodes": dict(sorted(episodes.items())),
            "lessons_by_kind": dict(sorted(Counter(k for k, _ in lessons).items())),
            "lessons": [{"kind": k, "text": t, "gates_failed": gates(t)} for k, t in lessons],
            "gate_failures": dict(sorted(failures.items())),
            "lessons_failing_a_gate": sum(1 for _, t in lessons if gates(t))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--corpus", default=str(Path(__file__).resolve().parent.parent / "tests/data/sessions"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    out = measure(Path(args.corpus))
    if args.json:
        print(json.dumps(out, ensure_ascii=False, indent=1))
        return 0
    print(f"{out['files']} session files, {out['turns']} turns")
    print("episodes:", ", ".join(f"{k} {n}" for k, n in out["episodes"].items()))
    print("lessons:", ", ".join(f"{k} {n}" for k, n in out["lessons_by_kind"].items()) or "none")
    print(f"lessons failing a gate: {out['lessons_failing_a_gate']} "
          f"({', '.join(f'{g} {n}' for g, n in out['gate_failures'].items()) or 'none'})")
    for lesson in out["lessons"]:
        mark = f"  [fails: {', '.join(lesson['gates_failed'])}]" if lesson["gates_failed"] else ""
        print(f"- {lesson['kind']}: {lesson['text']}{mark}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
