"""``neverestctl setup`` (wire the agents on this machine to the memory, or undo it),
``neverestctl memory-file`` (the Claude Code memory files written, opted out, opted back in) and
``neverestctl measure`` (whether the memory helps, by day)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from neverest.agents.doors import claude_dir, wired
from neverest.agents.measure import measure
from neverest.agents.memory_file import MemoryFileError, listing, opt_in, opt_out, withdraw_agent_memory
from neverest.agents.setup import Environment, SetupError, apply, plan, undo
from neverest.agents.transcripts import CLAUDE_AGENT
from neverest.commands.common import CommandFailed, UsageError, open_memory, through_daemon
from neverest.memory.store import open_store
from neverest.paths import STORE_FILE, HomeError, find_home, is_default, resolve_home


def add_parsers(sub: Any, common: argparse.ArgumentParser | None = None) -> None:
    parents = [common] if common else []
    p = sub.add_parser("setup", parents=parents,
                       help="wire Claude Code, Codex (and by MCP Claude Desktop, Cursor, Windsurf, Gemini CLI) and a "
                       "systemd unit to this memory (--undo puts it back)",
                       description="Find the coding agents installed and add Neverest's hooks and MCP server to "
                       "their configuration files, merged into what is there, with a backup of every file changed: "
                       "Claude Code and Codex; Claude Desktop, Cursor, Windsurf and Gemini CLI (the MCP server only, "
                       "where their configuration folder exists); write a systemd user unit for neverestd. Running "
                       "it again changes nothing. --undo restores the files as they were.")
    p.add_argument("--dry-run", action="store_true", help="change nothing; print what would change")
    p.add_argument("--undo", action="store_true", help="put back every file setup changed")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_setup)

    p = sub.add_parser("memory-file", parents=parents,
                       help="the Claude Code MEMORY.md files this memory writes: list, opt a project out or back in",
                       description="List the MEMORY.md files this memory has written its section into (and those "
                       "opted out: a deleted MEMORY.md opts its project out, and is not written again). `on PROJECT` "
                       "opts a project back in (its file is written at once); `off PROJECT` opts it out and takes "
                       "the section back now. PROJECT is the project's folder or the MEMORY.md itself.")
    p.add_argument("action", nargs="?", choices=("list", "on", "off"), default="list")
    p.add_argument("project", nargs="?", metavar="PROJECT")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_memory_file)

    p = sub.add_parser("measure", parents=parents,
                       help="by day: repeat-yourself rate, repeated-error rate, prediction accuracy",
                       description="By UTC day: the share of corrections repeating an earlier one, of errors a "
                       "lesson already knew, of resolved predictions confirmed; and the first two in sessions "
                       "with lessons injected against held-out ones.")
    p.add_argument("--days", type=int, default=7, help="how many days, ending today (default 7)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_measure)


def _daemon_note(args: argparse.Namespace) -> str | None:
    if through_daemon(args, {"op": "status"}, timeout_s=5.0) is None:
        return None
    return ("neverestd is running with the agents wired when it started: restart it (systemctl --user restart "
            "neverestd, or stop and start it) for it to read what changed here")


def _withdraw(neverest_home: Path, args: argparse.Namespace, *, dry_run: bool) -> list[dict[str, str]]:
    """After an undo: the sections written into Claude Code's memory files taken back, unless the config
    (as restored) still wires Claude Code."""
    if not (neverest_home / STORE_FILE).is_file():
        return []
    with open_memory(args) as memory:
        if wired(memory.config, CLAUDE_AGENT):
            return []
        written = [f for f in listing(memory) if f["lessons"] and f["exists"] and not f["opted_out"]]
        if not dry_run:
            withdraw_agent_memory(memory)
    return [{"file": f["file"], "action": "Neverest's section taken back"} for f in written]


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
            done += _withdraw(neverest_home, args, dry_run=args.dry_run)
            note = _daemon_note(args) if done and not args.dry_run else None
            if args.json:
                print(json.dumps({"undo": done, "dry_run": args.dry_run, "notes": [note] if note else []}))
            elif not done:
                print("nothing to undo: setup has changed no file (or was undone already)")
            else:
                for item in done:
                    print(f"{'would be ' if args.dry_run else ''}{item['action']}: {item['file']}")
                if note:
                    print(note)
            return 0
        todo = plan(env)
        if not args.dry_run:
            apply(env, todo)
    except SetupError as exc:
        raise CommandFailed(f"{exc} (nothing was changed)" if not args.undo else str(exc)) from None
    except OSError as exc:
        raise CommandFailed(f"setup could not write {exc.filename}: {exc.strerror}") from None
    if todo.changes and not args.dry_run:
        note = _daemon_note(args)
        if note:
            todo.notes.append(note)
    if args.json:
        print(json.dumps({"dry_run": args.dry_run, "changed": [{"file": str(c.path), "what": c.what}
                                                               for c in todo.changes],
                          "unchanged": todo.unchanged, "notes": todo.notes, "mcp_clients": todo.clients,
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
    for client in todo.clients:
        status = "would be wired" if args.dry_run and client["status"] == "wired" else client["status"]
        print(f"{client['label']}: {status}: {client['why']}")
    for note in todo.notes:
        print(note)
    return 0


def cmd_memory_file(args: argparse.Namespace) -> int:
    if args.action == "list" and args.project:
        raise UsageError("memory-file list takes no PROJECT")
    if args.action != "list" and not args.project:
        raise UsageError(f"memory-file {args.action} needs the PROJECT folder (or its MEMORY.md)")
    with open_memory(args) as memory:
        if args.action == "list":
            files = listing(memory)
            if args.json:
                for item in files:
                    print(json.dumps(item, ensure_ascii=False))
                return 0
            if not wired(memory.config, CLAUDE_AGENT):
                print("Claude Code is not wired (neverestctl setup): no memory file is written")
            for item in files:
                state = (f"opted out {item['opted_out']} (neverestctl memory-file on PROJECT to write it again)"
                         if item["opted_out"] else f"{item['lessons']} lesson(s)" if item["exists"] else "absent")
                print(f"{item['file']}  {state}" + (f"; {item['vetoed']} line(s) vetoed" if item["vetoed"] else ""))
            if not files:
                print("no memory file written yet")
            return 0
        try:
            if args.action == "on":
                name = opt_in(memory, claude_dir(memory.config), args.project)
                memory.render()
            else:
                name = opt_out(memory, claude_dir(memory.config), args.project)
        except MemoryFileError as exc:
            raise UsageError(str(exc)) from None
        if args.json:
            print(json.dumps({"file": name, "opted_out": args.action == "off"}))
        elif args.action == "on":
            print(f"opted back in: {name}" + ("" if wired(memory.config, CLAUDE_AGENT) else
                                              " (written once Claude Code is wired: neverestctl setup)"))
        else:
            print(f"opted out: {name}; Neverest's section taken back, the file is not written again")
    return 0


def _pct(value: float | None) -> str:
    return "   -" if value is None else f"{100 * value:3.0f}%"


MAX_DAYS = 3660  # ten years: more is a typo, not a question a memory can answer


def _measured(day: dict[str, Any]) -> bool:
    return bool(day["corrections"] or day["errors"] or day["predictions_resolved"])


def cmd_measure(args: argparse.Namespace) -> int:
    if not 1 <= args.days <= MAX_DAYS:
        raise UsageError(f"--days {args.days}: give a number of days from 1 to {MAX_DAYS} (ten years)")
    with open_memory(args) as memory:
        result = measure(memory, days=args.days)
    if args.json:
        print(json.dumps(result))
        return 0
    # Only the days with something measured: a table of empty days says nothing.
    shown = [day for day in result["days"] if _measured(day)]
    if not shown:
        print(f"nothing to measure in the last {args.days} day(s): no correction, error or resolved prediction "
              "was remembered (they come from the agents' sessions and the nightly sleep)")
        return 0
    print("day         repeat-yourself   repeated errors   predictions confirmed")
    for day in [*shown, {"day": "total"} | result["total"]]:
        print(f"{day['day']:<11} {_pct(day['repeat_rate'])} of {day['corrections']:<6}  "
              f"{_pct(day['repeated_error_rate'])} of {day['errors']:<6}  "
              f"{_pct(day['prediction_accuracy'])} of {day['predictions_resolved']}")
        if "injected" in day:
            for group in ("injected", "held_out"):
                rates = day[group]
                print(f"  {group.replace('_', ' '):<9} {_pct(rates['repeat_rate'])} of {rates['corrections']:<6}  "
                      f"{_pct(rates['repeated_error_rate'])} of {rates['errors']}")
    total, counted = result["total"], len(result["days"])
    print(f"{counted} day(s), {total['from']} to {total['to']}"
          + (f": nothing to measure before {total['from']}" if counted < args.days else "")
          + (f"; {counted - len(shown)} day(s) with nothing to measure not shown" if counted > len(shown) else ""))
    if result["split"] != "available":
        print(f"injected against held-out sessions: {result['split']}")
    return 0
