"""An in-sync success with a known peer is batched (written at the next flush), not a write transaction per
exchange: also when the peer's shared list (its 16 most recently seen addresses) comes in another order or
with other members, as long as every address in it is already learned."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path

from neverest.clock import FixedClock
from neverest.config import Config
from neverest.gossip.core import ExchangeResult
from neverest.gossip.service import Gossip
from neverest.identity import Identity

NOW = datetime(2026, 4, 1, 12, tzinfo=UTC)
PEER = Identity.from_seed(b"\x43" * 32).origin
URL = "http://127.0.0.1:7501"
A, B, C = "http://127.0.0.1:7502", "http://127.0.0.1:7503", "http://127.0.0.1:7504"


def ok(*addresses: str) -> ExchangeResult:
    return ExchangeResult(peer=PEER, in_sync=True, addresses=addresses)


def test_a_reordered_or_partial_list_of_known_addresses_is_batched_and_a_new_one_is_not(tmp_path: Path) -> None:
    gossip = Gossip(tmp_path, Config(verify_processes=0), FixedClock(NOW), Identity.from_seed(b"\x42" * 32),
                    random.Random(1))
    try:
        assert not gossip._batched(URL, ok(A, B))  # first contact: written
        gossip._score(URL, ok(A, B))
        assert gossip._batched(URL, ok(B, A))
        assert gossip._batched(URL, ok(B))
        assert gossip._batched(URL, ok())
        assert not gossip._batched(URL, ok(A, C))  # C is news: learned, written
        gossip._score(URL, ok(A, C))
        assert gossip._batched(URL, ok(C, B, A))
        assert not gossip._batched(URL, ExchangeResult(peer="0" * 16, addresses=(A,)))  # another origin there
    finally:
        gossip.close()
