"""``neverestctl ingest`` (the agents' session files into the memory) and ``neverestctl episodes``
(what the memory holds about the owner, so it can be seen and forgotten)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Final

from neverest.agents.doors import claude_dir, codex_dir, wired
from neverest.agents.ingest import ingest_transcripts
from neverest.agents.transcripts import CLAUDE_AGENT, CODEX_AGENT
from neverest.clock import iso, parse_time
from neverest.commands.common import UsageError, open_memory
from neverest.config import Config
from neverest.memory.model import Endpoint
from neverest.memory.queries import transcripts as queries

_GIST_CHARS: Final = 100


def cmd_ingest(args: argparse.Namespace) -> int:
    """A folder named by a flag is read; an agent's default folder only when the agent is wired (setup).
    With ``--chats FILE`` that file of conversations is read, and the folders only when named."""
    for flag, given in (("--claude", args.claude), ("--codex", args.codex)):
        if given and not Path(given).expanduser().is_dir():
            raise UsageError(f"{flag} {given}: not a folder")
    if args.chats is not None:
        return _ingest_chats(args)
    with open_memory(args) as memory:
        config = memory.config
        claude = Path(args.claude) if args.claude else claude_dir(config) if wired(config, CLAUDE_AGENT) else None
        codex = Path(args.codex) if args.codex else codex_dir(config) if wired(config, CODEX_AGENT) else None
        report = ingest_transcripts(memory, claude=claude, codex=codex)
    not_read = [name for name, folder in (("Claude Code", claude), ("Codex", codex)) if folder is None]
    out = report.to_json() | {"not_wired": [a for a, folder in ((CLAUDE_AGENT, claude), (CODEX_AGENT, codex))
                                            if folder is None]}
    if args.json:
        print(json.dumps(out, sort_keys=True))
    else:
        skipped = sum(n for reason, n in report.lines.items() if reason not in ("used", "blank"))
        print(f"{report.files} session files, {report.read} read, {report.turns} turns; "
              f"{report.stored} episodes stored"
              + (f" ({report.repeats} events repeated one of them in its session)" if report.repeats else "")
              + f", {report.duplicates} already held, {report.refused} refused; "
              f"{skipped} lines skipped" + (f"; {report.vanished} vanished" if report.vanished else ""))
        for problem in report.unreadable:
            print(f"unreadable: {problem}")
        for name in not_read:
            flag = "--claude" if name == "Claude Code" else "--codex"
            print(f"{name}: not read (not wired by `neverestctl setup`; name its folder with {flag} DIR to read it)")
    return 1 if report.unreadable else 0


def _ingest_chats(args: argparse.Namespace) -> int:
    """``ingest --chats FILE|-``: conversations with any model (neverest/agents/chats.py); exit status 1 when
    a conversation could not be read (the others are stored)."""
    from neverest.agents.chats import ingest_chats

    if args.chats != "-" and not Path(args.chats).expanduser().is_file():
        raise UsageError(f"--chats {args.chats}: no such file")
    with open_memory(args) as memory:
        try:
            if args.chats == "-":
                report = ingest_chats(memory, sys.stdin.buffer)
            else:
                with Path(args.chats).expanduser().open("rb") as stream:
                    report = ingest_chats(memory, stream)
        except OSError as exc:
            raise UsageError(f"cannot read {args.chats}: {exc.strerror}") from None
        folders = None
        if args.claude or args.codex:
            folders = ingest_transcripts(memory, claude=Path(args.claude) if args.claude else None,
                                         codex=Path(args.codex) if args.codex else None)
    out = report.to_json() | ({"sessions": folders.to_json()} if folders is not None else {})
    if args.json:
        print(json.dumps(out, sort_keys=True, ensure_ascii=False))
    else:
        formats = ", ".join(f"{n} {fmt}" for fmt, n in sorted(report.formats.items())) or "none"
        print(f"{report.conversations} conversation(s) ({formats}), {report.turns} turns; "
              f"{report.stored} episodes stored, {report.duplicates} already held, {report.refused} refused"
              + (f"; {report.unread} conversation(s) not read" if report.unread else ""))
        for problem in report.problems:
            print(f"  {problem}", file=sys.stderr)
        if folders is not None:
            print(f"{folders.files} session files, {folders.read} read; {folders.stored} episodes stored")
    unreadable = folders.unreadable if folders is not None else []
    return 1 if report.unread or unreadable else 0


def cmd_replay(args: argparse.Namespace) -> int:
    from neverest.agents.replay import replay, table

    for flag, given in (("--claude", args.claude), ("--codex", args.codex)):
        if given and not Path(given).expanduser().is_dir():
            raise UsageError(f"{flag} {given}: not a folder")
    claude: Path | None
    codex: Path | None
    if not args.claude and not args.codex:
        # The wired agents' folders (setup), as ingest reads them; else the folders must be named.
        with open_memory(args) as memory:
            config = memory.config
        claude = claude_dir(config) if wired(config, CLAUDE_AGENT) else None
        codex = codex_dir(config) if wired(config, CODEX_AGENT) else None
        if claude is None and codex is None:
            raise UsageError("no agent is wired (neverestctl setup): name the session folders with --claude DIR "
                             "and/or --codex DIR")
    else:
        claude = Path(args.claude) if args.claude else None
        codex = Path(args.codex) if args.codex else None
    if bool(args.embed_url) != bool(args.embed_model):
        raise UsageError("--embed-url and --embed-model go together")
    if args.embed_url:
        try:
            Endpoint(args.embed_url, args.embed_model)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    report = replay(claude, codex, config=Config(embed_url=args.embed_url or "", embed_model=args.embed_model or ""))
    if args.explain:
        print(report.explained())
    print(table(report))
    if args.json:
        print(json.dumps(report.to_json(), sort_keys=True, ensure_ascii=False))
    return 0


def _gist(row: dict[str, Any]) -> str:
    parts = [str(row[name]).strip() for name in ("title", "said", "happened", "expected", "text")
             if row.get(name) and str(row[name]).strip()]
    line = " — ".join(parts).replace("\n", " ")
    return line if len(line) <= _GIST_CHARS else line[: _GIST_CHARS - 1] + "…"


def cmd_episodes(args: argparse.Namespace) -> int:
    since = None
    if args.since:
        try:
            since = iso(parse_time(args.since))
        except (ValueError, OverflowError):
            raise UsageError(f"--since {args.since!r}: not an ISO 8601 date or time") from None
    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    with open_memory(args) as memory, memory.store.read() as db:
        rows = queries.list_episodes(db, kind=args.kind, session=args.session, since=since, limit=args.limit)
    if args.json:
        for row in rows:
            print(json.dumps(row, sort_keys=True, ensure_ascii=False))
        return 0
    for row in rows:
        print(f"{row['id']}  {row['at']}  {row['kind']:<11}  {row['session'] or '-'}  {_gist(row)}")
    if not rows:
        print("no episodes")
    return 0
