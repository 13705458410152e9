"""neverestctl relay (the project log: its handoff, or a line added) and neverestctl proxy (the model front door)."""

from __future__ import annotations

import argparse
import functools
import json
import logging
from typing import Any, Final

from neverest import relay
from neverest.commands.common import UsageError, clock_of_env, home_of
from neverest.config import ConfigError, is_loopback_listen, load_config

DEFAULT_PROXY_LISTEN: Final = "127.0.0.1:7429"
NOTE_KINDS: Final = ("note", "deploy", "correction")


def cmd_relay(args: argparse.Namespace) -> int:
    home, clock = home_of(args), clock_of_env()
    try:
        if args.note is not None:
            item = relay.entry(args.project, model=args.model or "", role="note", kind=args.kind, text=args.note,
                               now=clock.now())
            relay.write_entry(home, item)
            if args.json:
                print(json.dumps({"written": item.to_json()}, ensure_ascii=False))
            else:
                print(f"{item.kind} added to the log of {item.project} ({relay.relay_paths(home, args.project)[0]})")
            return 0
        data = relay.handoff_data(home, args.project, limit=args.limit)
    except relay.RelayError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(data.to_json() | {"text": data.text()}, ensure_ascii=False))
    elif data.empty:
        print(f"the log of {data.project} holds nothing yet")
    else:
        print(data.text())
    return 0


def cmd_proxy(args: argparse.Namespace) -> int:
    import trio

    from neverest.agents.proxy import Routes, home_door, serve
    from neverest.logs import setup_logging
    from neverest.serving import stop_on_signals

    home, clock = home_of(args), clock_of_env()
    overrides: dict[str, Any] = {"proxy_listen": args.listen}
    if args.route:
        overrides["routes"] = args.route
    try:
        config = load_config(home, **overrides)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    section = config.sections.proxy
    listen = section.listen or DEFAULT_PROXY_LISTEN
    if not is_loopback_listen(listen):
        raise UsageError(f"--listen {listen!r}: the proxy listens on loopback only (127.0.0.1:PORT or [::1]:PORT)")
    if not Routes.parse(section.routes).pairs:
        raise UsageError("no routes: give --route PREFIX=URL (e.g. --route '*=https://api.openai.com'), "
                         "or set routes in config.toml or NEVEREST_ROUTES")
    setup_logging(level=config.log_level, json=config.log_json)
    log = logging.getLogger("neverest.proxy")

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(stop_on_signals, nursery.cancel_scope, log)
            bound = await nursery.start(functools.partial(serve, home_door(home, config, clock), section, listen))
            print(f"neverest proxy on {', '.join(bound)}; routes: "
                  + ", ".join(f"{prefix}={url}" for prefix, url in Routes.parse(section.routes).pairs), flush=True)

    trio.run(run)
    return 0
