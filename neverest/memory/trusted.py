"""Who this memory trusts, and why (``neverestctl trust list``), and the origin ids its owner names.

An origin's support counts here for one of these reasons, each shown with the figure behind it:

- **named**: the owner named it, with ``neverestctl trust add`` (the store's ``trusted`` table, with
  the owner's note) or in config.toml's ``trust_allow``.  It counts under every policy; under
  ``earned`` it is also pre-trusted, so the origins it earned trust in are trusted here too.
- **earned** (``earned`` and ``vouched``): under ``earned``, this memory bore out first claims of
  it (the figure: how many, and its trust score); under ``vouched``, lessons it supported came
  true here (how many).
- **from a trusted memory** (``earned`` only: the one policy whose trust travels): it holds trust
  that reached it through origins trusted here, not from this memory's own tests (the figure: its
  score and the origin that passed it the most).
- **corroborates** (``earned``): not counted, but it bore out first claims of counted origins and
  nobody trusted contradicted it, so its support counts beside ``support_n`` counted claimants
  (commons.py, "Corroboration").
- **peer**: under ``peers``, every origin of the peer table counts.  Peers the owner added by hand
  (or in the config) are listed under every policy, since their records are never evicted for the
  storage budget (memory/admission.py); under the other policies their support counts only for
  one of the reasons above.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Final

import numpy as np

from neverest.commons import earned_standing
from neverest.config import Config
from neverest.memory.queries import budget as budget_queries
from neverest.memory.queries import status as status_queries
from neverest.memory.queries import trust as trust_queries
from neverest.memory.states import config_named, earned_facts, trust_config, trust_filter, vouched_facts

# A memory's origin id: the first 8 bytes of SHA-256 of its public key, in hex (records.origin_of).
ORIGIN: Final = re.compile(r"[0-9a-f]{16}")
NAMED, CONFIG, EARNED, THROUGH, CORROBORATES, PEER = (
    "named", "config", "earned", "from a trusted memory", "corroborates", "peer")


class OriginError(ValueError):
    """Not a memory's origin id."""


def parse_origin(text: str) -> str:
    """``text`` as an origin id (16 hex digits; upper case is taken as lower case)."""
    origin = text.strip().lower()
    if not ORIGIN.fullmatch(origin):
        raise OriginError(f"{text!r} is not an origin id: a memory's origin is 16 hex digits, like "
                          "3f9a0c1b2d4e5f60 (`neverestctl id` prints this memory's; `neverestctl show HASH` "
                          "the origins of a lesson's publishers and supporters)")
    return origin


@dataclass
class Entry:
    """One origin and why its support counts here (or, for a peer added by hand, why it is listed)."""

    origin: str
    reasons: list[str] = field(default_factory=list)
    counts: bool = False  # its support counts as support here
    corroborates: bool = False  # its support counts beside support_n counted claimants (commons.py)
    note: str = ""  # the owner's, for an origin named with trust add
    added: str | None = None  # when it was named with trust add
    trust: float | None = None  # its score under ``earned``
    first_claims: int = 0  # ``earned``: its first claims this memory bore out; ``vouched``: lessons verified here
    borne: int = 0  # lessons first claimed by counted origins that it bore out
    via: str | None = None  # ``earned``: the trusted origin that passed it the most trust

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def listing(db: sqlite3.Connection, config: Config, own_origin: str) -> list[Entry]:
    """Every origin this memory names, counts or takes as corroborating, and the peers added by hand,
    named ones first, then by reason and by trust."""
    entries: dict[str, Entry] = {}

    def entry(origin: str) -> Entry:
        return entries.setdefault(origin, Entry(origin))

    for row in trust_queries.named(db):
        e = entry(row.origin)
        e.reasons.append(NAMED)
        e.note, e.added, e.counts = row.note, row.added, True
    for origin in sorted(config_named(config)):
        e = entry(origin)
        e.reasons.append(CONFIG)
        e.counts = True
    if config.trust == "earned":
        _earned(db, config, own_origin, entry)
    elif config.trust == "vouched":
        counts = trust_filter(db, config, own_origin)
        verified, _, _ = vouched_facts(db)
        for origin, n in sorted(verified.items()):
            if origin != own_origin and counts(origin) and origin not in entries:
                e = entry(origin)
                e.reasons.append(EARNED)
                e.counts, e.first_claims = True, n
    elif config.trust == "peers":
        for origin in sorted(status_queries.known_peer_origins(db) - {own_origin}):
            e = entry(origin)
            e.counts = True
            if PEER not in e.reasons:
                e.reasons.append(PEER)
    for origin in sorted(budget_queries.chosen_peer_origins(db) - {own_origin}):
        e = entry(origin)
        if PEER not in e.reasons:
            e.reasons.append(PEER)
        e.counts = e.counts or config.trust == "any"
    order = {r: k for k, r in enumerate((NAMED, CONFIG, EARNED, THROUGH, CORROBORATES, PEER))}
    return sorted(entries.values(), key=lambda e: (order[e.reasons[0]], -(e.trust or 0.0), -e.borne, e.origin))


def _earned(db: sqlite3.Connection, config: Config, own_origin: str, entry: Callable[[str], Entry]) -> None:
    named = trust_queries.named_origins(db) | config_named(config)
    evidence, result = earned_standing(earned_facts(db, own_origin), own=own_origin, config=trust_config(config),
                                       allowed=named)
    trust, direct, borne = result.trust[:, 0], result.direct[:, 0], result.borne[:, 0]
    counted, corroborating = result.counted[:, 0], result.corroborating[:, 0]
    holding = np.flatnonzero(trust > 0)
    credit, _ = evidence.submatrices(holding)
    for k in np.flatnonzero(counted | corroborating).tolist():
        origin = evidence.origins[k]
        if origin == own_origin:
            continue
        e = entry(origin)
        e.counts, e.corroborates = bool(counted[k]), bool(corroborating[k])
        e.trust = float(trust[k]) if trust[k] > 0 else None
        e.first_claims, e.borne = int(direct[k]), int(borne[k])
        if origin in named:
            continue
        if corroborating[k]:
            e.reasons.append(CORROBORATES)
        elif direct[k] > 0:
            e.reasons.append(EARNED)
        else:
            e.reasons.append(THROUGH)
            at = int(np.searchsorted(holding, k))
            out = credit.sum(axis=1)
            # What each origin holding trust passed it at a step: its trust, spread over those it credits.
            passed = credit[:, at] / np.where(out > 0, out, 1.0) * trust[holding]
            passed[holding == k] = 0.0
            if passed.max(initial=0.0) > 0:
                e.via = evidence.origins[int(holding[int(np.argmax(passed))])]
