"""The words of a shell command line, read once the same way by every rule that looks at commands.

The session reader (what worked after a failure), the error classes (exits that are answers), the
phrasing (the program a lesson names) and the hook (the moment a lesson is about) all ask the same
questions of a command: its words, its simple commands, and which of those do the work.  A Codex
argument list ``["bash", "-lc", script]`` is read as its script.

Standard library only: the hook imports it on every tool call.
"""

from __future__ import annotations

import re
import shlex
from typing import Final

MAX_CHARS: Final = 2000
SEPARATORS: Final = frozenset({"&&", "||", ";", "|", "&"})
# Words that run the next word: the program is after them.
WRAPPERS: Final = frozenset({"sudo", "env", "time", "command", "exec", "nohup", "nice", "(", "{"})
# Simple commands that only set the shell up: the work is in another one.
SETUP: Final = frozenset({"cd", "pushd", "popd", "export", "source", ".", "set", "unset", "true", "echo", "sleep"})
_SHELLS: Final = frozenset({"bash", "sh", "zsh"})


def words(command: str | list[str]) -> list[str]:
    """The words of ``command`` as the shell reads them (split on whitespace when its quoting is broken)."""
    if isinstance(command, list):
        given = [w for w in command if isinstance(w, str)]
        if len(given) >= 3 and given[0].rsplit("/", 1)[-1] in _SHELLS and given[1] in ("-c", "-lc"):
            return words(given[2])
        return given
    try:
        return shlex.split(command[:MAX_CHARS], comments=True)
    except ValueError:
        return command[:MAX_CHARS].split()


def segments(command: str | list[str]) -> list[list[str]]:
    """The simple commands of a shell line, split at ``&& || ; | &``."""
    out: list[list[str]] = [[]]
    for word in words(command):
        if word in SEPARATORS:
            out.append([])
        else:
            out[-1].append(word)
    return [segment for segment in out if segment]


def bare(segment: list[str]) -> list[str]:
    """A simple command without its wrappers (``sudo``, ``env``…) and variable assignments (``FOO=1``)."""
    return [w for w in segment if w not in WRAPPERS and "=" not in w.split("/", 1)[0]]


def working(command: str | list[str]) -> list[list[str]]:
    """The simple commands that do the work, bare: ``cd x && FOO=1 pytest -q`` is ``[["pytest", "-q"]]``."""
    return [words_ for words_ in (bare(s) for s in segments(command)) if words_ and words_[0] not in SETUP]


def program(segment: list[str]) -> str:
    """The program a simple command runs, by its file name."""
    found = bare(segment)
    return found[0].rsplit("/", 1)[-1] if found else ""


def unquoted(command: str) -> list[str]:
    """The words of ``command`` that stand outside quotes and escapes (a rough split, for traits only)."""
    return re.sub(r"'[^']*'|\"[^\"]*\"|\\.", " ", command).split()


def bare_paren_path(command: str) -> bool:
    """Whether an unquoted path holds ``(`` (a Next.js route group such as ``app/(auth)``), which the shell
    reads as syntax; a command substitution ``$(…)`` is not one."""
    return any("(" in w and ("/" in w or w.startswith("(")) and not w.startswith("$(") for w in unquoted(command))


def bare_glob(command: str) -> bool:
    """Whether an unquoted word holds a glob or bracket character (``[ ] * ?``)."""
    return any(ch in w for w in unquoted(command) for ch in "[]*?")
