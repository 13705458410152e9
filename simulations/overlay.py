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
from typing import Any, Final, NamedTuple

from neverest.gossip.codec import Digest, Entry
from neverest.gossip.core import Run, record_cost, record_digest, seq_hash
from neverest.gossip.ranges import ORIGIN_BITS, RangeIndex, fingerprint_of, item_hash
from neverest.memory.receive import ReceiveResult

_MOD: Final = 1 << 128

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
        self.base_held: dict[str, Held] = {}  # origin → (entry, item hash) of the base, once views exist
        self._sorted: tuple[list[int], list[tuple[str, Entry]], list[tuple[str, Held]]] | None = None
        self._sums: dict[tuple[int, int], tuple[int, int]] = {}
        self._child_sums: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
        self._children: dict[tuple[int, int, int], list[tuple[bytes, int]]] = {}
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
        if self.lessons or self._sorted is not None:
            raise ValueError("settle the base before adding the run's records and making views")
        known = self._add(raw, -1)
        have = self.base_index.get(known.origin)
        if known.seq != (have[0] if have else 0) + 1:
            raise ValueError("the base holds every origin's records from seq 1, without gaps")
        self.base_index.set(known.origin, known.held[0])

    # -- the base's answers, computed once per range for every view (the base no longer changes
    # once views exist: settle refuses records after the run's own) -------------------------

    def _sorted_base(self) -> tuple[list[int], list[tuple[str, Entry]], list[tuple[str, Held]]]:
        if self._sorted is None:
            scanned = sorted(self.base_index._scan(0, 0))
            self._sorted = ([int(origin, 16) for origin, _ in scanned], [(o, held[0]) for o, held in scanned],
                            scanned)
            self.base_held = dict(scanned)
        return self._sorted

    def _span(self, bits: int, prefix: int) -> tuple[int, int]:
        keys = self._sorted_base()[0]
        shift = ORIGIN_BITS - bits
        return bisect.bisect_left(keys, prefix << shift), bisect.bisect_left(keys, (prefix + 1) << shift)

    def base_items(self, bits: int, prefix: int) -> list[tuple[str, Entry]]:
        """The base's entries in a range, sorted by origin (a slice of one sorted list)."""
        lo, hi = self._span(bits, prefix)
        return self._sorted_base()[1][lo:hi]

    def base_scan(self, bits: int, prefix: int) -> list[tuple[str, Held]]:
        lo, hi = self._span(bits, prefix)
        return self._sorted_base()[2][lo:hi]

    def base_sum_count(self, bits: int, prefix: int) -> tuple[int, int]:
        key = (bits, prefix)
        got = self._sums.get(key)
        if got is None:
            got = self._sums[key] = self.base_index._sum_count(bits, prefix)
        return got

    def base_child_sums(self, bits: int, prefix: int, b: int) -> list[tuple[int, int]]:
        key = (bits, prefix, b)
        got = self._child_sums.get(key)
        if got is None:
            got = self._child_sums[key] = self.base_index.child_sums(bits, prefix, b)
        return got

    def base_children(self, bits: int, prefix: int, b: int) -> list[tuple[bytes, int]]:
        key = (bits, prefix, b)
        got = self._children.get(key)
        if got is None:
            got = self._children[key] = self.base_index.children(bits, prefix, b)
        return got

    @property
    def base_digest(self) -> Digest:
        """The base as a digest, for revision 1: made once, not once per memory."""
        if self._base_digest is None:
            self._base_digest = Digest(dict(self.base_items(0, 0)))
        return self._base_digest


class OverlayIndex(RangeIndex):
    """A ``RangeIndex`` of a base index plus this memory's changes to it (entries only added or
    replaced: memories here forget nothing).  The parent's own buckets stay empty; every range
    method is answered from the library's cached answers for the base (``Library.base_*``: the
    base never changes once views exist, and every view asks the same ranges of it) corrected
    by this memory's changes, kept sorted by origin with their change of sum and count, so that
    the changes inside a range are one slice found by bisection."""

    def __init__(self, library: Library) -> None:
        super().__init__()
        self._lib = library
        self._base = library.base_index
        self.flat: dict[str, Held] = {}  # origin → (entry, item hash) where this memory differs
        self._keys: list[int] = []  # the changed origins as integers, sorted
        self._dsums: list[int] = []  # per changed origin (same order): its change of the sum
        self._dcounts: list[int] = []  # and of the count (1: an origin the base lacks)
        self._dsum = 0
        self._dcount = 0

    @property
    def changes(self) -> int:
        """Entries in which this memory differs from the base."""
        return len(self.flat)

    def __len__(self) -> int:
        return len(self._base) + self._dcount

    @property
    def root(self) -> bytes:
        total, count = self._sum_count(0, 0)
        return fingerprint_of(total, count)

    def _held(self, origin: str) -> Held | None:
        held = self.flat.get(origin)
        return held if held is not None else self._lib.base_held.get(origin)

    def get(self, origin: str) -> Entry | None:
        held = self._held(origin)
        return None if held is None else held[0]

    def set(self, origin: str, entry: Entry | None) -> None:
        if entry is None:
            raise ValueError("an overlay only adds or replaces entries")
        self.put(origin, (entry, item_hash(origin, entry)))

    def put(self, origin: str, held: Held) -> None:
        """Set an origin's entry with its item hash already known (``Known.held``)."""
        base = self._lib.base_held.get(origin)
        dsum = held[1] - (base[1] if base is not None else 0)
        dcount = int(base is None)
        key = int(origin, 16)
        at = bisect.bisect_left(self._keys, key)
        if origin in self.flat:  # replaced again: its change to the base is the new one
            self._dsum -= self._dsums[at]
            self._dcount -= self._dcounts[at]
            self._dsums[at], self._dcounts[at] = dsum, dcount
        else:
            self._keys.insert(at, key)
            self._dsums.insert(at, dsum)
            self._dcounts.insert(at, dcount)
        self.flat[origin] = held
        self._dsum = (self._dsum + dsum) % _MOD
        self._dcount += dcount

    # -- ranges ------------------------------------------------------------------------------

    def _slice(self, bits: int, prefix: int) -> tuple[int, int]:
        """The positions in ``_keys`` of this memory's changes inside a range."""
        shift = ORIGIN_BITS - bits
        keys = self._keys
        return bisect.bisect_left(keys, prefix << shift), bisect.bisect_left(keys, (prefix + 1) << shift)

    def _sum_count(self, bits: int, prefix: int) -> tuple[int, int]:
        total, count = self._lib.base_sum_count(bits, prefix)
        if bits == 0:
            return (total + self._dsum) % _MOD, count + self._dcount
        lo, hi = self._slice(bits, prefix)
        if lo == hi:
            return total, count
        return (total + sum(self._dsums[lo:hi])) % _MOD, count + sum(self._dcounts[lo:hi])

    def count(self, bits: int, prefix: int) -> int:
        return self._sum_count(bits, prefix)[1]

    def fingerprint(self, bits: int, prefix: int) -> bytes:
        return fingerprint_of(*self._sum_count(bits, prefix))

    def child_sums(self, bits: int, prefix: int, b: int) -> list[tuple[int, int]]:
        base = self._lib.base_child_sums(bits, prefix, b)
        lo, hi = self._slice(bits, prefix)
        if lo == hi:
            return list(base)
        sums = [[total, count] for total, count in base]
        shift, mask = ORIGIN_BITS - bits - b, (1 << b) - 1
        for at in range(lo, hi):
            child = sums[(self._keys[at] >> shift) & mask]
            child[0] += self._dsums[at]
            child[1] += self._dcounts[at]
        return [(total % _MOD, count) for total, count in sums]

    def children(self, bits: int, prefix: int, b: int) -> list[tuple[bytes, int]]:
        base = self._lib.base_children(bits, prefix, b)
        lo, hi = self._slice(bits, prefix)
        if lo == hi:
            return list(base)
        # Only the children holding a change need a new fingerprint.
        shift, mask = ORIGIN_BITS - bits - b, (1 << b) - 1
        touched = {(self._keys[at] >> shift) & mask for at in range(lo, hi)}
        sums = self.child_sums(bits, prefix, b)
        return [(fingerprint_of(*sums[i]), sums[i][1]) if i in touched else fc for i, fc in enumerate(base)]

    def items(self, bits: int, prefix: int) -> list[tuple[str, Entry]]:
        base = self._lib.base_items(bits, prefix)
        lo, hi = self._slice(bits, prefix)
        if lo == hi:
            return list(base)
        merged = dict(base)
        for at in range(lo, hi):
            origin = f"{self._keys[at]:016x}"
            merged[origin] = self.flat[origin][0]
        return sorted(merged.items())

    def _scan(self, bits: int, prefix: int) -> Iterable[tuple[str, Held]]:
        merged = dict(self._lib.base_scan(bits, prefix))
        lo, hi = self._slice(bits, prefix)
        for at in range(lo, hi):
            origin = f"{self._keys[at]:016x}"
            merged[origin] = self.flat[origin]
        return merged.items()


class OverlayView:
    """Agent ``agent``'s memory: the library's base plus what it received (a ``core.StoreView``)."""

    def __init__(self, library: Library, agent: int) -> None:
        self._lib, self.agent = library, agent
        library.base_items(0, 0)  # the base is final now: sort it once, for every view
        self._index = OverlayIndex(library)
        self._flat = self._index.flat
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
        held = self._flat.get(origin)
        if held is None:
            held = self._lib.base_held.get(origin)
        return None if held is None else held[0]

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

    def apply(self, records: Sequence[bytes], *, source: str, now: datetime,
              decoded: Sequence[Any] | None = None) -> ReceiveResult:
        result = ReceiveResult()
        for raw in records:
            if raw not in self._lib.known:
                result.refused["unknown"] += 1  # not a record of this run: nothing here can check it
            elif self.hold(raw):
                result.accepted += 1
            else:
                result.duplicates += 1
        return result
