"""The sentence of a lesson, written deterministically from its episodes.

A lesson's text is what may one day leave the machine, so it is built from the
episode's structured fields, never from a transcript, and scrubbed of what
identifies the machine or the person: paths, URLs, e-mail addresses, long hex
ids and tokens that look like secrets.  Commands are cut to their program and
sub-command ("pip install -e ./x --user" → "pip install").  The result is an
*observation* ("pip install fails: ...", "Expected ..., but ..."), checked by
the safety-rule-1 detector before it is used; what the detector refuses falls
back to a plainer form, and if even that reads as an order no lesson is written.

Determinism matters beyond tidiness: two memories that meet the same error and
write the same sentence produce the same lesson hash, so the second one's
publication counts as support for the first (PROTOCOL.md §1).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from neverest.memory import error_class, shellwords
from neverest.memory.hashed import words
from neverest.memory.scrub import meaningful, scrub
from neverest.safety import imperative_reason

MAX_LESSON_CHARS: Final = 200

# What an error's "happened" starts with when it already reads as the verb of a sentence.
_PREDICATE = re.compile(
    r"(?:fails?|failed|hangs?|hung|crash(?:es|ed)?|breaks?|broke|errors?|errored|times? out|timed out|returns?|"
    r"returned|needs|needed|requires|required|is|was|are|were|cannot|can't|can not|does not|doesn't|did not|"
    r"didn't|will not|won't|exits?|exited|refuses|refused|rejects|rejected|reports|reported|aborts|aborted|"
    r"runs|ran|takes|took|stops|stopped|loses|lost|picks|picked)\b(?!:)",
    re.I,
)


_SUBCOMMAND: Final = re.compile(r"^[a-z][a-z0-9-]*$")
_SCRIPT: Final = re.compile(r"^[\w.-]+\.(?:sh|py|js|mjs|ts|rb|pl|ps1|bat|cmd)$")
# Programs whose second word is a sub-command ("git push", "npm ci"); for any other the words after the
# program are its arguments (ls's folder, cat's file), which a lesson must not name.
_WITH_SUBCOMMANDS: Final = frozenset(
    "git npm pnpm yarn bun npx pip pip3 uv poetry pipenv conda cargo rustup go docker podman kubectl helm "
    "terraform gh glab brew apt apt-get dnf yum pacman gem bundle rails mix dotnet mvn gradle systemctl "
    "journalctl make just nx turbo deno supabase vercel wrangler firebase aws gcloud az heroku flutter "
    "pytest python python3 node tsc ruff mypy jest vitest playwright prisma alembic django-admin".split())
_TOOL_PREFIX: Final = re.compile(r"^[\w.-]+: (?=\S)")
_CLASS_SUFFIX: Final = re.compile(r" \((?:" + "|".join(re.escape(c) for c in sorted(error_class.ALL)) + r")\)$")


def command_head(title: str) -> str:
    """The program and sub-command of a failed call, without arguments, flags or paths.

    ``title`` is a command as reported by hand ("pip install -e .") or as the session reader
    writes it ("Bash: pip (missing dependency)"): the tool and the class are not the command."""
    title = _CLASS_SUFFIX.sub("", title.strip())
    if _TOOL_PREFIX.match(title):
        title = _TOOL_PREFIX.sub("", title, count=1)
    words: list[str] = []
    for word in title.split():
        if not words and "/" in word and _SCRIPT.match(word.rsplit("/", 1)[-1]):
            words.append(word.rsplit("/", 1)[-1])  # a script run by its path: its file name names it
            continue
        if word.startswith(("-", "/", "./", "~", "$", "'", '"')) or "/" in word or "=" in word:
            break
        if words and (not _SUBCOMMAND.match(word) or words[0] not in _WITH_SUBCOMMANDS):
            break  # an argument (a host, a file, a number), not a sub-command
        words.append(word)
        if len(words) == 3:
            break
    return " ".join(words) or scrub(title)


def _cap(text: str) -> str:
    text = text.strip()
    if len(text) > MAX_LESSON_CHARS:
        text = text[: MAX_LESSON_CHARS - 1].rsplit(" ", 1)[0].rstrip(",;:") + "…"
    return text


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def _clause(text: str, limit: int = 90) -> str:
    """A scrubbed fragment short enough to sit inside a sentence."""
    text = scrub(text).strip(" .;:,")
    if len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0].rstrip(",;:") + "…"
    return text


# -- corrections ----------------------------------------------------------------------------

_LEAD: Final = r"^(?:(?:no|nope|nah|wait|stop|actually|hmm|ugh|hold on)\b[,.!]*\s*)*"
_NOT_BUT: Final = re.compile(_LEAD + r"not (.{2,80}?)\s*(?:[,;]|\bbut\b)\s*(?:but\s+)?(.{2,80}?)[.!?]*$", re.I)
_BUT_NOT: Final = re.compile(_LEAD + r"(?:use |keep |put |make it |it'?s |it should be )?(.{2,80}?),?"
                             r"\s+not (.{2,80}?)[.!?]*$", re.I)
_INSTEAD_OF: Final = re.compile(_LEAD + r"(?:use |try |with |keep )?(.{2,80}?) instead of (.{2,80}?)[.!?]*$", re.I)
_DONT_THEN_DO: Final = re.compile(_LEAD + r"(?:please\s+)?(?:don'?t|do not|never)\s+(.{3,100}?)\s*[,;]\s*(?:but |and |"
                                  r"instead,? |just |rather )?(use|run|call|keep|put|add|do) (.{2,100}?)[.!?]*$",
                                  re.I)
_DONT: Final = re.compile(_LEAD + r"(?:please\s+)?(?:don'?t|do not|never|stop|quit)\s+(.{3,140}?)[.!?]*$", re.I)
_DO: Final = re.compile(_LEAD + r"(?:just |please |instead,? )?((?:use|keep|leave|put|add|run|make|call|write|"
                        r"check|test|read|look|ask|wait|revert|undo|remove|delete|rename|move) .{2,140}?)[.!?]*$", re.I)
# Words that make a correction a complaint about one moment ("still broken", "nothing loads now",
# "wtf?", "you deleted it"): worth counting, not a lesson by themselves.
_COMPLAINT: Final = re.compile(r"\?|\b(?:wtf|still|now|again|you|your|loading|working|showing|broken|nothing|"
                               r"ugh|seriously|what the)\b", re.I)
_LEAD_WORDS: Final = re.compile(_LEAD, re.I)
# A fact the person states ("the config lives in etc", "the staging database is read-only"): a copula or a verb
# of where and how things are, not a request ("like use that to go through the file and give me…").
_FACT: Final = re.compile(r"\b(?:is|are|was|were|isn'?t|aren'?t|lives?|sits?|runs? on|uses?|needs?|has|have|"
                          r"belongs?|comes? from|points? to|means?)\b", re.I)
_PRONOUN_LEAD: Final = re.compile(r"^(?:can|could|would|will|do|does|did|you|i|we|it|this|that|like|so|and|but)\b",
                                  re.I)


def _noun_phrase(text: str) -> bool:
    """Whether a captured alternative reads as a thing one can want (the settings tab, pnpm), not a clause."""
    text = text.strip(" .…")
    return 2 <= len(text) and len(text.split()) <= 6 and "?" not in text and not _PRONOUN_LEAD.match(text)
_PLEASE: Final = re.compile(r"[,;]?\s*\bplease\b[,.!]?", re.I)
_OBJECTIONS: Final = {"rejected": "The person refused to let the agent run {head}",
                      "interrupted": "The person stopped the agent while it ran {head}",
                      "corrected": "The person objected when the agent ran {head}"}


# A correction's words, this many at most, can be about the call it answered (an objection to it): more are about
# something else the person had on their mind.
_OBJECTION_WORDS: Final = 12


def _said(said: str) -> str:
    """The words of a correction as phrasing reads them: the first line, scrubbed, without "please"."""
    return _PLEASE.sub("", scrub(said.strip().splitlines()[0] if said.strip() else "")).strip()


def _objected_head(said: str, agent_did: str, reaction: str) -> str:
    """``objection_head`` of words already read by ``_said``."""
    if reaction not in _OBJECTIONS or not agent_did.startswith("ran ") or ": " not in agent_did:
        return ""
    if len(said.split()) > _OBJECTION_WORDS:
        return ""
    return shell_head(agent_did[len("ran "):].split(": ", 1)[1])


def objection_head(said: str, agent_did: str, reaction: str) -> str:
    """The command a correction objects to ("powershell.exe", "git push"): the head of the call the person
    refused, stopped or objected to, when that objection is all the correction says: no words, a few that
    make no lesson of their own ("dont run"), or a few that say not to and name the command ("stop trying to
    run powershell stuff"); '' otherwise.  Corrections that object to one command are one lesson however
    they were said (sleep.py): refusing powershell.exe nine times, once more with "stop trying to run
    powershell stuff", and stopping it with "dont run" is one thing the person wants, not three lessons.  Words that say
    something else keep their lesson apart: what to do instead ("use pnpm instead of npm", "run powershell as
    admin"), or a fact ("the build folder is shared" when ``rm -rf build`` was refused)."""
    said = _said(said)
    head = _objected_head(said, agent_did, reaction)
    if not head or not said:
        return head
    named = {word.removesuffix(".exe") for word in head.lower().split()}
    if _DONT.match(said) and not _DONT_THEN_DO.match(said) and named.intersection(words(said)):
        return head
    objection = _OBJECTIONS[reaction].format(head=head)
    return head if all(form == objection for form in _forms_of(said, agent_did, reaction)) else ""


def _correction_forms(said: str, agent_did: str, reaction: str) -> list[str]:
    """A correction is the person's words; the lesson reports what they wanted, as a fact."""
    return _forms_of(_said(said), agent_did, reaction)


def _forms_of(said: str, agent_did: str, reaction: str) -> list[str]:
    """``_correction_forms`` of words already read by ``_said``."""
    forms: list[str] = []
    if reaction == "told to act":
        forms.append("The person wanted the agent to act rather than ask first")
    if said:
        both = _DONT_THEN_DO.match(said)
        if both:
            forms.append(f"The person wanted the agent to {both.group(2).lower()} {_clause(both.group(3), 70)} "
                         f"rather than {_lower_first(_clause(both.group(1), 70))}")
        for pattern, template in ((_NOT_BUT, "The person wanted {1} rather than {0}"),
                                  (_INSTEAD_OF, "The person wanted {0} rather than {1}"),
                                  (_BUT_NOT, "The person wanted {0} rather than {1}")):
            found = pattern.match(said)
            if found and all(_noun_phrase(g) for g in found.groups()):
                forms.append(template.format(*(_clause(g, 70) for g in found.groups())))
        negative = _DONT.match(said)
        if negative and not both and len(negative.group(1).split()) >= 2 and "?" not in negative.group(1):
            what = _lower_first(_clause(negative.group(1), 140))
            if re.match(r"\w+ing\b", what):  # "stop trying to run X": what they did not want was to keep at it
                what = "keep " + what
            forms.append(f"The person did not want the agent to {what}")
        positive = _DO.match(said)
        if positive and not negative and "?" not in said and len(said.split()) <= 20:
            forms.append(f"The person wanted the agent to {_lower_first(_clause(positive.group(1), 140))}")
    if said and not forms and not _COMPLAINT.search(said) and 3 <= len(said.split()) <= 16 and _FACT.search(said):
        # A fact the person set right ("the staging database is read-only"), reported as theirs.
        fact = _LEAD_WORDS.sub("", said)
        forms.append(f"The person corrected the agent: {_clause(fact, 160)}")
        # Its first clause alone, when the rest reads as an order ("…, never migrate it").
        first = re.split(r"\s*(?:[,;:]| - | but | so )\s*", fact, maxsplit=1)[0]
        if first != fact and len(first.split()) >= 3:
            forms.append(f"The person corrected the agent: {_clause(first, 160)}")
    head = _objected_head(said, agent_did, reaction)
    if head:
        forms.append(_OBJECTIONS[reaction].format(head=head))
    return forms


# -- errors ---------------------------------------------------------------------------------

_MISSING_PROGRAMS: Final = tuple(re.compile(p, re.I) for p in (
    r"command not found:\s*([\w.+-]+)", r"linker [`'\"]?([\w.+-]+)[`'\"]? not found", r"'([\w.+-]+)' is not recognized",
    r"([\w.+-]+): (?:command )?not found"))
_CRLF: Final = re.compile(r"\$'\\r'|\\r': command not found|\w\\r['’]")
_MISSING_MODULE: Final = re.compile(r"(?:no module named|cannot find module|cannot find package|module not found:?"
                                    r"(?: error:)?(?: can'?t resolve)?)\s*['\"`]?([@\w./-]{1,60}?)['\"`]?(?:\s|$|,|;)",
                                    re.I)


def _trait(cls: str, failed: str, happened: str) -> str:
    """What about the failed command the class points at, in words."""
    if cls == error_class.SHELL_SYNTAX and failed:
        if shellwords.bare_paren_path(failed):
            return "with an unquoted path holding `(` (such as a route group folder)"
        if shellwords.bare_glob(failed) and "no matches found" in happened.lower():
            return "with an unquoted glob or bracket"
    return ""


def _flags(words: list[str]) -> set[str]:
    return {w.split("=", 1)[0] for w in words if re.match(r"^--?[A-Za-z][\w-]*(?:=|$)", w)}


def _env(words: list[str]) -> set[str]:
    return {w.split("=", 1)[0] for w in words if re.match(r"^[A-Z][A-Z0-9_]*=", w)}


def what_worked(failed: str, worked: str) -> str:
    """What changed between a failed command and the one that worked after it, as a clause
    ("quoting the path works"), or '' when the difference says nothing one can name."""
    if not failed or not worked or failed.strip() == worked.strip():
        return ""
    if re.search(r"dos2unix|\\r|crlf", worked, re.I) and not re.search(r"dos2unix|\\r|crlf", failed, re.I):
        return "converting the line endings works"

    before, after = shellwords.segments(failed), shellwords.segments(worked)
    flat_before = [w for s in before for w in s]
    flat_after = [w for s in after for w in s]
    p_before, p_after = shell_head(failed).split()[:1], shell_head(worked).split()[:1]
    if p_before and p_after and p_before != p_after:
        return f"{p_after[0]} works instead"
    fallback = re.search(r"\|\|\s*(?:sudo\s+)?([A-Za-z][\w.+-]*)", worked)
    if p_before and fallback and fallback.group(1) != p_before[0] and fallback.group(1) not in shellwords.SETUP:
        return f"{fallback.group(1)} works instead"  # "rg … || find …": the fallback is what ran
    if shellwords.bare_paren_path(failed) and not shellwords.bare_paren_path(worked) and "(" in worked:
        return "quoting the path works"  # the route-group path is quoted now, whatever else changed
    if flat_before == flat_after:
        # The same words once the shell has read them: what differs is the quoting.
        return "quoting the path works" if any(c in failed for c in "()[]* ") else "quoting the arguments works"
    added, dropped = _flags(flat_after) - _flags(flat_before), _flags(flat_before) - _flags(flat_after)
    if added:
        return f"adding {' '.join(sorted(added)[:2])} works"
    if "sudo" in flat_after and "sudo" not in flat_before:
        return "running it with sudo works"
    if _env(flat_after) - _env(flat_before):
        return f"setting {' '.join(sorted(_env(flat_after) - _env(flat_before))[:2])} works"
    if dropped:
        return f"it works without {' '.join(sorted(dropped)[:2])}"
    if any(s and s[0] in ("cd", "pushd") for s in after) and not any(s and s[0] in ("cd", "pushd") for s in before):
        return "running it from another folder works"
    head_after = shell_head(worked)
    if head_after != shell_head(failed) and len(head_after.split()) > 1:
        return f"{head_after} works"
    return ""


def shell_head(command: str) -> str:
    """``command_head`` of the simple command that does the work (past ``cd x &&``, ``export``...)."""
    work = shellwords.working(command)
    return command_head(" ".join(work[0])) if work else command_head(command)


def _missing(cls: str, happened: str) -> str:
    """What a failure of class ``cls`` says is missing: "crlf" for Windows line endings, the program that was
    not found, the module that is not installed; '' for other classes or when the output does not say."""
    if cls == error_class.COMMAND_NOT_FOUND:
        if _CRLF.search(happened):
            return "crlf"
        found = next((m for m in (p.search(happened) for p in _MISSING_PROGRAMS) if m), None)
        return found.group(1) if found else ""
    if cls == error_class.DEPENDENCY:
        found = _MISSING_MODULE.search(happened)
        return found.group(1) if found else ""
    return ""


def error_signature(title: str, happened: str) -> str:
    """What two errors must share to be one mistake: their class and its subject (the missing program or
    module, Windows line endings), else the shape of the message (its first words, numbers and what
    scrubbing removes left out).  Two "command not found" errors about python and about a script's
    carriage return are two mistakes; one cygpath failure met by ls, npm and ssh is one."""
    cls = error_class.classify(happened) if happened else error_class.OTHER
    subject = _missing(cls, happened).lower()
    if not subject:
        words = re.findall(r"[a-z][a-z'!_-]+", scrub(first_line(happened)).lower())
        subject = " ".join(w for w in words if w not in ("a", "an", "path", "token", "id", "url", "host", "user"))[:60]
        subject = " ".join(subject.split()[:3])
    if not subject:
        subject = command_head(title).split(" ", 1)[0].lower()
    return f"{cls}|{subject}"


def first_line(text: str) -> str:
    return next((line for line in text.splitlines() if line.strip()), "")


_NUMBER: Final = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")
_MILLISECONDS: Final = re.compile(r"\s*(?:milliseconds?|ms)\b")


def _seconds(value: float) -> str:
    """Seconds as a person says them: whole from one up, else to a tenth."""
    return f"{value:.0f}" if value >= 1 else f"{value:.1f}"


def _number(value: float) -> str:
    """A number as the message wrote it (``float`` of its digits): 1013, 2.5."""
    return str(int(value)) if value.is_integer() else str(value)


def what_failures_share(happened: str, others: Sequence[str]) -> str:
    """``happened`` told as what the failures a lesson is learned from share (``others``, their ``happened``), not
    as one of them: the figures of one failure's message are not the lesson's.

    When at least two have its first line's shape (that line with its numbers left out), each number that differs
    among them is written as the range they span ("timed out after 1 to 10 seconds", not "after 1013
    milliseconds"; milliseconds of a second or more read as seconds).  Else, when every one's first line begins
    with the same whole sentences and goes on differently ("ERROR: Not on a feature branch. Current branch:
    main" and "... Current branch: codex/fix-login"), those sentences alone.  Otherwise as it is."""
    line = first_line(happened)
    shape = _NUMBER.sub("#", line)
    alike = [[float(n) for n in _NUMBER.findall(first)] for first in map(first_line, others)
             if _NUMBER.sub("#", first) == shape]
    if len(alike) >= 2 and alike[0]:
        return happened.replace(line, _ranges(line, alike), 1)
    firsts = [first_line(o) for o in others]
    if len(firsts) >= 2 and len(set(firsts)) > 1:
        shared = _SENTENCES.match(_common_start(firsts))
        if shared and len(shared.group(1).split()) >= 3:
            return shared.group(1)
    return happened


def _common_start(texts: Sequence[str]) -> str:
    """The characters every one of ``texts`` begins with (those of the first and the last in sorted order)."""
    first, last = min(texts), max(texts)
    differs = (k for k, (a, b) in enumerate(zip(first, last, strict=False)) if a != b)  # none: a prefix of last
    return first[:next(differs, len(first))]


# Whole sentences at the start of a text: up to the last ". ", "! " or "? " in it.
_SENTENCES: Final = re.compile(r"(.*[.!?])\s")


def _ranges(line: str, alike: list[list[float]]) -> str:
    """``line`` with each of its numbers written as the range that number spans in ``alike`` (the numbers of lines
    of its shape, in order)."""
    out: list[str] = []
    end = 0
    for found, values in zip(_NUMBER.finditer(line), zip(*alike, strict=True), strict=True):
        out.append(line[end:found.start()])
        end = found.end()
        low, high = min(values), max(values)
        unit = _MILLISECONDS.match(line, end)
        if low == high:
            out.append(found.group())
        elif unit is not None and low >= 1000:
            end = unit.end()
            low_s, high_s = _seconds(low / 1000), _seconds(high / 1000)
            out.append(f"{low_s} to {high_s} seconds" if low_s != high_s else
                       f"about {low_s} second{'' if low_s == '1' else 's'}")
        else:
            out.append(f"{_number(low)} to {_number(high)}")
    out.append(line[end:])
    return "".join(out)


# The sentence of each class whose situation is the program and the class alone; the subject when no
# program is known.
_CLASS_TEMPLATES: Final = {
    error_class.SANDBOX: ("{head} is blocked by the sandbox: {detail}", "A command"),
    error_class.PERMISSION: ("{head} fails with permission denied", "A command"),
    error_class.NETWORK: ("{head} fails on the network or times out: {detail}", "A command"),
    error_class.OUT_OF_MEMORY: ("{head} runs out of memory", "A command"),
    error_class.VERSION: ("{head} fails on a version mismatch: {detail}", "A command"),
    error_class.FAILING_TEST: ("{head} reports failing tests", "The test command"),
    error_class.TYPE_ERROR: ("{head} fails with a type or compile error", "The build"),
    error_class.NO_SUCH_FILE: ("{head} fails because a path it names does not exist", "A command"),
}


def _error_forms(title: str, happened: str, failed: str, worked: str) -> list[str]:
    head = "Several programs" if title == "Several programs" else \
        shell_head(failed) if failed else (command_head(title) if title else "")
    program = head.split()[0] if head else ""
    cls = error_class.classify(happened) if happened else error_class.OTHER
    if cls == error_class.TOOL_USE:
        return []  # the agent's harness refused the call: a rule of the harness, not of this project
    fix = what_worked(failed, worked)
    if not fix and cls not in error_class.DURABLE and cls != error_class.OTHER:
        return []  # a missing file, a failing test, a type error: one moment's symptom, not a lesson
    detail = _clause(happened, 100)
    forms: list[str] = []
    situation = ""
    if cls == error_class.SHELL_SYNTAX:
        trait = _trait(cls, failed, happened)
        situation = (f"In this project, shell commands {trait} fail with a syntax error" if trait
                     else f"{head or 'A shell command'} fails with a shell syntax error: {detail}")
    elif cls == error_class.COMMAND_NOT_FOUND and _missing(cls, happened) == "crlf":
        situation = ("Shell scripts here have Windows line endings, so bash fails on them with "
                     "$'\\r': command not found")
    elif cls == error_class.COMMAND_NOT_FOUND:
        missing = _missing(cls, happened) or program
        missing = scrub(missing) if missing else ""
        situation = f"{missing} is not installed here (command not found)" if missing else ""
    elif cls == error_class.DEPENDENCY:
        module = _missing(cls, happened)
        module = scrub(module) if module else ""
        if module and " " not in module and module != "a path":
            situation = f"{head or 'A command'} fails because the module {module} is not installed"
    elif cls in _CLASS_TEMPLATES:
        template, subject = _CLASS_TEMPLATES[cls]
        situation = template.format(head=head or subject, detail=detail)
    if situation:
        if head == "Several programs":  # the templates are written for one program
            situation = re.sub(r"^Several programs (fails|is blocked|runs out|reports)\b",
                               lambda m: "Several programs " + {"fails": "fail", "is blocked": "are blocked",
                                                                "runs out": "run out", "reports": "report"}[m.group(1)],
                               situation).replace("fail on the network or times out", "fail on the network or time out")
        forms.append(f"{situation}; {fix}" if fix else situation)
    # The plain forms: what failed and how, in the output's own words.
    plain: list[str] = []
    happened_s = scrub(happened)
    if head == "Several programs" and happened_s:
        plain.append(f"Several programs fail the same way: {happened_s}")
    elif head and happened_s:
        if _PREDICATE.match(happened_s):  # "fails without ...", "hangs when ..."
            plain.append(f"{head} {_lower_first(happened_s)}")
        plain.append(f"{head} fails: {happened_s}")
    elif head:
        plain.append(f"{head} fails repeatedly")
    elif happened_s:
        plain.append(f"An error recurs: {happened_s}")
    if fix:
        plain = [f"{_clause(p, 150)}; {fix}" for p in plain] + plain
    return forms + plain


def candidate_texts(kind: str, *, title: str = "", said: str = "", expected: str = "",
                    happened: str = "", text: str = "", agent_did: str = "", worked: str = "",
                    reaction: str = "") -> list[str]:
    """Sentences for a lesson of ``kind`` from one representative episode, best first."""
    happened_s, expected_s = scrub(happened), scrub(expected)
    if kind == "correction":
        return [_cap(t) for t in _correction_forms(said, agent_did, reaction)]
    if kind == "error":
        return [_cap(t) for t in _error_forms(title, happened, agent_did, worked)]
    if kind == "surprise":
        forms = []
        if expected_s and happened_s:
            forms.append(f"Expected {_lower_first(expected_s)}, but {_lower_first(happened_s)}")
        if happened_s:
            forms.append(f"Unexpectedly, {_lower_first(happened_s)}" if not re.match(
                r"(?:unexpectedly|surprisingly|it turns out|turns out)\b", happened_s, re.I) else happened_s)
        if expected_s:
            forms.append(f"It was expected that {_lower_first(expected_s)}, and it did not happen")
        return [_cap(t) for t in forms]
    return []


_EXPECTED_BUT: Final = re.compile(r"^Expected .+?, but (.+)$", re.S)
_UNEXPECTEDLY: Final = re.compile(r"^Unexpectedly, (.+)$", re.S)


def claim_of(kind: str, text: str) -> str:
    """What a lesson says happens: for a surprise written by the templates above, what happened
    instead of what was expected ("Expected X, but Y" and "Unexpectedly, Y" say Y); for any other
    lesson (another memory's wording included), its whole sentence.  The verify pass compares an
    agent's expectation with it to tell a lesson that did not hold (sleep.py)."""
    if kind == "surprise":
        found = _EXPECTED_BUT.match(text) or _UNEXPECTEDLY.match(text)
        if found:
            return found.group(1)
    return text


def lesson_gate(text: str) -> str | None:
    """Why ``text`` cannot be a lesson's sentence, or None: the gates every sentence passes, the template's
    and a local model's alike (at most ``MAX_LESSON_CHARS``, nothing scrubbing would remove, an
    observation by safety rule 1)."""
    if len(text) > MAX_LESSON_CHARS:
        return f"longer than {MAX_LESSON_CHARS} characters"
    if "\n" in text.strip() or scrub(text).strip(" .;:,") != text.strip(" .;:,"):
        return "holds something scrubbing removes, or more than one line"
    return imperative_reason(text)


def observation(kind: str, **fields: str) -> str | None:
    """The first candidate sentence that reads as an observation and still says something once scrubbed,
    or None."""
    for text in candidate_texts(kind, **fields):
        if text and imperative_reason(text) is None and _says_something(text):
            return text
    return None


_PLACEHOLDERS: Final = re.compile(r"\b(?:a path|a URL|an address|a token|an id|a host|a user|an IP)\b")


def _says_something(text: str) -> bool:
    """A sentence that had something scrubbed out must still say something without it ("The person corrected
    the agent: a path a path" does not); one that had nothing removed stands as it is."""
    return not _PLACEHOLDERS.search(text) or meaningful(text)
