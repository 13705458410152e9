"""neverestd: the daemon that keeps one machine's memory.

One trio nursery owns every service, each an ``async def`` started with
``nursery.start`` where it has something to report ready:

- the control endpoint (``control.py``): a Unix socket in the home, mode 0600, for
  ``neverestctl`` and local agents (status, events, sleep now, gossip now);
- the peer-facing HTTP listener (hypercorn, trio worker): ``POST /gossip/v1/exchange``
  and nothing else;
- the gossip schedule: a round with ``fanout`` peers every ``gossip_every_s``, and one
  at the end of every sleep;
- the inbox watcher: drains ``inbox.jsonl`` every ``inbox_every_s``;
- the sleep schedule: nightly at ``sleep_at`` (local time); after each sleep the
  shared folder, when one is configured, is synced;
- zeroconf (``peers/mdns.py``): registers this memory and adds the peers it sees;
- the directory: polled every ``directory_every_s`` when one is configured.

Store work is blocking SQLite: it runs in worker threads (``trio.to_thread``), each
job on its own connection, and one lock keeps two jobs from writing the memory at
once.  Every write is committed before it is acknowledged, so a kill -9 at any
point loses nothing acknowledged.  SIGINT and SIGTERM cancel the nursery: the
services stop, the socket file is removed, and the exit status is 0.

Zeroconf runs its own threads; its callbacks reach the nursery through a memory channel.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
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
from neverest.gossip import http as gossip_http
from neverest.gossip.codec import MAX_MESSAGE_BYTES
from neverest.gossip.service import Gossip
from neverest.identity import Identity, IdentityError, load_or_create
from neverest.memory.events import ingest
from neverest.memory.inbox import drain_inbox
from neverest.memory.service import Memory
from neverest.memory.states import commons_pass
from neverest.memory.store import StoreError, open_store
from neverest.paths import ensure_home, resolve_home
from neverest.peers import directory, mdns
from neverest.peers import table as peer_table
from neverest.serving import stop_on_signals
from neverest.transports import commons_client, folder

log = logging.getLogger("neverestd")


@dataclass
class Daemon:
    home: Path
    config: Config
    clock: Clock
    identity: Identity
    started: float = field(default_factory=time.monotonic)
    listening: list[str] = field(default_factory=list)
    gossip: Gossip | None = None
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
            if self.config.commons_url:
                out["commons"] = self._commons(memory)
        self.last_sleep, self.last_sleep_report = report.started, out
        return out

    def _commons(self, memory: Memory) -> dict[str, Any]:
        """Push this memory's file, pull what changed, announce where peers reach us."""
        try:
            token = commons_client.read_token(self.config.commons_token_file)
            pushed = commons_client.push(memory.store, memory.identity, self.config.commons_url, token)
            pulled = commons_client.pull(memory.store, memory.identity, self.config.commons_url, token,
                                         self.config, self.clock.now())
            commons_pass(memory.store, now=self.clock.now(), config=self.config, own_origin=memory.identity.origin)
            announced = None
            if self.config.commons_announce:
                announced = commons_client.announce(self.config.commons_url, token, memory.identity,
                                                    self.config.commons_announce, self.clock.now())
            return {"push": pushed, "pull": pulled.to_json(), "announced": announced}
        except commons_client.CommonsError as exc:
            log.warning("commons: %s", exc)
            return {"error": str(exc)}

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
                "listen": self.listening,
                "peers": [{"url": a.url, "origin": a.origin, "source": a.source, "last_seen": a.last_seen,
                           "score": a.score, "ignored_until": a.ignored_until}
                          for a in peer_table.listing(db)],
                "last_round": self.gossip.last_round if self.gossip else None,
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
            report = await self._job(self._sleep_now)
            return {"report": report, "round": await self._round()}
        if op == "gossip":
            peer = request.get("peer")
            if peer is not None and not isinstance(peer, str):
                raise ValueError('"peer" must be a URL')
            try:
                return {"round": await self._round(only=peer)}
            except peer_table.PeerError as exc:
                raise ValueError(str(exc)) from None
        raise ValueError(f"unknown op {op!r}")

    async def _round(self, only: str | None = None) -> list[dict[str, Any]]:
        assert self.gossip is not None
        return await self.gossip.round(fanout=self.config.fanout, only=only)

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
                await self._round()  # a round ends every sleep
            except StoreError as exc:
                log.warning("sleep: %s", exc)

    async def gossip_every(self) -> None:
        while True:
            await trio.sleep(self.config.gossip_every_s)
            try:
                await self._round()
            except StoreError as exc:
                log.warning("gossip: %s", exc)

    def _add_peer(self, url: str, origin: str | None, source: str) -> None:
        with open_store(self.home, busy_timeout_s=self.config.busy_timeout_s) as store, store.write() as db:
            peer_table.add(db, url, source=source, now=self.clock.now(), origin=origin)

    async def poll_directory(self) -> None:
        while True:
            try:
                listing = await trio.to_thread.run_sync(directory.fetch, self.config.directory)
                for url, _claimed in listing.peers:
                    # An origin the directory claims is not trusted (it would count under the
                    # "peers" trust policy); the address learns its origin from the signed exchange.
                    await trio.to_thread.run_sync(self._add_peer, url, None, "directory")
                log.info("directory: %d peer(s), %d entries skipped", len(listing.peers), listing.skipped)
            except (directory.DirectoryError, StoreError) as exc:
                log.warning("directory: %s", exc)
            await trio.sleep(self.config.directory_every_s)

    async def discover(self, port: int, host: str) -> None:
        """Zeroconf: register this memory, add the peers seen (their records prove who they are)."""
        send, receive = trio.open_memory_channel[mdns.Sighting](256)
        token = trio.lowlevel.current_trio_token()

        def seen(sighting: mdns.Sighting) -> None:
            if sighting.compatible:
                try:
                    trio.from_thread.run_sync(send.send_nowait, sighting, trio_token=token)
                except (trio.WouldBlock, trio.RunFinishedError):
                    pass  # a burst beyond 256 unread sightings: the next announcement brings them again

        interfaces: list[str] | str = [i.strip() for i in self.config.mdns_interfaces.split(",") if i.strip()] or "all"
        finder = mdns.Discovery(interfaces=interfaces, on_sighting=seen, on_gone=lambda origin: None)
        addresses = None if host in ("0.0.0.0", "::", "") else [host]
        await trio.to_thread.run_sync(lambda: finder.start(self.identity.origin, port, addresses))
        log.info("zeroconf: registered on %s", interfaces)
        try:
            async for sighting in receive:
                for address in sighting.addresses:
                    url = f"http://[{address}]:{sighting.port}" if ":" in address else \
                        f"http://{address}:{sighting.port}"
                    await trio.to_thread.run_sync(self._add_peer, url, None, "mdns")
                log.info("zeroconf: found %s at %s", sighting.origin, ", ".join(sighting.addresses))
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(finder.close)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.gossip = Gossip(self.home, self.config, self.clock, self.identity, random.SystemRandom())
        try:
            async with trio.open_nursery() as nursery:
                # Signals first: from the moment the socket answers, SIGTERM must mean a clean stop.
                await nursery.start(stop_on_signals, nursery.cancel_scope, log)
                path = await nursery.start(serve_control, self.home, self.handle, self.config.control_timeout_s)
                log.info("control socket %s", path)
                app = gossip_http.GossipApp(self.gossip.respond, max_body_bytes=MAX_MESSAGE_BYTES)
                self.listening = await nursery.start(gossip_http.serve, app, self.config.listen)
                log.info("listening for peers on %s", ", ".join(self.listening))
                nursery.start_soon(self.watch_inbox)
                nursery.start_soon(self.sleep_nightly)
                nursery.start_soon(self.gossip_every)
                if self.config.directory:
                    nursery.start_soon(self.poll_directory)
                if self.config.mdns:
                    host, _, _ = self.config.listen.rpartition(":")
                    port = int(self.listening[0].rpartition(":")[2])
                    nursery.start_soon(self.discover, port, host.strip("[]"))
                log.info("neverestd %s ready as %s; next sleep %s", __version__, self.identity.origin,
                         iso(next_sleep(self.clock.now(), self.config)))
                task_status.started()
        finally:
            self.gossip.close()


def next_sleep(now: datetime, config: Config) -> datetime:
    """The next nightly sleep after ``now``, at ``sleep_at`` in the machine's local time."""
    hour, minute = sleep_time(config)
    local = now.astimezone()
    at = local.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if at <= local:
        at += timedelta(days=1)
    return at


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps({"at": iso(datetime.fromtimestamp(record.created).astimezone()), "level": record.levelname,
                           "logger": record.name, "message": record.getMessage()})


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["commons"]:  # `neverestd commons ...`: the HTTP commons server
        from neverest.transports.commons_server import main as commons_main
        return commons_main(args_list[1:])
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
    try:
        args = parser.parse_args(args_list)
    except SystemExit as exc:
        return int(exc.code or 0)
    home = ensure_home(resolve_home(args.home))
    try:
        config = load_config(home, path=Path(args.config) if args.config else None, log_json=args.log_json,
                             listen=args.listen, mdns=args.mdns,
                             mdns_interfaces=",".join(args.mdns_interface) if args.mdns_interface else None)
        clock = clock_from_env()
        identity = load_or_create(home)
    except (ConfigError, IdentityError, ValueError) as exc:
        print(f"neverestd: {exc}", file=sys.stderr)
        return 1 if not isinstance(exc, ValueError) else 2
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if config.log_json else
                         logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    try:
        trio.run(Daemon(home, config, clock, identity).run)
    except StoreError as exc:
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
