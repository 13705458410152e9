"""The daemon's loopback JSON API for other programs (``api_listen``): ``agents/api.py``'s app, each
operation run in the daemon's memory worker (a writing one under the worker's write lock, as the
control socket's are)."""

from __future__ import annotations

import logging
from typing import Any

import trio

from neverest.agents.api import ApiApp, api_token, check_listen, serve
from neverest.agents.operations import OperationFailed, Request
from neverest.memory.store import StoreError
from neverest.services.state import DaemonState

log = logging.getLogger("neverestd.api")


async def serve_api(state: DaemonState, *, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED
                    ) -> None:
    """Serve the API on ``api_listen`` until cancelled; the addresses bound go to ``task_status``.  Raises
    ListenError for an address that is not loopback (unless allowed) and TokenError for an unusable token."""
    section = state.config.sections.api
    check_listen(section.listen, allow_remote=section.allow_remote)
    token = await trio.to_thread.run_sync(api_token, state.home)

    async def run(request: Request) -> dict[str, Any]:
        try:
            if request.operation.writes:
                result = await state.worker.write(request.run)
            else:
                result = await state.worker.read(request.run)
        except StoreError as exc:  # a store locked past its busy timeout, a full disk
            raise OperationFailed(f"the memory's store failed: {exc}") from None
        if "via" in result:  # a write says who made it: here, the daemon
            result["via"] = "daemon"
        return result

    await serve(ApiApp(token, run, state.clock), section.listen, task_status=task_status)
