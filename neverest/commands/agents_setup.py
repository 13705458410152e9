"""``neverestctl setup`` (wire the agents on this machine to the memory, or undo it) and
``neverestctl measure`` (whether the memory helps, by day)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from neverest.agents.measure import measure
from neverest.agents.setup import Environment, SetupError, apply, plan, undo
from neverest.commands.common import CommandFailed, UsageError, open_memory
from neverest.memory.store import open_store
from neverest.paths import HomeError, find_home, is_default, resolve_home


def add_parsers(sub: Any, common: argparse.ArgumentParser | None = None) -> None:
    parents = [common] if common else []
    p = sub.add_parser("setup", parents=parents,
                       help="wire Claude Code, Codex and a systemd unit to this memory (--undo puts it back)",
                       description="Find the coding agents installed and add Neverest's hooks and MCP server to "
                       "their configuration files, merged into what is there, with a backup of every file changed; "
                       "write a systemd user unit for neverestd. Running it again changes nothing. --undo restores "
                       "the files as they were.")
    p.add_argument("--dry-run", action="store_true", help="change nothing; print what would change")
    p.add_argument("--undo", action="store_true", help="put back every file setup changed")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_setup)

    p = sub.add_parser("measure", parents=parents,
                       help="by day: repeat-yourself rate, repeated-error rate, prediction accuracy",
                       description="By UTC day: the share of corrections repeating an earlier one, of errors a "
                       "lesson already knew, of resolved predictions confirmed; and the first two in sessions "
                       "with lessons injected against held-out ones.")
    p.add_argument("--days", type=int, default=7, help="how many days, ending today (default 7)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_measure)


def cmd_setup(args: argparse.Namespace) -> int:
    flag = getattr(args, "home", None)
    if args.dry_run:
        neverest_home = resolve_home(flag)  # a dry run creates nothing, not even the default home
    else:
        try:
            neverest_home = find_home(flag)
        except HomeError as exc:
            raise UsageError(str(exc)) from None
        # The memory the agents are wired to exists from now on (its store marks the folder as a
        # home, so the backups kept in it do not make it look like some other folder).
        if not args.undo:
            open_store(neverest_home).close()
    env = Environment.detect(neverest_home, pinned=not is_default(flag))
    try:
        if args.undo:
            done = undo(env, dry_run=args.dry_run)
            if args.json:
                print(json.dumps({"undo": done, "dry_run": args.dry_run}))
            elif not done:
                print("nothing to undo: setup has changed no file (or was undone already)")
            else:
                for item in done:
                    print(f"{'would be ' if args.dry_run else ''}{item['action']}: {item['file']}")
            return 0
        todo = plan(env)
        if not args.dry_run:
            apply(env, todo)
    except SetupError as exc:
        raise CommandFailed(f"{exc} (nothing was changed)" if not args.undo else str(exc)) from None
    except OSError as exc:
        raise CommandFailed(f"setup could not write {exc.filename}: {exc.strerror}") from None
    if args.json:
        print(json.dumps({"dry_run": args.dry_run, "changed": [{"file": str(c.path), "what": c.what}
                                                               for c in todo.changes],
                          "unchanged": todo.unchanged, "notes": todo.notes,
                          "backups": str(env.backups)}, ensure_ascii=False))
        return 0
    verb = "would change" if args.dry_run else "changed"
    for change in todo.changes:
        print(f"{verb} {change.path}: {change.what}")
    if not todo.changes:
        print("nothing to change: everything is wired already" if todo.unchanged else "nothing to wire")
    elif not args.dry_run:
        print(f"the originals are kept in {env.backups}; `neverestctl setup --undo` puts them back")
    for line in todo.unchanged:
        print(f"already done {line}")
    for note in todo.notes:
        print(note)
    return 0


def _pct(value: float | None) -> str:
    return "   -" if value is None else f"{100 * value:3.0f}%"


def cmd_measure(args: argparse.Namespace) -> int:
    if not 1 <= args.days <= 3660:
        raise UsageError("--days must be between 1 and 3660")
    with open_memory(args) as memory:
        result = measure(memory, days=args.days)
    if args.json:
        print(json.dumps(result))
        return 0
    print("day         repeat-yourself   repeated errors   predictions confirmed")
    for day in [*result["days"], {"day": "total"} | result["total"]]:
        print(f"{day['day']:<11} {_pct(day['repeat_rate'])} of {day['corrections']:<6}  "
              f"{_pct(day['repeated_error_rate'])} of {day['errors']:<6}  "
              f"{_pct(day['prediction_accuracy'])} of {day['predictions_resolved']}")
        if "injected" in day:
            for group in ("injected", "held_out"):
                rates = day[group]
                print(f"  {group.replace('_', ' '):<9} {_pct(rates['repeat_rate'])} of {rates['corrections']:<6}  "
                      f"{_pct(rates['repeated_error_rate'])} of {rates['errors']}")
    if result["split"] != "available":
        print(f"injected against held-out sessions: {result['split']}")
    return 0
