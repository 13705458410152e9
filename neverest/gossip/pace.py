"""How long a daemon waits between its gossip rounds: the full rate while anything moves, less when nothing does.

An in-sync exchange is cheap (one round trip, a few hundred bytes) but not free: over the HTTP
edge it costs a few milliseconds of CPU at each end, so a daemon that keeps its full rate
while every memory it meets already holds what it holds spends its CPU, and its peers', on
learning nothing.  Gossip systems that scale keep rumours fast and anti-entropy slow (Demers
et al.'s "epidemic algorithms"; memberlist sends nothing on a gossip tick that has nothing to
broadcast and runs its full-state push-pull only every 30 s).  The rule here is that shape:

- a round is *quiet* when the set this memory holds (the range index's root fingerprint) and
  the number of peers it can pick from are what they were after the previous round, and every
  exchange of the round that completed was in sync and moved no record.  Failed exchanges say
  nothing either way;
- after ``WARM_ROUNDS`` quiet rounds in a row the wait doubles each quiet round, from
  ``every_s`` up to ``quiet_every_s`` (never below ``every_s``: a long period stays as the
  owner set it);
- anything new — a round that was not quiet, records received from a peer that asked,
  the owner publishing — gives back ``every_s`` at once (``wake``), so a memory that has
  just learned something spreads it at the full rate, and a new record reaches every memory
  through the memories it reaches, which are all awake.

Pure: no clock of its own, no IO; the daemon (``services/gossip.py``) asks it for the next
wait and tells it what each round did.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

# Quiet rounds at the full rate before the waits start to grow.  One: a memory that receives something new
# passes it on at once anyway (services/gossip.py), and each memory that still finds a peer without it stays
# at the full rate; measured with 30 daemons beside Serf (docs/figures.md), 1 instead of 3 kept the time to
# all (0.49-0.54 s against 0.44-0.53 s, alternated) and cut the 10 s after an event by 30-50 % in CPU and
# 40 % in traffic.
WARM_ROUNDS: Final = 1


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one exchange of a round did, as far as pacing cares."""

    completed: bool  # it ran to the end (no error)
    in_sync: bool
    moved: int  # records sent plus records received


@dataclass(slots=True)
class Pace:
    every_s: float
    quiet_every_s: float
    quiet_rounds: int = 0
    _root: bytes | None = field(default=None, repr=False)

    def after_round(self, root: bytes, outcomes: Iterable[Outcome]) -> float:
        """Record a round (``root``: what it is compared by, e.g. the holdings' fingerprint after it);
        the wait before the next, in s."""
        quiet = root == self._root and all(o.in_sync and not o.moved for o in outcomes if o.completed)
        self._root = root
        self.quiet_rounds = self.quiet_rounds + 1 if quiet else 0
        return self.wait_s()

    def wake(self) -> None:
        """Something new arrived between rounds: back to the full rate."""
        self.quiet_rounds = 0

    def wait_s(self) -> float:
        """The wait before the next round, as the rounds so far decide it."""
        grown = self.quiet_rounds - WARM_ROUNDS + 1
        if grown <= 0:
            return self.every_s
        # The exponent is capped so that a long-quiet daemon never overflows a float.
        return max(self.every_s, min(self.every_s * 2.0 ** min(grown, 64), self.quiet_every_s))
