"""The world the commons experiment plays in: what is true, who meets it, who lies.

- **Contexts** (a language, a tool, a kind of project): each honest agent works in
  ``contexts_per_agent`` of ``contexts``, and each night has ``sessions_per_night``
  sessions, each in one of its contexts.
- **True phenomena**: ``true_lessons`` facts, each in one context ("the build of stack 7
  fails with error E12 after a lockfile upgrade").  In a session in its context an agent
  does the thing the phenomenon is about with probability ``meet_probability``, and then
  meets it: it learns the lesson itself (its own lesson, published) or, holding it
  already from someone else, sees its prediction come true (a confirmation).
- **False lessons**: ``false_per_adversary`` per adversary, each about one context; the
  claimed outcome never happens.  An honest agent that holds one and does the thing in
  a session sees its prediction fail: a refutation, a fact only that agent knows.
- **Adversaries** are ordinary members: they gossip, and honest agents' peer tables hold
  them at their share of the population.  What they do is their strategy
  (adversaries.py); the default, ``collude``: publish the false lessons (spread over the
  first ``false_publish_nights`` nights), confirm every false lesson they hold, echo a
  confirmation of every true lesson they hold to build a track record, run
  ``sybils_per_adversary`` Sybil keys that do the same (relayed by their adversary; not
  peers), and forge one record a night (a confirmation under an honest agent's key,
  which the signature check refuses).

This is the "lighter path" of the issue: a session's outcome is drawn here instead of
running the events-and-sleep pipeline, but what follows is the real code: records
signed with ``neverest.records``, verified by ``records.parse``, judged by
``neverest.commons.judge`` under the real trust policies.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from neverest.records import lesson_hash


@dataclass(frozen=True)
class WorldOptions:
    contexts: int = 20
    contexts_per_agent: int = 4
    sessions_per_night: int = 2
    true_lessons: int = 60
    meet_probability: float = 0.3
    false_per_adversary: float = 0.1
    false_publish_nights: int = 10
    sybils_per_adversary: int = 1
    peers_per_agent: int = 8
    fanout: int = 3  # the daemon's default: peers per round
    rounds_per_night: int = 12  # gossip rounds between two sleeps that the simulation plays


KIND = "error"


@dataclass(frozen=True)
class Lesson:
    index: int
    context: int
    true: bool
    text: str
    hash: str


def lessons(opts: WorldOptions, false_count: int, rng: random.Random) -> list[Lesson]:
    """The true phenomena (spread evenly over the contexts) and the false claims (at random contexts)."""
    out = []
    for i in range(opts.true_lessons):
        c = i % opts.contexts
        text = f"the build of stack {c} fails with error E{100 + i} after a lockfile upgrade"
        out.append(Lesson(i, c, True, text, lesson_hash(KIND, text)))
    for k in range(false_count):
        out.append(false_lesson(opts.true_lessons + k, rng.randrange(opts.contexts)))
    return out


def false_lesson(index: int, context: int) -> Lesson:
    """The false claim number ``index``, about ``context`` (an adversary may choose where to place it)."""
    text = f"the test runner of stack {context} drops output when error E{100 + index} is raised"
    return Lesson(index, context, False, text, lesson_hash(KIND, text))
