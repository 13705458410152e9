"""neverestctl commands of the local memory: remember, sleep, lessons, recall.

``remember`` and ``sleep`` go through the running daemon when there is one (see
``common.daemon_or_here``); without one they work on the store here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neverest.commands.common import (
    UsageError,
    daemon_or_here,
    daemon_reads_or_here,
    home_of,
    open_memory,
    through_daemon,
)

if TYPE_CHECKING:  # with a daemon running, lessons and recall are answered without loading the memory here
    from neverest.memory.service import Memory

EVENT_FIELDS = ("said", "agent_did", "title", "expected", "happened", "text", "worked", "reaction", "agent", "session",
                "cwd", "at")


def _remember_file(args: argparse.Namespace, path: Path) -> dict[str, Any]:
    def here(memory: Memory) -> dict[str, Any]:
        try:
            with path.open("rb") as stream:
                return memory.ingest_lines(stream).to_json()
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    return daemon_or_here(args, {"op": "remember", "path": str(path.resolve())}, here)[0]


def _remember_stdin(args: argparse.Namespace) -> dict[str, Any]:
    # The daemon reads a file, not our standard input: spool it to a private file in the home first.
    home = home_of(args)
    if home.is_dir():
        import tempfile  # only `remember` from standard input spools (random, shutil: not for every command)

        fd, name = tempfile.mkstemp(prefix=".remember-", suffix=".jsonl", dir=home)
        try:
            with os.fdopen(fd, "wb") as spool:
                while chunk := sys.stdin.buffer.read(1 << 20):
                    spool.write(chunk)
            return _remember_file(args, Path(name))
        finally:
            os.unlink(name)
    with open_memory(args) as memory:
        return memory.ingest_lines(sys.stdin.buffer).to_json()


def cmd_remember(args: argparse.Namespace) -> int:
    if args.events is not None:
        if args.kind is not None:
            raise UsageError("give either --events or an event's fields, not both")
        if args.events == "-":
            result = _remember_stdin(args)
        else:
            if not Path(args.events).is_file():
                raise UsageError(f"cannot read {args.events}: no such file")
            result = _remember_file(args, Path(args.events))
    else:
        if args.kind is None:
            raise UsageError("give --kind and the event's fields, or --events FILE|-")
        event = {"kind": args.kind} | {f: getattr(args, f) for f in EVENT_FIELDS if getattr(args, f) is not None}
        if "cwd" not in event:
            event["cwd"] = str(Path.cwd())
        result, _ = daemon_or_here(args, {"op": "remember", "events": [event]},
                                   lambda memory: memory.ingest([event]).to_json())
    if args.json:
        print(json.dumps(result))
    else:
        print(f"stored {result['stored']}, already known {result['duplicates']}, refused {len(result['refused'])}"
              + (f"; {result['repeats']} repeated an earlier event of the same input" if result.get("repeats") else ""))
        for item in result["refused"]:
            print(f"  refused {item['position']}: {item['reason']}", file=sys.stderr)
    return 1 if result["refused"] else 0


def cmd_sleep(args: argparse.Namespace) -> int:
    answer = through_daemon(args, {"op": "sleep"})
    if answer is not None:
        report = answer["report"]
    else:
        from neverest.agents.doors import ingest_agents
        from neverest.transports.adapters import configured

        with open_memory(args) as memory:
            ingested = ingest_agents(memory)  # the agents' latest sessions count tonight, as the daemon does
            report = memory.night(configured(memory.config)) | {"ingest": ingested}
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
        return 0
    inbox = report["inbox"]
    print(f"sleep at {report['started']} in space {report['space']}" + (" (by the daemon)" if answer else ""))
    print(f"  inbox      {inbox['stored']} new event(s), {len(inbox['refused'])} refused")
    ingested = report.get("ingest")
    if ingested:
        not_wired = ingested.get("not_wired") or []
        print(f"  agents     {ingested['stored']} new event(s) from {ingested['files']} session file(s)"
              + (f"; not wired, not read: {', '.join(not_wired)} (neverestctl setup)" if not_wired else ""))
    print(f"  embed      {report['embedded']} vector(s)")
    print(f"  decay      {report['decay_days']} day(s); archived {report['archived_episodes']} episode(s), "
          f"{report['archived_lessons']} lesson(s)")
    print(f"  lessons    {report['considered']} episode(s) considered: {len(report['learned'])} new lesson(s), "
          f"{report['joined']} joined, {report['waiting']} waiting for a repeat")
    for item in report["learned"]:
        print(f"               + [{item['kind']}] {item['text']}")
    print(f"  merge      {len(report['merged'])} lesson(s) merged into themes")
    print(f"  verify     {len(report['confirmed'])} prediction(s) confirmed, {len(report['failed'])} failed, "
          f"{len(report['refuted'])} refuted")
    print(f"  predict    {report['predicted']} new prediction(s)")
    print(f"  signed     {report['signed_lessons']} lesson record(s), "
          f"{report['signed_confirmations']} confirmation(s), {report['signed_refutations']} refutation(s)"
          + (f"; {report['held_back']} lesson(s) held back by scrubbing" if report.get("held_back") else ""))
    for name in ("folder", "commons"):
        if name in report:
            print(f"  {name:<10} " + (f"error: {report[name]['error']}" if "error" in report[name] else "synced"))
    if answer is not None:
        print(f"  gossip     {len(answer['round'])} peer(s) told")
    return 0


# The columns of `neverestctl lessons`, named once above the rows (the widths are the rows').
LESSONS_HEADER = f"{'hash':<8}  {'kind':<10}  {'strength':>8}  {'seen':>4}  {'state':<9}  {'support':>7}  text"


def cmd_lessons(args: argparse.Namespace) -> int:
    lessons, _ = daemon_reads_or_here(
        args, {"op": "lessons", "kind": args.kind, "all": args.all},
        lambda memory: [lesson.listed() for lesson in memory.lessons(kind=args.kind, include_archived=args.all)])
    if not lessons and not args.json:
        print("no lessons yet: they are learned at the next sleep from the events remembered "
              "(neverestctl sleep runs one now)")
    elif not args.json:
        print(LESSONS_HEADER)
    for lesson in lessons:
        if args.json:
            print(json.dumps(lesson, ensure_ascii=False))
        else:
            print(f"{lesson['hash'][:8]}  {lesson['kind']:<10}  {lesson['strength']:8.2f}  {lesson['seen']:>4}  "
                  f"{lesson['state']:<9}  {lesson['support']:>7}  {lesson['text']}")
    return 0


def cmd_recall(args: argparse.Namespace) -> int:
    if args.k < 1:
        raise UsageError("-k must be at least 1")
    hits, _ = daemon_reads_or_here(args, {"op": "recall", "query": args.query, "k": args.k},
                                   lambda memory: [hit.to_json() for hit in memory.recall(args.query, k=args.k)])
    if not hits and not args.json:
        print("nothing this memory holds bears on that")
    for hit in hits:
        if args.json:
            print(json.dumps(hit, ensure_ascii=False))
        else:
            print(f"{hit['score']:.3f}  {hit['type']:<7} {hit['kind']:<11} {hit['text']}")
    return 0
