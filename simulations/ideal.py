"""The ideal push-pull models the real gossip is measured against.

- ``same_contacts``: the contacts the simulation drew (``engine.Schedule``), each taken as
  a perfect exchange: instantaneous, never lost, and both sides leave holding the union of
  what they held.  The only differences left between it and the real run are the
  protocol's and the network's (latency, lost messages, budgets, failed exchanges), so
  ``rounds / ideal_rounds`` measures exactly what the protocol costs.
- ``synchronous``: the textbook model (Karp et al., "Randomized rumor spreading", 2000):
  in each round every agent contacts ``fanout`` others, and every informed agent informs
  its contacts and every agent that contacts it, all at once, from the state at the start
  of the round.  It takes about log3 N + O(log log N) rounds at fanout 1.  Daemons are not
  synchronised, so a lesson can cross two hops within one period in the real network and
  in ``same_contacts``: both can beat this model, which is reported for reference only.
"""

from __future__ import annotations

import math

import numpy as np

from simulations.engine import Schedule


def same_contacts(schedule: Schedule, first: int, *, max_rounds: int) -> list[int]:
    """How many agents hold what ``first`` held at the end of each round, over the schedule's
    contacts, until all do (or max_rounds): the rounds taken are the list's length."""
    held = [False] * schedule.n
    held[first] = True
    count = 1
    curve = []
    for r in range(max_rounds):
        for _, i, j in schedule.contacts(r):
            if held[i] != held[j]:
                held[i] = held[j] = True
                count += 1
        curve.append(count)
        if count == schedule.n:
            break
    return curve


def synchronous(n: int, fanout: int, seed: int, *, max_rounds: int = 1000) -> list[int]:
    """Informed agents after each round of the textbook synchronous push-pull model, until all are."""
    rng = np.random.default_rng([seed, 0x5EED])
    informed = np.zeros(n, dtype=bool)
    informed[0] = True
    curve = []
    for _ in range(max_rounds):
        before = informed.copy()
        for _ in range(fanout):
            partner = rng.integers(0, n - 1, size=n)
            partner += partner >= np.arange(n)  # uniform over the others
            # push: informed callers inform their partner; pull: callers of an informed partner learn.
            informed[partner[before]] = True
            informed |= before[partner]
        curve.append(int(informed.sum()))
        if curve[-1] == n:
            return curve
    raise RuntimeError(f"not converged in {max_rounds} rounds")


def log3(n: int) -> float:
    return math.log(n, 3)
