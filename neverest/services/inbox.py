"""The inbox watcher: drains ``inbox.jsonl`` every ``inbox_every_s``.

A poll that finds the inbox as the last complete drain left it (``InboxWatch``: the same files,
sizes and times) opens no store: an idle daemon's poll is one ``scandir`` of its home.
"""

from __future__ import annotations

import logging

import trio

from neverest.memory.inbox_watch import InboxWatch
from neverest.memory.store import StoreError
from neverest.services.state import DaemonState

log = logging.getLogger("neverestd.inbox")


async def serve_inbox(state: DaemonState, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    task_status.started()
    watch = InboxWatch(state.home)
    while True:
        if watch.due():
            try:
                result = await state.worker.write(lambda memory: memory.drain_inbox())
                watch.drained()
                if result.stored or result.refused:
                    log.info("inbox: %d event(s) stored, %d refused", result.stored, len(result.refused))
            except StoreError as exc:  # a long import holds the lock: try again next time
                log.warning("inbox: %s", exc)
        await trio.sleep(state.config.inbox_every_s)
