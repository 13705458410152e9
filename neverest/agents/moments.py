"""Whether a tool call is the moment a lesson is about: its program and its traits, not bare words.

A lesson about a mistake helps when it reaches the agent just before the mistake, and only then.
Before a shell call the hook used to give every error lesson that shared a word with the command,
so a lesson about unquoted route-group paths (a failure of ``ls app/(protected)``) came with
``ls -la`` and ``git status`` too.  Here a lesson is read for the situation its sentence names
(the sentences are the templates of ``neverest.memory.phrasing``, the same for lessons received
from other memories):

- a **trait** of the command ("an unquoted path holding `(`"): the call must have that trait,
  whatever its program;
- a **program** ("pip install fails …", "python is not installed here …", "The person wanted pnpm
  rather than npm", "The person refused to let the agent run git push"): the call must run that
  program (and that sub-command when the lesson names one);
- neither: the call must share at least two key words with the lesson (words that are not filler,
  flags or numbers), so one shared word such as "ls" or "git" is not enough.

Standard library only: the hook imports this on every tool call.
"""

from __future__ import annotations

import re
from typing import Final

from neverest.memory import shellwords
from neverest.memory.keyterms import GENERIC

_PAREN_TRAIT: Final = "unquoted path holding `(`"
_GLOB_TRAIT: Final = "unquoted glob or bracket"
_SCRIPT_TRAIT: Final = "Shell scripts here"
# Lesson sentences that name a program, as the templates write them.
_NAMES_PROGRAM: Final = (
    re.compile(r"^([\w.+-]+(?: [a-z][\w-]*)?) (?:fails|is blocked|runs out|reports|hangs|needs|requires|exits|"
               r"crashes|times out|is rejected|returns)\b"),
    re.compile(r"^([\w.+-]+) is not installed here"),
    re.compile(r"^The person (?:refused to let the agent run|stopped the agent while it ran|objected when the "
               r"agent ran) ([\w.+-]+(?: [a-z][\w-]*)?)$"),
    # "wanted pnpm rather than npm": the moment is the call to npm, the one the person did not want.
    re.compile(r"^The person wanted (?:the agent to use )?(?:[\w.+-]+) rather than ([\w.+-]+)$"),
)
_KEY: Final = re.compile(r"[A-Za-z][\w.+-]{2,}")
# The words of a query that say nothing of its subject (keyterms.GENERIC), and the words the lesson
# templates themselves are written in.
_FILLER: Final = GENERIC | frozenset(
    "works here there project person agent shell command commands path paths file files folder ran wanted rather "
    "instead holding because installed exist exists".split())


def command_programs(command: str) -> list[tuple[str, str]]:
    """(program, first argument) of each simple command of a shell line that does work."""
    return [(found[0].rsplit("/", 1)[-1], next((w for w in found[1:] if not w.startswith("-")), ""))
            for found in shellwords.working(command)]


def command_traits(command: str) -> set[str]:
    """The traits a lesson may name, as this command has them."""
    traits = set()
    if shellwords.bare_paren_path(command):
        traits.add(_PAREN_TRAIT)
    if shellwords.bare_glob(command) and not command.lstrip().startswith(("[", "test ")):
        traits.add(_GLOB_TRAIT)
    if any(w.endswith(".sh") for w in shellwords.words(command)):
        traits.add(_SCRIPT_TRAIT)
    return traits


def lesson_situation(text: str) -> tuple[str, set[str]]:
    """What a lesson's sentence says its moment is: ("trait", {trait}), ("program", {programs}) or
    ("words", {key words})."""
    for trait in (_PAREN_TRAIT, _GLOB_TRAIT, _SCRIPT_TRAIT):
        if trait in text:
            return "trait", {trait}
    for pattern in _NAMES_PROGRAM:
        found = pattern.match(text)
        if found:
            return "program", {g for g in found.groups() if g}
    return "words", {w.lower() for w in _KEY.findall(text)} - _FILLER


class Call:
    """What a shell call is, read once for all the lessons weighed against it."""

    def __init__(self, command: str) -> None:
        self.traits = command_traits(command)
        self.programs = command_programs(command)
        self.words = {w.lower() for w in _KEY.findall(command)} - _FILLER


def bears_on_call(text: str, command: str | Call) -> bool:
    """Whether the lesson ``text`` is about the moment a shell call ``command`` is."""
    call = command if isinstance(command, Call) else Call(command)
    kind, keys = lesson_situation(text)
    if kind == "trait":
        return bool(keys & call.traits)
    programs = call.programs
    if kind == "program":
        for key in keys:
            program, _, sub = key.partition(" ")
            if any(p == program and (not sub or a == sub) for p, a in programs):
                return True
        return False
    return len(keys & call.words) >= 2
