"""The one receive function, for every transport (folder, gossip, commons).

``receive`` takes raw record lines and where they came from, and for each:

1. verifies it (``records.parse_many``: in this process, or for batches of at least
   ``POOL_MIN_LINES`` lines in a verifying process of ``verify_pool``, which also embeds the
   batch's lesson sentences for step 4); a refusal is counted by source and reason;
2. refuses a record signed more than ``future_tolerance_s`` after now (``future``), and a
   refutation by the lesson's own publisher (``refute-publisher``: a lesson record of that hash
   from that origin is held) or beyond ``refute_origin_max`` held for its origin
   (``refute-flood``: the first ones received are kept, and the lines claiming to be refutations
   by an origin already at the bound are refused before their signature is checked); and a lesson
   from another origin whose text holds what must never cross between memories (``unscrubbed``:
   ``scrub.scrub_check``, a path in a home, an e-mail address, a URL with credentials, a token, a
   private IP address): its hash is signed over its text, so it cannot be scrubbed here, and holding
   it would relay it;
3. refuses it when storing it would go over the storage budget (``over-budget``: admission.py,
   budget.py), then stores it as received (``holdings.put``): duplicates change nothing, forks
   are kept as evidence, an older version of an origin's lesson is stored but superseded;
4. applies it to this memory's lessons (the merge rule, PROTOCOL.md §9):
   - a lesson whose hash is tombstoned changes nothing;
   - a lesson revoked by its origin before it arrived is not applied;
   - a lesson with the hash of a lesson held here, or the same meaning (cosine of its
     sentence with a held lesson's sources ≥ the join threshold, hashed space, and a subject
     that agrees with the held lesson's: meaning.py), from an origin not yet counted for it,
     *corroborates* it: +``confirm_step`` strength, once per origin, however many records or
     equivalent sentences it sends;
   - otherwise it becomes a local *candidate* (strength 0.5, always predicting) in the
     ``domain`` layer when its origin is one of ``config.domain_origins``, else the
     ``common`` one, raised at once by confirmations already held for it;
   - a confirmation raises the lesson it names once per confirming origin, never for
     the lesson's own publisher; one for an unknown hash is kept and counted when the
     lesson arrives;
   - a revocation by a publisher removes that publisher's lesson here (its row is
     archived and a render drops its file); by anyone else it only counts toward the
     commons state (commons.py);
   - a refutation changes nothing here: it is held (for any hash, held or not, like a
     confirmation) for the trust rule to read, and it never moves a state or a strength.

Refusals of records that their origin signed validly, by this memory's own rules
(``POLICY_REFUSALS``), are not the delivering peer's fault: a relay cannot know them, so
peer scoring (gossip/service.py) does not count them against it.  Every other record of
the batch is applied whatever is refused.

Everything is committed in batches, so a crash loses at most the batch in progress,
and a record is acknowledged (counted as accepted) only once committed.
"""

from __future__ import annotations

import collections
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple

from neverest import verify_pool
from neverest.clock import iso, parse_time
from neverest.config import Config
from neverest.memory import admission, holdings
from neverest.memory.embed import (
    DIM,
    HASHED_SPACE,
    HashedEmbedder,
    hashed_vector,
)
from neverest.memory.meaning import MeaningIndex, subject_words
from neverest.memory.queries import lessons

# ReceiveResult, POLICY_REFUSALS and UNSCRUBBED live in memory/received.py (light enough for an idle daemon's
# gossip to name them); re-exported here, where the rules they count are.
from neverest.memory.received import POLICY_REFUSALS as POLICY_REFUSALS
from neverest.memory.received import UNSCRUBBED as UNSCRUBBED
from neverest.memory.received import ReceiveResult as ReceiveResult
from neverest.memory.scrub import scrub_check
from neverest.memory.store import Store
from neverest.records import Record, RecordError, claimed, parse_many, verified
from neverest.verify_pool import Job, VerifierError, VerifyPool, default_processes

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    # numpy on first use: the daemon imports this module at start-up, and idle it receives nothing.
    from neverest.lazy_numpy import numpy_for

    np = numpy_for(__name__)

CANDIDATE_STRENGTH: Final = 0.5
# Refusal codes of this module's rules (records.REASONS holds the record-format ones).
FUTURE: Final = "future"
REFUTE_PUBLISHER: Final = holdings.REFUTE_PUBLISHER  # an origin refuting a lesson it published itself
REFUTE_FLOOD: Final = holdings.REFUTE_FLOOD  # an origin past refute_origin_max refutations held here
# Records per transaction, and their bytes at most.  Each commit writes again every index page its
# records touched, and the index over digests takes each new record on a page of its own: 2 000
# records a commit cost 12.7 µs a record to insert, 500 cost 16.9 (measured with the records of
# bench_gossip.py).  Held in memory until the commit, hence the bound in bytes as well.
_BATCH: Final = 2000
_BATCH_BYTES: Final = 4 * 1024 * 1024
# Lines per verification batch (one request to a verifying process): small enough that the
# first answer comes back soon and the store starts while the next batches are verified.
_VERIFY_BATCH: Final = verify_pool.BATCH_LINES
# A batch with fewer lines than this to verify is verified in this process: below it, the trip
# to a worker and back costs more than the work it saves (measured: bench_receive.py --threshold).
POOL_MIN_LINES: Final = verify_pool.MIN_LINES


def _raise(db: sqlite3.Connection, lesson_id: int, origin: str, config: Config, now: datetime) -> bool:
    """Count ``origin`` once for the lesson; True when it was new."""
    return lessons.count_origin(db, lesson_id, origin, step=config.confirm_step, cap=config.strength_cap,
                                now=iso(now))


def layer_of(origin: str, config: Config) -> str:
    """The layer a lesson received from ``origin`` belongs to (this memory's own: personal)."""
    return "domain" if origin in {o.strip() for o in config.domain_origins.split(",")} else "common"


_NOTHING_MET: Final = lessons.Arrival(False, False, None, None)


def _apply_lesson(db: sqlite3.Connection, record: Record, own_origin: str, config: Config, now: datetime,
                  result: ReceiveResult, index: MeaningIndex, vector: npt.NDArray[np.float32] | None,
                  unknown: bool, key: int | None) -> None:
    if record.origin == own_origin:
        return
    # Is the hash tombstoned, did this origin already revoke it, and which lesson here holds
    # it (this memory's own first)?  Nothing, when nothing here is about it yet (``unknown``).
    met = _NOTHING_MET if unknown else lessons.arrival(db, record.target, record.origin)
    if met.buried or met.revoked:
        return
    fields = record.fields
    if met.held_id is not None:
        if met.held_origin == record.origin:  # a newer version from its publisher: its count of surprises
            lessons.set_seen(db, met.held_id, fields["seen"])
        elif _raise(db, met.held_id, record.origin, config, now):
            result.corroborated += 1
        return
    if vector is None:
        vector = hashed_vector(fields["text"])
    subjects = subject_words(fields["text"])
    similar = index.same_meaning(fields["kind"], vector, subjects, key)
    if similar is not None:
        if _raise(db, similar, record.origin, config, now):
            result.corroborated += 1
        return
    # Embedded at once in the hashed space, so that the next record with the same meaning
    # is recognised before any sleep (a sleep in a model's space re-embeds it).
    lesson_id = lessons.create(db, lessons.NewLesson(
        hash=record.target, kind=fields["kind"], text=fields["text"], cwd="", strength=CANDIDATE_STRENGTH,
        seen=fields["seen"], created=iso(now), origin=record.origin, layer=layer_of(record.origin, config),
        space=HASHED_SPACE, embedding=index.blob(fields["kind"], vector, key), centroid=None, origins=[record.origin]))
    result.candidates += 1
    index.add(fields["kind"], lesson_id, vector, subjects)
    # Confirmations that arrived before the lesson count now.
    for confirmer in ([] if unknown else holdings.confirmers(db, record.target)):
        if confirmer not in (record.origin, own_origin) and _raise(db, lesson_id, confirmer, config, now):
            result.confirmed += 1


def _apply_confirm(db: sqlite3.Connection, record: Record, own_origin: str, config: Config, now: datetime,
                   result: ReceiveResult, unknown: bool) -> None:
    for lesson_id, publisher in ([] if unknown else lessons.held(db, record.target)):
        # A publisher confirming its own lesson does not count; nor does this memory
        # counting its own confirmations twice.
        if record.origin in (publisher, own_origin):
            continue
        if _raise(db, lesson_id, record.origin, config, now):
            result.confirmed += 1


def _apply_revoke(db: sqlite3.Connection, record: Record, now: datetime, result: ReceiveResult) -> None:
    result.revoked += lessons.archive(db, record.target, origin=record.origin, now=iso(now))


def _apply(db: sqlite3.Connection, record: Record, own_origin: str, config: Config, now: datetime,
           result: ReceiveResult, index: MeaningIndex, vector: npt.NDArray[np.float32] | None = None,
           unknown: bool = False, key: int | None = None) -> None:
    """``unknown``: nothing in the store is about the record's target yet (Receiver._store knows it
    for a whole batch with three queries), so the look-ups that would find nothing are skipped.
    ``key``: the record's key in the meaning index's plan of its batch (``MeaningIndex.plan``)."""
    if record.type == "lesson":
        _apply_lesson(db, record, own_origin, config, now, result, index, vector, unknown, key)
    elif record.type == "confirm":
        _apply_confirm(db, record, own_origin, config, now, result, unknown)
    elif record.type == "revoke":
        _apply_revoke(db, record, now, result)
    else:  # a refutation informs the trust rule, which reads it from the records; it moves nothing here
        result.refutations += 1


class _Batch(NamedTuple):
    """Lines of one source on their way through verification, in the order they came."""

    source: str
    result: ReceiveResult
    lines: list[bytes | None]
    digests: list[str | None]  # holdings.digest_of of each line, computed once (None for a line too large)
    decoded: list[Any] | None  # the caller's json.loads of each line (``receive``), or None
    job: Job | None  # verifying in a worker process; None: verified here when taken


class _Pending(NamedTuple):
    """A verified record (or a refusal) waiting for its batch's transaction."""

    source: str
    item: Record | RecordError
    result: ReceiveResult
    vector: npt.NDArray[np.float32] | None  # its sentence in the hashed space, embedded by the worker
    digest: str | None


class Lookahead:
    """The lines of the next ``receive``, verified ahead by the verifying processes while the receiver
    before it stores its last batches (``Receiver(..., lookahead=...)``), so that they do not wait idle
    through them.  Verifying a line has one outcome whatever the store holds, so this changes no
    decision: the next receiver still skips, refuses unverified and verifies exactly the lines it would
    have (``Receiver.receive``'s ``verified_ahead``) and takes a job from here only for a batch of lines
    that it would have sent as they are; any other job's answer is dropped."""

    def __init__(self, lines: Sequence[bytes]) -> None:
        self._lines = lines
        self._lock = threading.Lock()
        self._jobs: dict[int, tuple[list[bytes | None], Job]] = {}  # by the index of the batch's first line
        self._next = 0  # the first line not sent yet

    def send(self, pool: VerifyPool, *, most: int, min_lines: int) -> None:
        """Send the next batches while a worker has room (never waiting), up to ``most`` batches out."""
        with self._lock:
            while len(self._jobs) < most and self._next < len(self._lines):
                part: list[bytes | None] = list(self._lines[self._next:self._next + _VERIFY_BATCH])
                if len(part) < min_lines:
                    return
                job = pool.try_submit("receive-batch", part)
                if job is None:
                    return
                self._jobs[self._next] = (part, job)
                self._next += len(part)

    def take(self, start: int, lines: list[bytes | None]) -> Job | None:
        """The job verifying ``lines`` if it was sent as they are from ``start`` on; else None."""
        with self._lock:
            sent = self._jobs.get(start)
            if sent is None or sent[0] != lines:
                return None
            del self._jobs[start]
            return sent[1]


class Receiver:
    """Receives records from any number of sources, committing in batches that span them.

    One receiver per sync keeps one meaning index and one transaction per batch, however
    many small files or peers the records came from: ``receive`` it all, then ``close``.

    The lines go through in batches of up to ``_VERIFY_BATCH``: those already held are skipped
    with one query per batch; a batch of at least ``pool_min_lines`` left to verify goes to a
    worker process (``verify_pool``), which also embeds its lessons' sentences, while this
    process stores the batch before it; smaller ones are verified here.  Batches are taken
    back in order, so the merge rule sees the records exactly in the order received.  At most
    ``PIPELINE × processes`` batches are out at once, so memory stays bounded (and as many of the next
    receive's, ``Lookahead``, while the last ones are stored: lines its caller holds already).
    """

    def __init__(self, store: Store, *, own_origin: str, config: Config, now: datetime,
                 pool: VerifyPool | Literal["shared"] | None = "shared", pool_min_lines: int = POOL_MIN_LINES,
                 lookahead: Callable[[], Lookahead | None] | None = None, index: MeaningIndex | None = None) -> None:
        """``lookahead``: where to find the lines of the receive after this one, if they are known by the
        time this one has sent all of its own to the verifying processes (``Lookahead``).  ``index``: the
        last receive's meaning index (``meaning_index``), when it is ``current`` and nothing wrote since."""
        self.store, self.own_origin, self.config, self.now = store, own_origin, config, now
        self._lookahead = lookahead
        self.meaning_index = index if index is not None else MeaningIndex(store.db)
        self._pending: list[_Pending] = []
        self._pending_bytes = 0  # of the records in ``_pending``
        if pool == "shared":
            processes = config.verify_processes if config.verify_processes >= 0 else default_processes()
            pool = verify_pool.shared(processes) if processes else None
        self._pool = pool
        self._pool_min_lines = max(1, pool_min_lines)
        self._out: collections.deque[_Batch] = collections.deque()
        self._most_out = verify_pool.PIPELINE * pool.processes if pool is not None else 0
        self.origins: set[str] = set()  # of every record that reached the store (gossip/view.py)
        self.gate = admission.Gate(config, own_origin=own_origin, now=now)  # the storage budget
        # Refutations held by origin, read once per transaction (an eviction may lower them).
        self._refutes: dict[str, int] = {}
        # Origins found at refute_origin_max: their further refutations are refused unverified;
        # and those found below it when this receive first met one of their refutations.
        self._full: set[str] = set()
        self._below: set[str] = set()
        self._early: Counter[str] = Counter()  # those refusals by source, until the next batch is written

    def receive(self, lines: Iterable[bytes | str | None], *, source: str,
                decoded: Sequence[Any] | None = None, verified_ahead: Lookahead | None = None) -> ReceiveResult:
        """Verify and queue ``lines`` from ``source``; the result fills in as batches commit
        (all of it once the receiver is closed).  ``decoded``: ``json.loads`` of each line, when
        the caller read them already (gossip's screen does): a line a worker verified is then
        not read again here.  ``verified_ahead``: these lines, partly verified ahead (``Lookahead``)."""
        result = ReceiveResult()
        for start, chunk in _chunks(lines, _VERIFY_BATCH):
            objs = None if decoded is None else list(decoded[start:start + len(chunk)])
            fresh, digests, objs = self._unseen(chunk, objs, result, source)
            if not fresh:
                continue
            job = None
            if self._pool is not None and len(fresh) >= self._pool_min_lines:
                job = verified_ahead.take(start, fresh) if verified_ahead is not None else None
                if job is None:
                    job = self._pool.submit("receive-batch", fresh)
            self._out.append(_Batch(source, result, fresh, digests, objs, job))
            while len(self._out) > self._most_out:
                self._take()
        return result

    def _unseen(self, lines: list[bytes | None], decoded: list[Any] | None, result: ReceiveResult, source: str
                ) -> tuple[list[bytes | None], list[str | None], list[Any] | None]:
        """Lines not held yet, with their digests (and what the caller decoded of them).  A line
        whose exact bytes are held was verified when it was stored: skipping it before
        verification makes re-reading a folder or a peer's answer cost an index look-up per
        record instead of a signature check.  A line that claims an origin the storage budget
        declined is refused unverified: it would be refused valid or not."""
        db = self.store.db
        digests = [None if line is None else holdings.digest_of(line) for line in lines]
        held = holdings.held_among(db, [d for d in digests if d is not None])
        keep = [k for k, d in enumerate(digests) if d is None or d not in held] if held else range(len(lines))
        result.duplicates += len(lines) - len(keep)
        kept = [k for k in keep if (line := lines[k]) is None or not self.gate.declines(db, line, source)]
        result.refused[admission.OVER_BUDGET] += len(keep) - len(kept)
        if not result.refused[admission.OVER_BUDGET]:
            del result.refused[admission.OVER_BUDGET]
        if self.config.refute_origin_max > 0:
            before = len(kept)
            kept = [k for k in kept if (line := lines[k]) is None or not self._flooding(db, line)]
            if len(kept) < before:
                result.refused[REFUTE_FLOOD] += before - len(kept)
                self._early[source] += before - len(kept)
        if len(kept) == len(lines):
            return lines, digests, decoded
        return ([lines[k] for k in kept], [digests[k] for k in kept],
                None if decoded is None else [decoded[k] for k in kept])

    def _flooding(self, db: sqlite3.Connection, line: bytes) -> bool:
        """Whether ``line`` claims to be a refutation by an origin already at the bound here: valid or
        not, it would be refused, so its signature is not checked, and a flood sent again at every
        exchange costs a JSON parse a line.  (Refutations still on their way to the store are not
        counted here: the store's check, ``_refused_refutation``, is the one that decides.)"""
        if b'"refute"' not in line:  # every refutation holds this; most other records do not
            return False
        rtype, _, origin = claimed(line)
        if rtype != "refute" or origin is None or origin == self.own_origin:
            return False
        if origin not in self._full:
            if origin in self._below:
                return False
            held = holdings.refute_counts(db, [origin]).get(origin, 0)
            if held < self.config.refute_origin_max:
                self._below.add(origin)  # looked at once per receive; the store's check sees the rest
                return False
            self._full.add(origin)
        return True

    def _take(self) -> None:
        """Take back the oldest batch out (verified, and its lessons embedded), queue it to store."""
        batch = self._out.popleft()
        if batch.job is None:
            for k, item in parse_many(enumerate(batch.lines)):
                self._queue(batch, item, None, batch.digests[k])
            return
        for (item, vector), digest in zip(_verdicts(batch.lines, batch.job.result(), batch.decoded), batch.digests,
                                          strict=True):
            self._queue(batch, item, vector, digest)

    def _queue(self, batch: _Batch, item: Record | RecordError, vector: npt.NDArray[np.float32] | None,
               digest: str | None) -> None:
        self._pending.append(_Pending(batch.source, item, batch.result, vector, digest))
        if isinstance(item, Record):
            self._pending_bytes += len(item.raw)
        if len(self._pending) >= _BATCH or self._pending_bytes >= _BATCH_BYTES:
            self._store()

    def flush(self) -> None:
        """Verify and store everything received so far.  Each batch taken back frees room in the
        verifying processes: the next receive's lines (``lookahead``) take it, so the processes work
        through the batches stored last instead of waiting for the next receive to start."""
        while self._out:
            self._send_ahead()
            self._take()
        self._send_ahead()
        self._store()

    def _send_ahead(self) -> None:
        ahead = self._lookahead() if self._lookahead is not None else None
        if ahead is not None and self._pool is not None:
            ahead.send(self._pool, most=self._most_out, min_lines=self._pool_min_lines)

    def _store(self) -> None:
        """Store the verified batch: the one place where verified records go into the store.  The
        storage budget (admission.py) screens the batch first, in the same transaction."""
        if not self._pending and not self.gate.early and not self._early:
            return
        horizon = self.now + timedelta(seconds=self.config.future_tolerance_s)
        # Each pending lesson's hashed vector: the worker's, else (verified here) embedded now, all of them in
        # one call: much cheaper than one by one.
        vectors = [p.vector for p in self._pending]
        here = [(k, p.item) for k, p in enumerate(self._pending)
                if p.vector is None and isinstance(p.item, Record) and p.item.type == "lesson"]
        if here:
            embedded = HashedEmbedder().embed([record.fields["text"] for _, record in here])
            for (k, _), vector in zip(here, embedded, strict=True):
                vectors[k] = vector
        with self.store.write() as db:
            refused: Counter[tuple[str, str]] = Counter()
            self._refutes = {}
            over = self.gate.screen(db, [(p.source, p.item) for p in self._pending])
            usage = holdings.Usage()
            # Targets nothing here is about yet: the first record of each skips the look-ups that
            # would find nothing; once one is stored, the target is known and the next ones look.
            unknown = holdings.unknown_targets(db, {p.item.target for p in self._pending
                                                    if isinstance(p.item, Record)})
            # The same-meaning check of the whole batch in one matrix product per kind.
            self.meaning_index.plan([(k, p.item.fields["kind"], vector)
                              for k, (p, vector) in enumerate(zip(self._pending, vectors, strict=True))
                              if isinstance(p.item, Record) and p.item.type == "lesson" and k not in over
                              and vector is not None and p.item.origin != self.own_origin])
            for k, ((source, item, result, _, digest), vector) in enumerate(zip(self._pending, vectors, strict=True)):
                reason = (over[k] if k in over
                          else self._store_one(db, source, item, result, horizon, vector, usage, unknown, digest, k))
                if reason is not None:
                    refused[source, reason] += 1
                    result.refused[reason] += 1
            usage.write(db)  # before the commit: the next batch's budget reads it
            refused.update(self.gate.take_early())
            refused.update({(source, REFUTE_FLOOD): n for source, n in self._early.items()})
            self._early.clear()
            for (source, reason), n in refused.items():
                holdings.count_refusal(db, source, reason, self.now, n)
        self._pending, self._pending_bytes = [], 0

    def _store_one(self, db: sqlite3.Connection, source: str, item: Record | RecordError, result: ReceiveResult,
                   horizon: datetime, vector: npt.NDArray[np.float32] | None, usage: holdings.Usage,
                   unknown: set[str], digest: str | None, key: int | None = None) -> str | None:
        """Store and apply one record; the refusal reason, if it is refused.  ``key``: its place in the
        batch, as the meaning index's plan knows it."""
        if isinstance(item, RecordError):
            return item.code
        if parse_time(holdings.signed_time(item)) > horizon:
            return FUTURE
        # This memory's own records are exempt: refusing one that comes back (signed before the gate
        # existed) would hide its seq from publish, which would sign that seq again, a fork of itself.
        if item.type == "lesson" and item.origin != self.own_origin and scrub_check(item.fields["text"]) is not None:
            return UNSCRUBBED
        first = item.target in unknown
        if item.type == "refute" and item.origin != self.own_origin:
            reason = self._refused_refutation(db, item, first)
            if reason is not None:
                return reason
        self.origins.add(item.origin)
        unknown.discard(item.target)
        outcome = holdings.put(db, item, source=source, now=self.now, usage=usage, unknown=first, digest=digest)
        if outcome == "new" and item.type == "refute" and item.origin in self._refutes:
            self._refutes[item.origin] += 1
        if outcome == "duplicate":
            result.duplicates += 1
        elif outcome == "fork":
            result.forks += 1
            return "fork"
        elif outcome == "older":
            result.older += 1
        else:
            result.accepted += 1
            _apply(db, item, self.own_origin, self.config, self.now, result, self.meaning_index, vector, first,
                   key)
        return None

    def _refused_refutation(self, db: sqlite3.Connection, record: Record, unknown: bool) -> str | None:
        """Why a verified refutation from another origin is refused here, or None to store it.

        Its publisher's: the trust rule ignores an origin refuting its own lesson, and one held
        here already says so (one that arrives before the lesson is kept, and ignored there).
        Past ``refute_origin_max`` held for its origin: the first ones received stay, so a flood
        can neither push out what an origin refuted before nor grow the store; an honest memory,
        which signs one refutation per lesson it met and saw fail, stays far below it."""
        if not unknown and holdings.published_by(db, record.origin, record.target):
            return REFUTE_PUBLISHER
        bound = self.config.refute_origin_max
        if bound <= 0:
            return None
        held = self._refutes.get(record.origin)
        if held is None:
            held = self._refutes[record.origin] = holdings.refute_counts(db, [record.origin]).get(record.origin, 0)
        if held >= bound and not holdings.holds(db, holdings.digest_of(record.raw)):
            self._full.add(record.origin)
            return REFUTE_FLOOD
        return None

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._out.clear()

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        # Commit what was verified even if the caller stopped early: every record in a
        # batch was checked on its own, and losing it would only mean fetching it again.
        self.close()


def _chunks(lines: Iterable[bytes | str | None], size: int) -> Iterator[tuple[int, list[bytes | None]]]:
    """(index of its first line, lines) of ``size`` lines at a time."""
    chunk: list[bytes | None] = []
    start = 0
    for line in lines:
        chunk.append(line.encode("utf-8") if isinstance(line, str) else line)
        if len(chunk) == size:
            yield start, chunk
            start += size
            chunk = []
    if chunk:
        yield start, chunk


def _verdicts(lines: list[bytes | None], reply: Any, decoded: Sequence[Any] | None = None
              ) -> Iterator[tuple[Record | RecordError, npt.NDArray[np.float32] | None]]:
    """The records (or refusals) of a worker's answer to ``verify_job.verify_batch``, its shape
    checked: the worker read hostile bytes, so what it says is data to check, not to trust.
    ``decoded``: ``json.loads`` of each line, read by the caller (``Receiver.receive``)."""
    try:
        verdicts, blob = reply
        ok = (isinstance(verdicts, list) and len(verdicts) == len(lines) and isinstance(blob, bytes)
              and len(blob) % (4 * DIM) == 0)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise VerifierError("a verifying process answered something that is not a batch's verdicts")
    vectors = np.frombuffer(blob, dtype="<f4").reshape(-1, DIM)
    lessons = 0
    out: list[tuple[Record | RecordError, npt.NDArray[np.float32] | None]] = []
    for k, (line, verdict) in enumerate(zip(lines, verdicts, strict=True)):
        if verdict is None and line is not None:
            record = verified(line, None if decoded is None else decoded[k])
            vector = None
            if record.type == "lesson":
                if lessons == len(vectors):
                    raise VerifierError("a verifying process sent fewer vectors than lessons")
                vector = vectors[lessons]
                lessons += 1
            out.append((record, vector))
        else:
            error = verify_pool.refusal(verdict)
            if error is None:
                raise VerifierError("a verifying process accepted a line too large to hold")
            out.append((error, None))
    if lessons != len(vectors):
        raise VerifierError("a verifying process sent more vectors than lessons")
    return iter(out)


def receive(store: Store, lines: Iterable[bytes | str | None], *, source: str, own_origin: str, config: Config,
            now: datetime) -> ReceiveResult:
    """Verify, store and apply record lines from ``source``; returns what happened to them."""
    with Receiver(store, own_origin=own_origin, config=config, now=now) as receiver:
        result = receiver.receive(lines, source=source)
    return result
