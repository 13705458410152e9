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
from typing import Final

from neverest.safety import imperative_reason

MAX_LESSON_CHARS: Final = 240

_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.I)
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+\.[\w.-]+\b")
_PATH = re.compile(r"(?:(?<=\s)|^)(?:~|\.{1,2})?(?:[\w.@+:-]*[/\\])+[\w.@+-]*")
_HEXID = re.compile(r"\b[0-9a-f]{12,}\b", re.I)
_SECRET = re.compile(r"\b(?=[A-Za-z0-9_-]*\d)(?=[A-Za-z0-9_-]*[A-Za-z])[A-Za-z0-9_-]{24,}\b")
_ASSIGN = re.compile(r"\b([A-Z][A-Z0-9_]{1,})=\S+")
_SPACES = re.compile(r"\s+")
# What an error's "happened" starts with when it already reads as the verb of a sentence.
_PREDICATE = re.compile(
    r"(?:fails?|failed|hangs?|hung|crash(?:es|ed)?|breaks?|broke|errors?|errored|times? out|timed out|returns?|"
    r"returned|needs|needed|requires|required|is|was|are|were|cannot|can't|can not|does not|doesn't|did not|"
    r"didn't|will not|won't|exits?|exited|refuses|refused|rejects|rejected|reports|reported|aborts|aborted|"
    r"runs|ran|takes|took|stops|stopped|loses|lost|picks|picked)\b",
    re.I,
)


def scrub(text: str) -> str:
    """Remove what identifies a machine or person from a phrase; keep the words."""
    text = _URL.sub("a URL", text)
    text = _EMAIL.sub("an address", text)
    text = _PATH.sub("a path", text)
    text = _HEXID.sub("an id", text)
    text = _SECRET.sub("a token", text)
    text = _ASSIGN.sub(r"\1", text)  # "LANG=C" → "LANG": the variable matters, its value may not
    return _SPACES.sub(" ", text).strip(" .;:,")


def command_head(title: str) -> str:
    """The program and sub-command of a failed call, without arguments, flags or paths."""
    words = []
    for word in title.split():
        if word.startswith(("-", "/", "./", "~", "$", "'", '"')) or "/" in word or "=" in word:
            break
        words.append(word)
        if len(words) == 3:
            break
    return " ".join(words) or scrub(title)


def _cap(text: str) -> str:
    text = text.strip()
    if len(text) > MAX_LESSON_CHARS:
        text = text[: MAX_LESSON_CHARS - 1].rsplit(" ", 1)[0] + "…"
    return text


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def _correction_forms(said: str) -> list[str]:
    """A correction is the person's words; the lesson reports what they want, as a fact."""
    said = scrub(said)
    # "please" reads as an order to the reader wherever it stands; it adds nothing to the fact.
    said = re.sub(r"[,;]?\s*\bplease\b[,.!]?", "", said, flags=re.I).strip()
    bare = re.sub(r"^(?:no|nope|wait)\b[,.!]?\s*", "", said, flags=re.I).strip()
    forms = []
    negative = re.match(r"^(?:don'?t|do not|never|please don'?t)\s+(.+)$", bare, re.I)
    if negative:
        forms.append(f"The person does not want the agent to {_lower_first(negative.group(1))}")
    elif imperative_reason(bare) is not None:
        forms.append(f"The person wants the agent to {_lower_first(bare)}")
    else:
        forms.append(f"The person corrected the agent: {bare}")
    forms.append("The person corrected the agent's approach here")
    return forms


def candidate_texts(kind: str, *, title: str = "", said: str = "", expected: str = "",
                    happened: str = "", text: str = "") -> list[str]:
    """Sentences for a lesson of ``kind`` from one representative episode, best first."""
    happened_s, expected_s = scrub(happened), scrub(expected)
    if kind == "correction":
        return [_cap(t) for t in _correction_forms(said or text)]
    if kind == "error":
        head = command_head(title) if title else ""
        forms = []
        if head and happened_s:
            if _PREDICATE.match(happened_s):  # "fails without ...", "hangs when ..."
                forms.append(f"{head} {_lower_first(happened_s)}")
            forms.append(f"{head} fails: {happened_s}")
            forms.append(f"An error recurs in {head}: {happened_s}")
        elif head:
            forms.append(f"{head} fails repeatedly")
            forms.append(f"An error recurs in {head}")
        if happened_s:
            forms.append(f"An error recurs: {happened_s}")
        return [_cap(t) for t in forms]
    if kind == "surprise":
        forms = []
        if expected_s and happened_s:
            forms.append(f"Expected {_lower_first(expected_s)}, but {_lower_first(happened_s)}")
        if happened_s:
            forms.append(f"Unexpectedly, {_lower_first(happened_s)}")
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


def observation(kind: str, **fields: str) -> str | None:
    """The first candidate sentence that reads as an observation, or None."""
    for text in candidate_texts(kind, **fields):
        if text and imperative_reason(text) is None:
            return text
    return None
