"""neverestctl: the command line of a Neverest memory.

Every command is reachable in-process as ``main([...])`` (that is how the tests
drive it) and returns the process exit status: 0 success, 1 the command ran and
found a problem (a refused record...), 2 a usage error; and 141, quietly, when the
reader of the output went away (``neverestctl export | head``), as for a Unix tool
killed by SIGPIPE.  Each command has a readable default output and ``--json`` for
scripts where it prints data.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import BinaryIO, TextIO

from neverest import __version__, verify_pool
from neverest.lines import read_lines
from neverest.records import KINDS, MAX_RECORD_BYTES, RecordError, claimed


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


def _top_parser() -> tuple[argparse.ArgumentParser, SubParsers[argparse.ArgumentParser], argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(prog="neverestctl", description="Manage a Neverest memory.")
    parser.add_argument("--version", action="version", version=f"neverest {__version__}")
    home_help = "the memory's home folder (default: $NEVEREST_HOME, else ~/.neverest)"
    parser.add_argument("--home", help=home_help)
    # --home is accepted after the command too (`neverestctl status --home DIR`); there it wins.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--home", default=argparse.SUPPRESS, help=home_help)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    return parser, sub, common


def _add_verify_parser(sub: SubParsers[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("verify", parents=[common],
        help="check record lines; one JSON verdict per non-blank line",
        description="Check wire records (one per line) from FILEs or standard input. Prints one JSON "
        "object per non-blank line: line, ok, type, hash, origin, reason, message. Exit status 0 when "
        "every line is accepted, 1 when any is refused, 2 for a usage error.",
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="files of records ('-' or none: standard input)")
    p.set_defaults(func=cmd_verify)


def build_parser() -> argparse.ArgumentParser:
    # The other commands' modules are imported here, not at the top: `verify` runs without
    # them (they take ~0.7 s to import: the memory, numpy, trio, httpx...).
    from neverest.agents.hook import add_parser as add_hook_parser
    from neverest.commands.agents_bridge import add_parsers as add_bridge_parsers
    from neverest.commands.agents_ingest import add_parsers as add_ingest_parsers
    from neverest.commands.agents_mcp import add_parser as add_mcp_parser
    from neverest.commands.agents_setup import add_parsers as add_agents_parsers
    from neverest.commands.data import add_parsers as add_data_parsers
    from neverest.commands.doctor import add_parser as add_doctor_parser
    from neverest.commands.memory import EVENT_FIELDS, cmd_lessons, cmd_recall, cmd_remember, cmd_sleep
    from neverest.commands.network import cmd_gossip, cmd_peer_add, cmd_peer_list, cmd_peer_remove, cmd_status
    from neverest.commands.sharing import cmd_commons, cmd_folder_sync, cmd_publish, cmd_revoke, cmd_show, cmd_unpublish
    from neverest.commands.trust import add_parsers as add_trust_parsers
    from neverest.memory.events import EVENT_KINDS

    parser, sub, common = _top_parser()

    p = sub.add_parser("init", parents=[common], help="make a new memory in --home (or check an existing one)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("id", parents=[common], help="print this memory's origin and public key (made on first use)")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    p.set_defaults(func=cmd_id)

    _add_verify_parser(sub, common)

    p = sub.add_parser("remember", parents=[common],
                       help="store an agent's event (or JSON Lines of events) as an episode",
                       description="Store one event from flags, or many from --events FILE|- (JSON Lines). "
                       "Exit status 1 when any event is refused; the others are still stored.")
    p.add_argument("--kind", choices=EVENT_KINDS)
    for name in EVENT_FIELDS:
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, metavar=name.upper())
    p.add_argument("--events", metavar="FILE", help="JSON Lines of events ('-': standard input)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_remember)

    p = sub.add_parser("sleep", parents=[common],
                       help="drain the inbox and run the sleep passes now; print what each did")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sleep)

    p = sub.add_parser("lessons", parents=[common], help="list the lessons this memory holds")
    p.add_argument("--kind", choices=KINDS)
    p.add_argument("--all", action="store_true", help="include archived lessons")
    p.add_argument("--json", action="store_true", help="one JSON object per lesson")
    p.set_defaults(func=cmd_lessons)

    p = sub.add_parser("recall", parents=[common], help="the episodes and lessons a query bears on")
    p.add_argument("query")
    p.add_argument("-k", type=int, default=5, help="how many (default 5)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_recall)

    p = sub.add_parser("publish", parents=[common], help="share the lessons learned in a project (opt-in, per project)")
    p.add_argument("--project", required=True, help="the project folder whose lessons may leave this machine")
    p.add_argument("--corrections", action="store_true", help="also publish lessons about the person")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_publish)

    p = sub.add_parser("unpublish", parents=[common], help="stop sharing a project's lessons")
    p.add_argument("--project", required=True)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_unpublish)

    p = sub.add_parser("folder", parents=[common], help="the shared-folder transport")
    folder_sub = p.add_subparsers(dest="folder_command", required=True, metavar="ACTION")
    q = folder_sub.add_parser("sync", parents=[common],
                              help="write this memory's records to DIR and read everyone else's")
    q.add_argument("dir", metavar="DIR")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_folder_sync)

    p = sub.add_parser("commons", parents=[common], help="the HTTP commons transport")
    commons_sub = p.add_subparsers(dest="commons_command", required=True, metavar="ACTION")
    for action, text in (("push", "put this memory's signed records on the commons"),
                         ("pull", "read what changed on the commons through the receive function")):
        q = commons_sub.add_parser(action, parents=[common], help=text)
        q.add_argument("url", metavar="URL", help="the commons, like https://commons.example.org")
        q.add_argument("--token-file", metavar="FILE", help="a file holding the bearer token")
        q.add_argument("--json", action="store_true")
        q.set_defaults(func=cmd_commons)

    p = sub.add_parser("show", parents=[common], help="a lesson with its state, publishers, supporters and records")
    p.add_argument("hash", metavar="HASH", help="the lesson's hash (at least 6 hex digits)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("revoke", parents=[common], help="withdraw a lesson this memory published")
    p.add_argument("hash", metavar="HASH")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_revoke)

    p = sub.add_parser("peer", parents=[common], help="the peers this memory gossips with")
    peer_sub = p.add_subparsers(dest="peer_command", required=True, metavar="ACTION")
    q = peer_sub.add_parser("add", parents=[common], help="add a peer by URL, like http://192.0.2.7:7428")
    q.add_argument("url", metavar="URL")
    q.set_defaults(func=cmd_peer_add)
    q = peer_sub.add_parser("remove", parents=[common],
                            help="forget an address, or a peer (by origin) and all its addresses")
    q.add_argument("peer", metavar="URL|ORIGIN")
    q.set_defaults(func=cmd_peer_remove)
    q = peer_sub.add_parser("list", parents=[common], help="the peers, their addresses, scores and back-offs")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_peer_list)

    p = sub.add_parser("gossip", parents=[common], help="one gossip round now (through the daemon when it runs)")
    p.add_argument("--peer", metavar="URL", help="exchange with this address only")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_gossip)

    p = sub.add_parser("status", parents=[common], help="this memory at a glance, with refusals by reason and source")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)
    add_data_parsers(sub, common)
    add_trust_parsers(sub, common)
    add_doctor_parser(sub, common)
    add_ingest_parsers(sub, common)
    add_hook_parser(sub, common)
    add_mcp_parser(sub, common)
    add_bridge_parsers(sub, common)
    add_agents_parsers(sub, common)
    return parser


def _is_verify(argv: Sequence[str]) -> bool:
    """Whether the command line asks for ``verify`` (its first word that is not ``--home DIR``)."""
    words = iter(argv)
    for word in words:
        if word == "--home":
            next(words, None)
        elif not word.startswith("--home="):
            return word == "verify"
    return False


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if _is_verify(argv):
        return _main_verify(argv)
    from neverest.commands.common import CommandFailed, UsageError
    from neverest.config import ConfigError
    from neverest.identity import IdentityError
    from neverest.memory.store import StoreError
    from neverest.paths import use_private_umask

    use_private_umask()  # files made in the home (the store's -wal and -shm too) are born private
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return _flushed(int(exc.code or 0))
    try:
        status = int(args.func(args))
        sys.stdout.flush()  # a closed pipe shows here, inside the try, not at interpreter exit
        return status
    except (UsageError, VerifyUsageError) as exc:
        print(f"neverestctl: {exc}", file=sys.stderr)
        return 2
    except (IdentityError, StoreError, ConfigError, CommandFailed) as exc:
        print(f"neverestctl: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return _closed_output()


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
