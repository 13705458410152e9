"""The nightly sleep: at ``sleep_at`` (the machine's local time) the memory's night runs,
then a gossip round, so what the night learned and received moves at once."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import trio

from neverest.config import Config, sleep_time
from neverest.memory.store import StoreError
from neverest.services.ingest import ingest_now
from neverest.services.state import DaemonState

if TYPE_CHECKING:  # imported by the memory worker's first job (services/state.py): not by an idle daemon
    from neverest.memory.service import Memory

log = logging.getLogger("neverestd.sleep")


def next_sleep(now: datetime, config: Config) -> datetime:
    """The next nightly sleep after ``now``, at ``sleep_at`` in the machine's local time."""
    hour, minute = sleep_time(config)
    local = now.astimezone()
    at = local.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if at <= local:
        at += timedelta(days=1)
    return at


async def night(state: DaemonState) -> dict[str, Any]:
    """One night now: the memory service's night with the configured transports."""
    from neverest.transports.adapters import configured  # the transports' modules: loaded by the first night

    transports = configured(state.config)
    ingested = await ingest_now(state)  # the agents' latest sessions count tonight

    def run(memory: Memory) -> dict[str, Any]:
        return memory.night(transports)

    out = await state.worker.write(run)
    out["ingest"] = ingested
    state.last_night = out
    return out


async def serve_nightly(state: DaemonState, gossip_round: Callable[[], Awaitable[Any]], *,
                        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    task_status.started()
    while True:
        wait_s = (next_sleep(state.clock.now(), state.config) - state.clock.now()).total_seconds()
        await trio.sleep(max(wait_s, 1.0))
        try:
            out = await night(state)
            log.info("sleep: %d lesson(s) learned, %d confirmed, %d failed, %d refuted", len(out["learned"]),
                     len(out["confirmed"]), len(out["failed"]), len(out["refuted"]))
        except StoreError as exc:
            log.warning("sleep: %s", exc)
            continue
        await gossip_round()  # a round ends every sleep
