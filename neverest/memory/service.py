"""One memory on disk, opened with its configuration and clock: what commands and the daemon use.

This is where the parts meet: the store, the embedder chosen by the
configuration (a local model when one answers, else the hashed space), the
optional writing model, the sleep passes and the render that follows them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

from neverest.clock import Clock
from neverest.config import Config
from neverest.identity import Identity, load_or_create
from neverest.memory import publish
from neverest.memory.embed import Embedder, load_embedder
from neverest.memory.model import Endpoint, Writer
from neverest.memory.recall import Hit, recall
from neverest.memory.render import render
from neverest.memory.sleep import SleepReport, sleep
from neverest.memory.states import commons_pass
from neverest.memory.store import Store, open_store


@dataclass
class Memory:
    home: Path
    config: Config
    clock: Clock
    store: Store = field(init=False)

    def __post_init__(self) -> None:
        self.store = open_store(self.home, busy_timeout_s=self.config.busy_timeout_s)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def embedder(self) -> Embedder:
        return load_embedder(self.config.embed_url or None, self.config.embed_model or None)

    def writer(self) -> Writer | None:
        if not self.config.writer_url:
            return None
        return Writer(Endpoint(self.config.writer_url, self.config.writer_model,
                               read_timeout_s=self.config.model_timeout_s))

    @functools.cached_property
    def identity(self) -> Identity:
        return load_or_create(self.home)

    def sleep(self) -> SleepReport:
        """The night: the passes, then confirmations of received lessons that came true here,
        this memory's changed lessons signed, the commons states judged, and the render."""
        now = self.clock.now()
        report = sleep(self.store, now=now, embedder=self.embedder(), config=self.config, writer=self.writer())
        received = [int(c["lesson"]) for c in report.confirmed]
        report.signed_confirmations = len(publish.confirm_received(self.store, self.identity, received, now))
        report.signed_lessons = len(publish.publish(self.store, self.identity, now))
        commons_pass(self.store, now=now, config=self.config, own_origin=self.identity.origin)
        self.render()
        return report

    def render(self) -> None:
        render(self.store, self.home, self.identity.origin)

    def recall(self, query: str, k: int = 5) -> list[Hit]:
        return recall(self.store, query, now=self.clock.now(), embedder=self.embedder(), k=k)
