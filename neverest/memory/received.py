"""What receiving records did, in the words the receive function shares with its callers.

``ReceiveResult`` (the counts of one call to ``memory.receive.Receiver``) and ``POLICY_REFUSALS`` (the
refusals a relaying peer is not to blame for) live here rather than in ``memory/receive.py`` so that gossip
can name them without loading the receive path: its verifying workers' client, the storage budget, the
embedder, the scrubber and the lessons' queries (about 0.9 MB resident) are loaded by the first records an
exchange applies, and an idle daemon applies none (docs/figures.md).  ``memory.receive`` re-exports them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

from neverest.memory.holdings import REFUTE_FLOOD, REFUTE_PUBLISHER

UNSCRUBBED: Final = "unscrubbed"  # a lesson whose text holds a path, an address, a token... (scrub.scrub_check)
# Valid records refused by this memory's own rules, which the peer that relayed them cannot know.
POLICY_REFUSALS: Final = frozenset({"fork", REFUTE_PUBLISHER, REFUTE_FLOOD, UNSCRUBBED})


@dataclass
class ReceiveResult:
    accepted: int = 0
    duplicates: int = 0
    older: int = 0
    forks: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    candidates: int = 0
    corroborated: int = 0
    confirmed: int = 0
    revoked: int = 0
    refutations: int = 0  # refutations stored (they change nothing else here)

    def to_json(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "duplicates": self.duplicates, "older": self.older, "forks": self.forks,
                "refused": dict(self.refused), "candidates": self.candidates, "corroborated": self.corroborated,
                "confirmed": self.confirmed, "revoked": self.revoked, "refutations": self.refutations}

    def add(self, other: ReceiveResult) -> None:
        for name in ("accepted", "duplicates", "older", "forks", "candidates", "corroborated", "confirmed",
                     "revoked", "refutations"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.refused.update(other.refused)
