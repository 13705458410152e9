"""The gossip logic's view of a memory's SQLite store (``core.StoreView`` over ``records``).

- ``digest``/``entry``/``index``: for each origin, its highest ``seq`` in ``records``
  (superseded rows included: they are held and relayed) and the short hash of that row's
  bytes, taken from the ``digest`` column the store indexes records by; when ``forks`` holds
  evidence of another record at that seq, a hash of all of them (``core.seq_hash``; core.py
  says why), with their range index (ranges.py).  An origin the storage budget *declined*
  (memory/admission.py) shows the head it was offered or held of it when that is higher than
  what is held, so that peers do not send it again while it is declined.  They are rebuilt only when the database
  changed, so the common in-sync exchange costs two PRAGMA reads; and when the change was
  this view's own ``apply`` and nothing else committed meanwhile, only the origins of the
  records applied are read again, so an exchange that receives a few records does not
  rebuild an index of every origin.
- ``run``: one origin's records in seq order after a given seq, read lazily so that a
  budget that stops early stops the read too.
- ``ahead``: a context in which the entries of some origins show records received but not yet
  applied (a pipelined pull, gossip/service.py, builds its next request in it), taken back after.
- ``apply``: the one receive function (``Receiver``), one per call, so that a batch of
  records from a peer commits in the receiver's batches and is counted under its source.
  ``receive`` then ``refresh`` is the same in two steps: a pipelined pull (gossip/service.py)
  receives in a worker thread and refreshes the cached entries on the event loop afterwards.
- ``pinned``: a context in which the cached entries are read as they are, without asking the
  database whether they are current, and ``run``/``known_at`` read through another connection:
  the next exchange of a pipelined pull is handled in it while ``receive`` stores through this
  view's connection in a worker thread.  It records the entries it was asked for, so the caller
  can check afterwards that what was stored is what they assumed.

The incremental path relies on the receive function changing ``records``, ``forks`` and
``declined`` only for the origins of the records it is given and those its budget gate
reports as ``touched`` (evicted, declined, or no longer declined).  Code that removes or rewrites rows through
this view's connection otherwise must call ``invalidate``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from neverest.config import Config
from neverest.gossip.codec import HASH_BYTES, Digest, Entry
from neverest.gossip.core import Run, record_cost, record_digest, seq_hash
from neverest.gossip.ranges import RangeIndex
from neverest.memory import holdings
from neverest.memory.queries import budget
from neverest.memory.received import ReceiveResult
from neverest.memory.store import Store

if TYPE_CHECKING:  # the receive path is loaded by the first records applied (``receive``)
    from neverest.memory.meaning import MeaningIndex
    from neverest.memory.receive import Lookahead


class Received(NamedTuple):
    """What ``receive`` did, and what ``refresh`` needs to bring the cached entries up to date."""

    result: ReceiveResult
    origins: frozenset[str]  # whose entries it may have changed (records stored, the budget's evictions...)
    before: tuple[int, int] | None  # data_version before and after it: did anything else commit meanwhile?
    after: tuple[int, int] | None


class SqliteView:
    def __init__(self, store: Store, *, own_origin: str, config: Config) -> None:
        self.store, self.own_origin, self.config = store, own_origin, config
        self._entries: dict[str, Entry] = {}
        self._index = RangeIndex()
        self._digest: Digest | None = None  # made from _entries when revision 1 asks for it
        self._version: tuple[int, int] | None = None
        # Inside ``pinned``: the thread that pinned, and the connection run and known_at read through in it.
        self._pinned: tuple[int, Store] | None = None
        self._read: dict[str, Entry | None] = {}  # inside ``pinned``: the entries asked for
        # Inside ``keeping_meaning``: the last receive's meaning index, and data_version when it was current.
        self._meaning: tuple[tuple[int, int], MeaningIndex] | None = None
        self._keepers = 0

    def invalidate(self) -> None:
        """Forget the cached entries: the next read rebuilds them from the database."""
        self._version = None

    def fresh(self) -> bool:
        """Whether the cached entries are those of the database now (nothing committed since they
        were read): the in-sync exchange then needs no other read (gossip/service.py answers it on
        the event loop instead of a trip to a worker thread).  One PRAGMA; in WAL mode it waits for
        no writer."""
        return self._version is not None and self.store.data_version() == self._version

    def _current(self) -> None:
        if self._pinned_here() is not None:  # this view's connection is another thread's meanwhile
            return
        version = self.store.data_version()
        if version == self._version:
            return
        db = self.store.db
        entries: dict[str, Entry] = {}
        forked: dict[str, set[bytes]] = {}
        # The heads' read passes over every record's index entry once (it left 2.2 MB of page cache at
        # 10^5 records), and this connection lives as long as the gossip service: a small cache meanwhile.
        with self.store.passing_over():
            for head in holdings.heads(db):
                digest = head.digest if head.digest is not None else record_digest(holdings.raw_of(db, head.id)).hex()
                entries[head.origin] = (head.seq, bytes.fromhex(digest))
            for origin, declined in budget.declined(db).items():
                if declined.seq > entries.get(origin, (0, b""))[0]:
                    entries[origin] = (declined.seq, bytes.fromhex(declined.digest))
            for origin, seq, other in holdings.fork_evidence(db):
                if entries.get(origin, (0, b""))[0] == seq:
                    forked.setdefault(origin, {entries[origin][1]}).add(record_digest(other))
        for origin, digests in forked.items():
            entries[origin] = (entries[origin][0], seq_hash(digests))
        self._entries = {o: (seq, h[:HASH_BYTES]) for o, (seq, h) in entries.items()}
        self._index = RangeIndex.from_digest(self._entries)
        self._digest = None
        self._version = version

    def digest(self) -> Digest:
        self._current()
        if self._digest is None:
            self._digest = Digest(self._entries)
        return self._digest

    def entry(self, origin: str) -> Entry | None:
        self._current()
        entry = self._entries.get(origin)
        if self._pinned_here() is not None:
            self._read.setdefault(origin, entry)
        return entry

    def index(self) -> RangeIndex:
        self._current()
        return self._index

    @contextmanager
    def ahead(self, heads: Mapping[str, Entry]) -> Iterator[None]:
        """Show ``heads`` (an origin's entry once records not yet applied are) where they are ahead of
        what is held, for the calls made inside; what is held is shown again after.  Nothing may be
        written through this view's connection inside."""
        if not heads:  # nothing to show (the common case): spare the two PRAGMA reads
            yield
            return
        self._current()
        version = self._version
        saved: dict[str, Entry | None] = {}
        for origin, entry in heads.items():
            held = self._entries.get(origin)
            if held is None or entry[0] > held[0]:
                saved[origin] = held
                self._entries[origin] = entry
                self._index.set(origin, entry)
        if saved:
            self._digest = None
        try:
            yield
        finally:
            if self._pinned_here() is None and self.store.data_version() != version:  # rebuilt or changed: reread
                self._version = None
            else:
                for origin, held in saved.items():
                    if held is None:
                        del self._entries[origin]
                    else:
                        self._entries[origin] = held
                    self._index.set(origin, held)
                if saved:
                    self._digest = None

    @contextmanager
    def pinned(self, reader: Store) -> Iterator[dict[str, Entry | None]]:
        """The cached entries as they are, for the calls made inside, while another thread stores through
        this view's connection (``receive``); ``run`` and ``known_at`` read through ``reader``, a connection
        of their own (WAL: what is committed).  Yields the entries asked for inside, as they were shown,
        filled in as they are asked.  Nothing may be applied through this view inside, and ``refresh``
        must not run meanwhile: the caller keeps the two apart (gossip/service.py runs both on the event
        loop)."""
        if self._pinned is not None:
            raise RuntimeError("already pinned")
        self._pinned, self._read = (threading.get_ident(), reader), {}
        try:
            yield self._read
        finally:
            self._pinned = None

    def _pinned_here(self) -> Store | None:
        """The reader connection when this thread pinned the view (``pinned``); None elsewhere: the
        thread that stores meanwhile (``receive``) uses the view as ever."""
        pinned = self._pinned
        return pinned[1] if pinned is not None and pinned[0] == threading.get_ident() else None

    def _reader(self) -> Store:
        reader = self._pinned_here()
        return reader if reader is not None else self.store

    def known_at(self, origin: str, seq: int) -> list[bytes]:
        return holdings.known_at(self._reader().db, origin, seq)

    def run(self, origin: str, after: int, *, budget_bytes: int, max_records: int) -> Run:
        out: list[bytes] = []
        rows = holdings.run_after(self._reader().db, origin, after)
        try:
            for seq, raw in rows:
                if seq != after + len(out) + 1:
                    return Run(out, False)  # a hole in what this memory holds: nothing more to send from here
                budget_bytes -= record_cost(raw)
                if budget_bytes < 0 or len(out) == max_records:
                    return Run(out, True)
                out.append(raw)
            return Run(out, False)
        finally:
            rows.close()

    def apply(self, records: Sequence[bytes], *, source: str, now: datetime,
              decoded: Sequence[Any] | None = None) -> ReceiveResult:
        received = self.receive(records, source=source, now=now, decoded=decoded)
        self.refresh(received)
        return received.result

    def receive(self, records: Sequence[bytes], *, source: str, now: datetime,
                decoded: Sequence[Any] | None = None, verified_ahead: Lookahead | None = None,
                lookahead: Callable[[], Lookahead | None] | None = None) -> Received:
        """``apply`` without bringing the cached entries up to date (``refresh`` does): it touches only
        the database, so the cache may be read meanwhile, inside ``pinned``.  ``verified_ahead`` and
        ``lookahead``: the records verified ahead, and where the next ones are (receive.Lookahead)."""
        if self._pinned_here() is not None:
            raise RuntimeError("records applied through a view pinned by this thread")
        if not records:
            return Received(ReceiveResult(), frozenset(), None, None)
        # The receive path is loaded by the first records applied: an idle daemon applies none.
        from neverest.memory.receive import Receiver

        before = self.store.data_version()
        kept, self._meaning = self._meaning, None
        with Receiver(self.store, own_origin=self.own_origin, config=self.config, now=now, lookahead=lookahead,
                      index=kept[1] if kept is not None and kept[0] == before else None) as receiver:
            result = receiver.receive(records, source=source, decoded=decoded, verified_ahead=verified_ahead)
        after = self.store.data_version()
        # Kept only if no other connection committed meanwhile (the first half: its lessons may have changed
        # under the index) and the index holds what a new one would read.
        if self._keepers and after[0] == before[0] and receiver.meaning_index.current():
            self._meaning = after, receiver.meaning_index
        return Received(result, frozenset(receiver.origins | receiver.gate.touched), before, after)

    @contextmanager
    def keeping_meaning(self) -> Iterator[None]:
        """A context in which each ``receive`` hands its meaning index (memory/meaning.py) to the next, when
        nothing else wrote in between: a pull in several answers reads the held lessons' vectors once, and
        compares the lessons it adds by their subject words (a pull of 20 000 lessons into an empty store
        read them 9 times and compared each new one with every lesson of the answers before).  Kept for
        the context only: the index of a large store is tens of MB, which an idle daemon does not hold."""
        self._keepers += 1
        try:
            yield
        finally:
            self._keepers -= 1
            if not self._keepers:
                self._meaning = None

    def refresh(self, received: Received) -> None:
        """Bring the cached entries up to date after ``receive``."""
        before, after = received.before, received.after
        if before is None or after is None:
            return
        # PRAGMA data_version (the first half) moves only when another connection commits: if it
        # did not, the only change since the cache was current is the records just applied, and
        # the origins the storage budget evicted or declined (admission.py).
        if before == self._version and after[0] == before[0]:
            for origin in received.origins:
                self._reread(origin)
            self._version = after

    def unchanged(self, before: tuple[int, int], after: tuple[int, int]) -> None:
        """Writes through this view's connection between ``before`` and ``after`` (``Store.data_version``)
        changed no record, fork or declined head (the peer tables, refusal counts): if the cached entries
        were current before them, they are current after, and the next read does not rebuild them."""
        if before == self._version and after[0] == before[0]:
            self._version = after
        if self._meaning is not None and self._meaning[0] == before and after[0] == before[0]:
            self._meaning = after, self._meaning[1]  # no lesson written

    def _reread(self, origin: str) -> None:
        db = self.store.db
        seq = holdings.max_seq(db, origin)
        entry = None
        if seq:
            entry = (seq, seq_hash({record_digest(r) for r in holdings.known_at(db, origin, seq)}))
        declined = budget.declined_head(db, origin)
        if declined is not None and declined.seq > (entry or (0, b""))[0]:
            entry = (declined.seq, bytes.fromhex(declined.digest)[:HASH_BYTES])
        if entry == self._entries.get(origin):
            return
        if entry is None:
            del self._entries[origin]
        else:
            self._entries[origin] = entry
        self._index.set(origin, entry)
        self._digest = None
