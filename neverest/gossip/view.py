"""The gossip logic's view of a memory's SQLite store (``core.StoreView`` over ``records``).

- ``digest``: for each origin, its highest ``seq`` in ``records`` (superseded rows included:
  they are held and relayed) and the short hash of that row's bytes, taken from the
  ``digest`` column the store indexes records by; when ``forks`` holds evidence of another
  record at that seq, a hash of all of them (``core.seq_hash``; core.py says why).  It is recomputed only
  when the database changed, so the common in-sync exchange costs two PRAGMA reads.
- ``run``: one origin's records in seq order after a given seq, read lazily so that a
  budget that stops early stops the read too.
- ``apply``: the one receive function (``Receiver``), one per call, so that a batch of
  records from a peer commits in the receiver's batches and is counted under its source.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from neverest.config import Config
from neverest.gossip.codec import HASH_BYTES, Digest, Entry
from neverest.gossip.core import Run, record_cost, record_digest, seq_hash
from neverest.memory import holdings
from neverest.memory.receive import Receiver, ReceiveResult
from neverest.memory.store import Store


class SqliteView:
    def __init__(self, store: Store, *, own_origin: str, config: Config) -> None:
        self.store, self.own_origin, self.config = store, own_origin, config
        self._digest = Digest()
        self._version: tuple[int, int] | None = None

    def digest(self) -> Digest:
        version = self.store.data_version()
        if version == self._version:
            return self._digest
        db = self.store.db
        entries: dict[str, Entry] = {}
        for head in holdings.heads(db):
            digest = head.digest if head.digest is not None else record_digest(holdings.raw_of(db, head.id)).hex()
            entries[head.origin] = (head.seq, bytes.fromhex(digest))
        forked: dict[str, set[bytes]] = {}
        for origin, seq, other in holdings.fork_evidence(db):
            if entries.get(origin, (0, b""))[0] == seq:
                forked.setdefault(origin, {entries[origin][1]}).add(record_digest(other))
        for origin, digests in forked.items():
            entries[origin] = (entries[origin][0], seq_hash(digests))
        self._digest = Digest({o: (seq, h[:HASH_BYTES]) for o, (seq, h) in entries.items()})
        self._version = version
        return self._digest

    def known_at(self, origin: str, seq: int) -> list[bytes]:
        return holdings.known_at(self.store.db, origin, seq)

    def run(self, origin: str, after: int, *, budget_bytes: int, max_records: int) -> Run:
        out: list[bytes] = []
        rows = holdings.run_after(self.store.db, origin, after)
        try:
            for seq, raw in rows:
                if seq != after + len(out) + 1:
                    return Run(out, False)  # a hole in what this memory holds: nothing more to send from here
                budget_bytes -= record_cost(raw)
                if budget_bytes < 0 or len(out) == max_records:
                    return Run(out, True)
                out.append(raw)
            return Run(out, False)
        finally:
            rows.close()

    def apply(self, records: Sequence[bytes], *, source: str, now: datetime) -> ReceiveResult:
        if not records:
            return ReceiveResult()
        with Receiver(self.store, own_origin=self.own_origin, config=self.config, now=now) as receiver:
            result = receiver.receive(records, source=source)
        return result
