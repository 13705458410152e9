"""The proxy as one of the daemon's services (``proxy_listen``): the model front door of
``neverest/agents/proxy.py``, its events stored through the daemon's memory worker."""

from __future__ import annotations

from typing import Any

import trio

from neverest.agents.proxy import MemoryDoor, serve
from neverest.services.state import DaemonState


async def serve_proxy(state: DaemonState, *, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED
                      ) -> None:
    """Serve the proxy on ``proxy_listen`` until cancelled; reports the bound addresses."""

    async def store(events: list[dict[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = await state.worker.write(lambda memory: memory.ingest(events).to_json())
        return result

    door = MemoryDoor(state.home, state.clock, state.worker.read, store)
    section = state.config.sections.proxy
    await serve(door, section, section.listen, task_status=task_status)
