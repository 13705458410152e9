"""What the daemon's services share: the memory worker, the settle signal, what only a daemon knows."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from neverest.clock import Clock
from neverest.config import Config
from neverest.identity import Identity
from neverest.memory.store import StoreError

if TYPE_CHECKING:
    # The memory service, its queries and the embedder are imported by the worker's first job, in its
    # thread: an idle daemon runs no job, and they are about 0.5 MB resident (docs/figures.md).
    from neverest.memory.embed import Embedder
    from neverest.memory.holdings import Refusal
    from neverest.memory.service import Memory
    from neverest.memory.views import LessonView

T = TypeVar("T")
log = logging.getLogger("neverestd")


def render_for_agents(memory: Memory, lessons: list[LessonView]) -> None:
    """The agents' doors' renderer, imported when lessons are first rendered: the doors import the
    session readers and numpy, which an idle daemon does not need resident (docs/figures.md)."""
    from neverest.agents.doors import render_for_agents as render

    render(memory, lessons)


class MemoryWorker:
    """Runs memory-service calls off the event loop, in worker threads.

    Each call opens the memory on a connection of its own (SQLite connections are not
    shared between threads); writers take one lock, so two jobs of this daemon never
    compete for the store's write lock, while readers run beside them (WAL).
    """

    def __init__(self, home: Path, config: Config, clock: Clock) -> None:
        self.home, self.config, self.clock = home, config, clock
        self._writing = trio.Lock()
        # One embedder for the daemon's life: a model's client is not rebuilt for every job.  A configured
        # model is made here, so that its configuration mistakes stop the start loudly; the hashed space
        # (no model configured) cannot fail and is made by the first job.  Readers run beside the writer,
        # so two first jobs may meet: the lock makes one.
        self._embedder: Embedder | None = None
        self._embedder_made = threading.Lock()
        if config.embed_url or config.embed_model:
            self.embedder()

    def embedder(self) -> Embedder:
        with self._embedder_made:
            if self._embedder is None:
                from neverest.memory.embed import load_embedder

                self._embedder = load_embedder(self.config.embed_url or None, self.config.embed_model or None)
            return self._embedder

    def _call(self, fn: Callable[[Memory], T]) -> T:
        from neverest.memory.service import Memory

        with Memory.open(self.home, self.config, self.clock, embedder=self.embedder(),
                         renderers=(render_for_agents,)) as memory:
            return fn(memory)

    async def write(self, fn: Callable[[Memory], T]) -> T:
        async with self._writing:
            return await trio.to_thread.run_sync(self._call, fn)

    async def read(self, fn: Callable[[Memory], T]) -> T:
        return await trio.to_thread.run_sync(self._call, fn)


@dataclass
class DaemonState:
    home: Path
    config: Config
    clock: Clock
    identity: Identity
    worker: MemoryWorker
    started: float = field(default_factory=time.monotonic)
    listening: list[str] = field(default_factory=list)
    proxying: list[str] = field(default_factory=list)  # the proxy for models' addresses, when it runs
    serving_api: list[str] = field(default_factory=list)  # the JSON API's addresses, when it runs
    last_round: dict[str, Any] | None = None
    quiet_rounds: int = 0  # rounds in a row that found every peer in sync (gossip/pace.py)
    last_night: dict[str, Any] | None = None
    exchanges: dict[str, int] = field(default_factory=dict)  # outcome -> count, for /metrics
    # Refusals counted in memory and not written yet (gossip's), added to the store's in status.
    pending_refusals: Callable[[], list[Refusal]] = list
    _settle: trio.Event = field(default_factory=trio.Event)

    def settle_soon(self) -> None:
        """Records arrived: judge and render soon (many arrivals in a burst settle once)."""
        self._settle.set()

    async def wait_settle(self) -> None:
        await self._settle.wait()
        self._settle = trio.Event()

    def count_exchange(self, outcome: str) -> None:
        self.exchanges[outcome] = self.exchanges.get(outcome, 0) + 1


async def serve_settle(state: DaemonState, *, debounce_s: float = 1.0,
                       task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Judge the commons states and render after records arrive by gossip, once per burst."""
    task_status.started()
    while True:
        await state.wait_settle()
        await trio.sleep(debounce_s)
        try:
            await state.worker.write(lambda memory: memory.settle())
        except StoreError as exc:
            log.warning("settle: %s; next arrival tries again", exc)
