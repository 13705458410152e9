"""neverestctl commands over the owner's data: forget and export."""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from neverest.clock import iso, parse_time
from neverest.commands.common import UsageError, daemon_or_here, open_memory
from neverest.memory.export import export
from neverest.memory.store import Store


def _before(value: str) -> datetime:
    """A date (midnight UTC) or an ISO 8601 time."""
    try:
        if len(value) == 10:
            return datetime.fromisoformat(value).replace(tzinfo=UTC)
        return parse_time(value)
    except (ValueError, OverflowError):
        raise UsageError(f"--before {value!r} is not a date (2026-01-31) or an ISO 8601 time") from None


def cmd_forget(args: argparse.Namespace) -> int:
    chosen = [name for name in ("episode", "session", "before") if getattr(args, name) is not None]
    if len(chosen) != 1:
        raise UsageError("forget needs exactly one of --episode ID, --session S, --before DATE")
    before = _before(args.before) if args.before is not None else None
    # The service re-renders: lessons.md and the others no longer count what was forgotten.
    result, _ = daemon_or_here(args, {"op": "forget", "episode": args.episode, "session": args.session,
                                      "before": iso(before) if before is not None else None},
                               lambda memory: memory.forget(episode=args.episode, session=args.session, before=before))
    # An id or a session that names nothing is a typo, not a success (a date before everything is not:
    # there was just nothing that old).  Nothing matched, so nothing was deleted.
    if not result["episodes"] and args.episode is not None:
        raise UsageError(f"no episode has the id {args.episode!r}: nothing was forgotten "
                         "(`neverestctl episodes` lists the episodes and their ids)")
    if not result["episodes"] and args.session is not None:
        raise UsageError(f"no episode is of the session {args.session!r}: nothing was forgotten "
                         "(`neverestctl episodes` lists the episodes and their sessions)")
    if args.json:
        print(json.dumps(result))
    else:
        print(f"forgot {result['episodes']} episode(s); {result['lesson_sources']} lesson source(s) and "
              f"{result['predictions']} prediction(s) that pointed at them removed")
        if not (result["vacuumed"] and result["wal_truncated"]):
            print("another process was using the store, so deleted text may remain on disk until a later "
                  "checkpoint; run the same forget again to finish")
    return 0


def _dump(out: TextIO, store: Store) -> int:
    lines = 0
    for item in export(store):
        out.write(json.dumps(item, ensure_ascii=False) + "\n")
        lines += 1
    out.flush()
    return lines


def cmd_export(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
        if args.output is None:
            lines = _dump(sys.stdout, memory.store)
        else:
            path = Path(args.output)
            try:
                # The export holds raw episodes: private to its owner, like the store.
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.fchmod(fd, 0o600)  # a file that existed keeps its mode otherwise
            except OSError as exc:
                raise UsageError(f"cannot write {path}: {exc.strerror}") from None
            with open(fd, "w", encoding="utf-8") as f:
                lines = _dump(f, memory.store)
    if args.output is not None:
        if args.json:
            print(json.dumps({"output": args.output, "lines": lines}))
        else:
            print(f"exported {lines} line(s) to {args.output}")
    return 0


def add_parsers(sub: argparse._SubParsersAction, common: argparse.ArgumentParser | None = None  # type: ignore[type-arg]
                ) -> None:
    parents = [common] if common else []
    p = sub.add_parser("forget", parents=parents,
                       help="remove episodes for good: one by id, a session, or everything before a date")
    p.add_argument("--episode", metavar="ID", help="the episode's id")
    p.add_argument("--session", metavar="S", help="every episode of this session")
    p.add_argument("--before", metavar="DATE", help="every episode that happened before this date or time (UTC)")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    p.set_defaults(func=cmd_forget)
    p = sub.add_parser("export", parents=parents,
                       help="the owner's data as JSON Lines (episodes, lessons, predictions, projects, peers); "
                            "never the key")
    p.add_argument("--output", metavar="FILE", help="write to FILE instead of standard output")
    p.add_argument("--json", action="store_true", help="with --output, print a JSON summary")
    p.set_defaults(func=cmd_export)
