"""neverestd: the daemon that keeps one machine's memory.

It only composes services (``neverest/services/``) in one trio nursery:

- signals first: from the moment the socket answers, SIGTERM means a clean stop;
- the control socket (``services/control.py``): ``neverestctl`` and local agents;
- the peer-facing HTTP listener and the gossip rounds (``services/gossip.py``);
- the settling of received records: judge, render (``services/state.py``);
- the inbox watcher (``services/inbox.py``) and the nightly sleep (``services/nightly.py``);
- discovery: zeroconf, a directory, the static peers of the config (``services/discovery.py``);
- the proxy for models on loopback when ``proxy_listen`` is set (``services/proxy.py``).
- the loopback JSON API for other programs when ``api_listen`` is set (``services/api.py``).

Memory work runs in worker threads through the memory service, one writer at a time.
Every write is committed before it is acknowledged, so a kill -9 at any point loses
nothing acknowledged.  SIGINT and SIGTERM cancel the nursery: the services stop, the
socket file is removed, and the exit status is 0.
"""

from __future__ import annotations

import functools
import importlib
import logging
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import trio

from neverest import __version__
from neverest.clock import Clock, clock_from_env, iso
from neverest.config import Config, ConfigError, config_warnings, load_config, log_file_path
from neverest.identity import Identity, IdentityError, load_or_create
from neverest.lock import LISTENING, AlreadyRunning, DaemonLock
from neverest.logs import setup_logging
from neverest.memory.store import StoreError
from neverest.paths import HomeError, find_home, use_private_umask
from neverest.services.gossip import GossipService, make_app, serve_flush, serve_listener, serve_rounds
from neverest.services.listen import ListenError, first_of, parse_listen
from neverest.services.state import DaemonState, MemoryWorker
from neverest.services.status import metrics_text
from neverest.serving import stop_on_signals

if TYPE_CHECKING:
    import argparse

# What only serves once the peer listener answers: imported in a worker thread after it is up
# (about a third of the start-up's imports, measured with -X importtime), so /healthz is answered
# while they load.  The API's and the proxy's modules are imported only when they are configured.
LATER_SERVICES = ("neverest.services.control", "neverest.services.discovery", "neverest.services.inbox",
                  "neverest.services.ingest", "neverest.services.nightly")


def _import_all(names: Sequence[str]) -> None:
    for name in names:
        importlib.import_module(name)

log = logging.getLogger("neverestd")


async def run(home: Path, config: Config, clock: Clock, identity: Identity, *, lock: DaemonLock | None = None,
              task_status: trio.TaskStatus[DaemonState] = trio.TASK_STATUS_IGNORED) -> None:
    """The daemon until cancelled (or a signal)."""
    state = DaemonState(home, config, clock, identity, MemoryWorker(home, config, clock))
    gossip = GossipService(state, random.SystemRandom())
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(stop_on_signals, nursery.cancel_scope, log)
            app = make_app(gossip, metrics=lambda: metrics_text(state))
            state.listening = await nursery.start(serve_listener, gossip, app)
            gossip.gossip.listen_port = int(state.listening[0].rpartition(":")[2])  # told to peers
            log.info("listening for peers on %s", ", ".join(state.listening))
            if lock is not None:
                lock.describe(LISTENING + ", ".join(state.listening))
            later = list(LATER_SERVICES)
            later += ["neverest.services.api"] if config.sections.api.listen else []
            later += ["neverest.services.proxy"] if config.sections.proxy.listen else []
            # Cancellable: a SIGTERM while they load stops the daemon at once (an import left
            # running in its thread ends with the process).
            await trio.to_thread.run_sync(_import_all, later, abandon_on_cancel=True)
            from neverest.services.control import ControlOps, serve_control
            from neverest.services.discovery import add_static_peers, serve_directory, serve_mdns
            from neverest.services.inbox import serve_inbox
            from neverest.services.ingest import serve_ingest
            from neverest.services.nightly import next_sleep, serve_nightly
            from neverest.services.state import serve_settle

            path = await nursery.start(serve_control, ControlOps(state, gossip, nursery))
            log.info("control socket %s", path)
            if config.sections.api.listen:
                from neverest.agents.api import TOKEN_FILE
                from neverest.services.api import serve_api

                state.serving_api = await nursery.start(serve_api, state)
                log.info("JSON API for other programs on %s (token in %s)", ", ".join(state.serving_api),
                         home / TOKEN_FILE)
            await nursery.start(serve_settle, state)
            await nursery.start(serve_inbox, state)
            discovery = config.sections.discovery
            # With no agent wired a pass reads nothing (consent: agents/doors.py), and the daemon reads its
            # config once: no periodic pass then, nor the session readers it would load (docs/figures.md).
            # The night's own pass still runs and reports the agents not wired.
            if config.sections.agents.ingest_every_s > 0 and config.sections.agents.wired:
                await nursery.start(serve_ingest, state)
            await nursery.start(serve_nightly, state, gossip.round_quietly)
            if config.sections.proxy.listen:
                from neverest.services.proxy import serve_proxy

                state.proxying = await nursery.start(serve_proxy, state)
                log.info("the proxy for models listens on %s", ", ".join(state.proxying))
            await nursery.start(serve_rounds, gossip)
            await nursery.start(serve_flush, gossip)
            await add_static_peers(state, discovery.peers)
            if discovery.directory:
                await nursery.start(serve_directory, state)
            if discovery.mdns:
                host, _ = parse_listen(config.sections.gossip.listen)
                port = int(state.listening[0].rpartition(":")[2])
                await nursery.start(serve_mdns, state, port, host)  # started at once; probes on its own
            log.info("neverestd %s ready as %s; next sleep %s", __version__, identity.origin,
                     iso(next_sleep(clock.now(), config)))
            task_status.started(state)
    finally:
        with trio.CancelScope(shield=True):
            await gossip.aclose()


def build_parser() -> argparse.ArgumentParser:
    import argparse  # see _parse

    parser = argparse.ArgumentParser(prog="neverestd", description="The Neverest memory daemon "
                                     "(`neverestd commons --help` for the HTTP commons server).")
    parser.add_argument("--version", action="version", version=f"neverest {__version__}")
    parser.add_argument("--home", help="the memory's home folder (default: $NEVEREST_HOME, else ~/.neverest)")
    parser.add_argument("--config", help="a config.toml to read instead of the home's")
    parser.add_argument("--listen", metavar="HOST:PORT", help="where peers reach this memory (default 0.0.0.0:7428)")
    parser.add_argument("--no-mdns", dest="mdns", action="store_false", default=None, help="no zeroconf")
    parser.add_argument("--mdns-interface", action="append", metavar="IP",
                        help="use zeroconf only on this interface address (repeatable; default: all)")
    parser.add_argument("--log-json", action="store_true", default=None, help="log JSON lines")
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default=None,
                        help="the least severe messages logged (default info)")
    parser.add_argument("--log-file", metavar="FILE", help="append the log to FILE instead of standard error")
    return parser


# What only the command line's parse uses.  Nothing an idle daemon runs imports them (tests/test_daemon_start.py
# holds it), and the parse is over before the daemon starts: 0.35 MB of modules resident for nothing.
PARSE_ONLY_MODULES: Final = ("argparse", "gettext")


def _parse(args_list: list[str]) -> dict[str, Any]:
    """The options as a plain dict; then the ``PARSE_ONLY_MODULES`` this parse loaded are taken out of
    ``sys.modules``: with no reference left (no parser, no Namespace), they are freed.  A later ``import
    argparse`` would load it again, unharmed; modules loaded before the parse are left alone.
    ``SystemExit`` for --help, --version and mistakes, as argparse raises it."""
    loaded = [name for name in PARSE_ONLY_MODULES if name not in sys.modules]
    try:
        return dict(vars(build_parser().parse_args(args_list)))
    finally:
        for name in loaded:
            sys.modules.pop(name, None)


def main(argv: Sequence[str] | None = None) -> int:
    use_private_umask()  # the store's -wal and -shm, the log file: born private
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["commons"]:  # `neverestd commons ...`: the HTTP commons server
        from neverest.transports.commons_server import main as commons_main
        return commons_main(args_list[1:])
    try:
        args = _parse(args_list)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        home = find_home(args["home"])
        config = load_config(home, path=Path(args["config"]) if args["config"] else None, log_json=args["log_json"],
                             listen=args["listen"], mdns=args["mdns"], log_level=args["log_level"],
                             log_file=args["log_file"],
                             mdns_interfaces=",".join(args["mdns_interface"]) if args["mdns_interface"] else None)
        parse_listen(config.listen)
        if config.api_listen:
            from neverest.agents.api import check_listen

            check_listen(config.api_listen, allow_remote=config.api_allow_remote)
        clock = clock_from_env()
    except (HomeError, ListenError, ValueError) as exc:
        print(f"neverestd: {exc}", file=sys.stderr)
        return 2
    except ConfigError as exc:
        print(f"neverestd: {exc}", file=sys.stderr)
        return 1
    lock = DaemonLock(home)
    try:
        # Before anything binds or is written: a second daemon on this home must change nothing.
        lock.acquire(about=f"starting, --listen {config.listen}")
        identity = load_or_create(home)
        setup_logging(level=config.log_level, json=config.log_json, file=log_file_path(config, home))
    except (AlreadyRunning, IdentityError, ValueError, OSError) as exc:
        lock.release()
        print(f"neverestd: {exc}", file=sys.stderr)
        return 1
    for warning in config_warnings(config):
        log.warning("%s", warning)
    try:
        trio.run(functools.partial(run, home, config, clock, identity, lock=lock))
    except (Exception, BaseExceptionGroup) as raised:
        # A failure the owner can act on is one line; anything else is a bug and keeps its traceback.
        # The API's TokenError is looked up only if its module was loaded (the API is configured).
        api = sys.modules.get("neverest.agents.api")
        token_error: type[Exception] | None = getattr(api, "TokenError", None) if api is not None else None
        known: Exception | None = first_of(raised, ListenError)
        known = known or first_of(raised, StoreError)
        known = known or (first_of(raised, token_error) if token_error is not None else None)
        if known is None:
            raise
        log.error("%s", known)
        return 1
    finally:
        lock.release()  # last: the control socket is gone by now
    return 0


if __name__ == "__main__":
    sys.exit(main())
