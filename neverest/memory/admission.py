"""The storage budget at the point where the receive function stores a batch of verified records.

``Gate.screen`` reads what is held (bytes by origin and by delivering peer), ranks the origins,
asks the rule (budget.py) and applies its decision inside the batch's write transaction: it
evicts, remembers what it declined, and returns the records to refuse with their reason
(``untrusted-full`` when the pool shared by all untrusted origins is full, ``over-budget`` for every
other bound; counted by source like every refusal, so ``neverestctl status`` and /metrics show them;
evictions are counted as ``evicted`` under the source ``budget``).

**Who is trusted** (``Rank.TRUSTED``: never refused or evicted for the budget): the origins the
owner named (``neverestctl trust add``, ``trust_allow``, ``domain_origins``), those of peers the
owner added by hand or in the config (``peer_addresses``/``peers`` with source ``manual`` or
``config``), and origins that signed at least ``vouch_min_verified`` lessons or confirmations of
lessons whose predictions came true in this memory's own sessions (what ``commons.vouched`` counts
as verified, without the policy's other conditions: room is cheaper to give than support).  Not
trusted for room: origins that only repeated this memory's own lessons, since anyone can copy a
published lesson.
**Known** (``Rank.KNOWN``): origins of the peer table, identities that exchanged signed gossip
with this memory.  **Unknown**: all others; the 1 000 self-made origins of a flood are unknown.
Known and unknown origins are *untrusted*: one shared pool (``received_untrusted_budget_bytes``)
holds them all, so keys made for free cannot each take a slice of the total.  A **stranger** source
is a gossip peer whose origin is not trusted (``gossip:<origin>``; a folder's files and a commons
are the owner's choice of source): it is bounded by ``received_stranger_peer_budget_bytes``.

**Declined origins** (table ``declined``, schema v5).  An origin refused for a lasting bound
(``budget.LASTING``) or evicted is *declined* for ``declined_remember_s``: its records are refused
before anything is stored, and gossip's digest (gossip/view.py) shows the head it was offered or
held of it, so that a peer that has it finds nothing to send and the exchange does not carry it
again and again: without this, every exchange with a peer holding a flood would carry a full
delta of it to be refused.  When the row expires the digest falls back to what is held and the
origin is offered again, once per period at most.  The cost: while declined, this memory does not
hold what its digest shows, so a peer lacking that origin gets nothing of it from here.
Declines of origins that became trusted are dropped.  Expired rows are dropped when a batch is
screened (a memory that receives nothing keeps showing them: it then has nothing to re-pull either).

A peer is the delivering ``source``, with every folder file counted as one peer (``folder``).
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Final

from neverest.clock import iso
from neverest.config import Config
from neverest.memory import holdings
from neverest.memory.budget import LASTING, Bound, Holding, Limits, Offer, Rank, decide
from neverest.memory.queries import budget as q
from neverest.memory.queries import trust as trust_queries
from neverest.records import MAX_RECORD_BYTES, Record, RecordError

OVER_BUDGET: Final = "over-budget"
UNTRUSTED_FULL: Final = "untrusted-full"  # the pool shared by every untrusted origin is full
EVICTED: Final = "evicted"
BUDGET_SOURCE: Final = "budget"


def limits_of(config: Config) -> Limits:
    return Limits(total_bytes=config.received_budget_bytes, origin_bytes=config.received_origin_budget_bytes,
                  peer_bytes=config.received_peer_budget_bytes, exchange_bytes=config.received_exchange_budget_bytes,
                  untrusted_bytes=config.received_untrusted_budget_bytes,
                  stranger_peer_bytes=config.received_stranger_peer_budget_bytes)


def reason_of(bound: Bound) -> str:
    """The refusal reason counted for a record refused for ``bound``."""
    return UNTRUSTED_FULL if bound == "untrusted" else OVER_BUDGET


def peer_of(source: str) -> str:
    """The peer a source counts against: a folder's files are one peer (as ``holdings.Usage``
    counts them in ``received_usage``)."""
    return "folder" if source.startswith("folder:") else source


def _names(text: str) -> set[str]:
    return {o.strip() for o in text.split(",") if o.strip()}


def trusted_origins(db: sqlite3.Connection, config: Config) -> set[str]:
    """The module docstring's trusted origins (this memory's own excepted: it has its own rank)."""
    return (_names(config.trust_allow) | _names(config.domain_origins) | trust_queries.named_origins(db)
            | q.chosen_peer_origins(db) | q.verified_supporters(db, max(config.vouch_min_verified, 1)))


class Gate:
    """One per Receiver: the exchange bound counts across all the batches it screens."""

    def __init__(self, config: Config, *, own_origin: str, now: datetime) -> None:
        self.limits, self.own_origin, self.now = limits_of(config), own_origin, now
        self.until = iso(now + timedelta(seconds=config.declined_remember_s))
        self._config = config
        self._ranks: tuple[set[str], set[str]] | None = None  # (trusted, known), read once
        self._declined: dict[str, int] | None = None  # declined origins not trusted and their seq, read once
        self._pruned = False  # expired declines and those of trusted origins dropped (at the first batch)
        self.spent = 0
        self.cut: dict[str, Bound] = {}  # origins refused by an earlier batch: their later records are too
        # Origins whose digest entry may have changed though no record of theirs was received.
        self.touched: set[str] = set()
        self.evicted: list[str] = []
        self.early: Counter[str] = Counter()  # lines refused unverified, by source, not counted in the store yet

    def _read(self, db: sqlite3.Connection) -> tuple[set[str], set[str], dict[str, int]]:
        if self._ranks is None or self._declined is None:
            self._ranks = (trusted_origins(db, self._config), q.peer_origins(db))
            self._declined = {o: seq for o, seq in q.declined_seqs(db, after=iso(self.now)).items()
                              if o not in self._ranks[0]}
        return self._ranks[0], self._ranks[1], self._declined

    def declines(self, db: sqlite3.Connection, raw: bytes, source: str) -> bool:
        """Whether ``raw`` claims a declined origin at a seq no higher than the head shown for it: it
        is refused before it is verified (valid or not, it would be refused).  A record past that
        head goes on to be verified, so that a valid one moves the head and is not sent again.
        Counted by source until the next batch is written."""
        if self.limits.off:
            return False
        declined = self._read(db)[2]
        if not declined:
            return False
        origin, seq = _claim(raw)
        if origin is None or seq is None or seq > declined.get(origin, 0):
            return False
        self.early[source] += 1
        return True

    def take_early(self) -> Counter[tuple[str, str]]:
        """The early refusals, to count in the store with the batch's others."""
        out = Counter({(source, OVER_BUDGET): n for source, n in self.early.items()})
        self.early.clear()
        return out

    def rank(self, origin: str) -> Rank:
        assert self._ranks is not None
        trusted, known = self._ranks
        if origin == self.own_origin:
            return Rank.OWN
        return Rank.TRUSTED if origin in trusted else Rank.KNOWN if origin in known else Rank.UNKNOWN

    def stranger(self, source: str) -> bool:
        """Whether ``source`` is a gossip peer this memory does not trust (its origin is not trusted)."""
        assert self._ranks is not None
        return source.startswith("gossip:") and source[len("gossip:"):] not in self._ranks[0]

    def screen(self, db: sqlite3.Connection, items: Sequence[tuple[str, Record | RecordError]]) -> dict[int, str]:
        """The indexes of ``items`` (source, verified record or refusal) to refuse for the budget, with
        the reason to count (``reason_of``); runs inside the batch's write transaction, before
        anything of the batch is stored."""
        if self.limits.off:
            if not self._pruned:  # the budget was turned off: what it declined is taken again
                self._pruned = True
                self.touched.update(q.undecline(db, expired_at="9999"))
            return {}
        records = [(k, source, item) for k, (source, item) in enumerate(items)
                   if isinstance(item, Record) and item.origin != self.own_origin]
        if not records:
            return {}
        trusted, _, declined = self._read(db)
        if not self._pruned:
            self._pruned = True
            self.touched.update(q.undecline(db, expired_at=iso(self.now), origins=trusted))
        # What an offer says besides its origin and size, by (origin, source): the same for all their records.
        alike: dict[tuple[str, str], tuple[str, Rank, bool, bool]] = {}
        offers = []
        for _, source, r in records:
            rest = alike.get((r.origin, source))
            if rest is None:
                rest = alike[r.origin, source] = (peer_of(source), self.rank(r.origin), r.origin in declined,
                                                  self.stranger(source))
            offers.append(Offer(r.origin, len(r.raw), *rest))
        total, untrusted = q.received_split(db, self.own_origin, trusted)
        decision = decide(self.limits, self._holdings(db, offers, total, untrusted), offers, spent=self.spent,
                          cut=self.cut, total=total, untrusted=untrusted)
        self.cut = decision.cut
        self.spent = decision.exchange
        for origin in decision.evicted:
            self._evict(db, origin)
        refused: dict[str, tuple[Record, Bound]] = {}
        for i, bound in decision.refused.items():
            record = records[i][2]
            if bound in LASTING and record.seq is not None:
                top = refused.get(record.origin)
                if top is None or (top[0].seq or 0) < record.seq:
                    refused[record.origin] = (record, bound)
        for origin, (record, _) in refused.items():
            assert record.seq is not None
            q.decline(db, origin, q.Head(record.seq, holdings.digest_of(record.raw)), until=self.until)
            self._note_declined(origin, record.seq)
        return {records[i][0]: reason_of(bound) for i, bound in decision.refused.items()}

    def _holdings(self, db: sqlite3.Connection, offers: Sequence[Offer], total: int, untrusted: int) -> list[Holding]:
        """What ``decide`` needs: every holding when the batch may need room taken, else only those
        of the offers' origins and peers (budget.decide says why that is enough)."""
        incoming = sum(o.size for o in offers if o.rank is not Rank.OWN)
        incoming_untrusted = sum(o.size for o in offers if o.rank >= Rank.KNOWN)
        if ((self.limits.total_bytes and total + incoming > self.limits.total_bytes)
                or (self.limits.untrusted_bytes and untrusted + incoming_untrusted > self.limits.untrusted_bytes)):
            rows = q.usage(db, self.own_origin)
        else:
            rows = q.usage(db, self.own_origin, origins={o.origin for o in offers}, peers={o.source for o in offers})
        by_origin: dict[str, dict[str, int]] = {}
        last: dict[str, str] = {}
        for row in rows:
            by_origin.setdefault(row.origin, {})[row.peer] = row.size
            last[row.origin] = max(last.get(row.origin, ""), row.last)
        return [Holding(o, self.rank(o), s, last[o]) for o, s in by_origin.items()]

    def _evict(self, db: sqlite3.Connection, origin: str) -> None:
        head = q.held_head(db, origin)
        removed, _ = q.evict(db, origin)
        if head is not None:
            q.decline(db, origin, head, until=self.until)
            self._note_declined(origin, head.seq)
        if removed:
            holdings.count_refusal(db, BUDGET_SOURCE, EVICTED, self.now, removed)
        self.evicted.append(origin)
        self.touched.add(origin)

    def _note_declined(self, origin: str, seq: int) -> None:
        self.touched.add(origin)
        if self._declined is not None:
            self._declined[origin] = max(seq, self._declined.get(origin, 0))


def _claim(raw: bytes) -> tuple[str | None, int | None]:
    """The origin and seq a line claims, unverified; (None, None) when it cannot be read (an
    oversized line is left to the verifier, which refuses it before parsing it)."""
    if len(raw) > MAX_RECORD_BYTES:
        return None, None
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return None, None
    if not isinstance(obj, dict):
        return None, None
    origin, seq = obj.get("origin"), obj.get("seq")
    return (origin if type(origin) is str else None), (seq if type(seq) is int else None)
