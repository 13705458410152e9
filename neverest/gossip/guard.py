"""What keeps a flood of invalid gossip requests cheap: refusals tallied in memory, and cut-offs.

- ``Tally``: refused requests counted by (source, reason) in memory, for the daemon to add
  to the store's ``refusals`` table now and then (``drain``), instead of one SQLite write
  per refusal.  Bounded: past ``max_keys`` distinct pairs, new ones are counted under
  ``OTHERS`` (a peer making up a fresh origin per request cannot grow the map).
- ``Cutoffs``: strikes against a peer, by address and, once its signature told who it is,
  by origin.  ``after`` refusals within ``cooling_s`` and it is cut off for ``cooling_s``:
  the edge answers 429 without reading its requests.  Bounded: past ``max_keys``, the
  entry touched longest ago is forgotten.  IPv6 addresses count by their /64, which is
  what one machine is usually given.  The daemon keeps two: one by origin, one by address
  with a larger ``after`` (service.py says which request strikes which).
- ``Vouched``: the origins that completed a valid exchange from each address lately (asking,
  or answering this memory's own request there).  An
  address is shared by everyone behind one NAT, an attacker included; a signature is not.
  While an address is cut off, a request from it signed by one of these origins is still
  answered, so an honest peer is not cut off with the attacker next to it.  Bounded: past
  ``max_addresses`` the address touched longest ago is forgotten, and each keeps its
  ``per_address`` most recent origins.

Both take the time as an argument: the tally the clock's ``now`` (it is stored), the cut-offs
``trio.current_time()`` in the daemon (a number in tests).
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Final

OTHERS: Final = "gossip:others"  # the source counted when the tally has no room for another
DEFAULT_TALLY_KEYS: Final = 1024
DEFAULT_CUTOFF_KEYS: Final = 4096
DEFAULT_VOUCHED_ADDRESSES: Final = 4096
DEFAULT_VOUCHED_PER_ADDRESS: Final = 16


@dataclass
class Count:
    n: int
    last: datetime  # when the last one was refused


class Tally:
    def __init__(self, *, max_keys: int = DEFAULT_TALLY_KEYS) -> None:
        self.max_keys = max_keys
        self._counts: dict[tuple[str, str], Count] = {}

    def __len__(self) -> int:
        return len(self._counts)

    def add(self, source: str, reason: str, now: datetime, n: int = 1) -> None:
        key = (source, reason)
        if key not in self._counts and len(self._counts) >= self.max_keys:
            key = (OTHERS, reason)
        count = self._counts.get(key)
        if count is None:
            self._counts[key] = Count(n, now)
        else:
            count.n += n
            count.last = max(count.last, now)

    def pending(self) -> dict[tuple[str, str], Count]:
        """What was counted since the last ``drain`` (a copy)."""
        return {k: Count(c.n, c.last) for k, c in self._counts.items()}

    def drain(self) -> dict[tuple[str, str], Count]:
        """What was counted since the last ``drain``, forgotten here: the caller stores it (and
        gives it back with ``restore`` if it could not)."""
        out, self._counts = self._counts, {}
        return out

    def restore(self, counts: dict[tuple[str, str], Count]) -> None:
        for (source, reason), count in counts.items():
            self.add(source, reason, count.last, count.n)


def address_key(host: str) -> str:
    """The key a peer's address counts under: the IP, or its /64 for IPv6."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return f"addr:{host[:64]}"
    if ip.version == 6:
        return f"addr:{ipaddress.ip_network(f'{ip}/64', strict=False)}"
    return f"addr:{ip}"


@dataclass
class _Strikes:
    n: int
    since_s: float
    until_s: float | None = None  # cut off until then


class Cutoffs:
    def __init__(self, *, after: int, cooling_s: float, max_keys: int = DEFAULT_CUTOFF_KEYS) -> None:
        if after < 1 or cooling_s <= 0:
            raise ValueError("a cut-off needs after >= 1 and cooling_s > 0")
        self.after, self.cooling_s, self.max_keys = after, cooling_s, max_keys
        self._table: OrderedDict[str, _Strikes] = OrderedDict()

    def __len__(self) -> int:
        return len(self._table)

    def blocked(self, key: str, now_s: float) -> float | None:
        """Seconds left of ``key``'s cut-off, or None when it may be heard."""
        entry = self._table.get(key)
        if entry is None or entry.until_s is None:
            return None
        if now_s >= entry.until_s:
            del self._table[key]  # cooled down: a clean slate
            return None
        return entry.until_s - now_s

    def strike(self, key: str, now_s: float) -> bool:
        """Count one invalid request against ``key``; True if that cut it off."""
        entry = self._table.get(key)
        if entry is None or now_s - entry.since_s > self.cooling_s:
            entry = _Strikes(0, now_s)
        entry.n += 1
        self._table[key] = entry
        self._table.move_to_end(key)
        while len(self._table) > self.max_keys:
            self._table.popitem(last=False)
        if entry.until_s is None and entry.n >= self.after:
            entry.until_s = now_s + self.cooling_s
            return True
        return False


class Vouched:
    def __init__(self, *, max_addresses: int = DEFAULT_VOUCHED_ADDRESSES,
                 per_address: int = DEFAULT_VOUCHED_PER_ADDRESS) -> None:
        self.max_addresses, self.per_address = max_addresses, per_address
        self._table: OrderedDict[str, OrderedDict[str, None]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._table)

    def add(self, address: str, origin: str) -> None:
        """``origin`` completed a valid exchange from ``address`` (an ``address_key``)."""
        origins = self._table.setdefault(address, OrderedDict())
        origins[origin] = None
        origins.move_to_end(origin)
        while len(origins) > self.per_address:
            origins.popitem(last=False)
        self._table.move_to_end(address)
        while len(self._table) > self.max_addresses:
            self._table.popitem(last=False)

    def any(self, address: str) -> bool:
        return address in self._table

    def has(self, address: str, origin: str) -> bool:
        origins = self._table.get(address)
        return origins is not None and origin in origins
