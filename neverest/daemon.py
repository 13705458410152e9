"""neverestd: the daemon that keeps one machine's memory.

One trio nursery owns every service, each an ``async def`` started with
``nursery.start`` where it has something to report ready:

- the control endpoint (``control.py``): a Unix socket in the home, mode 0600, for
  ``neverestctl`` and local agents (status, events, sleep now);
- the inbox watcher: drains ``inbox.jsonl`` every ``inbox_every_s``;
- the sleep schedule: nightly at ``sleep_at`` (local time); after each sleep the
  shared folder, when one is configured, is synced.

Store work is blocking SQLite: it runs in worker threads (``trio.to_thread``), each
job on its own connection, and one lock keeps two jobs from writing the memory at
once.  Every write is committed before it is acknowledged, so a kill -9 at any
point loses nothing acknowledged.  SIGINT and SIGTERM cancel the nursery: the
services stop, the socket file is removed, and the exit status is 0.

Gossip between peers over HTTP, zeroconf discovery and the directory are built in
the next steps (PROTOCOL.md §11); their configuration is not accepted until then.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import trio

from neverest import __version__
from neverest.clock import Clock, clock_from_env, iso
from neverest.config import Config, ConfigError, load_config, sleep_time
from neverest.control import serve as serve_control
from neverest.identity import IdentityError, load_or_create
from neverest.memory.events import ingest
from neverest.memory.inbox import drain_inbox
from neverest.memory.service import Memory
from neverest.memory.store import StoreError
from neverest.paths import ensure_home, resolve_home
from neverest.transports import folder

log = logging.getLogger("neverestd")


@dataclass
class Daemon:
    home: Path
    config: Config
    clock: Clock
    started: float = field(default_factory=time.monotonic)
    last_sleep: str | None = None
    last_sleep_report: dict[str, Any] | None = None
    last_folder_sync: str | None = None
    _writing: trio.Lock = field(default_factory=trio.Lock)

    # -- work on the memory, in a worker thread, one job at a time --------------------

    async def _job(self, fn: Any, *args: Any) -> Any:
        async with self._writing:
            return await trio.to_thread.run_sync(fn, *args)

    def _memory(self) -> Memory:
        return Memory(self.home, self.config, self.clock)

    def _sleep_now(self) -> dict[str, Any]:
        with self._memory() as memory:
            inbox = drain_inbox(memory.store, self.home, now=self.clock.now())
            report = memory.sleep()
            out = report.to_json() | {"inbox": inbox.to_json()}
            if self.config.folder:
                synced = folder.sync(memory.store, memory.identity, Path(self.config.folder), self.config,
                                     self.clock.now())
                out["folder"] = synced.to_json()
                self.last_folder_sync = iso(self.clock.now())
        self.last_sleep, self.last_sleep_report = report.started, out
        return out

    def _drain(self) -> dict[str, Any]:
        with self._memory() as memory:
            return drain_inbox(memory.store, self.home, now=self.clock.now()).to_json()

    def _remember(self, events: list[Any]) -> dict[str, Any]:
        with self._memory() as memory:
            return ingest(memory.store, events, now=self.clock.now()).to_json()

    def _status(self) -> dict[str, Any]:
        with self._memory() as memory:
            db = memory.store.db
            refused = [{"source": s, "reason": r, "count": n} for s, r, n in db.execute(
                "SELECT source, reason, count FROM refusals ORDER BY source, reason")]
            return {
                "version": __version__, "origin": memory.identity.origin, "home": str(self.home),
                "uptime_s": round(time.monotonic() - self.started, 1),
                "last_sleep": self.last_sleep, "last_folder_sync": self.last_folder_sync,
                "next_sleep": iso(next_sleep(self.clock.now(), self.config)),
                "episodes": db.execute("SELECT count(*) FROM episodes").fetchone()[0],
                "lessons": db.execute("SELECT count(*) FROM lessons WHERE archived = 0").fetchone()[0],
                "records": db.execute("SELECT count(*) FROM records").fetchone()[0],
                "refused": refused,
            }

    # -- the control endpoint ---------------------------------------------------------

    async def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request["op"]
        if op == "ping":
            return {}
        if op == "status":
            return {"status": await trio.to_thread.run_sync(self._status)}
        if op == "remember":
            events = request.get("events")
            if not isinstance(events, list) or len(events) > 10_000:
                raise ValueError('"events" must be a list of at most 10 000 events')
            return {"result": await self._job(self._remember, events)}
        if op == "sleep":
            return {"report": await self._job(self._sleep_now)}
        raise ValueError(f"unknown op {op!r}")

    # -- schedules ----------------------------------------------------------------------

    async def watch_inbox(self) -> None:
        while True:
            try:
                result = await self._job(self._drain)
                if result["stored"] or result["refused"]:
                    log.info("inbox: %d event(s) stored, %d refused", result["stored"], len(result["refused"]))
            except StoreError as exc:  # a long import holds the lock: try again next time
                log.warning("inbox: %s", exc)
            await trio.sleep(self.config.inbox_every_s)

    async def sleep_nightly(self) -> None:
        while True:
            wait_s = (next_sleep(self.clock.now(), self.config) - self.clock.now()).total_seconds()
            await trio.sleep(max(wait_s, 1.0))
            try:
                out = await self._job(self._sleep_now)
                log.info("sleep: %d lesson(s) learned, %d confirmed, %d failed", len(out["learned"]),
                         len(out["confirmed"]), len(out["failed"]))
            except StoreError as exc:
                log.warning("sleep: %s", exc)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            path = await nursery.start(serve_control, self.home, self.handle, self.config.control_timeout_s)
            log.info("control socket %s", path)
            nursery.start_soon(self.watch_inbox)
            nursery.start_soon(self.sleep_nightly)
            nursery.start_soon(_stop_on_signals, nursery.cancel_scope)
            log.info("neverestd %s ready; next sleep %s", __version__, iso(next_sleep(self.clock.now(), self.config)))
            task_status.started()


def next_sleep(now: datetime, config: Config) -> datetime:
    """The next nightly sleep after ``now``, at ``sleep_at`` in the machine's local time."""
    hour, minute = sleep_time(config)
    local = now.astimezone()
    at = local.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if at <= local:
        at += timedelta(days=1)
    return at


async def _stop_on_signals(scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("%s: shutting down", signal.Signals(signum).name)
            scope.cancel()
            return


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps({"at": iso(datetime.fromtimestamp(record.created).astimezone()), "level": record.levelname,
                           "logger": record.name, "message": record.getMessage()})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="neverestd", description="The Neverest memory daemon.")
    parser.add_argument("--version", action="version", version=f"neverest {__version__}")
    parser.add_argument("--home", help="the memory's home folder (default: $NEVEREST_HOME, else ~/.neverest)")
    parser.add_argument("--config", help="a config.toml to read instead of the home's")
    parser.add_argument("--log-json", action="store_true", default=None, help="log JSON lines")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    home = ensure_home(resolve_home(args.home))
    try:
        config = load_config(home, path=Path(args.config) if args.config else None, log_json=args.log_json)
        clock = clock_from_env()
        load_or_create(home)
    except (ConfigError, IdentityError, ValueError) as exc:
        print(f"neverestd: {exc}", file=sys.stderr)
        return 1 if not isinstance(exc, ValueError) else 2
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if config.log_json else
                         logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    try:
        trio.run(Daemon(home, config, clock).run)
    except StoreError as exc:
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
