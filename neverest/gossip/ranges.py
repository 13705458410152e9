"""Fingerprints of ranges of a digest, kept up to date entry by entry (for reconciliation).

Range-based set reconciliation (Meyer's negentropy, after Minsky and Trachtenberg) compares
two sets by the fingerprints of ranges of them, and splits only the ranges whose
fingerprints differ.  Here the set is a memory's digest (codec.Digest: origin → (seq,
hash)) and the ranges are **bit prefixes of the origin**: a range is ``(bits, prefix)``,
the origins whose top ``bits`` bits equal ``prefix`` (0 ≤ bits ≤ 64, prefix < 2^bits;
``(0, 0)`` is everything).  Origins are hashes of keys, so the prefixes split them evenly,
and two memories name the same ranges without agreeing on any boundary.

- an **item hash** is BLAKE2b-128(``ITEM_DOMAIN`` ‖ origin (8) ‖ seq (8, big-endian) ‖
  hash (8)), read as a big-endian integer;
- a range's **fingerprint** is BLAKE2b-128(``RANGE_DOMAIN`` ‖ (sum of its item hashes mod
  2^128, 16 bytes big-endian) ‖ count (8, big-endian)), or 16 zero bytes for an empty range.

A sum is what makes the index incremental: changing one entry subtracts its old item hash
and adds the new one, in the bucket that holds it and in each level above.  The hash over
the sum and count keeps a fingerprint from revealing the sum (negentropy does the same
with SHA-256).

``RangeIndex`` keeps 4 096 buckets by the top 12 bits of the origin, each with its sum,
count and entries, and 64 buckets by the top 6 bits above them: a range of at most 12
bits is a sum of at most 64 bucket totals, a deeper one a scan of one bucket (at 10^6
origins, about 250 entries).  Buckets are made when first used, so an index of a few
origins costs a few objects.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Final

from neverest.gossip.codec import FINGERPRINT_BYTES, Entry

ITEM_DOMAIN: Final = b"neverest-range-item-v1\x00"
RANGE_DOMAIN: Final = b"neverest-range-v1\x00"
EMPTY: Final = bytes(FINGERPRINT_BYTES)
ORIGIN_BITS: Final = 64
_MOD: Final = 1 << 128
_LOW_BITS: Final = 12  # the buckets that hold entries
_TOP_BITS: Final = 6  # the level of bucket totals above them


def item_hash(origin: str, entry: Entry) -> int:
    seq, short = entry
    data = ITEM_DOMAIN + bytes.fromhex(origin) + seq.to_bytes(8, "big") + short
    return int.from_bytes(hashlib.blake2b(data, digest_size=FINGERPRINT_BYTES).digest(), "big")


def fingerprint_of(total: int, count: int) -> bytes:
    """The fingerprint of a range whose item hashes sum to ``total`` over ``count`` items."""
    if count == 0:
        return EMPTY
    return hashlib.blake2b(RANGE_DOMAIN + (total % _MOD).to_bytes(16, "big") + count.to_bytes(8, "big"),
                           digest_size=FINGERPRINT_BYTES).digest()


def check_range(bits: int, prefix: int) -> None:
    if not 0 <= bits <= ORIGIN_BITS or not 0 <= prefix < (1 << bits):
        raise ValueError(f"({bits}, {prefix}) is not a range of {ORIGIN_BITS}-bit origins")


def contains(bits: int, prefix: int, origin: str) -> bool:
    return bits == 0 or int(origin, 16) >> (ORIGIN_BITS - bits) == prefix


class _Bucket:
    __slots__ = ("count", "entries", "total")

    def __init__(self) -> None:
        self.total = 0
        self.count = 0
        self.entries: dict[str, tuple[Entry, int]] = {}  # origin → (entry, item hash)


class RangeIndex:
    """A digest's entries with the sum and count of every prefix range, updated per entry."""

    def __init__(self) -> None:
        self._low: dict[int, _Bucket] = {}
        self._top: dict[int, list[int]] = {}  # top-6-bit prefix → [sum, count]
        self._total = 0
        self._count = 0

    @classmethod
    def from_digest(cls, digest: Mapping[str, Entry]) -> RangeIndex:
        index = cls()
        for origin, entry in digest.items():
            index.set(origin, entry)
        return index

    def __len__(self) -> int:
        return self._count

    @property
    def root(self) -> bytes:
        """The fingerprint of the whole set (the range ``(0, 0)``)."""
        return fingerprint_of(self._total, self._count)

    def get(self, origin: str) -> Entry | None:
        bucket = self._low.get(int(origin[:3], 16))
        held = None if bucket is None else bucket.entries.get(origin)
        return None if held is None else held[0]

    def set(self, origin: str, entry: Entry | None) -> None:
        """Put, replace (``entry``) or remove (None) one origin's entry."""
        low = int(origin[:3], 16)
        bucket = self._low.get(low)
        if bucket is None:
            if entry is None:
                return
            bucket = self._low[low] = _Bucket()
        delta_sum, delta_count = 0, 0
        old = bucket.entries.pop(origin, None)
        if old is not None:
            delta_sum -= old[1]
            delta_count -= 1
        if entry is not None:
            h = item_hash(origin, entry)
            bucket.entries[origin] = (entry, h)
            delta_sum += h
            delta_count += 1
        if delta_count == 0 and delta_sum == 0:
            return
        bucket.total = (bucket.total + delta_sum) % _MOD
        bucket.count += delta_count
        top = self._top.setdefault(low >> (_LOW_BITS - _TOP_BITS), [0, 0])
        top[0] = (top[0] + delta_sum) % _MOD
        top[1] += delta_count
        self._total = (self._total + delta_sum) % _MOD
        self._count += delta_count
        if bucket.count == 0:
            del self._low[low]

    # -- ranges ----------------------------------------------------------------------------

    def _sum_count(self, bits: int, prefix: int) -> tuple[int, int]:
        if bits == 0:
            return self._total, self._count
        if bits <= _TOP_BITS:
            span = _TOP_BITS - bits
            tops = (self._top.get(p) for p in range(prefix << span, (prefix + 1) << span))
            pairs = [t for t in tops if t is not None]
            return sum(t[0] for t in pairs), sum(t[1] for t in pairs)
        if bits <= _LOW_BITS:
            span = _LOW_BITS - bits
            lows = (self._low.get(p) for p in range(prefix << span, (prefix + 1) << span))
            buckets = [b for b in lows if b is not None]
            return sum(b.total for b in buckets), sum(b.count for b in buckets)
        total, count = 0, 0
        for _, (_, h) in self._scan(bits, prefix):
            total += h
            count += 1
        return total, count

    def _buckets_under(self, bits: int, prefix: int) -> Iterable[_Bucket]:
        if bits >= _LOW_BITS:
            bucket = self._low.get(prefix >> (bits - _LOW_BITS))
            return () if bucket is None else (bucket,)
        span = _LOW_BITS - bits
        if self._count < (1 << span):  # fewer entries than buckets to look at: go by what exists
            return [b for low, b in self._low.items() if low >> span == prefix]
        lows = (self._low.get(p) for p in range(prefix << span, (prefix + 1) << span))
        return [b for b in lows if b is not None]

    def _scan(self, bits: int, prefix: int) -> Iterable[tuple[str, tuple[Entry, int]]]:
        shift = ORIGIN_BITS - bits
        for bucket in self._buckets_under(bits, prefix):
            if bits <= _LOW_BITS:
                yield from bucket.entries.items()
            else:
                yield from ((o, held) for o, held in bucket.entries.items() if int(o, 16) >> shift == prefix)

    def count(self, bits: int, prefix: int) -> int:
        return self._sum_count(bits, prefix)[1]

    def fingerprint(self, bits: int, prefix: int) -> bytes:
        return fingerprint_of(*self._sum_count(bits, prefix))

    def children(self, bits: int, prefix: int, b: int) -> list[tuple[bytes, int]]:
        """(fingerprint, count) of the 2^b ranges ``(bits + b, prefix · 2^b + i)``, in order."""
        return [(fingerprint_of(total, count), count) for total, count in self.child_sums(bits, prefix, b)]

    def child_sums(self, bits: int, prefix: int, b: int) -> list[tuple[int, int]]:
        """(sum of item hashes, count) of the 2^b ranges ``(bits + b, prefix · 2^b + i)``, in order."""
        if bits + b <= _LOW_BITS:
            return [self._sum_count(bits + b, (prefix << b) | i) for i in range(1 << b)]
        # One pass over the entries under the range, by child.
        sums, counts = [0] * (1 << b), [0] * (1 << b)
        shift, mask = ORIGIN_BITS - bits - b, (1 << b) - 1
        for origin, (_, h) in self._scan(bits, prefix):
            i = (int(origin, 16) >> shift) & mask
            sums[i] += h
            counts[i] += 1
        return list(zip(sums, counts, strict=True))

    def items(self, bits: int, prefix: int) -> list[tuple[str, Entry]]:
        """The entries in the range, sorted by origin."""
        return sorted((origin, held[0]) for origin, held in self._scan(bits, prefix))
