"""neverestctl: the command line of a Neverest memory.

Every command is reachable in-process as ``main([...])`` (that is how the tests
drive it) and returns the process exit status: 0 success, 1 the command ran and
found a problem (a refused record...), 2 a usage error; and 141, quietly, when the
reader of the output went away (``neverestctl export | head``), as for a Unix tool
killed by SIGPIPE.  Each command has a readable default output and ``--json`` for
scripts where it prints data.

Adding a command is a ``command(sub, common, "name", "package.module:cmd_name", help=...)`` line in
``build_parser`` and its arguments: the module is imported only when that command runs, so the
arguments' choices are spelled here, not imported (a module's own ``add_parser(sub, common)`` still
works, and a callable ``func`` runs as it is, but it puts that module's imports into every start-up).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, BinaryIO, TextIO, cast

from neverest import __version__

# Start-up is part of every command's cost (an agent runs `recall` in a loop): this module imports
# only the standard library at its top, and each command's module once the command line names it.


class VerifyUsageError(Exception):
    """A usage error of ``verify`` (exit status 2), raised without importing the other commands."""


def cmd_init(args: argparse.Namespace) -> int:
    """A new memory (its folder, key and store), or an existing one checked and made private."""
    from neverest.commands.common import UsageError
    from neverest.identity import load_or_create
    from neverest.memory.store import open_store
    from neverest.paths import KEY_FILE, HomeError, find_home

    try:
        home = find_home(args.home, init=True)
    except HomeError as exc:
        raise UsageError(str(exc)) from None
    existed = (home / KEY_FILE).exists()
    ident = load_or_create(home)
    open_store(home).close()
    if args.json:
        print(json.dumps({"home": str(home), "origin": ident.origin, "new": not existed}))
    else:
        print(f"{'memory already at' if existed else 'new memory at'} {home}, origin {ident.origin}")
    return 0


def cmd_id(args: argparse.Namespace) -> int:
    from neverest.commands.common import home_of
    from neverest.identity import load_or_create

    ident = load_or_create(home_of(args))
    if args.json:
        print(json.dumps({"origin": ident.origin, "key": ident.key, "key_file": str(ident.path)}))
    else:
        print(f"origin {ident.origin}\nkey    {ident.key}\nfile   {ident.path}")
    return 0


def verify_stream(stream: BinaryIO, out: TextIO) -> bool:
    """Check every line of ``stream``, writing one JSON verdict per non-blank line.

    This is the stable contract of ``neverestctl verify``: the keys line, ok, type,
    hash, origin, reason (a refusal code or null) and message (null when ok).
    Returns True when every line was accepted.
    """
    from neverest import verify_pool
    from neverest.lines import read_lines
    from neverest.records import MAX_RECORD_BYTES, RecordError, claimed

    all_ok = True
    lines = (((number, line), line) for number, line in read_lines(stream, MAX_RECORD_BYTES)
             if line is None or line.strip())
    # Worker processes verify the lines of a big input while this one writes the verdicts.
    pool = verify_pool.shared(verify_pool.default_processes())
    for (number, line), result in verify_pool.parse_many(pool, lines):
        verdict: dict[str, object]
        if isinstance(result, RecordError):
            all_ok = False
            rtype, target, origin = claimed(line) if line is not None else (None, None, None)
            verdict = {"line": number, "ok": False, "type": rtype, "hash": target, "origin": origin,
                       "reason": result.code, "message": result.message}
        else:
            verdict = {"line": number, "ok": True, "type": result.type, "hash": result.target,
                       "origin": result.origin, "reason": None, "message": None}
        out.write(json.dumps(verdict, ensure_ascii=False) + "\n")
    return all_ok


def _open_inputs(files: Sequence[str]) -> Iterable[BinaryIO]:
    if not files:
        yield sys.stdin.buffer
        return
    for name in files:
        if name == "-":
            yield sys.stdin.buffer
            continue
        try:
            handle = open(name, "rb")
        except OSError as exc:
            raise VerifyUsageError(f"cannot read {name}: {exc.strerror}") from None
        with handle:
            yield handle


def cmd_verify(args: argparse.Namespace) -> int:
    # Check that every file can be opened before printing anything, so that a
    # typo in the third name is a usage error, not a half-written report.
    for name in args.files:
        if name != "-" and not Path(name).is_file():
            raise VerifyUsageError(f"cannot read {name}: no such file")
    all_ok = True
    for stream in _open_inputs(args.files):
        all_ok &= verify_stream(stream, sys.stdout)
    return 0 if all_ok else 1




SubParsers = argparse._SubParsersAction  # argparse's type for add_subparsers()


def _terminal_columns() -> int:
    """``shutil.get_terminal_size().columns``, by the same rule ($COLUMNS, else standard output's
    terminal, else 80), without importing shutil: argparse makes a formatter for every argument added,
    and its own default width imports shutil with zlib, bz2 and lzma, 2 ms of every command line."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


class _Formatter(argparse.HelpFormatter):
    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position,
                         _terminal_columns() - 2 if width is None else width)


class _Parser(argparse.ArgumentParser):
    """argparse's parser with ``_Formatter``; its sub-commands' parsers are of this class too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

# Choices the grammar spells here rather than importing them from where they are defined: those
# modules load the store, the crypto or the hook, and `--help` must start without them.  A test
# (tests/test_ctl_startup.py) holds each equal to its source.
LESSON_KINDS = ("error", "correction", "surprise")  # records.KINDS
EVENT_KINDS = ("correction", "error", "environment", "surprise", "note")  # memory.events.EVENT_KINDS
EVENT_FIELDS = ("said", "agent_did", "title", "expected", "happened", "text", "worked", "reaction", "agent", "session",
                "cwd", "at")  # commands.memory.EVENT_FIELDS
HOLDOUT_ENV, DEFAULT_HOLDOUT, EXPLAIN_ENV = "NEVEREST_HOLDOUT", 0.5, "NEVEREST_HOOK_EXPLAIN"  # agents.hook's
RELAY_NOTE_KINDS, RELAY_LIMIT = ("note", "deploy", "correction"), 20  # commands.relay.NOTE_KINDS, relay.DEFAULT_LIMIT
PROXY_LISTEN = "127.0.0.1:7429"  # commands.relay.DEFAULT_PROXY_LISTEN


class _Unbuilt:
    """What ``add_parser`` gives for a command the command line does not name, when only the named one is
    built: it takes every call a command's grammar makes (``add_argument``, ``set_defaults``, nested
    ``add_subparsers``/``add_parser``...) and builds nothing."""

    def __getattr__(self, name: str) -> Callable[..., _Unbuilt]:
        return lambda *args, **kwargs: self


class _OnlyCommand:
    """The top-level subparsers action, building the parser of one command and none of the others.

    Building all ~40 parsers costs about 16 ms (argparse looks up its message catalogue for every help
    text), more than most commands' own work (docs/figures.md, start-up); a command line that names a
    command needs only that one.  ``found`` says whether the name was one of them."""

    def __init__(self, sub: SubParsers[argparse.ArgumentParser], wanted: str) -> None:
        self._sub, self._wanted, self.found = sub, wanted, False

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if name != self._wanted:
            return cast(argparse.ArgumentParser, _UNBUILT)
        self.found = True
        return self._sub.add_parser(name, **kwargs)


_UNBUILT = _Unbuilt()


def _top_parser() -> tuple[argparse.ArgumentParser, SubParsers[argparse.ArgumentParser], argparse.ArgumentParser]:
    parser: argparse.ArgumentParser = _Parser(prog="neverestctl", description="Manage a Neverest memory.")
    parser.add_argument("--version", action="version", version=f"neverest {__version__}")
    home_help = "the memory's home folder (default: $NEVEREST_HOME, else ~/.neverest)"
    parser.add_argument("--home", help=home_help)
    # --home is accepted after the command too (`neverestctl status --home DIR`); there it wins.
    common = _Parser(add_help=False)
    common.add_argument("--home", default=argparse.SUPPRESS, help=home_help)
    sub: SubParsers[argparse.ArgumentParser] = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    return parser, sub, common


def command(sub: SubParsers[argparse.ArgumentParser], common: argparse.ArgumentParser, name: str, run: str,
            **kwargs: Any) -> argparse.ArgumentParser:
    """A command ``name`` run by ``run``, "module:function", imported only once the command line is parsed
    and names this command: `--help` and every other command start without that module."""
    p = sub.add_parser(name, parents=[common], **kwargs)
    p.set_defaults(func=run)
    return p


def _add_verify_parser(sub: SubParsers[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = command(sub, common, "verify", "neverest.ctl:cmd_verify",
        help="check record lines; one JSON verdict per non-blank line",
        description="Check wire records (one per line) from FILEs or standard input. Prints one JSON "
        "object per non-blank line: line, ok, type, hash, origin, reason, message. Exit status 0 when "
        "every line is accepted, 1 when any is refused, 2 for a usage error.",
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="files of records ('-' or none: standard input)")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every command's arguments, each naming the function that runs it (see ``command``).  Nothing here
    imports a command's module: adding a command is a ``command(...)`` line and its arguments.

    ``only``: build that top-level command's parser alone (what ``main`` does once the command line names
    a command); a name that is no command builds them all, so that argparse lists the choices."""
    if only is not None:
        parser, sub, common = _top_parser()
        one = _OnlyCommand(sub, only)
        _add_commands(cast("SubParsers[argparse.ArgumentParser]", one), common)
        if one.found:
            return parser
    parser, sub, common = _top_parser()
    _add_commands(sub, common)
    return parser


def _add_commands(sub: SubParsers[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    """The commands, in the order ``--help`` lists them."""
    p = command(sub, common, "init", "neverest.ctl:cmd_init",
                help="make a new memory in --home (or check an existing one)")
    p.add_argument("--json", action="store_true")

    p = command(sub, common, "id", "neverest.ctl:cmd_id",
                help="print this memory's origin and public key (made on first use)")
    p.add_argument("--json", action="store_true", help="print a JSON object")

    _add_verify_parser(sub, common)

    p = command(sub, common, "remember", "neverest.commands.memory:cmd_remember",
                help="store an agent's event (or JSON Lines of events) as an episode",
                description="Store one event from flags, or many from --events FILE|- (JSON Lines). "
                "Exit status 1 when any event is refused; the others are still stored.")
    p.add_argument("--kind", choices=EVENT_KINDS)
    for name in EVENT_FIELDS:
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, metavar=name.upper())
    p.add_argument("--events", metavar="FILE", help="JSON Lines of events ('-': standard input)")
    p.add_argument("--json", action="store_true")

    p = command(sub, common, "sleep", "neverest.commands.memory:cmd_sleep",
                help="drain the inbox and run the sleep passes now; print what each did")
    p.add_argument("--json", action="store_true")

    p = command(sub, common, "lessons", "neverest.commands.memory:cmd_lessons",
                help="list the lessons this memory holds")
    p.add_argument("--kind", choices=LESSON_KINDS)
    p.add_argument("--all", action="store_true", help="include archived lessons")
    p.add_argument("--json", action="store_true", help="one JSON object per lesson")

    p = command(sub, common, "recall", "neverest.commands.memory:cmd_recall",
                help="the episodes and lessons a query bears on")
    p.add_argument("query")
    p.add_argument("-k", type=int, default=5, help="how many (default 5)")
    p.add_argument("--json", action="store_true")

    p = command(sub, common, "publish", "neverest.commands.sharing:cmd_publish",
                help="share the lessons learned in a project (opt-in, per project)")
    p.add_argument("--project", required=True, help="the project folder whose lessons may leave this machine")
    p.add_argument("--corrections", action="store_true", help="also publish lessons about the person")
    p.add_argument("--json", action="store_true")

    p = command(sub, common, "unpublish", "neverest.commands.sharing:cmd_unpublish",
                help="stop sharing a project's lessons")
    p.add_argument("--project", required=True)
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("folder", parents=[common], help="the shared-folder transport")
    folder_sub = p.add_subparsers(dest="folder_command", required=True, metavar="ACTION")
    q = command(folder_sub, common, "sync", "neverest.commands.sharing:cmd_folder_sync",
                help="write this memory's records to DIR and read everyone else's")
    q.add_argument("dir", metavar="DIR")
    q.add_argument("--json", action="store_true")

    p = sub.add_parser("commons", parents=[common], help="the HTTP commons transport")
    commons_sub = p.add_subparsers(dest="commons_command", required=True, metavar="ACTION")
    for action, text in (("push", "put this memory's signed records on the commons"),
                         ("pull", "read what changed on the commons through the receive function")):
        q = command(commons_sub, common, action, "neverest.commands.sharing:cmd_commons", help=text)
        q.add_argument("url", metavar="URL", help="the commons, like https://commons.example.org")
        q.add_argument("--token-file", metavar="FILE", help="a file holding the bearer token")
        q.add_argument("--json", action="store_true")

    p = command(sub, common, "show", "neverest.commands.sharing:cmd_show",
                help="a lesson with its state, publishers, supporters and records")
    p.add_argument("hash", metavar="HASH", help="the lesson's hash (at least 6 hex digits)")
    p.add_argument("--json", action="store_true")

    p = command(sub, common, "revoke", "neverest.commands.sharing:cmd_revoke",
                help="withdraw a lesson this memory published")
    p.add_argument("hash", metavar="HASH")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("peer", parents=[common], help="the peers this memory gossips with")
    peer_sub = p.add_subparsers(dest="peer_command", required=True, metavar="ACTION")
    q = command(peer_sub, common, "add", "neverest.commands.network:cmd_peer_add",
                help="add a peer by URL, like http://192.0.2.7:7428")
    q.add_argument("url", metavar="URL")
    q = command(peer_sub, common, "remove", "neverest.commands.network:cmd_peer_remove",
                help="forget an address, or a peer (by origin) and all its addresses")
    q.add_argument("peer", metavar="URL|ORIGIN")
    q = command(peer_sub, common, "list", "neverest.commands.network:cmd_peer_list",
                help="the peers, their addresses, scores and back-offs")
    q.add_argument("--json", action="store_true")

    p = command(sub, common, "gossip", "neverest.commands.network:cmd_gossip",
                help="one gossip round now (through the daemon when it runs)")
    p.add_argument("--peer", metavar="URL", help="exchange with this address only")
    p.add_argument("--json", action="store_true")

    p = command(sub, common, "status", "neverest.commands.network:cmd_status",
                help="this memory at a glance, with refusals by reason and source")
    p.add_argument("--json", action="store_true")

    p = command(sub, common, "forget", "neverest.commands.data:cmd_forget",
                help="remove episodes for good: one by id, a session, or everything before a date")
    p.add_argument("--episode", metavar="ID", help="the episode's id")
    p.add_argument("--session", metavar="S", help="every episode of this session")
    p.add_argument("--before", metavar="DATE", help="every episode that happened before this date or time (UTC), "
                   "and the project logs' lines written before it")
    p.add_argument("--relay", metavar="PROJECT", help="the project log of PROJECT (its folder or name), whole")
    p.add_argument("--json", action="store_true", help="print a JSON object")

    p = command(sub, common, "export", "neverest.commands.data:cmd_export",
                help="the owner's data as JSON Lines (episodes, lessons, predictions, projects, peers, project logs); "
                     "never the key")
    p.add_argument("--output", metavar="FILE", help="write to FILE instead of standard output")
    p.add_argument("--json", action="store_true", help="with --output, print a JSON summary")

    p = command(sub, common, "doctor", "neverest.commands.doctor:cmd_doctor",
                help="check the home, key, store, daemon, port, peers and clock; say what to fix",
                description="Check this memory without changing anything. Each check prints ok, warn or FAIL with a "
                "hint. Exit status 0 when nothing failed, 1 otherwise.")
    p.add_argument("--json", action="store_true", help='one JSON object: {"home", "ok", "checks": [...]}')

    _add_agent_parsers(sub, common)
    p = sub.add_parser("trust", parents=[common], help="the memories whose support counts here, and why")
    trust_sub = p.add_subparsers(dest="trust_command", required=True, metavar="ACTION")
    q = command(trust_sub, common, "add", "neverest.commands.trust:cmd_trust_add",
                help="name a memory by its origin: its support counts here under every policy")
    q.add_argument("origin", metavar="ORIGIN", help="16 hex digits, as `neverestctl id` prints them")
    q.add_argument("--note", metavar="TEXT", help="why, or who it is (shown by trust list)")
    q.add_argument("--json", action="store_true")
    q = command(trust_sub, common, "remove", "neverest.commands.trust:cmd_trust_remove", help="stop naming a memory")
    q.add_argument("origin", metavar="ORIGIN")
    q.add_argument("--json", action="store_true")
    q = command(trust_sub, common, "list", "neverest.commands.trust:cmd_trust_list",
                help="who is trusted here and why: named, earned, from a trusted memory, "
                     "corroborating, peers added by hand")
    q.add_argument("--json", action="store_true", help="one JSON object: the policy and every origin")

    p = command(sub, common, "relay", "neverest.commands.relay:cmd_relay",
                help="the project log: print its handoff, or add a note, deploy or correction",
                description="Print the handoff of a project's log (the recent work, and every correction and deploy "
                "held), or with --note add a line to it. The log stays on this machine.")
    p.add_argument("--project", required=True, help="the project's folder (or name)")
    p.add_argument("--note", metavar="TEXT", help="add this line to the log instead of printing the handoff")
    p.add_argument("--kind", choices=RELAY_NOTE_KINDS, default="note", help="what the line added is (default note)")
    p.add_argument("--model", default="", help="who writes the line added (default: nobody, the person)")
    p.add_argument("--limit", type=int, default=RELAY_LIMIT,
                   help=f"lines of recent work in the handoff (default {RELAY_LIMIT})")
    p.add_argument("--json", action="store_true")

    p = command(sub, common, "proxy", "neverest.commands.relay:cmd_proxy",
                help="serve the model front door on loopback (OpenAI and Anthropic styles)",
                description="A proxy for /v1/chat/completions and /v1/messages that picks the upstream by the model's "
                "prefix (routes). Without an x-neverest-project header it passes requests through untouched; with "
                "one it writes the project log, hands a new model the recent work and adds the lessons the message "
                "bears on.")
    p.add_argument("--listen", metavar="HOST:PORT", default=None,
                   help=f"a loopback address (default: proxy_listen, else {PROXY_LISTEN})")
    p.add_argument("--route", action="append", metavar="PREFIX=URL",
                   help="a model-name prefix and its upstream, '*' for every other model (repeatable; replaces "
                        "the configured routes)")

    p = command(sub, common, "bridge", "neverest.commands.agents_bridge:cmd_bridge",
                help="answer one JSON request on standard input with one JSON answer (for other programs)",
                description='Reads one request, {"operation": NAME, "arguments": {...}}, from standard input (at '
                'most 1 MiB) and writes one answer on standard output: {"ok": true, "operation", "result"} with '
                'exit status 0, or {"ok": false, "error": {"code", "message", "argument"}} with exit status 2 (the '
                "request is at fault) or 1 (the memory failed). Operations: --list prints them with their "
                "arguments.")
    p.add_argument("--list", action="store_true", help="print the operations and their arguments as JSON")

    p = command(sub, common, "api", "neverest.commands.agents_bridge:cmd_api",
                help="serve the loopback JSON API (POST /v1/<operation>) until stopped",
                description="Serves the operations of the bridge as POST /v1/<operation> with a JSON object of "
                "arguments, to requests that carry Authorization: Bearer <token>; the token is made on first start "
                "in <home>/api-token (mode 0600). Loopback addresses only, unless --allow-remote. The daemon serves "
                "the same API itself when api_listen is set in config.toml.")
    p.add_argument("--listen", metavar="HOST:PORT", help="where to listen (default: api_listen; port 0: any free one)")
    p.add_argument("--allow-remote", action="store_true",
                   help="listen on an address that is not loopback (anyone reaching it with the token can read and "
                   "write this memory, over plain HTTP)")


def _add_agent_parsers(sub: SubParsers[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    """The commands of the coding agents' doors: ingest, replay, episodes, hook, mcp, setup, memory-file, measure."""
    p = command(sub, common, "ingest", "neverest.commands.agents_ingest:cmd_ingest",
                help="read the coding agents' session files (Claude Code, Codex) into episodes")
    p.add_argument("--claude", metavar="DIR", help="Claude Code projects folder (default, once Claude Code is wired "
                   "by setup: claude_dir, else ~/.claude/projects)")
    p.add_argument("--codex", metavar="DIR", help="Codex sessions folder (default, once Codex is wired by setup: "
                   "codex_dir, else $CODEX_HOME/sessions or ~/.codex/sessions)")
    p.add_argument("--chats", metavar="FILE", help="read conversations with any model from FILE ('-': standard "
                   "input): OpenAI, Anthropic or Gemini message arrays, JSON Lines or one JSON document "
                   "(docs/reference.md); the agents' folders are then read only when named")
    p.add_argument("--json", action="store_true", help="print the counts as a JSON object")

    p = command(sub, common, "replay", "neverest.commands.agents_ingest:cmd_replay",
                help="replay session files into a throwaway memory: was the right lesson given in time?",
                description="Replays the session files in time order into a temporary memory (never this "
                "one), sleeping between days, and counts the repeated mistakes the hook's lessons caught "
                "or missed, beside a retrieve-similar baseline.  Reads nothing into this memory.")
    p.add_argument("--claude", metavar="DIR", help="Claude Code projects folder (when neither folder is given: "
                   "the wired agents' folders, as ingest reads them)")
    p.add_argument("--codex", metavar="DIR", help="Codex sessions folder (when neither folder is given: the wired "
                   "agents' folders)")
    p.add_argument("--json", action="store_true", help="also print the figures as one JSON object on the last line")
    p.add_argument("--explain", action="store_true",
                   help="first list every repeat (caught or missed) and every lesson given (used or unused)")
    p.add_argument("--embed-url", metavar="URL", help="run the throwaway memory, and every comparison, in this "
                   "embedding model's space (an OpenAI-compatible API root, e.g. http://127.0.0.1:8765/v1; "
                   "default: the hashed space, whatever this home's config says)")
    p.add_argument("--embed-model", metavar="NAME", help="the model's name at --embed-url")

    p = command(sub, common, "episodes", "neverest.commands.agents_ingest:cmd_episodes",
                help="list the episodes this memory holds (newest first)")
    p.add_argument("--kind", choices=EVENT_KINDS)
    p.add_argument("--session", metavar="S", help="only this session's episodes")
    p.add_argument("--since", metavar="T", help="only episodes that happened at or after this date or time (UTC)")
    p.add_argument("--limit", type=int, default=200, metavar="N", help="at most N episodes (default 200)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")

    p = command(sub, common, "hook", "neverest.agents.hook:cmd_hook",
                help="answer one Claude Code hook call (JSON on standard input) from this memory")
    p.add_argument("--holdout", type=float, default=None,
                   help=f"the fraction of sessions given nothing, for measuring (default ${HOLDOUT_ENV}, else "
                        f"{DEFAULT_HOLDOUT})")
    p.add_argument("--explain", action="store_true",
                   help=f"say on standard error why the call gave what it gave, or nothing (also ${EXPLAIN_ENV}=1)")

    command(sub, common, "mcp", "neverest.commands.agents_mcp:cmd_mcp",
            help="serve this memory to a coding agent over MCP on standard input and output",
            description="An MCP server (stdio transport) with the tools remember, recall, lessons, show and relay. "
            "Register it with the agent, e.g. `claude mcp add neverest -- neverestctl mcp`. It works while "
            "neverestd runs: events go through the daemon when it does.")

    p = command(sub, common, "setup", "neverest.commands.agents_setup:cmd_setup",
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

    p = command(sub, common, "memory-file", "neverest.commands.agents_setup:cmd_memory_file",
                help="the Claude Code MEMORY.md files this memory writes: list, opt a project out or back in",
                description="List the MEMORY.md files this memory has written its section into (and those "
                "opted out: a deleted MEMORY.md opts its project out, and is not written again). `on PROJECT` "
                "opts a project back in (its file is written at once); `off PROJECT` opts it out and takes "
                "the section back now. PROJECT is the project's folder or the MEMORY.md itself.")
    p.add_argument("action", nargs="?", choices=("list", "on", "off"), default="list")
    p.add_argument("project", nargs="?", metavar="PROJECT")
    p.add_argument("--json", action="store_true")

    p = command(sub, common, "measure", "neverest.commands.agents_setup:cmd_measure",
                help="by day: repeat-yourself rate, repeated-error rate, prediction accuracy",
                description="By UTC day: the share of corrections repeating an earlier one, of errors a "
                "lesson already knew, of resolved predictions confirmed; and the first two in sessions "
                "with lessons injected against held-out ones.")
    p.add_argument("--days", type=int, default=7, help="how many days, ending today (default 7)")
    p.add_argument("--json", action="store_true")


def runner(func: str | Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """The function a parsed command line names: "module:function" imported now (a callable as it is)."""
    if callable(func):
        return func
    module, _, name = func.partition(":")
    run: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(module), name)
    return run


def _command_word(argv: Sequence[str]) -> str | None:
    """The command a command line names: its first word that is not ``--home DIR``; None when that word is
    another option (``--help``, ``--version``) or there is none."""
    words = iter(argv)
    for word in words:
        if word == "--home":
            next(words, None)
        elif not word.startswith("--home="):
            return None if word.startswith("-") else word
    return None


def _is_verify(argv: Sequence[str]) -> bool:
    """Whether the command line asks for ``verify``."""
    return _command_word(argv) == "verify"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if _is_verify(argv):
        return _main_verify(argv)
    from neverest.paths import use_private_umask

    use_private_umask()  # files made in the home (the store's -wal and -shm too) are born private
    parser = build_parser(only=_command_word(argv))
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return _flushed(int(exc.code or 0))
    try:
        status = int(runner(args.func)(args))
        sys.stdout.flush()  # a closed pipe shows here, inside the try, not at interpreter exit
        return status
    except BrokenPipeError:
        return _closed_output()
    except Exception as exc:
        failed = _failure_status(exc)
        if failed is None:
            raise
        print(f"neverestctl: {exc}", file=sys.stderr)
        return failed


# The errors a command reports as one line and an exit status (2: the usage is at fault; 1: the command
# ran and failed), by module and name: a module that was never imported cannot have raised its error,
# so none is imported here for the sake of an except clause.
_FAILURES: tuple[tuple[str, str, int], ...] = (
    ("neverest.commands.common", "UsageError", 2), ("neverest.ctl", "VerifyUsageError", 2),
    ("neverest.identity", "IdentityError", 1), ("neverest.memory.store", "StoreError", 1),
    ("neverest.config", "ConfigError", 1), ("neverest.commands.common", "CommandFailed", 1),
)


def _failure_status(exc: Exception) -> int | None:
    """The exit status of a command's reported failure, or None for an error that is a bug (raised on)."""
    for module, name, status in _FAILURES:
        loaded = sys.modules.get(module)
        if loaded is not None and isinstance(exc, getattr(loaded, name)):
            return status
    return None


def _main_verify(argv: list[str]) -> int:
    """``neverestctl verify`` with the parser of that command alone: it reads no home."""
    parser, sub, common = _top_parser()
    _add_verify_parser(sub, common)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return _flushed(int(exc.code or 0))
    try:
        status = cmd_verify(args)
        sys.stdout.flush()
        return status
    except VerifyUsageError as exc:
        print(f"neverestctl: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _closed_output()


# The status of a program killed by SIGPIPE, as the shell reports it (128 + 13).
CLOSED_OUTPUT_STATUS = 128 + signal.SIGPIPE


def _flushed(status: int) -> int:
    """``status``, once what argparse printed (--help, a usage error) is flushed; a closed pipe is quiet."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return _closed_output()
    return status


def _closed_output() -> int:
    # The reader went away (`neverestctl export | head`): stop writing, quietly, as Unix tools do.
    # They die of SIGPIPE and the shell reports 141; an in-process caller (the tests) must not be
    # killed, so the same status is returned instead.  Standard output is pointed at /dev/null so
    # that Python's own flush at exit does not fail again and print a traceback.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return CLOSED_OUTPUT_STATUS


if __name__ == "__main__":
    sys.exit(main())
