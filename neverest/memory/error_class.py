"""What kind of failure an error is, and which failures are no failure at all.

Used on both sides of the memory: the session reader (``neverest.agents.detect``) decides
with it whether a tool call failed and keys an error episode by its class; the phrasing
(``neverest.memory.phrasing``) writes one sentence per class.  Both read the same output,
so an error remembered by hand (``neverestctl remember --kind error``) is classed as one
read from a session file.

The classes are read from the output, first match wins, in an order that puts the specific
before the general (a sandbox denial before a permission error, a missing module before a
missing file).  ``OTHER`` is what none of the patterns name.

``benign_exit`` knows the programs whose non-zero exit is an answer, not a failure: grep and
its kin exit 1 when nothing matches, diff and cmp when files differ, ``test``/``[`` when the
condition is false, ``git diff --quiet``/``--exit-code`` when there is a difference, ``git
commit`` when there is nothing to commit, ``which``/``command -v`` when a program is absent.
"""

from __future__ import annotations

import re
from typing import Final

from neverest.memory import shellwords

COMMAND_NOT_FOUND: Final = "command not found"
NO_SUCH_FILE: Final = "no such file"
SANDBOX: Final = "sandbox denied"
PERMISSION: Final = "permission denied"
SHELL_SYNTAX: Final = "shell syntax"
DEPENDENCY: Final = "missing dependency"
VERSION: Final = "version mismatch"
TYPE_ERROR: Final = "type or compile error"
FAILING_TEST: Final = "failing test"
NETWORK: Final = "network or timeout"
OUT_OF_MEMORY: Final = "out of memory"
TOOL_USE: Final = "tool use"  # the agent's harness refused the call (file not read first, string not found)
OTHER: Final = "other"

ALL: Final = frozenset({COMMAND_NOT_FOUND, NO_SUCH_FILE, SANDBOX, PERMISSION, SHELL_SYNTAX, DEPENDENCY, VERSION,
                        TYPE_ERROR, FAILING_TEST, NETWORK, OUT_OF_MEMORY, TOOL_USE, OTHER})

# Classes whose failure says something about the machine or the project that holds from one
# session to the next, so that two of them make a lesson even when nothing that worked was seen.
# A missing file, a failing test or a type error describe one moment of one piece of work:
# without what worked they are the symptom, not the lesson.
DURABLE: Final = frozenset({COMMAND_NOT_FOUND, SANDBOX, PERMISSION, SHELL_SYNTAX, DEPENDENCY, VERSION, NETWORK,
                            OUT_OF_MEMORY})

_CLASSES: Final[tuple[tuple[str, re.Pattern[str]], ...]] = tuple((name, re.compile(pattern, re.IGNORECASE)) for
                                                                   name, pattern in (
    (TOOL_USE, r"<tool_use_error>|doesn'?t want to (?:proceed with this tool use|take this action)|"
               r"tool use was rejected|request interrupted by user|file has not been read yet|"
               r"string to replace not found|"
               r"file has been modified since read|found \d+ matches of the string to replace|"
               r"no changes to make: old_string and new_string are exactly the same|"
               r"file does not exist\. note: your current working directory"),
    (SANDBOX, r"sandbox|seatbelt|operation not permitted|read-only file system|landlock|"
              r"not allowed by (?:the )?(?:sandbox|approval)|blocked by (?:the )?(?:sandbox|policy)"),
    (COMMAND_NOT_FOUND, r"command not found|bash\\r|(?<![\d\s]): not found$|"
                        r"is not recognized as an internal or external command|"
                        r"no such file or directory \(os error 2\).*spawn|executable file not found|"
                        r"\bcommand\b.*\bnot found\b|linker [`'\"]?\w+[`'\"]? not found|"
                        r"(?:program|binary|executable) not found|\b\w+ was not found; run without arguments"),
    (DEPENDENCY, r"modulenotfounderror|no module named|cannot find module|module not found|"
                 r"could not resolve (?:dependency|import)|unresolved import|cannot find package|"
                 r"importerror|package .* (?:is )?not installed|could not find a version that satisfies|"
                 r"no matching distribution|missing (?:dependency|peer dependency)|"
                 r"err_module_not_found|failed to resolve import|crate .* not found|"
                 r"can'?t find crate|no required module provides package"),
    (VERSION, r"requires (?:python|node|a different python|version)|unsupported (?:engine|python|node|version)|"
              r"version mismatch|incompatible (?:version|with)|requires-python|engine \"?node\"? is incompatible|"
              r"(?:python|node) \d+(?:\.\d+)* or (?:newer|later|higher) is required|"
              r"minimum supported (?:rust|python|node) version|is not supported on this (?:python|node|platform)"),
    (SHELL_SYNTAX, r"syntax error near unexpected token|unexpected eof while looking for|unterminated quoted|"
                   r"parse error near|bad substitution|unmatched [`'\"(]|no matches found:|"
                   r"syntax error: unexpected|unexpected end of file"),
    (OUT_OF_MEMORY, r"out of memory|cannot allocate memory|memoryerror|heap out of memory|oom-?kill|killed: 9|"
                    r"javascript heap"),
    (NETWORK, r"timed? ?out|timeout|connection (?:refused|reset|closed)|could not resolve host|"
              r"name or service not known|temporary failure in name resolution|network is unreachable|"
              r"econnrefused|econnreset|enotfound|etimedout|getaddrinfo|ssl: |certificate verify failed|"
              r"failed to connect|unable to connect|502 bad gateway|503 service unavailable|"
              r"address already in use"),
    (PERMISSION, r"permission denied|eacces|access is denied|not permitted|forbidden|unauthori[sz]ed|"
                 r"authentication failed|requires root|must be run as root"),
    (FAILING_TEST, r"\b\d+ (?:failed|failing)\b(?!:)|tests? failed|failed tests?|assertionerror|"
                   r"^failed |\bfail(?:ed)?:? .*test|test suites?: \d+ failed|✕|"
                   r"expected .* (?:to equal|to be|received)"),
    (TYPE_ERROR, r"\berror ts\d+|error\[e\d+\]|type ?error|syntaxerror|compil(?:e|ation) (?:error|failed)|"
                 r"cannot find name|is not assignable to|does not exist on type|undefined reference|"
                 r"mismatched types|expected .* found|nameerror|attributeerror|indentationerror|"
                 r"error: expected|unexpected token|parsing error|build failed"),
    (NO_SUCH_FILE, r"no such file|does not exist|not found|cannot access|enoent|cannot stat|no such directory|"
                   r"couldn'?t find|could not find|is not a directory|path .* not exist"),
))


def classify(text: str) -> str:
    """The class of the failure ``text`` (an error line or output) reports."""
    head = text[:4000]
    for name, pattern in _CLASSES:
        if pattern.search(head):
            return name
    return OTHER


_GREPS: Final = frozenset({"grep", "egrep", "fgrep", "rg", "ag", "ack", "zgrep", "git-grep", "pgrep"})
_COMPARES: Final = frozenset({"diff", "cmp", "comm"})
_TESTS: Final = frozenset({"test", "[", "[[", "false"})
_LOOKUPS: Final = frozenset({"which", "type", "command", "hash", "whereis"})
_SHELL_TROUBLE: Final = re.compile(r"no matches found|syntax error|command not found|no such file|permission denied|"
                                   r"unrecognized|invalid|\berror\b", re.IGNORECASE)
_NOTHING_TO_COMMIT: Final = re.compile(r"nothing to commit|no changes added to commit|nothing added to commit",
                                       re.IGNORECASE)


def benign_exit(command: str | list[str] | None, code: int | None, output: str) -> bool:
    """True when a non-zero exit of ``command`` is an answer rather than a failure (see the module
    docstring).  Only exit 1 is an answer: grep exits 2 on a real error, diff 2 on trouble."""
    if _NOTHING_TO_COMMIT.search(output[:2000]) and not re.search(r"\berror\b|\bfatal\b", output[:2000], re.I):
        return True
    if command is None or code != 1:
        return False
    parts = shellwords.segments(command)
    if not parts:
        return False
    last = parts[-1]
    program = shellwords.program(last)
    if _SHELL_TROUBLE.search(output[:4000]):
        return False  # the shell or the program said what went wrong: not a quiet "no"
    if program in _GREPS | _COMPARES | _TESTS | _LOOKUPS or "command" in last[:2]:  # `command -v x`: a look-up
        return True
    if program == "git" and len(last) > 1:
        rest = last[1:]
        if rest[0] in ("diff", "grep") and (rest[0] == "grep" or {"--quiet", "--exit-code"} & set(rest)):
            return True
        if rest[0] in ("ls-files", "rev-parse", "show-ref", "merge-base") and not output.strip():
            return True
    # "cmd | grep x || true" style guards never get here (their exit is 0); "cmd | head" exits with head's.
    return False
