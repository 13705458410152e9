"""The memory service: the one place that owns the order of the application's steps.

The daemon (over its control socket and its schedules), ``neverestctl`` (when no
daemon runs) and the simulator all call these methods; none of them re-spells a
sequence.  The sequences are:

- **ingest**: events (or JSON Lines of events, or the inbox file) become episodes,
  committed before the call returns.
- **night**: drain the inbox; the sleep passes; refutations of received lessons that
  did not hold here, then confirmations of those that came true; this memory's changed
  lessons signed (in that order, so that a refutation is this origin's newest record only
  on a night that signed nothing else: PROTOCOL.md §1, "Refutations"); then every configured
  transport synced; then the commons states judged and the renders written, so what
  the night received is in ``lessons.md`` the same morning.
- **sync**: through one transport (a shared folder, an HTTP commons): sign what is
  pending, move records both ways through the one receive function, judge, render.
- **settle**: judge and render after records arrived by another path (gossip).
- **publish / unpublish / revoke / forget / name / unname**: the owner's writes, each
  followed by what it changes downstream (signing, judging, rendering); naming an origin
  (``neverestctl trust``) changes whose support counts, so the states are judged again.

A ``Memory`` works on an open ``Store`` (a file for the daemon and the CLI, ``:memory:``
in the simulator) with an identity, the configuration and an injected clock.  A home
folder is optional: without one there is no inbox and nothing is rendered.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from neverest.clock import Clock, iso
from neverest.config import Config
from neverest.identity import Identity, load_or_create
from neverest.memory import holdings, views
from neverest.memory.queries import budget as budget_queries
from neverest.memory.queries import injections as injection_queries
from neverest.memory.queries import lessons as lesson_queries
from neverest.memory.queries import sleeps
from neverest.memory.queries import status as status_queries
from neverest.memory.queries import trust as trust_queries
from neverest.memory.store import Store, meta_value, open_store
from neverest.records import Record

# The passes that embed, learn, receive, sign and judge (numpy, PyNaCl, the commons), the project logs and
# the renders are imported by the methods that run them: opening the memory to list its lessons or its status
# loads none of them (docs/figures.md, start-up; tests/test_ctl_startup.py holds it so).
if TYPE_CHECKING:
    from neverest.memory.embed import Embedder
    from neverest.memory.events import IngestResult
    from neverest.memory.model import Writer
    from neverest.memory.recall import Hit


class Transport(Protocol):
    """A way records move that a memory syncs through (a shared folder, an HTTP commons).

    ``exchange`` writes what this memory publishes and reads what the others published
    through the receive function; it does not judge or render: the service does.  It
    returns a JSON-able report.  Transport failures are reported in it, not raised,
    so one unreachable commons never stops a night.
    """

    name: str

    def exchange(self, store: Store, identity: Identity, config: Config, now: datetime) -> dict[str, Any]: ...


def refutation_status(db: sqlite3.Connection) -> dict[str, Any]:
    """Refutations held (this memory's own included) and refused by the receive function's rules for
    them, by reason (malformed or forged ones count with every other record, under ``refused``)."""
    refused: dict[str, int] = {}
    for r in holdings.refusals(db):
        if r.reason in (holdings.REFUTE_PUBLISHER, holdings.REFUTE_FLOOD):
            refused[r.reason] = refused.get(r.reason, 0) + r.count
    return {"held": status_queries.refutations(db), "refused": refused}


# Where the store keeps this memory's public key, filed under its seed's tag (``Identity.seed_tag``):
# deriving it from the seed needs PyNaCl, which a command that only reads the memory does not load otherwise.
PUBLIC_KEY_META = "identity_public_key"


def _with_known_public(store: Store, identity: Identity) -> Identity:
    """``identity`` with its public key read from the store when it was filed there for this very seed;
    else derived (PyNaCl) and filed for the next process.  A store that cannot take the write at once
    (another writer holds it, a read-only file) is left as it is: the key is derived again next time."""
    tag, _, public = (meta_value(store.db, PUBLIC_KEY_META) or "").partition(":")
    if tag == identity.seed_tag and len(public) == 64:
        return identity.with_public(bytes.fromhex(public))
    store.set_meta_if_free(PUBLIC_KEY_META, f"{identity.seed_tag}:{identity.public_key.hex()}")
    return identity


class OwnerError(ValueError):
    """The owner asked for something this memory cannot do as asked (exit status 2 in the CLI)."""


# A render of a layer above (an agent's memory files): the memory, and its lessons as ``lessons()`` gives them.
Renderer = Callable[["Memory", list[views.LessonView]], object]


class Memory:
    """A memory: its store, identity, configuration and clock, and what every door asks of them.

    A plain class, not a dataclass: every read command imports this module, and ``dataclasses`` (with
    ``inspect``) costs each about 9 ms (docs/figures.md, start-up)."""

    def __init__(self, store: Store, identity: Identity, config: Config, clock: Clock, home: Path | None = None,
                 embedder_: Embedder | None = None, renderers: tuple[Renderer, ...] = ()) -> None:
        self.store = store
        self.identity = identity
        self.config = config
        self.clock = clock
        self.home = home
        # The embedder, when the caller keeps one across memories (the daemon's worker); else made on first use.
        self.embedder_ = embedder_
        # Renders of the layers above (the agents' memory files) run after this memory's own, in this order,
        # with the lessons those were rendered from (judged once for every render).
        self.renderers = renderers

    def __repr__(self) -> str:
        return f"Memory(home={self.home!r})"

    @classmethod
    def open(cls, home: Path, config: Config, clock: Clock, *, embedder: Embedder | None = None,
             renderers: tuple[Renderer, ...] = ()) -> Memory:
        """The memory whose store and key live in ``home``."""
        store = open_store(home, busy_timeout_s=config.busy_timeout_s)
        try:
            identity = _with_known_public(store, load_or_create(home))
        except BaseException:
            store.close()
            raise
        return cls(store, identity, config, clock, home, embedder, renderers)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the models chosen by the configuration -------------------------------------------

    @property
    def embedder(self) -> Embedder:
        if self.embedder_ is None:
            from neverest.memory.embed import load_embedder

            self.embedder_ = load_embedder(self.config.embed_url or None, self.config.embed_model or None)
        return self.embedder_

    def writer(self) -> Writer | None:
        if not self.config.writer_url:
            return None
        from neverest.memory.model import Endpoint, Writer

        return Writer(Endpoint(self.config.writer_url, self.config.writer_model,
                               read_timeout_s=self.config.model_timeout_s))

    # -- ingest ------------------------------------------------------------------------------

    def ingest(self, events: Iterable[object], *, seen: set[str] | None = None) -> IngestResult:
        """``seen``: the ids of the events of the same input given to earlier calls (one set per input)."""
        from neverest.memory.events import ingest

        return ingest(self.store, events, now=self.clock.now(), seen=seen)

    def ingest_lines(self, stream: BinaryIO) -> IngestResult:
        from neverest.memory.events import ingest_lines

        return ingest_lines(self.store, stream, now=self.clock.now())

    def drain_inbox(self) -> IngestResult:
        from neverest.memory.events import IngestResult
        from neverest.memory.inbox import drain_inbox

        if self.home is None:
            return IngestResult()
        return drain_inbox(self.store, self.home, now=self.clock.now())

    # -- the night ---------------------------------------------------------------------------

    def night(self, transports: Sequence[Transport] = ()) -> dict[str, Any]:
        """Inbox, sleep, confirm, sign, sync every transport, judge, render: one report."""
        from neverest.memory import publish as publishing
        from neverest.memory.sleep import sleep

        inbox = self.drain_inbox()
        now = self.clock.now()
        report = sleep(self.store, now=now, embedder=self.embedder, config=self.config, writer=self.writer())
        refuted = [int(r["lesson"]) for r in report.refuted]
        report.signed_refutations = len(publishing.refute_received(self.store, self.identity, refuted, now,
                                                                   most=self.config.refute_origin_max))
        received = [int(c["lesson"]) for c in report.confirmed]
        report.signed_confirmations = len(publishing.confirm_received(self.store, self.identity, received, now))
        report.signed_lessons = len(publishing.publish(self.store, self.identity, now))
        out = report.to_json() | {"inbox": inbox.to_json(), "held_back": len(publishing.held_back(self.store.db))}
        for transport in transports:
            out[transport.name] = transport.exchange(self.store, self.identity, self.config, self.clock.now())
        out["states"] = self.settle()
        # The night's end, read from the clock once everything is done (``started`` is when it began).
        out["finished"] = iso(self.clock.now())
        return out

    # -- records moving ----------------------------------------------------------------------

    def sync(self, transport: Transport) -> dict[str, Any]:
        """Sign what is pending, exchange through ``transport``, then judge and render."""
        from neverest.memory import publish as publishing

        publishing.publish(self.store, self.identity, self.clock.now())
        out = transport.exchange(self.store, self.identity, self.config, self.clock.now())
        self.settle()
        return out

    def settle(self) -> dict[str, int]:
        """Judge the commons states from the records held, then render what changed."""
        from neverest.memory.states import commons_pass

        states = commons_pass(self.store, now=self.clock.now(), config=self.config, own_origin=self.identity.origin)
        self.render()
        return states

    def render(self) -> None:
        from neverest.memory.render import render

        if self.home is not None:
            lessons = self.lessons()
            render(self.store, self.home, lessons)
            for extra in self.renderers:
                extra(self, lessons)

    def _commons_state(self) -> Callable[[str], str]:
        """A lesson hash's commons state, for the renders to label received lessons with (a received
        lesson is a candidate until it is common, whatever layer it is kept in).  The trust policy is
        read once, at the first lesson asked about."""
        from neverest.memory.states import trust_filter, verdict

        db, now, origin = self.store.db, self.clock.now(), self.identity.origin
        counts: list[Callable[[str], bool]] = []

        def state_of(target: str) -> str:
            if not counts:
                counts.append(trust_filter(db, self.config, origin))
            return verdict(db, target, now=now, config=self.config, own_origin=origin, counts=counts[0]).state
        return state_of

    # -- the owner's writes ------------------------------------------------------------------

    def publish(self, project: str, *, corrections: bool) -> dict[str, Any]:
        """Opt a project in (its folder must exist) and sign what it makes publishable now."""
        from neverest.memory import publish as publishing

        path = Path(project).expanduser()
        if not path.is_dir():
            raise OwnerError(f"{project} is not a folder: give the project folder whose lessons may be shared")
        now = self.clock.now()
        name = publishing.opt_in(self.store, os.fspath(path), corrections=corrections, now=now)
        signed = publishing.publish(self.store, self.identity, now)
        self.settle()
        # Lessons of the published projects that scrubbing keeps personal (publish.held_back).
        held = len(publishing.held_back(self.store.db))
        return {"project": name, "corrections": corrections, "signed": len(signed), "held_back": held}

    def unpublish(self, project: str) -> dict[str, Any]:
        from neverest.memory import publish as publishing

        removed = publishing.opt_out(self.store, project)
        return {"project": project, "removed": removed}

    def revoke(self, target: str) -> Record:
        from neverest.memory import publish as publishing

        if not lesson_queries.is_own_lesson(self.store.db, target, self.identity.origin):
            raise OwnerError(f"{target} is not a lesson of this memory; only its origin can revoke it")
        record = publishing.revoke(self.store, self.identity, target, self.clock.now())
        self.settle()
        return record

    def name(self, origin: str, *, note: str | None = None) -> dict[str, Any]:
        """Name ``origin`` as trusted (``neverestctl trust add``), then judge again with it counted."""
        origin = self._origin(origin)
        if origin == self.identity.origin:
            raise OwnerError(f"{origin} is this memory's own origin: its own support always counts here")
        with self.store.write() as db:
            new = trust_queries.name(db, origin, note=note, added=iso(self.clock.now()))
        self.settle()
        return {"origin": origin, "new": new, "note": note}

    def unname(self, origin: str) -> dict[str, Any]:
        """Stop naming ``origin`` (``neverestctl trust remove``), then judge again without it.  An origin
        named in config.toml's ``trust_allow`` stays named: the command never edits the config."""
        origin = self._origin(origin)
        with self.store.write() as db:
            removed = trust_queries.unname(db, origin)
        if removed:
            self.settle()
        from neverest.memory.states import config_named

        return {"origin": origin, "removed": removed, "in_config": origin in config_named(self.config)}

    def trusted(self) -> dict[str, Any]:
        """Who is trusted here and why (memory/trusted.py)."""
        from neverest.memory import trusted

        return {"policy": self.config.trust, "support_n": self.config.support_n,
                "origins": [e.to_json() for e in trusted.listing(self.store.db, self.config, self.identity.origin)]}

    @staticmethod
    def _origin(text: str) -> str:
        from neverest.memory import trusted

        try:
            return trusted.parse_origin(text)
        except trusted.OriginError as exc:
            raise OwnerError(str(exc)) from None

    # -- reading -----------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """What this memory holds, from its store (a daemon adds what only it knows)."""
        from neverest.memory import publish as publishing

        db = self.store.db
        last = sleeps.last_finished(db)
        return {"origin": self.identity.origin, "home": str(self.home) if self.home else None} | \
            status_queries.counts(db).to_json() | {
            "last_sleep": last.started if last else None,
            "published_projects": [p for p, _ in publishing.projects(self.store)],
            "held_back": len(publishing.held_back(db)),
            "refused": [r.as_dict() for r in holdings.refusals(db)],
            "refutations": refutation_status(db),
            "received": budget_queries.report(db, self.identity.origin, self.config.received_budget_bytes),
            "hook": {"holdout": self.config.holdout, "agents": list(self.config.agents)}
            | injection_queries.holdout_summary(db),
        }

    def forget(self, *, episode: str | None = None, session: str | None = None,
               before: datetime | None = None, relay_project: str | None = None) -> dict[str, Any]:
        """Episodes gone for good (store, recall index, disk), then the renders rewritten without them.

        ``before`` also removes the project logs' lines written before it (``neverest.relay``);
        ``relay_project`` removes one project's whole log and nothing else."""
        from neverest import relay

        if relay_project is not None:
            if episode is not None or session is not None or before is not None:
                raise ValueError("forget takes exactly one of episode, session, before, relay_project")
            gone = relay.forget(self.home, project=relay_project) if self.home is not None \
                else relay.RelayForgotten(0, 0)
            return {"episodes": 0, "lesson_sources": 0, "predictions": 0, "lessons_recentred": 0, "vacuumed": True,
                    "wal_truncated": True, "relay_lines": gone.lines, "relay_files": gone.files}
        from neverest.memory.forget import forget

        result = forget(self.store, episode=episode, session=session, before=before)
        lines = relay.forget(self.home, before=before) if before is not None and self.home is not None \
            else relay.RelayForgotten(0, 0)
        self.render()
        return result.to_json() | {"relay_lines": lines.lines, "relay_files": lines.files}

    def recall(self, query: str, k: int = 5) -> list[Hit]:
        from neverest.memory.recall import recall

        # Without a model configured (nor an embedder kept by the daemon), recall ranks in the hashed space
        # without loading the embedders or numpy (memory/hashed.py).
        hashed_only = self.embedder_ is None and not (self.config.embed_url or self.config.embed_model)
        return recall(self.store, query, now=self.clock.now(), embedder=None if hashed_only else self.embedder, k=k)

    def lessons(self, *, kind: str | None = None, include_archived: bool = False,
                ids: Collection[int] | None = None) -> list[views.LessonView]:
        """The lessons held (of ``kind``, with one of ``ids``), strongest first, as every door shows them."""
        return views.load(self.store.db, now=self.clock.now(), config=self.config, own_origin=self.identity.origin,
                          kind=kind, include_archived=include_archived, ids=ids)

    def lesson(self, prefix: str) -> dict[str, Any]:
        """One lesson in full by hash prefix (``views.details``); raises ``views.LessonNotFound``."""
        return views.details(self.store.db, prefix, now=self.clock.now(), config=self.config,
                             own_origin=self.identity.origin)
