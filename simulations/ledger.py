"""Every record the commons experiment makes, verified once, and who holds which.

A record is verified once, when it is made: the ``records.sign_*`` functions return only
after parsing the bytes they signed, exactly as a receiver would; the bulk signer
(signer.py) makes byte for byte what they make; anything else (a forgery) goes through
the real ``records.parse``.  The result is a pure function of the bytes, so an honest
agent never holds a record that failed, and a replayed record is bytes already held.

**Batches.**  Records move as the ideal anti-entropy moves them: at a contact both sides
leave holding the union (an honest side takes only valid records).  So the records one
agent came to hold since the last gossip (what it signed, or, for an adversary, relayed
for its Sybils) travel together for the rest of the run: whoever holds one of them holds
them all.  They form one *batch*, and holdings are kept per batch, as one Python integer
per agent with one bit per batch: at 1 000 agents, 10 Sybils per adversary, about
4 * 10^5 records fall into about 3 * 10^4 batches, and an exchange is two integer ORs
instead of two passes over a row of records.  ``Held`` gives the record-level view
(``held[agent, :n]``) that judging reads.  When records move by the real gossip engine,
which may deliver part of what a peer holds, every record is a batch of its own.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from neverest.commons import Fact, fact_of
from neverest.memory import holdings
from neverest.records import Record, RecordError, parse

LESSON: Final = 0
CONFIRM: Final = 1
REVOKE: Final = 2
REFUTE: Final = 3
KIND_OF: Final = {"lesson": LESSON, "confirm": CONFIRM, "revoke": REVOKE, "refute": REFUTE}

_COLUMNS: Final = ("lesson", "origin", "kind", "valid", "batch")


class Ledger:
    """Every record made in the run, with what judging needs about it, one column per field."""

    def __init__(self) -> None:
        self.raw: list[bytes] = []
        self.facts: list[Fact | None] = []  # None: refused by records.parse
        self.by_digest: dict[str, int] = {}
        self._n = 0
        self._cols = np.zeros((len(_COLUMNS), 1024), dtype=np.int32)

    def __len__(self) -> int:
        return self._n

    @staticmethod
    def check(raw: bytes, record: Record | None = None) -> tuple[Fact | None, int]:
        """The fact and kind of ``raw``, verified with the real ``records.parse``; or of ``record``,
        which the signing functions return only after parsing the bytes they signed.
        A refused record has no fact (its kind is then CONFIRM: what a forgery claims to be)."""
        try:
            record = parse(raw) if record is None else record
            return fact_of(record), KIND_OF[record.type]
        except RecordError:
            return None, CONFIRM

    def append(self, raw: bytes, fact: Fact | None, kind: int, lesson: int, origin: int, batch: int) -> int:
        if self._n == self._cols.shape[1]:
            grown = np.zeros((len(_COLUMNS), 2 * self._n), dtype=np.int32)
            grown[:, :self._n] = self._cols
            self._cols = grown
        rec = self._n
        self._cols[:, rec] = (lesson, origin, kind, fact is not None, batch)
        self._n += 1
        self.by_digest[holdings.digest_of(raw)] = rec
        self.raw.append(raw)
        self.facts.append(fact)
        return rec

    def column(self, name: str) -> npt.NDArray[np.int32]:
        """One column of every record so far (a view: records added later are not in it)."""
        return self._cols[_COLUMNS.index(name), :self._n]

    def arrays(self) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.int8],
                              npt.NDArray[np.bool_]]:
        """(lesson, origin, kind, valid) of every record so far."""
        n = self._n
        return (self._cols[0, :n], self._cols[1, :n], self._cols[2, :n].astype(np.int8),
                self._cols[3, :n].astype(bool))


def bits(row: int, width: int) -> npt.NDArray[np.bool_]:
    """The bits 0..width-1 of ``row`` as booleans."""
    packed = np.frombuffer(row.to_bytes((width + 7) // 8, "little"), dtype=np.uint8)
    return np.unpackbits(packed, bitorder="little")[:width].astype(bool)


class Held:
    """Who holds which record: ``held[agent, :n]``, one flag per record, read from the
    agents' batch rows.  Agents in sync hold the same row: each distinct row is expanded
    once per set of records."""

    def __init__(self, rows: list[int], ledger: Ledger) -> None:
        self._rows, self._ledger = rows, ledger
        self._cache: dict[int, npt.NDArray[np.bool_]] = {}
        self._cached_for = -1

    def row(self, agent: int) -> npt.NDArray[np.bool_]:
        n = len(self._ledger)
        if n != self._cached_for or len(self._cache) > 64:
            self._cache, self._cached_for = {}, n
        value = self._rows[agent]
        flags = self._cache.get(value)
        if flags is None:
            batch = self._ledger.column("batch")
            width = int(batch.max(initial=-1)) + 1
            flags = bits(value, width)[batch]
            flags.setflags(write=False)  # shared by every agent with this row
            self._cache[value] = flags
        return flags

    def __getitem__(self, key: tuple[int, slice]) -> npt.NDArray[np.bool_]:
        agent, records = key
        return self.row(agent)[records]
