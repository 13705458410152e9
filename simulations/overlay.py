"""Memories that share what they all hold: a compact ``StoreView`` for networks of 10^4 agents.

Ten thousand memories that each hold ten thousand origins are 10^8 digest entries: as
``RangeIndex`` objects (about 137 bytes an entry) or SQLite stores, tens of
gigabytes.  But in a network that gossips, almost every memory holds almost the same
thing: what they differ by is the few lessons still spreading.  So the views here share
one ``Library``:

- every record of the run, signed once (real Ed25519 records, ``records.sign_lesson``), by
  (origin, seq), with what the views need of it computed once: its origin, seq, short
  hash (``core.seq_hash`` of one record) and item hash (``ranges.item_hash``);
- the **base**: the entries every memory holds (the history published before the run),
  one real ``RangeIndex`` for all.

and each ``OverlayView`` keeps only how its memory differs from the base: an
``OverlayIndex``, a ``RangeIndex`` whose sums and counts are the base's plus the overlay's
changes, per bucket, so that fingerprints, counts, children and items are exactly those
of a ``RangeIndex`` of the memory's whole digest (tests/test_sim_load.py checks them
against one built from scratch).  The gossip core reads the view through the ``StoreView``
protocol and cannot tell the difference.

What this view does not do, said plainly: ``apply`` does not verify signatures (as
``loopback.MemoryView`` does not): it recognises the records by their bytes, which must be
records of the library (anything else is refused as ``unknown``), and stores each (origin,
seq) once, in seq order.  There are no forks in these runs.  Verification is the receive
path's cost, measured by benchmarks/bench_receive.py, not what the load experiment
measures.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Final, NamedTuple

from neverest.gossip.codec import Digest, Entry
from neverest.gossip.core import Run, record_cost, record_digest, seq_hash
from neverest.gossip.ranges import ORIGIN_BITS, RangeIndex, fingerprint_of, item_hash
from neverest.memory.receive import ReceiveResult

_MOD: Final = 1 << 128
_LOW_BITS: Final = 12  # ranges.py's buckets: by the top 12 bits of the origin
_TOP_BITS: Final = 6  # and their totals by the top 6

Held = tuple[Entry, int]  # (entry, item hash): what a RangeIndex bucket keeps per origin


class Known(NamedTuple):
    """What the views need of one record, computed once."""

    origin: str
    seq: int
    held: Held
    lesson: int  # its number among the records added (not settled): 0, 1, ...; -1 for the base


class Library:
    """The records of a run and the base every memory holds (see the module docstring)."""

    def __init__(self) -> None:
        self.raw: dict[tuple[str, int], bytes] = {}
        self.known: dict[bytes, Known] = {}
        self.lessons: list[tuple[str, int]] = []  # lesson number → (origin, seq), for records added
        self.base_index = RangeIndex()
        self._base_lows: list[int] | None = None
        self._base_digest: Digest | None = None
        # (agent, lesson number) whenever a view accepts a record: how the experiment counts holders.
        self.on_accept: Callable[[int, int], None] | None = None

    def add(self, raw: bytes) -> Known:
        """A record of the run (JSON naming an origin and a seq), held by nobody yet."""
        return self._add(raw, len(self.lessons))

    def _add(self, raw: bytes, lesson: int) -> Known:
        obj = json.loads(raw)
        origin, seq = obj["origin"], obj["seq"]
        if (origin, seq) in self.raw:
            raise ValueError(f"the library already holds seq {seq} of {origin}")
        entry = (seq, seq_hash({record_digest(raw)}))
        known = Known(origin, seq, (entry, item_hash(origin, entry)), lesson)
        self.raw[origin, seq] = raw
        self.known[raw] = known
        if lesson >= 0:
            self.lessons.append((origin, seq))
        return known

    def settle(self, raw: bytes) -> None:
        """Make a record (the next seq of its origin) part of the base.  Only before views exist:
        they read the base index as it is."""
        if self.lessons:
            raise ValueError("settle the base before adding the run's records")
        known = self._add(raw, -1)
        have = self.base_index.get(known.origin)
        if known.seq != (have[0] if have else 0) + 1:
            raise ValueError("the base holds every origin's records from seq 1, without gaps")
        self.base_index.set(known.origin, known.held[0])

    @property
    def base_lows(self) -> list[int]:
        """The base index's buckets, sorted: one list for every view (4 096 at 10^4 origins)."""
        if self._base_lows is None:
            self._base_lows = sorted(self.base_index._low)
        return self._base_lows

    @property
    def base_digest(self) -> Digest:
        """The base as a digest, for revision 1: made once, not once per memory."""
        if self._base_digest is None:
            self._base_digest = Digest(dict(self.base_index.items(0, 0)))
        return self._base_digest


class OverlayIndex(RangeIndex):
    """A ``RangeIndex`` of a base index plus this memory's changes to it (entries only added or
    replaced: memories here forget nothing).  The parent's own buckets stay empty; it serves
    ``count``, ``fingerprint``, ``children``, ``child_sums`` and ``items`` through the
    ``_sum_count`` and ``_scan`` below."""

    def __init__(self, base: RangeIndex, base_lows: list[int] | None = None) -> None:
        super().__init__()
        self._base = base
        self._over: dict[int, dict[str, Held]] = {}  # low bucket → origin → (entry, item hash)
        self._dlow: dict[int, list[int]] = {}  # low bucket → [change of its sum, of its count]
        self._dtop: dict[int, list[int]] = {}  # the same by the top 6 bits
        self._dsum = 0
        self._dcount = 0
        self._over_lows: list[int] = []  # the keys of _over, sorted
        # The base does not change once views read it; views of one library share the list.
        self._base_lows = sorted(base._low) if base_lows is None else base_lows

    @property
    def changes(self) -> int:
        """Entries in which this memory differs from the base."""
        return sum(map(len, self._over.values()))

    def __len__(self) -> int:
        return len(self._base) + self._dcount

    @property
    def root(self) -> bytes:
        total, count = self._sum_count(0, 0)
        return fingerprint_of(total, count)

    def _held(self, origin: str, low: int) -> Held | None:
        over = self._over.get(low)
        if over is not None and origin in over:
            return over[origin]
        bucket = self._base._low.get(low)
        return None if bucket is None else bucket.entries.get(origin)

    def get(self, origin: str) -> Entry | None:
        held = self._held(origin, int(origin[:3], 16))
        return None if held is None else held[0]

    def set(self, origin: str, entry: Entry | None) -> None:
        if entry is None:
            raise ValueError("an overlay only adds or replaces entries")
        self.put(origin, (entry, item_hash(origin, entry)))

    def put(self, origin: str, held: Held) -> None:
        """Set an origin's entry with its item hash already known (``Known.held``)."""
        low = int(origin[:3], 16)
        old = self._held(origin, low)
        over = self._over.get(low)
        if over is None:
            over = self._over[low] = {}
            bisect.insort(self._over_lows, low)
        over[origin] = held
        dsum = held[1] - (old[1] if old is not None else 0)
        dcount = old is None
        for table, key in ((self._dlow, low), (self._dtop, low >> (_LOW_BITS - _TOP_BITS))):
            change = table.setdefault(key, [0, 0])
            change[0] = (change[0] + dsum) % _MOD
            change[1] += dcount
        self._dsum = (self._dsum + dsum) % _MOD
        self._dcount += dcount

    # -- what RangeIndex's range methods read -------------------------------------------------

    def _sum_count(self, bits: int, prefix: int) -> tuple[int, int]:
        if bits > _LOW_BITS:
            total, count = 0, 0
            for _, (_, h) in self._scan(bits, prefix):
                total += h
                count += 1
            return total, count
        total, count = self._base._sum_count(bits, prefix)
        if bits == 0:
            return total + self._dsum, count + self._dcount
        table, span = (self._dtop, _TOP_BITS - bits) if bits <= _TOP_BITS else (self._dlow, _LOW_BITS - bits)
        lo, hi = prefix << span, (prefix + 1) << span
        if len(table) < hi - lo:
            changes = [c for key, c in table.items() if lo <= key < hi]
        else:
            changes = [c for c in map(table.get, range(lo, hi)) if c is not None]
        return total + sum(c[0] for c in changes), count + sum(c[1] for c in changes)

    def child_sums(self, bits: int, prefix: int, b: int) -> list[tuple[int, int]]:
        if bits + b > _LOW_BITS:
            return super().child_sums(bits, prefix, b)  # one pass over _scan
        # The base's children, plus this memory's changes to them in one pass over its buckets.
        sums = [[total, count] for total, count in self._base.child_sums(bits, prefix, b)]
        table, level = (self._dtop, _TOP_BITS) if bits + b <= _TOP_BITS else (self._dlow, _LOW_BITS)
        span = level - bits
        lo, hi, shift = prefix << span, (prefix + 1) << span, level - bits - b
        keys = self._over_lows if table is self._dlow else sorted(table)
        for key in keys[bisect.bisect_left(keys, lo):bisect.bisect_left(keys, hi)]:
            change = table[key]
            child = sums[(key - lo) >> shift]
            child[0] += change[0]
            child[1] += change[1]
        return [(total, count) for total, count in sums]

    def _lows(self, bits: int, prefix: int) -> Iterable[int]:
        """The buckets under a range that the base or this memory holds entries in, in order."""
        if bits >= _LOW_BITS:
            return (prefix >> (bits - _LOW_BITS),)
        span = _LOW_BITS - bits
        lo, hi = prefix << span, (prefix + 1) << span
        base = self._base_lows[bisect.bisect_left(self._base_lows, lo):bisect.bisect_left(self._base_lows, hi)]
        over = self._over_lows[bisect.bisect_left(self._over_lows, lo):bisect.bisect_left(self._over_lows, hi)]
        return sorted({*base, *over}) if over else base

    def _scan(self, bits: int, prefix: int) -> Iterable[tuple[str, Held]]:
        lows = self._lows(bits, prefix)
        shift = ORIGIN_BITS - bits
        deep = bits > _LOW_BITS
        for low in lows:
            bucket = self._base._low.get(low)
            over = self._over.get(low)
            if bucket is None and over is None:
                continue
            merged: Iterable[tuple[str, Held]] = bucket.entries.items() if bucket is not None else ()
            if over is not None:
                merged = [*((o, h) for o, h in merged if o not in over), *over.items()]
            for origin, held in merged:
                if not deep or int(origin, 16) >> shift == prefix:
                    yield origin, held


class OverlayView:
    """Agent ``agent``'s memory: the library's base plus what it received (a ``core.StoreView``)."""

    def __init__(self, library: Library, agent: int) -> None:
        self._lib, self.agent = library, agent
        self._index = OverlayIndex(library.base_index, library.base_lows)
        self._digest: Digest | None = None  # made when revision 1 asks, kept until a change

    def hold(self, raw: bytes) -> bool:
        """Hold one record of the library (the next seq of its origin); False if already held."""
        known = self._lib.known[raw]
        have = self._index.get(known.origin)
        top = have[0] if have is not None else 0
        if known.seq <= top:
            return False
        if known.seq != top + 1:
            raise ValueError(f"seq {known.seq} of {known.origin} would leave a gap after {top}")
        self._index.put(known.origin, known.held)
        self._digest = None
        if self._lib.on_accept is not None and known.lesson >= 0:
            self._lib.on_accept(self.agent, known.lesson)
        return True

    @property
    def changes(self) -> int:
        """Entries in which this memory differs from the base (what it costs beyond the shared part)."""
        return self._index.changes

    def holds(self, origin: str, seq: int) -> bool:
        have = self._index.get(origin)
        return have is not None and have[0] >= seq

    # -- core.StoreView -------------------------------------------------------------------

    def digest(self) -> Digest:
        if self._digest is None:
            self._digest = (Digest(dict(self._index.items(0, 0))) if self._index.changes
                            else self._lib.base_digest)
        return self._digest

    def entry(self, origin: str) -> Entry | None:
        return self._index.get(origin)

    def index(self) -> RangeIndex:
        return self._index

    def known_at(self, origin: str, seq: int) -> list[bytes]:
        raw = self._lib.raw.get((origin, seq)) if self.holds(origin, seq) else None
        return [] if raw is None else [raw]

    def run(self, origin: str, after: int, *, budget_bytes: int, max_records: int) -> Run:
        have = self._index.get(origin)
        top = have[0] if have is not None else 0
        out: list[bytes] = []
        for seq in range(after + 1, top + 1):
            raw = self._lib.raw[origin, seq]
            budget_bytes -= record_cost(raw)
            if budget_bytes < 0 or len(out) == max_records:
                return Run(out, True)
            out.append(raw)
        return Run(out, False)

    def apply(self, records: Sequence[bytes], *, source: str, now: datetime) -> ReceiveResult:
        result = ReceiveResult()
        for raw in records:
            if raw not in self._lib.known:
                result.refused["unknown"] += 1  # not a record of this run: nothing here can check it
            elif self.hold(raw):
                result.accepted += 1
            else:
                result.duplicates += 1
        return result
