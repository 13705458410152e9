"""neverestctl: the command line of a Neverest memory.

Every command is reachable in-process as ``main([...])`` (that is how the tests
drive it) and returns the process exit status: 0 success, 1 the command ran and
found a problem (a refused record...), 2 a usage error.  Each command has a
readable default output and ``--json`` for scripts where it prints data.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import BinaryIO, TextIO

from neverest import __version__
from neverest.identity import IdentityError, load_or_create
from neverest.lines import read_lines
from neverest.paths import resolve_home
from neverest.records import MAX_RECORD_BYTES, RecordError, claimed, parse


class UsageError(Exception):
    """The user asked for something that cannot be done as asked (exit status 2)."""


def _cmd_id(args: argparse.Namespace) -> int:
    ident = load_or_create(resolve_home(args.home))
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
    for number, line in read_lines(stream, MAX_RECORD_BYTES):
        if line is not None and not line.strip():
            continue
        verdict: dict[str, object]
        try:
            if line is None:
                raise RecordError("too-large", f"line is longer than {MAX_RECORD_BYTES} bytes")
            record = parse(line)
        except RecordError as exc:
            all_ok = False
            rtype, target, origin = claimed(line) if line is not None else (None, None, None)
            verdict = {"line": number, "ok": False, "type": rtype, "hash": target, "origin": origin,
                       "reason": exc.code, "message": exc.message}
        else:
            verdict = {"line": number, "ok": True, "type": record.type, "hash": record.target,
                       "origin": record.origin, "reason": None, "message": None}
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
            raise UsageError(f"cannot read {name}: {exc.strerror}") from None
        with handle:
            yield handle


def _cmd_verify(args: argparse.Namespace) -> int:
    # Check that every file can be opened before printing anything, so that a
    # typo in the third name is a usage error, not a half-written report.
    for name in args.files:
        if name != "-" and not Path(name).is_file():
            raise UsageError(f"cannot read {name}: no such file")
    all_ok = True
    for stream in _open_inputs(args.files):
        all_ok &= verify_stream(stream, sys.stdout)
    return 0 if all_ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="neverestctl", description="Manage a Neverest memory.")
    parser.add_argument("--version", action="version", version=f"neverest {__version__}")
    parser.add_argument("--home", help="the memory's home folder (default: $NEVEREST_HOME, else ~/.neverest)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("id", help="print this memory's origin and public key (made on first use)")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    p.set_defaults(func=_cmd_id)

    p = sub.add_parser(
        "verify",
        help="check record lines; one JSON verdict per non-blank line",
        description="Check wire records (one per line) from FILEs or standard input. Prints one JSON "
        "object per non-blank line: line, ok, type, hash, origin, reason, message. Exit status 0 when "
        "every line is accepted, 1 when any is refused, 2 for a usage error.",
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="files of records ('-' or none: standard input)")
    p.set_defaults(func=_cmd_verify)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"neverestctl: {exc}", file=sys.stderr)
        return 2
    except IdentityError as exc:
        print(f"neverestctl: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
