"""In-memory networks of real memories, for tests and simulations (h11's ConnectionPair).

Two levels:

- ``Cluster``: each ``Node`` is a real store in its own folder with its own identity, view
  and responder; ``Cluster.exchange`` runs one exchange from one node to another by direct
  calls, through the same ``Initiator``/``Responder`` bytes the HTTP edge carries.  Every
  message crosses ``Cluster.wire`` (a list of (sender, receiver, bytes)), and a ``tamper``
  hook may rewrite or drop a message in flight, which is how tests play a hostile network.
- ``MemoryView``: a ``core.StoreView`` in dicts, for benchmarks and property tests of the
  exchange at sizes a SQLite store would make slow (10^6 origins): it stores what it is given
  without verifying it (the receive function is not what they measure), keeping the first
  record at an (origin, seq) and the others as fork evidence, as the store does.
- ``AppNetwork``: whole gossip services (``service.Gossip``, with their peer tables) talking
  HTTP without sockets or threads: each listener is an ASGI app (``http.GossipApp``) at a
  base URL, and each sender gets an ``httpx`` transport (``transport_for``) that hands its
  requests to the app at the URL they name, from the sender's host.  A URL with no app
  fails as a connection refused does.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from neverest.config import Config
from neverest.gossip.codec import Digest, Entry
from neverest.gossip.core import (
    ExchangeResult,
    Initiator,
    Reply,
    Responder,
    Run,
    Settings,
    drive,
    record_cost,
    record_digest,
    seq_hash,
)
from neverest.gossip.peer_auth import ReplayCache
from neverest.gossip.ranges import RangeIndex
from neverest.gossip.view import SqliteView
from neverest.identity import Identity
from neverest.memory.receive import ReceiveResult
from neverest.memory.store import Store, open_store

Tamper = Callable[[str, str, bytes], bytes | None]


class Node:
    """One memory: a store in ``home``, an identity made from ``seed``, its gossip view and responder."""

    def __init__(self, home: Path, seed: bytes, *, config: Config | None = None,
                 settings: Settings | None = None) -> None:
        self.identity = Identity.from_seed(seed)
        self.config = config or Config()
        self.settings = settings or Settings()
        self.store: Store = open_store(home)
        self.view = SqliteView(self.store, own_origin=self.identity.origin, config=self.config)
        self.responder = Responder(self.view, self.identity.signing_key,
                                   replay=ReplayCache(skew_s=self.settings.skew_s), settings=self.settings)

    @property
    def origin(self) -> str:
        return self.identity.origin

    def initiator(self, peer: str | None, *, now: datetime, rng: random.Random,
                  share: Sequence[tuple[str, str | None]] = (), listen_port: int | None = None) -> Initiator:
        return Initiator(self.view, self.identity.signing_key, peer, now=now, rng=rng, settings=self.settings,
                         share=share, listen_port=listen_port)

    def close(self) -> None:
        self.store.close()


class Cluster:
    """``n`` nodes in folders under ``root``, node i with the identity seeded by ``bytes([first_seed + i]) * 32``."""

    def __init__(self, root: Path, n: int, *, first_seed: int = 200, config: Config | None = None,
                 settings: Settings | None = None) -> None:
        self.nodes = [Node(root / f"node{i}", bytes([first_seed + i]) * 32, config=config, settings=settings)
                      for i in range(n)]
        self.wire: list[tuple[str, str, bytes]] = []
        self.replies: list[Reply] = []
        self.tamper: Tamper | None = None

    def __getitem__(self, i: int) -> Node:
        return self.nodes[i]

    def _carry(self, sender: str, receiver: str, data: bytes) -> bytes | None:
        if self.tamper is not None:
            changed = self.tamper(sender, receiver, data)
            if changed is None:
                return None
            data = changed
        self.wire.append((sender, receiver, data))
        return data

    def exchange(self, i: int, j: int, *, now: datetime, rng: random.Random, addressed: bool = True,
                 share: Sequence[tuple[str, str | None]] = (), respond_share: Sequence[tuple[str, str | None]] = (),
                 listen_port: int | None = None) -> ExchangeResult:
        """One exchange from node i to node j (addressed to j's origin, or to nobody in particular);
        ``share`` and ``respond_share`` are the addresses each side tells the other about."""
        a, b = self.nodes[i], self.nodes[j]
        initiator = a.initiator(b.origin if addressed else None, now=now, rng=rng, share=share,
                                listen_port=listen_port)

        def post(request: bytes) -> bytes | None:
            carried = self._carry(a.origin, b.origin, request)
            if carried is None:
                return None
            reply = b.responder.respond(carried, now=now, rng=rng, share=respond_share)
            self.replies.append(reply)
            return None if reply.data is None else self._carry(b.origin, a.origin, reply.data)

        return drive(initiator, post)

    def close(self) -> None:
        for node in self.nodes:
            node.close()


class MemoryView:
    """A StoreView in dicts (see the module docstring).  ``put`` and ``apply`` take record bytes
    that name an ``origin`` and a ``seq`` (JSON); ``assume`` sets an entry without records, for
    the origins of a benchmark that are the same on both sides and never sent."""

    def __init__(self) -> None:
        self._known: dict[str, dict[int, list[bytes]]] = {}  # origin → seq → [kept, evidence...]
        self._entries: dict[str, Entry] = {}
        self._index = RangeIndex()
        self._digest: Digest | None = None  # made when revision 1 asks, kept until a change

    def assume(self, origin: str, entry: Entry) -> None:
        self._entries[origin] = entry
        self._index.set(origin, entry)
        self._digest = None

    def drop(self, origin: str) -> None:
        """Forget an origin: its records and its entry."""
        self._known.pop(origin, None)
        self._entries.pop(origin, None)
        self._index.set(origin, None)
        self._digest = None

    def put(self, raw: bytes) -> str:
        """Hold a record: 'new', 'duplicate' or 'fork' (another record at the same origin and seq)."""
        obj = json.loads(raw)
        origin, seq = obj["origin"], obj["seq"]
        at = self._known.setdefault(origin, {}).setdefault(seq, [])
        outcome = "duplicate" if raw in at else "fork" if at else "new"
        if outcome != "duplicate":
            at.append(raw)
        top = max(self._known[origin])
        self.assume(origin, (top, seq_hash({record_digest(r) for r in self._known[origin][top]})))
        return outcome

    def digest(self) -> Digest:
        if self._digest is None:
            self._digest = Digest(self._entries)
        return self._digest

    def entry(self, origin: str) -> Entry | None:
        return self._entries.get(origin)

    def index(self) -> RangeIndex:
        return self._index

    def known_at(self, origin: str, seq: int) -> list[bytes]:
        return list(self._known.get(origin, {}).get(seq, ()))

    def run(self, origin: str, after: int, *, budget_bytes: int, max_records: int) -> Run:
        held, out = self._known.get(origin, {}), list[bytes]()
        while after + len(out) + 1 in held:
            raw = held[after + len(out) + 1][0]
            budget_bytes -= record_cost(raw)
            if budget_bytes < 0 or len(out) == max_records:
                return Run(out, True)
            out.append(raw)
        return Run(out, False)

    def apply(self, records: Sequence[bytes], *, source: str, now: datetime,
              decoded: Sequence[Any] | None = None) -> ReceiveResult:
        result = ReceiveResult()
        for raw in records:
            outcome = self.put(raw)
            result.accepted += outcome == "new"
            result.duplicates += outcome == "duplicate"
            result.forks += outcome == "fork"
        return result


AsgiApp = Callable[..., Any]


class AppNetwork:
    """ASGI apps by base URL (``http://host:port``), reached through ``transport_for``."""

    def __init__(self) -> None:
        self.apps: dict[str, AsgiApp] = {}

    def listen(self, base_url: str, app: AsgiApp) -> None:
        self.apps[base_url.rstrip("/")] = app

    def stop(self, base_url: str) -> None:
        self.apps.pop(base_url.rstrip("/"), None)

    def transport_for(self, sender_host: str) -> httpx.AsyncBaseTransport:
        """The transport of a sender whose requests come from ``sender_host``."""
        return _Route(self, sender_host)


class _Route(httpx.AsyncBaseTransport):
    def __init__(self, network: AppNetwork, host: str) -> None:
        self._network, self._host = network, host

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        app = self._network.apps.get(f"{url.scheme}://{url.netloc.decode('ascii')}")
        if app is None:
            raise httpx.ConnectError(f"nothing listens at {url.scheme}://{url.netloc.decode('ascii')}",
                                     request=request)
        return await httpx.ASGITransport(app, client=(self._host, 49152)).handle_async_request(request)
