"""How much storage peers may take: the rule, without SQL or clocks (the store side is admission.py).

A memory stores what peers send it, and a peer can make keys for free: one stranger with a
fresh key once pushed 15 000 valid records from 1 000 self-made origins, all of them stored.
This rule decides, for a batch of verified records about to be stored, which to admit and
which origins' holdings to evict, from the bytes held per origin and per delivering source.
admission.py reads those from the store, applies the decision and says who is trusted.

**Ranks** (who may take room from whom; admission.py assigns them):

- ``OWN``: this memory's own origin.  Never counted, never refused, never evicted.
- ``TRUSTED``: origins the owner chose or this memory verified (admission.py lists them).
  Never refused and never evicted for the budget; counted in the total, and when the total
  is full they take room from the ranks below.
- ``KNOWN``: origins of the peers in the peer table (identities that exchanged signed
  messages with this memory).  Bounded per origin and per source; when the total is full
  they take room from unknown origins only.
- ``UNKNOWN``: every other origin.  Bounded per origin and per source, admitted only while
  there is room, and evicted first.  An unknown origin's records never evict anything, so a
  flood of strangers cannot push out what is already held.

**Bounds** (0 turns a bound off), in the order they are checked:

- ``origin_bytes``: what one known or unknown origin may hold;
- ``peer_bytes``: what one source (``gossip:<peer origin>``, ``folder:<file>``, ``commons:...``:
  whoever delivered the records) may hold of known and unknown origins' records;
- ``stranger_peer_bytes``: what one *stranger* source (a gossip peer this memory does not trust,
  ``Offer.stranger``) may hold of known and unknown origins' records, on top of ``peer_bytes``:
  keys are free, so a peer nobody vouched for gets no more room than one origin would;
- ``exchange_bytes``: known and unknown records admitted from one batch of receiving;
- ``untrusted_bytes``: all known and unknown origins' records together, one shared pool: a flood of
  fresh keys (each of them an origin and a peer of its own) fills this much at most, however many
  identities it makes.  When it is full a known origin takes room from unknown ones (evicted, the
  order below); an unknown one is refused (bound ``untrusted``).  Trusted origins are not in it;
- ``total_bytes``: everything received (every rank but ``OWN``).

Bytes are the records' own bytes (``len(raw)``), as stored.

**Gossip's rule** (an origin's records held from seq 1 with no gap) is kept by two properties
the tests check: once one of an origin's records in a batch is refused, every later one of it
in the batch is refused too (the admitted part is a prefix of what was offered); and an origin
is evicted whole, never one with records offered in the same batch.

**Eviction order**: unknown origins before known ones; within a rank, origins delivered by the
source that holds the most bytes first (a flood's source before everyone else's), then the
origin whose last record arrived most recently.  An offer evicts only when that frees enough
room for it, so no holding is lost for an offer that is then refused anyway.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final, Literal, NamedTuple

Bound = Literal["origin", "peer", "exchange", "untrusted", "total", "declined"]
# Refusals for these bounds last (the origin is *declined* for a while, admission.py): a
# refusal for the exchange bound only means "later", since the next batch has room again.
LASTING: Final[frozenset[Bound]] = frozenset({"origin", "peer", "untrusted", "total", "declined"})


class Rank(IntEnum):
    OWN = 0
    TRUSTED = 1
    KNOWN = 2
    UNKNOWN = 3


@dataclass(frozen=True)
class Limits:
    total_bytes: int = 0
    origin_bytes: int = 0
    peer_bytes: int = 0
    exchange_bytes: int = 0
    untrusted_bytes: int = 0
    stranger_peer_bytes: int = 0

    @property
    def off(self) -> bool:
        return not (self.total_bytes or self.origin_bytes or self.peer_bytes or self.exchange_bytes
                    or self.untrusted_bytes or self.stranger_peer_bytes)

    def peer_bound(self, stranger: bool) -> int:
        """The bound on one source's known and unknown bytes (0: none)."""
        if not stranger or not self.stranger_peer_bytes:
            return self.peer_bytes
        return min(self.peer_bytes, self.stranger_peer_bytes) if self.peer_bytes else self.stranger_peer_bytes


@dataclass(frozen=True)
class Holding:
    """What is held of one origin: its bytes by the source that delivered them, and when its
    last record arrived (an ISO time: they sort as strings)."""

    origin: str
    rank: Rank
    by_source: Mapping[str, int]
    last: str = ""

    @property
    def size(self) -> int:
        return sum(self.by_source.values())


class Offer(NamedTuple):
    """One verified record about to be stored: its origin, its size, who delivered it (a tuple: a
    batch makes one per record)."""

    origin: str
    size: int
    source: str
    rank: Rank
    declined: bool = False  # the origin is declined (admission.py): refused until that expires
    stranger: bool = False  # the source is a gossip peer this memory does not trust (``stranger_peer_bytes``)


@dataclass
class Decision:
    refused: dict[int, Bound] = field(default_factory=dict)  # offer index -> the bound that refused it
    evicted: list[str] = field(default_factory=list)  # origins to evict, in order
    exchange: int = 0  # known and unknown bytes admitted, those of earlier batches of the exchange included
    cut: dict[str, Bound] = field(default_factory=dict)  # origins refused, earlier batches' included


class _Usage:
    """Bytes held, as the batch's decisions change them."""

    def __init__(self, held: Sequence[Holding]) -> None:
        self.origin: Counter[str] = Counter()
        self.source: Counter[str] = Counter()  # of known and unknown origins only
        self.total = 0
        self.untrusted = 0  # of known and unknown origins (the shared pool)
        for h in held:
            if h.rank is Rank.OWN:
                continue
            self.origin[h.origin] += h.size
            self.total += h.size
            if h.rank >= Rank.KNOWN:
                self.source.update(h.by_source)
                self.untrusted += h.size

    def add(self, offer: Offer) -> None:
        self.origin[offer.origin] += offer.size
        self.total += offer.size
        if offer.rank >= Rank.KNOWN:
            self.source[offer.source] += offer.size
            self.untrusted += offer.size

    def remove(self, holding: Holding) -> None:
        self.origin.pop(holding.origin, None)
        self.total -= holding.size
        if holding.rank >= Rank.KNOWN:
            self.source.subtract(holding.by_source)
            self.untrusted -= holding.size


def _bound(limits: Limits, usage: _Usage, offer: Offer, exchange: int) -> Bound | None:
    """The per-origin, per-source or per-batch bound the offer would cross, if any."""
    if offer.rank < Rank.KNOWN:
        return None
    if offer.declined:
        return "declined"
    if limits.origin_bytes and usage.origin[offer.origin] + offer.size > limits.origin_bytes:
        return "origin"
    peer_bytes = limits.peer_bound(offer.stranger)
    if peer_bytes and usage.source[offer.source] + offer.size > peer_bytes:
        return "peer"
    if limits.exchange_bytes and exchange + offer.size > limits.exchange_bytes:
        return "exchange"
    return None


def victims(held: Sequence[Holding], offered: set[str]) -> list[Holding]:
    """Holdings that may be evicted, first to go first (the module docstring's order)."""
    by_source: Counter[str] = Counter()
    for h in held:
        if h.rank >= Rank.KNOWN:
            by_source.update(h.by_source)

    def key(h: Holding) -> tuple[int, int, str]:
        main = max(h.by_source.items(), key=lambda item: (item[1], item[0]))[0] if h.by_source else ""
        return (h.rank, by_source[main], h.last)

    return sorted((h for h in held if h.rank >= Rank.KNOWN and h.origin not in offered and h.size > 0),
                  key=key, reverse=True)


def decide(limits: Limits, held: Sequence[Holding], offers: Sequence[Offer], *, spent: int = 0,
           cut: Mapping[str, Bound] | None = None, total: int | None = None,
           untrusted: int | None = None) -> Decision:
    """Which offers to refuse (and for which bound) and which holdings to evict, offers taken in order;
    ``spent`` and ``cut`` are what earlier batches of the same exchange admitted against
    ``exchange_bytes`` and the origins they refused (``Decision.exchange`` and ``.cut``): a batch
    never admits the rest of an origin an earlier batch cut.

    ``held`` is every holding, or, when ``total`` (the bytes of every holding but own ones) and
    ``untrusted`` (those of known and unknown origins) are given and the offers fit under
    ``total_bytes`` and ``untrusted_bytes`` with them, only the holdings of the offers' origins and
    sources (nothing can be evicted then, and those are all the other bounds read)."""
    decision = Decision(exchange=spent, cut=dict(cut or {}))
    if limits.off:
        return decision
    usage = _Usage(held)
    if total is not None:
        usage.total = total
    if untrusted is not None:
        usage.untrusted = untrusted
    queue: list[Holding] | None = None  # sorted only when room must be taken
    cut = decision.cut
    exchange = spent

    def make_room(offer: Offer, need: int) -> bool:
        """Evict holdings of lower rank than ``offer`` until ``need`` bytes are freed; False (and
        nothing evicted) when they would not free enough (trusted offers take what there is)."""
        nonlocal queue
        if queue is None:
            queue = victims(held, {o.origin for o in offers})
        lower = [h for h in queue if h.rank > offer.rank]
        if offer.rank is not Rank.TRUSTED and sum(h.size for h in lower) < need:
            return False
        for h in lower:
            if need <= 0:
                break
            queue.remove(h)
            usage.remove(h)
            decision.evicted.append(h.origin)
            need -= h.size
        return True

    i, n = 0, len(offers)
    while i < n:
        offer = offers[i]
        # A run of offers alike but for their sizes (one origin's records from one source, as they come):
        # when the whole run fits under every bound, each of its offers would fit taken one by one, so
        # it is admitted at once; otherwise its offers are decided one by one, below.
        end = i + 1
        while end < n and offers[end][0] == offer[0] and offers[end][2:] == offer[2:]:
            end += 1
        if offer.rank is Rank.OWN:
            i = end
            continue
        if end - i > 1 and offer.origin not in cut:
            run = offer._replace(size=sum(o.size for o in offers[i:end]))
            if _fits(limits, usage, run, exchange):
                usage.add(run)
                if offer.rank >= Rank.KNOWN:
                    exchange += run.size
                i = end
                continue
        for k in range(i, end):
            exchange = _one(limits, usage, offers[k], k, exchange, decision, make_room)
        i = end
    decision.exchange = exchange
    return decision


def _fits(limits: Limits, usage: _Usage, offer: Offer, exchange: int) -> bool:
    """Whether ``offer`` crosses no bound and needs no room taken (``_one`` would admit it as it is)."""
    if _bound(limits, usage, offer, exchange) is not None:
        return False
    if offer.rank >= Rank.KNOWN and limits.untrusted_bytes and usage.untrusted + offer.size > limits.untrusted_bytes:
        return False
    return not (limits.total_bytes and usage.total + offer.size > limits.total_bytes)


def _one(limits: Limits, usage: _Usage, offer: Offer, i: int, exchange: int, decision: Decision,
         make_room: Callable[[Offer, int], bool]) -> int:
    """Decide offer ``i`` (into ``decision``); the exchange's bytes after it."""
    cut = decision.cut
    reason = cut.get(offer.origin) or _bound(limits, usage, offer, exchange)
    if reason is None:
        # What the shared pool and the total lack; the holdings that can be evicted for this offer
        # (of lower rank: known or unknown) count in both, so freeing the larger need frees both,
        # and nothing is evicted for an offer then refused.
        pool = (usage.untrusted + offer.size - limits.untrusted_bytes
                if offer.rank >= Rank.KNOWN and limits.untrusted_bytes else 0)
        whole = usage.total + offer.size - limits.total_bytes if limits.total_bytes else 0
        if max(pool, whole) > 0 and not make_room(offer, max(pool, whole)):
            reason = "untrusted" if pool >= whole else "total"
    if reason is not None:
        cut[offer.origin] = reason
        decision.refused[i] = reason
        return exchange
    usage.add(offer)
    if offer.rank >= Rank.KNOWN:
        exchange += offer.size
    return exchange
