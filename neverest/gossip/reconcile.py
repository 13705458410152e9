"""Revision 2 of the exchange: range-based set reconciliation of two digests (negentropy's protocol).

Two memories that differ by a few records should not send each other their whole digests.
They compare fingerprints of ranges of their digests instead (ranges.py: bit prefixes of the
origin, a sum of item hashes per range), and split only the ranges that differ, until the
ranges are small enough to list: then each side sends the records the other lacks in them,
exactly as a delta does (core.delta: seq order, no gap, fork witnesses, a byte budget)::

    initiator                                        responder
    SYNC {f: root fingerprint, w: 2}          ──▶
                                              ◀──  IN_SYNC                       (same root: done)
                                              ◀──  RECON {n: [root node]}
    RECON {n: nodes for the ranges that differ} ──▶
                                              ◀──  RECON {n: ..., r, e, x}       ... until a message
                                                                                  carries only records

A **node** is either a *split* ``[bits, prefix, b, fingerprints]`` (the range's 2^b children,
the first 8 bytes of each child's fingerprint) or *items* ``[bits, prefix, entries]`` (the
sender's digest entries in that range).  Receiving them:

- a split: for each child whose fingerprint differs from this memory's, a node for it:
  items when this memory holds at most ``RANGE_ITEMS`` entries there, else a split
  (``split_bits`` says into how many children);
- items: the records the sender lacks in that range (a delta against the entries it
  listed), and ``"e"``: this memory's entries for the origins it listed where this memory
  is behind or holds another record at the same seq, and ``"x"``: the origins it listed
  that this memory holds nothing of: what the sender needs to send records back;
- ``"e"``/``"x"``: the records the sender lacks of those origins, and nothing more.

Whoever receives nodes, ``"e"`` or ``"x"`` answers; the exchange ends with the first message
that carries only records (or nothing).  Nodes only go deeper (a reply names children of
the splits it answers), so two honest memories finish in a few round trips: 1 difference
among 10^4 or 10^5 origins in 3, among 10^6 in 4 (benchmarks/bench_reconcile.py).

Revision 3 (``codec.COMPACT``, issue 26) is the same exchange made smaller: child
fingerprints of 4 bytes (``width``; a split's own width is read from its length, so both
are answered), envelopes without the origins once both sides said they speak it (core.py),
and splits aiming at children of a quarter of ``RANGE_ITEMS`` (``node_for``).

A SYNC with a small digest inline (``"d"``, ≤ 16 origins) keeps ``"f"`` the digest's own
fingerprint, so that a revision-1 responder reads it as before; a revision-2 responder
takes the inline digest as an items node for the whole range.

**Bounds.**  The codec refuses a message with more than ``MAX_NODES`` nodes or
``MAX_CHILDREN`` child fingerprints, ranges out of bounds, overlapping or out of order,
and entries outside their node's range.  The initiator also refuses a reply naming a range
it did not ask about (not a child of one of its splits) or entries of origins it did not
list, and gives up with ``no-convergence`` after ``MAX_ROUND_TRIPS``.  What this memory
sends is cut to the same bounds (``"m"``: more to do; the next exchange finds the rest).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from neverest.gossip.codec import (
    CHILD_FP_BYTES,
    MAX_CHILDREN,
    MAX_NODES,
    MAX_SPLIT_BITS,
    Digest,
    Entry,
    Items,
    Node,
    ProtocolError,
    Recon,
    Split,
)
from neverest.gossip.ranges import ORIGIN_BITS, RangeIndex, fingerprint_of

# A range of at most 48 entries goes as items (about 20 bytes each): listing it costs about
# what one more split level would, and saves the round trip.
RANGE_ITEMS: Final = 48
# Splits aim at children of half that (24), so that the children of an even split stay
# under RANGE_ITEMS and go as items at the next step (Poisson(24) exceeds 48 with
# probability under 1e-4).
# Honest memories need 3 or 4 round trips (the module docstring); twice that is a peer
# that does not converge.
MAX_ROUND_TRIPS: Final = 8
# Entries a message lists (items, "e", "x"): about 1.6 MiB at most, next to 1 MiB of records.
MAX_SENT_ENTRIES: Final = 65_536

NOTHING: Final[Entry] = (0, b"")


class Ranged(Protocol):
    """What reconciliation reads of a memory (core.StoreView has it)."""

    def entry(self, origin: str) -> Entry | None:
        ...

    def index(self) -> RangeIndex:
        ...


def lags(seen: Entry, entry: Entry) -> bool:
    """Whether a memory at ``seen`` lacks records held up to ``entry``, or holds another record there."""
    return seen[0] < entry[0] or (seen[0] == entry[0] and seen[1] != entry[1])


def split_bits(count: int, items_at_most: int = RANGE_ITEMS, aim: int | None = None) -> int:
    """The b of a split of a range of ``count`` entries (1 ≤ b ≤ 6).

    Ranges of at most ``items_at_most`` entries go as items, so a range needs as many levels
    of splits as it takes, at 2^6 children each, to get there; the levels then share the
    bits evenly, each aiming at children of half ``items_at_most``.  Two levels of 2^5 cost
    half the fingerprint bytes of a level of 2^6 and one of 2^3 (at 10^4 entries: 384
    bytes instead of 576), in the same number of round trips.

    ``aim``: the children's size aimed at instead (revision 3 aims lower: its child fingerprints
    cost 4 bytes against about 18 an entry, so one more level of 2^5 children pays for itself by
    halving the entries listed; at 10^4 entries 2^5 · 2^5 children of 10 instead of 2^5 · 2^4 of 20)."""
    target = max(1, items_at_most // 2 if aim is None else aim)
    levels = 1
    while (items_at_most << (MAX_SPLIT_BITS * levels)) < count:
        levels += 1
    b = 1
    while b < MAX_SPLIT_BITS and (target << (b * levels)) < count:
        b += 1
    return b


def node_for(index: RangeIndex, bits: int, prefix: int, *, items_at_most: int = RANGE_ITEMS,
             width: int = CHILD_FP_BYTES) -> Node:
    """This memory's node for a range: its entries when few, else a split.

    A range whose entries crowd into one of its 64 sub-ranges is split in 64 whatever its
    count: origins are hashes, so crowding means keys ground to share a prefix, and each
    level of splits costs a round trip.  Splitting by 2^6 there keeps 49 origins ground to a
    48-bit prefix within MAX_ROUND_TRIPS (12 bits a round trip) where splits by their count
    (2^2) would take 12 round trips."""
    count = index.count(bits, prefix)
    if count <= items_at_most or bits == ORIGIN_BITS:
        return Items(bits, prefix, Digest(dict(index.items(bits, prefix))))
    top = min(MAX_SPLIT_BITS, ORIGIN_BITS - bits)
    fine = index.child_sums(bits, prefix, top)
    # Revision 3 (4-byte child fingerprints) aims at children of a quarter of items_at_most.
    aim = None if width == CHILD_FP_BYTES else max(1, items_at_most // 4)
    b = min(split_bits(count, items_at_most, aim), top)
    if max(c for _, c in fine) > max(items_at_most, count // 4):
        b = top
    group = 1 << (top - b)
    children = [fine[i:i + group] for i in range(0, len(fine), group)]
    fingerprints = (fingerprint_of(sum(t for t, _ in part), sum(c for _, c in part)) for part in children)
    return Split(bits, prefix, b, b"".join(fp[:width] for fp in fingerprints))


def _size(node: Node) -> tuple[int, int]:
    """(child fingerprints, entries) a node puts in a message."""
    return (1 << node.b, 0) if isinstance(node, Split) else (0, len(node.entries))


@dataclass
class Plan:
    """What to answer a RECON with: nodes, and the records to send as a delta of ``mine`` against
    ``theirs`` (core.delta), with the entries the peer needs to send records back."""

    nodes: list[Node] = field(default_factory=list)
    mine: dict[str, Entry] = field(default_factory=dict)  # origins the peer lacks records of
    theirs: dict[str, Entry] = field(default_factory=dict)  # the peer's entries for them
    entries: dict[str, Entry] = field(default_factory=dict)  # "e"
    lacking: list[str] = field(default_factory=list)  # "x"
    cut: bool = False  # some node or entry did not fit: the exchange leaves work for the next one

    @property
    def asks(self) -> bool:
        return bool(self.nodes or self.entries or self.lacking)


class _Room:
    """The bounds of one outgoing message."""

    def __init__(self) -> None:
        self.nodes, self.children, self.entries = 0, 0, 0

    def take(self, nodes: int, children: int, entries: int) -> bool:
        if (self.nodes + nodes > MAX_NODES or self.children + children > MAX_CHILDREN
                or self.entries + entries > MAX_SENT_ENTRIES):
            return False
        self.nodes += nodes
        self.children += children
        self.entries += entries
        return True


def plan(view: Ranged, got: Recon | Iterable[Node], *, items_at_most: int = RANGE_ITEMS,
         width: int = CHILD_FP_BYTES) -> Plan:
    """The answer to a RECON (or to nodes alone: an inline digest is an items node for everything);
    ``width``: bytes of each child fingerprint in the splits it sends (4 in revision 3)."""
    nodes = got.nodes if isinstance(got, Recon) else tuple(got)
    index = view.index()
    out, room = Plan(), _Room()
    for node in nodes:
        if isinstance(node, Split):
            _answer_split(index, node, out, room, items_at_most, width)
        else:
            _answer_items(view, index, node, out, room)
    if isinstance(got, Recon):
        # "e" and "x": the records they lack of origins they named; no entries back.
        for origin, entry in (got.entries or {}).items():
            have = view.entry(origin)
            if have is not None and lags(entry, have):
                out.mine[origin], out.theirs[origin] = have, entry
        for origin in got.lacking:
            have = view.entry(origin)
            if have is not None:
                out.mine[origin] = have
    return out


def _answer_split(index: RangeIndex, node: Split, out: Plan, room: _Room, items_at_most: int, width: int) -> None:
    theirs = node.width  # the sender's width, which may not be the one this memory answers in
    for i, (fingerprint, _) in enumerate(index.children(node.bits, node.prefix, node.b)):
        at = i * theirs
        if fingerprint[:theirs] == node.fingerprints[at:at + theirs]:
            continue
        child = node_for(index, *node.child(i), items_at_most=items_at_most, width=width)
        if room.take(1, *_size(child)):
            out.nodes.append(child)
        else:
            out.cut = True


def _answer_items(view: Ranged, index: RangeIndex, node: Items, out: Plan, room: _Room) -> None:
    theirs = node.entries
    for origin, entry in index.items(node.bits, node.prefix):
        seen = theirs.get(origin, NOTHING)
        if lags(seen, entry):
            out.mine[origin] = entry
            if origin in theirs:
                out.theirs[origin] = seen
    for origin, entry in theirs.items():
        have = view.entry(origin)
        if have is not None and not lags(have, entry):
            continue
        if not room.take(0, 0, 1):
            out.cut = True
            return
        if have is None:
            out.lacking.append(origin)
        else:
            out.entries[origin] = have


class Asked:
    """What the initiator asked about in its last request, to hold the reply to it."""

    def __init__(self) -> None:
        self.ranges: set[tuple[int, int]] = set()
        self.origins: set[str] = set()

    def note(self, nodes: Iterable[Node]) -> None:
        """Remember the nodes sent: a reply may answer each split's children and each listed origin."""
        self.ranges, self.origins = set(), set()
        for node in nodes:
            if isinstance(node, Split):
                self.ranges.update(node.child(i) for i in range(1 << node.b))
            else:
                self.origins.update(node.entries)

    def check(self, reply: Recon) -> None:
        """Raises ProtocolError("remote", "bad-range") for a reply about what was not asked."""
        for node in reply.nodes:
            if (node.bits, node.prefix) not in self.ranges:
                raise ProtocolError("remote", "bad-range",
                                    f"the reply names range ({node.bits}, {node.prefix}), which was not asked about")
        named: Mapping[str, Entry] = reply.entries or {}
        if any(o not in self.origins for o in named) or any(o not in self.origins for o in reply.lacking):
            raise ProtocolError("remote", "bad-range", "the reply names origins that were not listed to it")
