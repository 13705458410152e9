"""``neverestctl bridge`` (one JSON request on standard input, one answer on standard output) and
``neverestctl api`` (the loopback JSON API): the doors other programs plug in through
(``neverest/agents/bridge.py``, ``neverest/agents/api.py``, one table of operations behind both)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from neverest.commands.common import UsageError, clock_of_env, home_of


def cmd_bridge(args: argparse.Namespace) -> int:
    from neverest.agents.bridge import answer, refusal, write
    from neverest.agents.operations import catalogue

    if args.list:
        print(json.dumps({"operations": catalogue()}, ensure_ascii=False))
        return 0
    # Whatever goes wrong, the caller reads one JSON answer on standard output.
    try:
        home, clock = home_of(args), clock_of_env()
    except UsageError as exc:
        write(sys.stdout, refusal("no-memory", str(exc)))
        return 2
    reply, status = answer(sys.stdin.buffer, home, clock)
    write(sys.stdout, reply)
    return status


def cmd_api(args: argparse.Namespace) -> int:
    from neverest.agents.api import run_alone
    from neverest.config import load_config

    home, clock = home_of(args), clock_of_env()
    config = load_config(home)
    listen = args.listen or config.sections.api.listen
    if not listen:
        raise UsageError("give --listen HOST:PORT (e.g. 127.0.0.1:7429), or set api_listen in config.toml")
    return run_alone(home, clock, listen, allow_remote=args.allow_remote or config.sections.api.allow_remote)


def add_parsers(sub: Any, common: argparse.ArgumentParser | None = None) -> None:
    parents = [common] if common else []
    p = sub.add_parser(
        "bridge", parents=parents,
        help="answer one JSON request on standard input with one JSON answer (for other programs)",
        description='Reads one request, {"operation": NAME, "arguments": {...}}, from standard input (at most '
        '1 MiB) and writes one answer on standard output: {"ok": true, "operation", "result"} with exit status '
        '0, or {"ok": false, "error": {"code", "message", "argument"}} with exit status 2 (the request is at '
        "fault) or 1 (the memory failed). Operations: status, remember, recall, lessons, show, chat.")
    p.add_argument("--list", action="store_true", help="print the operations and their arguments as JSON")
    p.set_defaults(func=cmd_bridge)
    p = sub.add_parser(
        "api", parents=parents, help="serve the loopback JSON API (POST /v1/<operation>) until stopped",
        description="Serves the operations of the bridge as POST /v1/<operation> with a JSON object of arguments, "
        "to requests that carry Authorization: Bearer <token>; the token is made on first start in "
        "<home>/api-token (mode 0600). Loopback addresses only, unless --allow-remote. The daemon serves the "
        "same API itself when api_listen is set in config.toml.")
    p.add_argument("--listen", metavar="HOST:PORT", help="where to listen (default: api_listen; port 0: any free one)")
    p.add_argument("--allow-remote", action="store_true",
                   help="listen on an address that is not loopback (anyone reaching it with the token can read and "
                   "write this memory, over plain HTTP)")
    p.set_defaults(func=cmd_api)
