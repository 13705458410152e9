"""The commons state of one lesson, judged from the records a memory holds.

Every memory computes, for every lesson hash, one of five states from the signed
records it holds about that hash (PROTOCOL.md §9).  This module is the
whole rule, and only the rule: no store, no clock, no I/O.  The records' facts,
``now``, the configuration and the trust policy are passed in, so the daemon and
the network simulator run the same function and a verdict can be replayed.

The rules
---------

A record contributes one *fact*: its type, its origin and its signed time (a
lesson's ``updated``, a confirmation's or revocation's ``at``).  Only the facts
about one hash are judged together.  A verdict depends on the *set* of facts, never
on the order they arrived in or how many copies of one arrived: memories that hold
the same records, use the same policy and judge at the same ``now`` agree.

- **Future facts.**  A fact signed more than ``future_tolerance_s`` after ``now``
  is ignored, as if not yet received, until ``now`` catches up.  Otherwise one
  origin with a clock set ahead (or a forged date) would hold a lesson ``common``
  for as long as it liked.

- **Publishers.**  The origins that published a lesson record with the hash.  The
  *first publisher* is the one whose earliest lesson record has the earliest signed
  time, ties going to the lowest origin string.  It is chosen among all publishers,
  counted by the policy or not, so that adding a confirmation or a later publication
  never moves it.  The price: an origin the policy does not count can back-date a
  copy to take the first place, which turns the real author's publication into one
  supporter (at most one; signed times are the signers' claims).  A memory that
  holds no lesson record for the hash knows no publisher: the verdict is a
  ``candidate`` with no support, and nothing is lost, because the caller keeps the
  confirmations and revocations and judges again when the lesson arrives.

- **Support.**  The distinct origins, other than the first publisher, that published
  the hash too or confirmed it, and that the trust policy counts (``counts``; all
  origins when it is not given).  One origin counts once however many records it
  sends, and the first publisher's own confirmations never count.  A second
  publisher counts: two memories that met the same surprise and wrote the same
  sentence are a verification, not two lessons (PROTOCOL.md §9).

- **Corroboration** (only when the policy says who corroborates: ``Trust``; the policy
  ``earned``).  An origin the policy does not count, but that *corroborates* (it bore
  out what trusted origins claimed first, and nobody trusted contradicted it), is
  support too, but only for a lesson that at least N of its claimants the policy counts
  back already: its publishers and supporters, the first publisher included.  So a
  lesson still needs N trusted voices, as many as before; the first publisher's own
  trust may be one of them, and the remaining supporters may be corroborating origins.
  A corroborating supporter never moves the clock (below) and its revocation never
  counts toward the quorum: Sybil keys can corroborate, so they must neither keep a
  lesson alive nor withdraw it.

- **The clock.**  A supporter's time is the signed time of its *earliest*
  supporting record, so re-sending or re-signing old support refreshes nothing, and a
  later confirmation from an origin already counted does not either: one origin is
  one voice, once.  A new supporter signed at ``t`` is new support at ``t``, even if
  its record arrives late.  The lesson's clock runs from its last new record: the
  first publisher's earliest publication or the newest counted (not corroborating)
  supporter's time, whichever is later.  A publisher re-signing its lesson (a new ``updated``) does not move it
  either, so an unconfirmed lesson cannot be kept alive by its own author.

- **States**, with N = ``support_n``, W = ``window_days`` and age = now - clock:

  - ``candidate``: support < N and age < 2W.  An unconfirmed lesson stays a
    candidate while it is young; it fades away like any other, see ``removed``.
  - ``common``: support >= N and age < W.
  - ``fading``: support >= N and W <= age < 2W.  It is common again as soon as a
    new supporter signs (the clock moves to that supporter's time).
  - ``removed``: age >= 2W, whatever the support: a common lesson nobody has newly
    confirmed for 2W, or a candidate that never reached N and had no new record for
    2W ("unconfirmed, it fades").
  - ``revoked``: every publisher revoked it, or at least ``revoke_quorum`` of its
    supporters did.  Revoked wins over every other state.

- **Revocations.**  A revocation from an origin counts whenever it was signed, even
  before that origin's publication: a revocation can overtake its lesson on the
  way, and it is applied when the lesson arrives.  "Every publisher" means every
  publisher the policy counts, or every publisher when the policy counts none, so
  that an origin the policy ignores can neither keep alive nor withdraw a lesson
  published by one it counts.  A supporter that revoked still counts as support (its
  confirmation happened); its revocation counts toward the quorum instead.
  Revocations from any other origin do nothing.

- **Quarantine** (only when the caller asks for it: the policy ``vouched``).  A lesson
  this memory first held less than ``quarantine_days`` ago is not ``common`` here yet,
  whatever its support: the days are this memory's chance to test it in its own
  sessions, and to catch its supporters lying, before it relies on them.  An origin can
  build a clean record first and lie later; a quarantine is what makes that late lie
  meet a test before it is believed.

- **Tombstones.**  ``removed`` and ``revoked`` are final.  When a verdict reaches one
  of them without a tombstone, it says so (``Verdict.tombstone``) and the caller
  writes one; judged with that tombstone, the lesson keeps that state whatever
  records arrive later, so it never comes back through a slower path (an old copy
  relayed late, a confirmation in flight, or its publisher re-publishing with a newer
  signed time: resurrection is refused too, and a lesson that is wanted again needs
  new words, hence a new hash).

Transitions
-----------

What can move a lesson from one state to another, with a fixed policy, as records
are added and ``now`` moves forward::

    from        to          when
    ----------  ----------  ------------------------------------------------------
    candidate   common      support reaches N, the newest support younger than W
    candidate   fading      support reaches N through support signed W..2W ago
    candidate   removed     age reaches 2W                           (tombstone)
    common      fading      age reaches W: no new supporter for W days
    common      removed     age reaches 2W, if not judged in between (tombstone)
    fading      common      a new supporter signed less than W ago
    fading      removed     age reaches 2W                           (tombstone)
    any         revoked     every publisher, or a quorum of supporters (tombstone)
    removed     -           final
    revoked     -           final

One move back is possible only under a trust policy: a counted supporter whose
copy of the lesson is signed earlier than every other becomes the first publisher,
whose support never counts, while the publisher it displaces is not counted; support
then drops by one (common to candidate).  Under the policy ``any`` support never
drops as records are added.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from neverest.records import Record, RecordType

State = Literal["candidate", "common", "fading", "removed", "revoked"]

CANDIDATE: Final = "candidate"
COMMON: Final = "common"
FADING: Final = "fading"
REMOVED: Final = "removed"
REVOKED: Final = "revoked"
STATES: Final[frozenset[State]] = frozenset({CANDIDATE, COMMON, FADING, REMOVED, REVOKED})
# The states a tombstone keeps: once computed, a lesson never leaves them.
TERMINAL: Final[frozenset[State]] = frozenset({REMOVED, REVOKED})

_KINDS: Final = frozenset({"lesson", "confirm", "revoke", "refute"})


@dataclass(frozen=True)
class CommonsConfig:
    """The commons parameters; defaults as PROTOCOL.md §9 states them (N = 3, W = 90 days, quorum N)."""

    support_n: int = 3
    window_days: float = 90.0
    revoke_quorum: int = 3
    # Ten minutes absorbs ordinary clock drift between machines without letting a
    # record dated ahead pin its lesson's clock in the future.
    future_tolerance_s: float = 600.0

    def __post_init__(self) -> None:
        if self.support_n < 1 or self.revoke_quorum < 1:
            raise ValueError("support_n and revoke_quorum must be at least 1")
        if not self.window_days > 0:
            raise ValueError("window_days must be positive")
        if not self.future_tolerance_s >= 0:
            raise ValueError("future_tolerance_s must not be negative")


@dataclass(frozen=True)
class Fact:
    """What one record says about its lesson: its type, who signed it, and when."""

    kind: RecordType
    origin: str
    at: datetime  # timezone-aware: a lesson's ``updated``, a confirmation's or revocation's ``at``
    # When this memory first held the record, if known: a signed time is the signer's word, the time a
    # record reached this memory is not (``earned`` orders first claims by it).  Judging ignores it.
    held: datetime | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"kind {self.kind!r} is not one of lesson, confirm, revoke, refute")
        if self.at.tzinfo is None or (self.held is not None and self.held.tzinfo is None):
            raise ValueError("a fact's times must be timezone-aware")


def fact_of(record: Record) -> Fact:
    """The fact a verified record contributes to the lesson ``record.target``."""
    stamp = record.fields["updated" if record.type == "lesson" else "at"]
    return Fact(kind=record.type, origin=record.origin, at=datetime.fromisoformat(stamp))


def _nobody(origin: str) -> bool:
    return False


@dataclass(frozen=True)
class Trust:
    """A trust policy's answer: the origins that count (``trusted``), and those that only corroborate:
    their support counts for a lesson that enough trusted claimants back already (``judge``; the policy
    ``earned`` says who corroborates, the others nobody).  Called, it answers ``trusted``."""

    trusted: Callable[[str], bool]
    corroborating: Callable[[str], bool] = _nobody

    def __call__(self, origin: str) -> bool:
        return self.trusted(origin)


@dataclass(frozen=True)
class Verdict:
    """A lesson's state and the evidence for it.  Origin tuples are sorted."""

    state: State
    supporters: tuple[str, ...]  # the counted ones and the corroborating ones
    publishers: tuple[str, ...]
    first_publisher: str | None
    first_published: datetime | None  # the first publisher's earliest lesson record
    last_support: datetime | None  # the newest counted supporter's earliest supporting record
    revoked_by: tuple[str, ...]  # the origins whose revocations count, whether or not they suffice
    tombstone: bool  # the state just became final: the caller must write a tombstone now
    corroborators: tuple[str, ...] = ()  # the supporters that count only as corroboration (``Trust``)

    @property
    def support(self) -> int:
        return len(self.supporters)


def judge(
    facts: Iterable[Fact],
    *,
    now: datetime,
    config: CommonsConfig = CommonsConfig(),
    counts: Callable[[str], bool] | AbstractSet[str] | None = None,
    tombstone: str | None = None,
    held_since: datetime | None = None,
    quarantine_days: float = 0.0,
) -> Verdict:
    """The state of one lesson from ``facts``, every fact held about its hash.

    ``counts`` is the trust policy: the origins whose support and revocations count,
    as a predicate or a set; ``None`` counts every origin (the policy ``any``); a ``Trust``
    also names the origins whose support counts as corroboration.
    ``tombstone`` is the state of the tombstone the memory holds for the hash, if any.
    ``held_since``, with ``quarantine_days``, is when this memory first held the lesson:
    before ``held_since + quarantine_days`` a lesson that would be ``common`` is still a
    ``candidate`` here (the quarantine of the policy ``vouched``; 0 days: none).
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    if tombstone is not None and tombstone not in TERMINAL:
        raise ValueError(f"a tombstone is {REMOVED} or {REVOKED}, not {tombstone!r}")
    admitted = _policy(counts)
    horizon = now + timedelta(seconds=config.future_tolerance_s)

    published: dict[str, datetime] = {}  # origin -> its earliest lesson record
    supported: dict[str, datetime] = {}  # origin -> its earliest lesson or confirmation
    revokers: set[str] = set()
    for fact in facts:
        if fact.at > horizon or fact.kind == "refute":
            continue  # a refutation informs trust (``earned``); it never moves a state by itself
        if fact.kind == "revoke":
            revokers.add(fact.origin)
            continue
        _keep_earliest(supported, fact.origin, fact.at)
        if fact.kind == "lesson":
            _keep_earliest(published, fact.origin, fact.at)

    if not published:
        return Verdict(
            state=_terminal(tombstone) or CANDIDATE, supporters=(), publishers=(), first_publisher=None,
            first_published=None, last_support=None, revoked_by=(), tombstone=False,
        )

    first = min(published, key=lambda origin: (published[origin], origin))
    supporters = {o: at for o, at in supported.items() if o != first and admitted(o)}
    corroborators: set[str] = set()
    if isinstance(counts, Trust) and len(supporters) + admitted(first) >= config.support_n:
        corroborators = {o for o in supported if o != first and o not in supporters and counts.corroborating(o)}
    owners = {o for o in published if admitted(o)} or set(published)
    last_support = max(supporters.values(), default=None)
    clock = published[first] if last_support is None else max(published[first], last_support)

    state = _terminal(tombstone) or _state(
        support=len(supporters) + len(corroborators),
        age=now - clock,
        revoked=owners <= revokers or len(revokers & supporters.keys()) >= config.revoke_quorum,
        config=config,
    )
    if state == COMMON and held_since is not None and now - held_since < timedelta(days=quarantine_days):
        state = CANDIDATE
    return Verdict(
        state=state,
        supporters=tuple(sorted(supporters.keys() | corroborators)),
        publishers=tuple(sorted(published)),
        first_publisher=first,
        first_published=published[first],
        last_support=last_support,
        revoked_by=tuple(sorted(revokers & (owners | supporters.keys()))),
        tombstone=tombstone is None and state in TERMINAL,
        corroborators=tuple(sorted(corroborators)),
    )


def _state(*, support: int, age: timedelta, revoked: bool, config: CommonsConfig) -> State:
    """The transition table, for a lesson without a tombstone."""
    window = timedelta(days=config.window_days)
    if revoked:
        return REVOKED
    if age >= 2 * window:
        return REMOVED
    if support < config.support_n:
        return CANDIDATE
    return COMMON if age < window else FADING


def _terminal(tombstone: str | None) -> State | None:
    # Narrows the caller's string to a State; judge has already checked it is terminal.
    return REMOVED if tombstone == REMOVED else REVOKED if tombstone == REVOKED else None


def _policy(counts: Callable[[str], bool] | AbstractSet[str] | None) -> Callable[[str], bool]:
    if counts is None:
        return lambda origin: True
    if isinstance(counts, Trust):
        return counts.trusted  # called once per origin and fact: not through Trust.__call__
    if isinstance(counts, AbstractSet):
        return counts.__contains__
    return counts


def _keep_earliest(times: dict[str, datetime], origin: str, at: datetime) -> None:
    if origin not in times or at < times[origin]:
        times[origin] = at


# -- the trust policy "vouched" ----------------------------------------------------------


def vouched(verified: Mapping[str, int], refuted: Mapping[str, int], *, resolved: int, own: str,
            min_verified: int, min_resolved: int, allowed: AbstractSet[str] = frozenset()) -> Callable[[str], bool]:
    """The policy ``vouched``: which origins this memory lets count, from what it tested itself.

    ``verified[o]`` is the number of lessons ``o`` supported (published or confirmed) that
    came true in this memory's own sessions, ``refuted[o]`` the number it supported whose
    prediction failed here, ``resolved`` the number of lessons this memory has tested at
    all.  An origin counts when it is this memory, or is allowed by name, or when

    - this memory has tested at least ``min_resolved`` lessons itself: until it has, it
      could not yet have caught an origin that supports false lessons among true ones,
      so it vouches for nobody;
    - at least ``min_verified`` lessons the origin supported came true here (a track
      record this memory checked, which Sybil keys that only confirm each other lack);
    - and no lesson it supported was refuted here: one false claim seen first-hand is
      enough, since an honest memory only supports what happened in its own sessions.

    Echoing confirmations of true lessons earns a track record; it does not hide the false
    ones, which is why the policy waits for ``min_resolved`` tests, and why ``judge`` keeps a
    lesson out of ``common`` during a quarantine (``held_since``).  What it buys and where it
    fails is measured by the commons simulation (docs/simulations.md).
    """
    def counts(origin: str) -> bool:
        if origin == own or origin in allowed:
            return True
        return (resolved >= min_resolved and verified.get(origin, 0) >= min_verified
                and refuted.get(origin, 0) == 0)

    return counts


# -- the trust policy "earned" -----------------------------------------------------------
#
# Trust earned from verified history and passed along, after EigenTrust (Kamvar, Schlosser and
# Garcia-Molina, 2003), with this memory, and the origins its owner named, as the pre-trusted peers.
#
# Evidence.  Every record about a lesson is a *claim* by its origin: a lesson or a confirmation
# says "it holds" (my sessions bore it out), a refutation "it does not" (my sessions met its
# situation and it did not hold).  Each origin has one claim per lesson, its earliest (a
# publication wins over a refutation by the same origin: a publisher cannot refute its own
# lesson).  Between two origins i and j that claimed the same lesson:
#
# - *credit* i -> j, one per lesson: j made the first claim (the earliest signed; ties all
#   first) and i, later, claimed the same.  j said something before anyone else did, and i's own
#   sessions bore it out.  Only the first claim earns credit: echoing what others said first
#   (confirming every lesson as soon as it arrives) earns nothing, however many keys echo.
# - *contradiction* i <-> j: they claimed the opposite.  One of them is wrong about what its
#   sessions showed.
#
# Scores.  Each origin i spreads its trust over the origins it credits, in proportion to the
# credit, but never to an origin it contradicted (local trust c_ij).  This memory's scores are
# ``steps`` damped steps of EigenTrust from the pre-trusted: t0 = p, t(k+1) = a p + (1 - a) C^T t(k),
# where a = ``damping``, p is spread evenly over this memory and the origins its owner named
# (``neverestctl trust add``, ``trust_allow``; only this memory when it named none), and the trust
# of an origin that credits nobody returns to p.  So trust is bounded (it travels at most
# ``steps`` hops, and each hop keeps only 1 - a of it) and a key nobody credits has none, however
# many keys there are: Sybil keys that only confirm each other earn nothing from this memory
# unless it, an origin it named, or an origin they trust, credits them.
#
# Counting.  An origin counts when it is this memory, or it has trust, and it is not
# *discredited*: this memory contradicted it first-hand, or the trust of the origins (this memory
# excepted, and none discredited first-hand) that contradicted it exceeds its own trust.  A lie in
# a lesson this memory never met is caught by whoever met it, and their trust is what weighs.
# Transitions of one origin, as records arrive:
#
#     unknown      -> trusted       an origin with trust credits it (directly or through others)
#     trusted      -> discredited   contradicted first-hand, or by more trust than it holds
#     discredited  -> trusted       only if the contradiction weighs less again (its accusers
#                                   lost trust); a first-hand contradiction is final
#
# Corroboration.  A memory that only ever confirms (every lesson it met had been published
# before it met it) makes no first claim, so it earns no trust, however often its sessions bear
# out what others said: what it confirms is an echo to everyone else, since confirming alone is
# exactly what an echoing key does.  No rule can tell the two apart from the claims, so the
# rule bounds what confirming alone can buy rather than who can buy it: an origin that is not
# counted *corroborates* when it bore out (claimed later, the same way) at least ``corroboration``
# lessons that an origin counted here claimed first, and no origin with trust here (this memory
# included) contradicted it.  A corroborating origin's support counts only for a lesson that
# ``support_n`` claimants counted here back already (``judge``), its first publisher included:
# so a false lesson still needs ``support_n`` counted liars, as many as without corroboration
# (then the first publisher's trust did not matter and ``support_n`` counted supporters were
# needed), and what corroborating keys add is at most the last supporters of a lesson that
# trusted memories vouch for.  Corroborating origins pass no trust, weigh nothing in a
# contradiction, never move a lesson's clock and never count toward a revocation quorum.
#
# What the rule cannot do, measured by ``python -m simulations sweep``: a lie about a situation
# no honest memory meets is never contradicted, so an adversary that earned trust by echoing true
# lessons can carry it; the quarantine of ``judge`` (``held_since``) buys the time for someone to
# meet it.


@dataclass(frozen=True)
class TrustConfig:
    """The parameters of ``earned``."""

    damping: float = 0.15  # share of trust returned to this memory at every step (EigenTrust's a)
    steps: int = 6  # how many hops trust travels from this memory
    # Lessons first claimed by counted origins that an origin must have borne out to corroborate
    # (the comment above); 0: nobody corroborates.  One suffices: what corroboration buys is bounded
    # by the counted claimants a lesson needs, not by how hard corroborating is (an echo is free).
    corroboration: int = 1

    def __post_init__(self) -> None:
        if not 0.0 < self.damping < 1.0:
            raise ValueError("damping must be in (0, 1)")
        if self.steps < 1:
            raise ValueError("steps must be at least 1")
        if self.corroboration < 0:
            raise ValueError("corroboration must not be negative")


class _Sides(NamedTuple):
    credit: tuple[tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]], ...]  # (first claimants, later), per side
    pro: npt.NDArray[np.intp]
    con: npt.NDArray[np.intp]


class Evidence:
    """The claims held, one per (origin, lesson), from which credit and contradictions are read.

    Built by ``add_lesson`` (the facts about one lesson, in batches, in any order): what it holds
    depends only on the set of facts.  The daemon builds one from every record it holds; the
    simulator adds each night's records to one it keeps.  Nothing here is quadratic in the number
    of origins: ``counted_origins`` reads credit and contradictions only among the origins trust
    can reach, so a flood of keys costs their claims, never a matrix of them.
    """

    def __init__(self, origins: Iterable[str] = ()) -> None:
        self.origins: list[str] = []
        self.index: dict[str, int] = {}
        # lesson -> (origin indices, sorted; earliest support and refutation signed, in seconds; the same
        # as first held here; published)
        self._seen: dict[str, tuple[npt.NDArray[np.intp], npt.NDArray[np.float64], npt.NDArray[np.float64],
                                    npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.bool_]]] = {}
        # lesson -> its credit (per side: the first claimants, and the later ones on that side),
        # its supporters and its refuters
        self._sides: dict[str, _Sides] = {}
        self._pairs: tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]] | None = None  # _credit_pairs, until a claim
        for origin in origins:
            self._id(origin)

    def __len__(self) -> int:
        return len(self.origins)

    def _id(self, origin: str) -> int:
        i = self.index.get(origin)
        if i is None:
            i = self.index[origin] = len(self.origins)
            self.origins.append(origin)
        return i

    def add_lesson(self, lesson: str, facts: Iterable[Fact]) -> None:
        """The claims ``facts`` make about ``lesson`` (a revocation claims nothing)."""
        claims = [(self._id(f.origin), f.kind, f.at.timestamp(), (f.held or f.at).timestamp())
                  for f in facts if f.kind != "revoke"]
        if claims:
            self.add_claims(lesson, [c[0] for c in claims], [c[1] for c in claims], [c[2] for c in claims],
                            [c[3] for c in claims])

    def add_claims(self, lesson: str, who: Sequence[int], kinds: Sequence[str], at: Sequence[float],
                   held: Sequence[float] | None = None) -> None:
        """``add_lesson`` for callers that hold origin indices and signed times in seconds already;
        ``held``: when this memory first held each record (default: when it was signed)."""
        old = self._seen.get(lesson)
        if old is None:
            members = np.zeros(0, dtype=np.intp)
            support = refute = support_held = refute_held = np.zeros(0)
            published = np.zeros(0, dtype=bool)
        else:
            members, support, refute, support_held, refute_held, published = old
        new = np.setdiff1d(np.asarray(who, dtype=np.intp), members)
        unknown = np.full(len(new), math.inf)
        members = np.concatenate([members, new])
        order = np.argsort(members, kind="stable")  # concatenate copies: the arrays held stay as they were
        members = members[order]
        support = np.concatenate([support, unknown])[order]
        refute = np.concatenate([refute, unknown])[order]
        support_held = np.concatenate([support_held, unknown])[order]
        refute_held = np.concatenate([refute_held, unknown])[order]
        published = np.concatenate([published, np.zeros(len(new), dtype=bool)])[order]
        pos = np.searchsorted(members, np.asarray(who, dtype=np.intp))
        kind = np.asarray(kinds)
        times = np.asarray(at, dtype=np.float64)
        # A record cannot have reached this memory before it was signed: a later signed time is a clock's error.
        reached = times if held is None else np.maximum(np.asarray(held, dtype=np.float64), times)
        is_refute = kind == "refute"
        np.minimum.at(refute, pos[is_refute], times[is_refute])
        np.minimum.at(support, pos[~is_refute], times[~is_refute])
        np.minimum.at(refute_held, pos[is_refute], reached[is_refute])
        np.minimum.at(support_held, pos[~is_refute], reached[~is_refute])
        published[pos[kind == "lesson"]] = True
        self._seen[lesson] = (members, support, refute, support_held, refute_held, published)
        # One claim per origin: its earliest; a publisher never refutes its own lesson.
        holds = published | (support <= refute)
        claim_at = np.where(holds, support, refute)
        claim_held = np.where(holds, support_held, refute_held)
        # A claim signed before the lesson's first publication is no claim: no honest memory confirms or
        # refutes a lesson before it exists, and a back-dated confirmation would otherwise take the first
        # claim's credit.  Until a publication is held, the lesson is no evidence at all.
        if published.any():
            real = published | (claim_at >= support[published].min())
        else:
            real = np.zeros_like(published)
        members, holds, claim_at, claim_held = members[real], holds[real], claim_at[real], claim_held[real]
        credit = []
        for side in (holds, ~holds):
            if side.any():
                # First: the claims this memory held first, and of those the earliest signed (ties are all
                # first).  Ordering by when a claim arrived, not by what it says, is what keeps a copy signed
                # with an earlier time than the original, and delivered after it, from taking its credit.
                reached = claim_held[side].min()
                first_at = claim_at[side & (claim_held == reached)].min()
                firsts = side & (claim_held == reached) & (claim_at == first_at)
                credit.append((members[firsts], members[side & ~firsts]))
        self._sides[lesson] = _Sides(tuple(credit), members[holds], members[~holds])
        self._pairs = None

    def _credit_pairs(self) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
        """(i, j) once per lesson on which j made the first claim and i, later, the same one; read by both
        ``reachable`` and ``submatrices``, so kept until the next claim."""
        if self._pairs is not None:
            return self._pairs
        rows, cols = [], []
        for sides in self._sides.values():
            for firsts, later in sides.credit:
                if len(firsts) and len(later):
                    rows.append(np.repeat(later, len(firsts)))
                    cols.append(np.tile(firsts, len(later)))
        if not rows:
            self._pairs = np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp)
        else:
            self._pairs = np.concatenate(rows), np.concatenate(cols)
        return self._pairs

    def submatrices(self, keep: npt.NDArray[np.intp]) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """``credit[i, j]`` (lessons on which j claimed first and i bore it out) and ``contra[i, j]``
        (lessons on which they claimed the opposite, symmetric) among the origins ``keep``, in that order."""
        where = np.full(len(self.origins), -1, dtype=np.intp)
        where[keep] = np.arange(len(keep))
        credit = np.zeros((len(keep), len(keep)), dtype=np.float32)
        contra = np.zeros((len(keep), len(keep)), dtype=np.float32)
        rows, cols = self._credit_pairs()
        r, c = where[rows], where[cols]
        ok = (r >= 0) & (c >= 0)
        np.add.at(credit, (r[ok], c[ok]), 1.0)
        for sides in self._sides.values():
            pro, con = where[sides.pro], where[sides.con]
            pro, con = pro[pro >= 0], con[con >= 0]
            if len(pro) and len(con):
                contra[np.ix_(pro, con)] += 1.0
                contra[np.ix_(con, pro)] += 1.0
        return credit, contra

    def contradictions(self, rows: npt.NDArray[np.intp], cols: npt.NDArray[np.intp]) -> npt.NDArray[np.float32]:
        """``contra[i, j]`` between the origins ``rows`` and ``cols`` (two sets, in those orders): the lessons
        on which they claimed the opposite."""
        at_row = np.full(len(self.origins), -1, dtype=np.intp)
        at_row[rows] = np.arange(len(rows))
        at_col = np.full(len(self.origins), -1, dtype=np.intp)
        at_col[cols] = np.arange(len(cols))
        contra = np.zeros((len(rows), len(cols)), dtype=np.float32)
        for sides in self._sides.values():
            for one, other in ((sides.pro, sides.con), (sides.con, sides.pro)):
                i, j = at_row[one], at_col[other]
                i, j = i[i >= 0], j[j >= 0]
                if len(i) and len(j):
                    contra[np.ix_(i, j)] += 1.0
        return contra

    def matrices(self) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """Credit and contradictions among every origin (for tests and small memories)."""
        return self.submatrices(np.arange(len(self.origins)))

    def reachable(self, roots: npt.NDArray[np.intp], hops: int) -> npt.NDArray[np.intp]:
        """The origins within ``hops`` credit steps of a root, roots included: the only ones trust can reach."""
        rows, cols = self._credit_pairs()
        seen = np.zeros(len(self.origins), dtype=bool)
        seen[roots] = True
        frontier = seen.copy()
        for _ in range(hops):
            step = np.zeros_like(seen)
            step[cols[frontier[rows]]] = True
            frontier = step & ~seen
            if not frontier.any():
                break
            seen |= frontier
        return np.flatnonzero(seen)


@dataclass(frozen=True)
class Standing:
    """What ``earned`` says of every origin (rows, ``Evidence`` order) for each root (columns)."""

    counted: npt.NDArray[np.bool_]  # counts: the root, a named origin, or trust and not discredited
    corroborating: npt.NDArray[np.bool_]  # not counted, but corroborates (the comment above)
    trust: npt.NDArray[np.float32]  # the EigenTrust score
    borne: npt.NDArray[np.float32]  # lessons it bore out that an origin counted by the root claimed first
    direct: npt.NDArray[np.float32]  # lessons it claimed first that the root itself bore out


# Every number multiplied here is a count or a trust share, finite by construction.  OpenBLAS now and then
# leaves the FPU's "invalid" flag set after a product of such numbers (numpy issues 13173 and 24067,
# OpenBLAS 1924), and numpy then printed "RuntimeWarning: invalid value encountered in matmul" on a user's
# terminal (seen once in five runs of examples/share-by-folder.sh): a flag, not a NaN.
@np.errstate(invalid="ignore")
def standing(evidence: Evidence, roots: Sequence[int], config: TrustConfig = TrustConfig(),
             named: Sequence[Sequence[int]] = ()) -> Standing:
    """``earned`` for each root (column): which origins count, which corroborate, and the figures that say
    why.  ``named[k]``: the origins root k's owner named, pre-trusted with it (none when not given)."""
    n, r = len(evidence), len(roots)
    idx, cols = np.asarray(roots, dtype=np.intp), np.arange(len(roots))
    chosen = [np.asarray(named[k] if k < len(named) else (), dtype=np.intp) for k in range(r)]
    # Trust can only ever sit on an origin within config.steps credit steps of the pre-trusted: compute on those.
    active = evidence.reachable(np.concatenate([idx, *chosen]), config.steps)
    credit, contra = evidence.submatrices(active)
    where = np.full(n, -1, dtype=np.intp)
    where[active] = np.arange(len(active))
    local = np.where(contra > 0, np.float32(0.0), credit)
    out = local.sum(axis=1)
    dangling = out <= 0
    step = np.ascontiguousarray((local / np.where(dangling, np.float32(1.0), out)[:, None]).T)
    pre = np.zeros((len(active), r), dtype=np.float32)
    for k, extra in enumerate(chosen):
        pre[where[extra], k] = 1.0
    pre[where[idx], cols] = 1.0
    pre /= pre.sum(axis=0, keepdims=True)
    t = pre.copy()
    a = np.float32(config.damping)
    for _ in range(config.steps):
        returned = t[dangling].sum(axis=0)  # trust held by origins that credit nobody goes home
        t = a * pre + (1 - a) * (step @ t + pre * returned)
    # Discredited: contradicted by the root itself, or by more trust than the origin holds.
    first_hand = (contra[where[idx], :] > 0).T
    weight = np.where(first_hand, np.float32(0.0), t)
    weight[where[idx], cols] = 0.0
    accused = (contra > 0).astype(np.float32).T @ weight
    ok = (t > 0) & ~first_hand & ~(accused > t)
    for k, extra in enumerate(chosen):
        ok[where[extra], k] = True
    ok[where[idx], cols] = True
    counted = np.zeros((n, r), dtype=bool)
    counted[active] = ok
    trust = np.zeros((n, r), dtype=np.float32)
    trust[active] = t
    direct = np.zeros((n, r), dtype=np.float32)
    direct[active] = credit[where[idx], :].T
    borne = np.zeros((n, r), dtype=np.float32)
    corroborating = np.zeros((n, r), dtype=bool)
    # Corroborating: the origins that bore out first claims of counted origins (they credit them), found
    # from the credit pairs whose first claimant is within reach; a flood of echoes costs its pairs.
    later, first = evidence._credit_pairs()
    inside = where[first] >= 0
    later, first = later[inside], where[first[inside]]
    if len(later):
        who = np.unique(later)
        bore = np.zeros((len(who), len(active)), dtype=np.float32)
        np.add.at(bore, (np.searchsorted(who, later), first), 1.0)
        borne[who] = bore @ ok.astype(np.float32)
        if config.corroboration > 0:
            against = evidence.contradictions(who, active) > 0
            blamed = (against.astype(np.float32) @ weight > 0) | against[:, where[idx]]
            corroborating[who] = (borne[who] >= config.corroboration) & ~blamed & ~counted[who]
    return Standing(counted=counted, corroborating=corroborating, trust=trust, borne=borne, direct=direct)


def counted_origins(evidence: Evidence, roots: Sequence[int], config: TrustConfig = TrustConfig()
                    ) -> npt.NDArray[np.bool_]:
    """For each root (column), which origins (rows) count under ``earned`` (module comment above)."""
    return standing(evidence, roots, config).counted


def evidence_of(facts_by_lesson: Mapping[str, Iterable[Fact]], *, own: str,
                named: AbstractSet[str] = frozenset()) -> Evidence:
    """The claims of ``facts_by_lesson``; ``own`` is the first origin, then the ``named`` ones, sorted."""
    evidence = Evidence([own, *sorted(named - {own})])
    for lesson, facts in facts_by_lesson.items():
        evidence.add_lesson(lesson, facts)
    return evidence


def earned_standing(facts_by_lesson: Mapping[str, Iterable[Fact]], *, own: str, config: TrustConfig = TrustConfig(),
                    allowed: AbstractSet[str] = frozenset()) -> tuple[Evidence, Standing]:
    """``standing`` for the memory ``own`` (its column 0), with the evidence its rows index."""
    evidence = evidence_of(facts_by_lesson, own=own, named=allowed)
    return evidence, standing(evidence, [0], config, [[evidence.index[o] for o in sorted(allowed - {own})]])


def earned(facts_by_lesson: Mapping[str, Iterable[Fact]], *, own: str, config: TrustConfig = TrustConfig(),
           allowed: AbstractSet[str] = frozenset()) -> Trust:
    """The policy ``earned`` for the memory ``own``: which origins count and which corroborate, from every
    fact it holds (its own tests among them, as facts signed by ``own``).  ``allowed``: the origins its owner
    named, which always count and are pre-trusted with it."""
    evidence, result = earned_standing(facts_by_lesson, own=own, config=config, allowed=allowed)
    counted = {o for o, f in zip(evidence.origins, result.counted[:, 0].tolist(), strict=True) if f}
    counted |= set(allowed) | {own}
    backing = {o for o, f in zip(evidence.origins, result.corroborating[:, 0].tolist(), strict=True) if f}
    return Trust(trusted=counted.__contains__, corroborating=backing.__contains__)
