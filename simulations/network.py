"""The simulated network: what carries bytes between agents, and when.

The daemon's transport is one HTTP POST per message (``gossip/http.py``); the gossip core
only ever sees "send these bytes, get these bytes back".  Here the same bytes are carried
by ``VirtualNetwork.carry``, which decides, from a seeded ``random.Random``, whether and
when a message arrives:

- **latency**: log-normal, given by its median and shape (a long right tail, as measured
  on real networks), per message;
- **loss**: each message is lost with probability ``loss``; the sender learns of it only
  when its timeout expires, as an HTTP client would;
- **partitions**: while one is in force, a message between agents in different groups
  is dropped (the same timeout);
- **churn**: an agent that is offline neither sends nor answers.

Nothing here knows about records or the protocol: the simulator hands the bytes that the
real ``Initiator``/``Responder`` produce to ``carry`` and delivers them when it says.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class NetworkModel:
    latency_median_s: float = 0.04  # a LAN or a nearby region
    latency_shape: float = 0.6  # sigma of the log-normal: the 99th percentile is about 4x the median
    loss: float = 0.0  # probability that one message is lost
    timeout_s: float = 10.0  # how long a sender waits for a lost message (the client's timeout)

    def __post_init__(self) -> None:
        if not 0.0 <= self.loss < 1.0:
            raise ValueError(f"loss must be in [0, 1), not {self.loss}")
        if self.latency_median_s <= 0 or self.timeout_s <= 0 or self.latency_shape < 0:
            raise ValueError("latency_median_s and timeout_s must be positive, latency_shape not negative")


@dataclass
class Traffic:
    messages: int = 0
    lost: int = 0
    bytes: int = 0  # bytes of every message sent, delivered or not


@dataclass
class VirtualNetwork:
    """Carries messages between agents numbered 0..n-1."""

    n: int
    model: NetworkModel
    rng: random.Random
    online: list[bool] = field(init=False)
    groups: list[int] | None = None  # a partition in force: each agent's side; None: one network
    traffic: Traffic = field(default_factory=Traffic)
    sent_by: list[int] = field(init=False)  # bytes each agent sent

    def __post_init__(self) -> None:
        self.online = [True] * self.n
        self.sent_by = [0] * self.n
        self._mu = math.log(self.model.latency_median_s)

    def reachable(self, src: int, dst: int) -> bool:
        if not (self.online[src] and self.online[dst]):
            return False
        return self.groups is None or self.groups[src] == self.groups[dst]

    def carry(self, src: int, dst: int, size: int) -> float | None:
        """The delay after which a message of ``size`` bytes from src reaches dst, or None if it never does."""
        self.traffic.messages += 1
        self.traffic.bytes += size
        self.sent_by[src] += size
        if not self.reachable(src, dst) or (self.model.loss and self.rng.random() < self.model.loss):
            self.traffic.lost += 1
            return None
        return self.rng.lognormvariate(self._mu, self.model.latency_shape)

    # -- faults ---------------------------------------------------------------------------

    def split(self, groups: list[int]) -> None:
        """Partition the network: agent i is on side ``groups[i]`` until ``heal``."""
        if len(groups) != self.n:
            raise ValueError("one group per agent")
        self.groups = list(groups)

    def heal(self) -> None:
        self.groups = None

    def churn(self, fraction: float, rng: random.Random) -> tuple[list[int], list[int]]:
        """``fraction`` of the online agents leave and as many offline ones come back (or fewer, if
        fewer are offline).  Returns (left, joined)."""
        up = [i for i in range(self.n) if self.online[i]]
        down = [i for i in range(self.n) if not self.online[i]]
        leaving = rng.sample(up, round(fraction * len(up)))
        joining = rng.sample(down, min(len(down), len(leaving)))
        for i in leaving:
            self.online[i] = False
        for i in joining:
            self.online[i] = True
        return leaving, joining

    def all_online(self) -> None:
        self.online = [True] * self.n
