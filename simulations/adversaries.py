"""What the commons experiment's adversaries do: one named strategy each.

Every strategy plays with the same cast: the world's adversaries (``--adversaries``, a
fraction of the agents: 30 % in the sweep), ordinary members that gossip and sit in
honest agents' peer tables at their share, and their Sybil keys (``--sybils`` per
adversary: 10 in the sweep, "10:1 Sybils"), which are not members: an adversary signs
their records and relays them as its own holdings.  The false lessons are claims about
one context whose outcome never happens (world.py): ``false_per_adversary`` of them per
adversary (0.1: 30 at N = 1 000), each published by one adversary on a night drawn from
the first ``false_publish_nights`` (10).  An adversary knows which lessons are its own
lies and takes every other lesson for true; it acts on a lesson once per key, on the
first night it holds it, signing with the real Ed25519 keys (signer.py).  What honest
agents do is the same under every strategy (commons.py): they confirm the lessons that
come true in their sessions and refute, once, the false ones they hold and meet.

``collude``
    The baseline, and the behaviour before strategies had names: publish the false
    lessons; every adversary key confirms every false lesson it holds and echoes a
    confirmation of every true lesson it holds, to build a track record; each adversary
    forges one record a night (a confirmation in an honest agent's name, which the
    signature check refuses).

``echo``
    Earn as much trust as the protocol lets a key earn: every key supports every true
    lesson the night it holds it in both ways a memory can, a confirmation *and* its
    own copy of the lesson (a second publisher counts as support too, and a publisher's
    copy is what a withdrawal must also reach); it never forges (a refused record is
    evidence against its sender); the lies are told as ``collude`` tells them.

``clean-then-lie``
    A clean record first: for the first ``clean_nights`` nights (10 of 30) the keys only
    echo true lessons, publish no false one and forge nothing; the false lessons are
    published on the ``false_publish_nights`` nights after that, and from then on the
    adversaries collude on them as ``collude`` does.

``lie-rarely``
    Few lies, each told by few keys: ``rare_false_per_adversary`` false lessons per
    adversary (0.02: 6 at N = 1 000; at least one), each supported by its author and by
    each other key with probability ``lie_probability`` (0.15, drawn once per key and
    lesson); every key echoes every true lesson; no forgeries.

``rare-contexts``
    The lies go where few honest agents could test them: the adversaries know every
    honest agent's contexts (the worst case) and place every false lesson in the
    ``rare_contexts`` (1) contexts the fewest honest agents work in, among those at least
    one works in (a lie about a context nobody works in misleads no session; ties go to
    the lower context), then collude on them as ``collude`` does.

``sybil-swarm``
    Sybil keys ten times (``swarm_factor``) the honest population instead of
    ``sybils_per_adversary`` each (7 000 at N = 1 000), spread evenly over the
    adversaries, all of them echoing true lessons and confirming false ones, as
    ``collude``.

``refute-spam``
    Attack the truth instead of vouching for lies: every adversary key refutes every
    true lesson it holds (a signed refutation, ``records.sign_refute``) and confirms
    every false lesson it holds, and the false lessons are published and forged as in
    ``collude``.

``backdate``
    Steal the credit of the first claim, which is what ``earned`` rewards: every key
    publishes its own copy of every true lesson it holds, dated ``backdate_s`` (60 s)
    before the earliest honest copy of that lesson (a signer writes what time it likes
    into its records; the adversaries are granted that knowledge, the worst case); it
    never forges; the lies are told as ``collude`` tells them.  Not one of the issue's
    seven strategies: it was added after the sweep, and made false lessons common until
    ``earned`` ordered first claims by when they were held rather than by their signed
    time (commons.Run.update_earned takes the night a record was made).

The knobs are ``Tactics``; ``Strategy.night`` is called by ``commons.Run.adversaries``
with the run's session stream (the forgeries' victims are drawn from it, as before the
strategies existed), and every other choice is either drawn from the world's stream when
the world is made or a pure function of the seed, so a run is reproducible from
``--seed``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final

from simulations.ledger import CONFIRM, LESSON, REFUTE
from simulations.world import false_lesson

if TYPE_CHECKING:
    from simulations.commons import World

STRATEGIES: Final = ("collude", "echo", "clean-then-lie", "lie-rarely", "rare-contexts", "sybil-swarm",
                     "refute-spam", "backdate")


@dataclass(frozen=True)
class Tactics:
    """The strategies' knobs (each strategy reads its own)."""

    clean_nights: int = 10  # clean-then-lie
    lie_probability: float = 0.15  # lie-rarely: the chance that a key supports a false lesson
    rare_false_per_adversary: float = 0.02  # lie-rarely
    rare_contexts: int = 1  # rare-contexts
    swarm_factor: int = 10  # sybil-swarm: Sybil keys per honest agent
    backdate_s: float = 60.0  # backdate: how long before the earliest copy a key dates its own

    def __post_init__(self) -> None:
        if self.clean_nights < 0 or self.rare_contexts < 1 or self.swarm_factor < 0 or self.backdate_s < 0:
            raise ValueError("clean_nights, swarm_factor and backdate_s must not be negative, rare_contexts must be "
                             "at least 1")
        if not 0.0 <= self.lie_probability <= 1.0 or self.rare_false_per_adversary < 0:
            raise ValueError("lie_probability must be in [0, 1] and rare_false_per_adversary not negative")


class Strategy:
    """``collude``; the other strategies change some of its steps."""

    name = "collude"

    def __init__(self, tactics: Tactics, seed: int) -> None:
        self.tactics, self.seed = tactics, seed

    # -- the world, when it is made ---------------------------------------------------------

    def sybils(self, adversaries: int, honest: int, per_adversary: int) -> int:
        """How many Sybil keys the adversaries run in all."""
        return adversaries * per_adversary

    def false_count(self, adversaries: int, per_adversary: float) -> int:
        return round(per_adversary * adversaries)

    def place(self, world: World) -> None:
        """Move the false lessons once the honest agents' contexts are known (none move here)."""

    def publish_night(self, drawn: int) -> int:
        """The night a false lesson is published, from the night ``drawn`` in 1..false_publish_nights."""
        return drawn

    # -- each night -------------------------------------------------------------------------

    def acts(self, signer: int, lesson: int, true: bool, night: int) -> tuple[int, ...] | None:
        """The records key ``signer`` signs about a lesson it holds and has not acted on yet
        (record kinds; ``()``: none, ever; ``None``: not yet)."""
        return (CONFIRM,)

    def forges(self, night: int) -> bool:
        return True

    def sign(self, world: World, holder: int, todo: list[tuple[int, int, int]], when: datetime) -> None:
        """Sign the night's ``(signer, kind, lesson)`` records, held by ``holder``."""
        world.sign_many(holder, todo, when)

    def night(self, world: World, night: int, when: datetime, rng: random.Random) -> None:
        for f in world.false:
            author = world.false_author[f]
            if world.false_night[f] == night:
                world.publish(author, f, when)
                world.acted[author].add(f)
        for a in world.adversaries:
            holding = world.held_lessons(a)
            todo: list[tuple[int, int, int]] = []  # (signer, kind, lesson)
            for signer in (a, *world.sybils_of[a]):
                done = world.acted[signer]
                for lesson in sorted(holding - done):
                    kinds = self.acts(signer, lesson, world.lessons[lesson].true, night)
                    if kinds is None:
                        continue
                    done.add(lesson)
                    todo.extend((signer, kind, lesson) for kind in kinds)
            self.sign(world, a, todo, when)
            if self.forges(night) and world.false and world.honest:
                world.forge(a, rng.choice(world.false), rng.choice(world.honest), when)


class Echo(Strategy):
    name = "echo"

    def acts(self, signer: int, lesson: int, true: bool, night: int) -> tuple[int, ...] | None:
        return (CONFIRM, LESSON) if true else (CONFIRM,)

    def forges(self, night: int) -> bool:
        return False


class CleanThenLie(Strategy):
    name = "clean-then-lie"

    def publish_night(self, drawn: int) -> int:
        return self.tactics.clean_nights + drawn

    def acts(self, signer: int, lesson: int, true: bool, night: int) -> tuple[int, ...] | None:
        return (CONFIRM,) if true or night > self.tactics.clean_nights else None

    def forges(self, night: int) -> bool:
        return night > self.tactics.clean_nights


class LieRarely(Strategy):
    name = "lie-rarely"

    def false_count(self, adversaries: int, per_adversary: float) -> int:
        return max(1, round(self.tactics.rare_false_per_adversary * adversaries)) if adversaries else 0

    def acts(self, signer: int, lesson: int, true: bool, night: int) -> tuple[int, ...] | None:
        if true:
            return (CONFIRM,)
        # Drawn once per key and lesson, from the seed alone: the same whatever the order of play.
        coin = random.Random(f"{self.seed}/lie-rarely/{signer}/{lesson}").random()
        return (CONFIRM,) if coin < self.tactics.lie_probability else ()

    def forges(self, night: int) -> bool:
        return False


class RareContexts(Strategy):
    name = "rare-contexts"

    def place(self, world: World) -> None:
        workers = {c: 0 for c in range(world.opts.world.contexts)}
        for agent in world.agents.values():
            for c in agent.contexts:
                workers[c] += 1
        ranked = sorted((c for c in workers if workers[c] > 0), key=lambda c: (workers[c], c))
        chosen = ranked[:self.tactics.rare_contexts]
        if not chosen:
            return  # no honest agent works anywhere: nowhere to hide a lie from
        for k, f in enumerate(le.index for le in world.lessons if not le.true):
            world.lessons[f] = false_lesson(f, chosen[k % len(chosen)])


class SybilSwarm(Strategy):
    name = "sybil-swarm"

    def sybils(self, adversaries: int, honest: int, per_adversary: int) -> int:
        return self.tactics.swarm_factor * honest if adversaries else 0


class RefuteSpam(Strategy):
    name = "refute-spam"

    def acts(self, signer: int, lesson: int, true: bool, night: int) -> tuple[int, ...] | None:
        return (REFUTE,) if true else (CONFIRM,)


class Backdate(Strategy):
    name = "backdate"

    def acts(self, signer: int, lesson: int, true: bool, night: int) -> tuple[int, ...] | None:
        return (LESSON,) if true else (CONFIRM,)

    def forges(self, night: int) -> bool:
        return False

    def sign(self, world: World, holder: int, todo: list[tuple[int, int, int]], when: datetime) -> None:
        lies = [t for t in todo if t[1] != LESSON]
        world.sign_many(holder, lies, when)
        copies: dict[int, list[tuple[int, int, int]]] = {}
        for t in todo:
            if t[1] == LESSON:
                copies.setdefault(t[2], []).append(t)
        for lesson, group in copies.items():
            earliest = world.first_published.get(lesson, when)
            world.sign_many(holder, group, when, signed=earliest - timedelta(seconds=self.tactics.backdate_s))


_BY_NAME: Final[dict[str, Callable[[Tactics, int], Strategy]]] = {
    cls.name: cls for cls in (Strategy, Echo, CleanThenLie, LieRarely, RareContexts, SybilSwarm, RefuteSpam,
                              Backdate)}
assert tuple(_BY_NAME) == STRATEGIES


def strategy(name: str, tactics: Tactics, seed: int) -> Strategy:
    """The strategy called ``name``."""
    try:
        return _BY_NAME[name](tactics, seed)
    except KeyError:
        raise ValueError(f"unknown adversary strategy {name!r}: one of {', '.join(STRATEGIES)}") from None
