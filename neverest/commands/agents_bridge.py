"""``neverestctl bridge`` (one JSON request on standard input, one answer on standard output) and
``neverestctl api`` (the loopback JSON API): the doors other programs plug in through
(``neverest/agents/bridge.py``, ``neverest/agents/api.py``, one table of operations behind both)."""

from __future__ import annotations

import argparse
import json
import sys

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
        raise UsageError("give --listen HOST:PORT (e.g. 127.0.0.1:7430), or set api_listen in config.toml")
    return run_alone(home, clock, listen, allow_remote=args.allow_remote or config.sections.api.allow_remote)
