"""The agents' session files read into the memory every ``ingest_every_s`` (0: only before each night)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from neverest.memory.store import StoreError
from neverest.services.state import DaemonState

if TYPE_CHECKING:  # imported by the memory worker's first job (services/state.py): not by an idle daemon
    from neverest.memory.service import Memory

log = logging.getLogger("neverestd.ingest")


def _ingest(memory: Memory) -> dict[str, Any]:
    # Imported in the worker thread on the first pass, not when the daemon starts: the session
    # readers (and the numpy they bring) would delay the first /healthz and stay resident for nothing.
    from neverest.agents.doors import ingest_agents

    return ingest_agents(memory)


async def ingest_now(state: DaemonState) -> dict[str, Any] | None:
    """One pass over the agents' session files; None when the store was busy (the next pass catches up)."""
    try:
        report = await state.worker.write(_ingest)
    except StoreError as exc:
        log.warning("ingest: %s", exc)
        return None
    if report["stored"]:
        log.info("ingest: %d new event(s) from the agents' sessions", report["stored"])
    return report


async def serve_ingest(state: DaemonState, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                       ) -> None:
    task_status.started()
    while True:
        await ingest_now(state)
        await trio.sleep(state.config.ingest_every_s)
