"""Finding peers: zeroconf on the LAN, a directory polled, and the static ``peers`` of the config.

An origin that zeroconf or a directory claims is never trusted (it would count under the
"peers" trust policy): an address learns its origin from its own signed exchange.
Zeroconf runs its own threads; its callbacks reach the nursery through a memory channel.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

import trio

from neverest.memory.store import StoreError
from neverest.peers import table as peer_table
from neverest.services.state import DaemonState

if TYPE_CHECKING:
    from neverest.memory.service import Memory  # imported by the memory worker's first job
    from neverest.peers import mdns

log = logging.getLogger("neverestd.peers")
# Zeroconf's goodbyes and the closing of its sockets took 0.25 s measured on loopback; a stop waits
# for them this long at most, then leaves them to the process's exit.
MDNS_CLOSE_S: Final = 0.3


async def add_peer(state: DaemonState, url: str, source: str) -> None:
    def add(memory: Memory) -> None:
        with memory.store.write() as db:
            peer_table.add(db, url, source=source, now=state.clock.now())

    try:
        await state.worker.write(add)
    except peer_table.PeerError as exc:
        log.warning("%s peer %s refused: %s", source, url, exc)


async def add_static_peers(state: DaemonState, urls: tuple[str, ...]) -> None:
    for url in urls:
        await add_peer(state, url, "config")


async def serve_directory(state: DaemonState, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                          ) -> None:
    from neverest.peers import directory  # only where a directory is configured

    task_status.started()
    while True:
        try:
            listing = await trio.to_thread.run_sync(directory.fetch, state.config.sections.discovery.directory)
            for url, _claimed in listing.peers:
                await add_peer(state, url, "directory")
            log.info("directory: %d peer(s), %d entries skipped", len(listing.peers), listing.skipped)
        except (directory.DirectoryError, StoreError) as exc:
            log.warning("directory: %s", exc)
        await trio.sleep(state.config.sections.discovery.directory_every_s)


async def serve_mdns(state: DaemonState, port: int, host: str, *,
                     task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Register this memory on zeroconf and add the peers seen.

    Started at once: zeroconf's probe blocks about 2 s, and neither the daemon's readiness nor a
    stop waits for it (a SIGTERM during the probe abandons it; ``close`` ends it).
    """
    from neverest.peers import mdns  # zeroconf and its threads only when mDNS is on (--no-mdns: never)

    send, receive = trio.open_memory_channel[mdns.Sighting](256)
    token = trio.lowlevel.current_trio_token()

    def seen(sighting: mdns.Sighting) -> None:
        if sighting.compatible:
            try:
                trio.from_thread.run_sync(send.send_nowait, sighting, trio_token=token)
            except (trio.WouldBlock, trio.RunFinishedError):
                pass  # a burst beyond 256 unread sightings: the next announcement brings them again

    interfaces: list[str] | str = list(state.config.sections.discovery.mdns_interfaces) or "all"
    finder = mdns.Discovery(interfaces=interfaces, on_sighting=seen, on_gone=lambda origin: None)
    addresses = None if host in ("0.0.0.0", "::", "") else [host]
    task_status.started()
    try:
        await trio.to_thread.run_sync(lambda: finder.start(state.identity.origin, port, addresses),
                                      abandon_on_cancel=True)
        log.info("zeroconf: registered on %s", interfaces)
        async for sighting in receive:
            if sighting.origin == state.identity.origin:
                continue  # ourselves, seen on another interface
            for address in sighting.addresses:
                url = f"http://[{address}]:{sighting.port}" if ":" in address else f"http://{address}:{sighting.port}"
                await add_peer(state, url, "mdns")
            log.info("zeroconf: found %s at %s", sighting.origin, ", ".join(sighting.addresses))
    finally:
        with trio.CancelScope(shield=True, deadline=trio.current_time() + MDNS_CLOSE_S):
            await trio.to_thread.run_sync(finder.close, abandon_on_cancel=True)
