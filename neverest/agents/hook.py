"""``neverestctl hook`` / ``neverest-hook``: Claude Code's hooks, answered from this memory.

Claude Code runs the hook command on every prompt and tool call with one JSON object on standard
input (``session_id``, ``transcript_path``, ``cwd``, ``hook_event_name``, and per event ``prompt``,
``tool_name``, ``tool_input``, ``tool_response``).  The hook answers on standard output with

    {"hookSpecificOutput": {"hookEventName": "<event>", "additionalContext": "<text>"}}

or with nothing, and only for the events whose documented output takes ``additionalContext``
(Claude Code's hooks reference, https://code.claude.com/docs/en/hooks, "Decision control" of each
event).  What each event gets:

- ``SessionStart`` ("``additionalContext``: String added to Claude's context"): the strongest error lessons
  learned in this working directory's project, then general ones (a correction waits for the call it is
  about);
- ``UserPromptSubmit`` ("``additionalContext``: String added to Claude's context"): the lessons that share
  ``MIN_SHARED_TERMS`` key terms with the prompt (``neverest.memory.keyterms``) at or above recall's
  relevance floor in the hashed space, and those the last Stop kept for it (below).  With an embedding
  model configured, a lesson whose vector the sleep put in the model's space is compared there
  (``MODEL_MIN_SHARED_TERMS``, ``MODEL_MIN_COSINE``), the prompt's vector asked of the model within
  ``hook_model.TIMEOUT_S``; a model that does not answer in time leaves the hashed space's rule;
- ``PreToolUse`` ("``additionalContext``: String added to Claude's context before the tool executes";
  never ``permissionDecision``): before a shell call, the error and correction lessons whose moment it is
  (``moments.py``: the trait or program their sentence names; an error learned here only in its own
  project; one lesson a situation); before another tool, the error lessons that name that tool.
  These rules were chosen by ``neverestctl replay`` on the public corpus (docs/sessions.md);
- ``PostToolUse`` with a failed result (``is_error``, or a non-zero exit code) and ``PostToolUseFailure``:
  an error event stored at once through the one ingest function (by the daemon when it runs), nothing said;
- ``Stop``: nothing is printed.  The reference gives Stop no ``additionalContext``: its only control is
  the top-level ``decision``, and "To prevent Claude from stopping, return ``{"decision": "block",
  "reason": ...}``. The reason is shown to Claude, which may decide to continue the conversation" -- a
  memory must never keep the agent going.  So the correction lessons the agent's hand-back bears on
  are logged at the hand-back (the moment bore on them) and kept for the session's next prompt, whose
  ``UserPromptSubmit`` answer gives them.

Only this memory's own lessons and received lessons whose commons state is ``common`` are given, each
at most once per session, framed as an observation with its kind, state and provenance, under a line
saying they are observations, not instructions; the whole text is at most ``MAX_CONTEXT_CHARS``.
A stable fraction of sessions (``holdout``, chosen by a hash of the session id) is given nothing; both
what is given and what is withheld are logged (tables ``hook_sessions`` and ``injections``) so that a
measure can compare the two groups, and ``neverestctl status`` shows the share and the recent held-out
sessions.  ``--explain`` (or ``NEVEREST_HOOK_EXPLAIN=1``) says on standard error why a call gave what it
gave, or nothing: held out, nothing bearing on it (with the scores), already given, not common, ...

The hook never stands in the agent's way: whatever goes wrong (no input, garbage, another agent's
JSON, no memory, a locked store, a slow daemon) it prints nothing and exits 0, within ``DEADLINE_S``
(a watchdog ends the process then).  It never exits 2 and never answers ``"decision": "block"`` or a
``permissionDecision``, which would block or steer the agent.

It is run on every prompt and tool call, so it imports the standard library only on the way to an
answer (the model's client too, ``hook_model.py``): the hashed-space vectors are computed here in plain
Python (``tests/test_hook.py`` checks them against ``neverest.memory.embed``), the daemon is asked through
``neverest.client`` (standard library only too).  The heavy modules load only when they are needed: judging
the commons state of a published or received lesson (then cached for ``STATE_TTL_S`` in ``lesson_states``),
and storing an error without a daemon.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import threading
import time
from array import array
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from operator import mul
from pathlib import Path
from typing import IO, Any, Final

from neverest.agents import hook_model
from neverest.agents.hook_model import ModelQuery
from neverest.agents.moments import Call, bears_on_call, lesson_situation
from neverest.hashes import blake2b  # without hashlib, whose import loads OpenSSL
from neverest.memory.hashed import entries, row_entries, words
from neverest.memory.keyterms import key_terms
from neverest.memory.queries import injections as q
from neverest.memory.space import DIM as DIM
from neverest.memory.space import HASHED_SPACE
from neverest.memory.store import Store
from neverest.memory.views import framing, one_line, state_label
from neverest.paths import KEY_FILE, STORE_FILE, resolve_home

DEADLINE_S: Final = 1.5
# How long a write waits for another process's lock: well under the deadline, so a locked store means
# an empty answer, not a killed hook.
BUSY_TIMEOUT_S: Final = 0.25
MAX_INPUT_BYTES: Final = 8 * 1024 * 1024
MAX_CONTEXT_CHARS: Final = 2000
MAX_LESSON_CHARS: Final = 400
MAX_QUERY_CHARS: Final = 4000
DEFAULT_HOLDOUT: Final = 0.5
HOLDOUT_ENV: Final = "NEVEREST_HOLDOUT"
DEBUG_ENV: Final = "NEVEREST_HOOK_DEBUG"  # exceptions on standard error (--explain says more)
EXPLAIN_ENV: Final = "NEVEREST_HOOK_EXPLAIN"  # why each call gave what it gave, on standard error
STATE_TTL_S: Final = 600.0
# Judging states loads the commons rule (about half a second on a busy machine): it is started only
# with this much of the deadline left, else the states judged before are used, however old.
JUDGE_BUDGET_S: Final = 1.0
AGENT: Final = "claude-code"
HEADER: Final = f"Neverest memory: {framing()}."
# Key terms a prompt or a hand-back must share with a lesson (keyterms.py): with one, replay on the public
# corpus found 7 lessons given with prompts and none of them bore on what followed (docs/sessions.md).
MIN_SHARED_TERMS: Final = 2
# How many lessons each event gives at most (Stop's: kept for the next prompt, which gives them beside its own).
TOP: Final = {"SessionStart": 5, "UserPromptSubmit": 3, "PreToolUse": 2, "Stop": 2}
# What Stop keeps for a next prompt that never comes is dropped after a day.
PENDING_TTL_S: Final = 86400.0
# The kind of lesson each event looks for (None: every kind).
KIND: Final[dict[str, str | None]] = {"SessionStart": None, "UserPromptSubmit": None, "PreToolUse": None,
                                      "Stop": "correction"}
FAILURE_EVENTS: Final = ("PostToolUse", "PostToolUseFailure")
SESSION_MAX_CHARS: Final = 256
# How much of the transcript's end is read to find the agent's hand-back when the Stop input lacks it.
TRANSCRIPT_TAIL_BYTES: Final = 256 * 1024

# Recall's relevance floor in the hashed space (neverest.memory.recall.HASHED_MIN_COSINE).
MIN_COSINE: Final = 0.1
# A prompt or a hand-back in a model's space (a model configured, the lesson's vector in its space, the model
# answering in time: hook_model.py): the key terms it must share with a lesson, and the cosine it must reach.
# Chosen by replay on the public corpus with all-MiniLM-L6-v2 (docs/sessions.md, "Model space").
MODEL_MIN_SHARED_TERMS: Final = 2
MODEL_MIN_COSINE: Final = 0.3
Vector = dict[int, float]
Notes = list[str] | None  # the explanation being gathered (--explain); None when nobody asked


class Skip(Exception):
    """Nothing to say: the input is not a hook call this memory answers."""


# -- the hashed space ---------------------------------------------------------------------------


def hashed(text: str) -> Vector:
    """The text's unit vector in the hashed space, as {slot: value}; {} without words."""
    return dict(entries(text))


def from_blob(blob: bytes) -> Vector:
    """A hashed-space vector stored by ``neverest.memory.embed.to_blob`` (sparse or dense)."""
    return dict(row_entries(blob))


def dot(a: Vector, b: Vector) -> float:
    if len(b) < len(a):
        a, b = b, a
    return sum(v * b.get(i, 0.0) for i, v in a.items())


# -- what the agent sent ------------------------------------------------------------------------


def _text(value: object, limit: int = MAX_QUERY_CHARS) -> str:
    return value[:limit] if isinstance(value, str) else ""


def tool_query(payload: dict[str, Any]) -> str:
    """What a tool call is about: its tool and command (or its other string arguments)."""
    tool_input = payload.get("tool_input")
    parts = [_text(payload.get("tool_name"), 200)]
    if isinstance(tool_input, dict):
        command = tool_input.get("command")
        if isinstance(command, str):
            parts.append(command)
        else:
            parts.extend(v for v in tool_input.values() if isinstance(v, str) and len(v) <= 1000)
    return " ".join(parts)[:MAX_QUERY_CHARS]


def _command(payload: dict[str, Any]) -> str:
    tool_input = payload.get("tool_input")
    command = tool_input.get("command") if isinstance(tool_input, dict) else None
    if isinstance(command, list):
        command = " ".join(w for w in command if isinstance(w, str))
    return command[:MAX_QUERY_CHARS] if isinstance(command, str) else ""


def hand_back(payload: dict[str, Any]) -> str:
    """The agent's last answer: from the input when it carries it, else from the transcript's end."""
    given = payload.get("last_assistant_message")
    if isinstance(given, str):
        return given[-MAX_QUERY_CHARS:]
    path = payload.get("transcript_path")
    if not isinstance(path, str) or not path:
        return ""
    try:
        with open(path, "rb") as stream:
            stream.seek(0, os.SEEK_END)
            size = stream.tell()
            stream.seek(max(0, size - TRANSCRIPT_TAIL_BYTES))
            tail = stream.read(TRANSCRIPT_TAIL_BYTES)
    except OSError:
        return ""
    for line in reversed(tail.splitlines()):
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # the first line of the tail may be cut; any line may be damaged
        if not isinstance(entry, dict) or entry.get("type") != "assistant":
            continue
        message = entry.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            return content[-MAX_QUERY_CHARS:]
        if isinstance(content, list):
            texts = [b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text"
                     and isinstance(b.get("text"), str)]
            if texts:
                return " ".join(texts)[-MAX_QUERY_CHARS:]
    return ""


def _exit_code(response: dict[str, Any]) -> int | None:
    for key in ("exit_code", "exitCode", "returncode", "return_code"):
        value = response.get(key)
        if type(value) is int:
            return value
    return None


def failure(payload: dict[str, Any]) -> str | None:
    """The error text of a failed tool call, None when the call did not fail."""
    if payload.get("hook_event_name") == "PostToolUseFailure":
        return _text(payload.get("error")) or "the tool call failed"
    response = payload.get("tool_response")
    if not isinstance(response, dict):
        return None
    code = _exit_code(response)
    if response.get("is_error") is not True and response.get("isError") is not True and not code:
        return None
    text = next((value[:MAX_QUERY_CHARS] for value in (response.get(key) for key in
                                                        ("stderr", "error", "content", "stdout", "output"))
                 if isinstance(value, str) and value.strip()), "")
    # An exit that is an answer (grep finding nothing, "nothing to commit") is no failure: the session
    # reader's rule (error_class.benign_exit), so both doors store the same errors.  Imported here: only a
    # failed call pays for the session reader's modules (a third of the hook's import time).
    from neverest.memory import error_class

    if error_class.benign_exit(_command(payload) or None, code, text):
        return None
    return text or (f"exit code {code}" if code else "the tool reported an error")


_WRAPPERS: Final = frozenset({"sudo", "env", "time", "command", "exec", "nohup", "nice"})


def program(command: str) -> str:
    """The program a shell command runs: its first word, past variable assignments and wrappers."""
    for token in command.split():
        if "=" in token.split("/")[0] or token in _WRAPPERS or token.startswith("-"):
            continue
        return token.rsplit("/", 1)[-1][:100]
    return ""


def first_line(text: str) -> str:
    """The first line that says something (not blank, not only punctuation or a traceback banner)."""
    for line in text.splitlines():
        line = line.strip()
        if words(line) and not line.startswith("Traceback (most recent call last)"):
            return line[:500]
    return text.strip()[:500]


def error_event(payload: dict[str, Any], error: str, now: datetime) -> dict[str, str]:
    tool = _text(payload.get("tool_name"), 100) or "tool"
    tool_input = payload.get("tool_input")
    command = tool_input.get("command") if isinstance(tool_input, dict) else None
    command = command if isinstance(command, str) else ""
    from neverest.agents.detect import first_meaningful_line
    from neverest.agents.transcripts import clean
    from neverest.memory import error_class

    name = program(command)
    happened = first_meaningful_line(clean(error)) or first_line(error)
    cls = error_class.classify(happened)
    title = (f"{tool}: {name}" if name else tool) + (f" ({cls})" if cls != error_class.OTHER else "")
    event = {"kind": "error", "title": title, "happened": happened,
             "agent": AGENT, "session": _text(payload.get("session_id"), SESSION_MAX_CHARS),
             "cwd": _text(payload.get("cwd"), 4096), "at": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
    if command:
        event["agent_did"] = command[:2000]
    return event


# -- choosing lessons ---------------------------------------------------------------------------


def held_out(session: str, holdout: float) -> bool:
    """Whether ``session`` is held out: stable for a session, a ``holdout`` fraction of all sessions."""
    digest = blake2b(session.encode("utf-8"), digest_size=8, person=b"neverest-hold").digest()
    return int.from_bytes(digest, "big") / 2.0**64 < holdout


def _holds_here(group: list[q.Candidate], cwd: str) -> bool:
    """Whether a lesson holds in ``cwd``: received from another memory (no project), or learned in this one."""
    return any(not r.cwd or r.origin or _in_project(r.cwd, cwd) for r in group)


def _in_project(lesson_cwd: str, cwd: str) -> bool:
    if not lesson_cwd or not cwd:
        return False
    a, b = lesson_cwd.rstrip("/") + "/", cwd.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


def _group(rows: list[q.Candidate]) -> list[list[q.Candidate]]:
    by_hash: dict[str, list[q.Candidate]] = {}
    for row in rows:
        by_hash.setdefault(row.hash, []).append(row)
    return [sorted(g, key=lambda r: r.origin != "") for g in by_hash.values()]


def _about(group: list[q.Candidate]) -> str:
    """A lesson as --explain names it: its hash prefix and kind, never its text (``neverestctl show`` has it)."""
    return f"{group[0].hash[:12]} ({group[0].kind}, {'this memory' if group[0].origin == '' else 'received'})"


def rank(event: str, rows: list[q.Candidate], payload: dict[str, Any], notes: Notes = None, *,
         model: ModelQuery | None = None, deadline: float = float("inf")) -> list[list[q.Candidate]]:
    """The lessons for ``event``, best first, each as its rows (own first); [] when nothing bears on it.

    ``model``: the configured embedding model, for the lessons whose vector is in its space (prompts and
    hand-backs only: the other moments are matched by their words, as replay chose)."""
    groups = _group(rows)
    if event == "SessionStart":
        cwd = _text(payload.get("cwd"), 4096)
        # Errors only: a correction about a program comes before that program runs (PreToolUse), and replay
        # on the public corpus found the corrections given at session start unused 5 times in 6.
        groups = [g for g in groups if g[0].kind == "error"]
        here = [g for g in groups if any(_in_project(r.cwd, cwd) for r in g)]
        general = [g for g in groups if all(not r.cwd for r in g)]
        if notes is not None:
            notes.append(f"{len(here)} learned in this project ({cwd or 'no cwd given'}), {len(general)} general; "
                         f"{len(groups) - len(here) - len(general)} belong to other projects")
        strength = lambda g: -max(r.strength for r in g)  # noqa: E731
        return sorted(here, key=strength) + sorted(general, key=strength)
    if event == "UserPromptSubmit":
        query = _text(payload.get("prompt"))
    elif event == "PreToolUse":
        command = _command(payload)
        if command:
            # A shell call: the lessons whose situation it is (moments.py), error and correction alike.
            query = tool_query(payload)
            vector = hashed(query)
            call = Call(command)
            cwd = _text(payload.get("cwd"), 4096)
            # An error this memory learned holds where it was learned (a program missing in one project's
            # environment may be there in another's); a correction is about the person, and holds anywhere.
            matched = [(dot(vector, hashed(g[0].text)), g) for g in groups
                       if (g[0].kind == "correction" or (g[0].kind == "error" and _holds_here(g, cwd)))
                       and bears_on_call(g[0].text, call)]
            # One lesson a situation: two corrections about the same program say one thing twice.
            chosen: list[list[q.Candidate]] = []
            situations: set[tuple[str, str, frozenset[str]]] = set()
            for _, group in sorted(matched, key=lambda item: (-max(r.strength for r in item[1]), -item[0])):
                kind, keys = lesson_situation(group[0].text)
                situation = (group[0].kind, kind, frozenset(keys))
                if kind == "words" or situation not in situations:
                    situations.add(situation)
                    chosen.append(group)
            if notes is not None:
                notes.append(f"{len(chosen)} of {len(groups)} lesson(s) are about this call's moment (the trait or "
                             "program their sentence names, else two key words; an error only in its own project)")
                notes.extend(f"  about this call: {_about(g)}" for g in chosen[:5])
            return chosen
        # Another tool (Read, Edit, WebFetch…): only the lessons that name it ("Read fails: …").
        tool = Call(_text(payload.get("tool_name"), 100))
        named = [g for g in groups if g[0].kind == "error" and lesson_situation(g[0].text)[0] == "program"
                 and bears_on_call(g[0].text, tool)]
        if notes is not None:
            notes.append(f"{len(named)} error lesson(s) name the tool {tool.programs[0][0] if tool.programs else '-'}")
        return named
    else:
        query = hand_back(payload)
    vector = hashed(query)
    if not vector:
        if notes is not None:
            notes.append("the " + ("prompt" if event == "UserPromptSubmit" else "tool call" if event == "PreToolUse"
                                   else "hand-back") + " has no words to match")
        return []
    # A lesson bears on the words when it shares key terms with them (keyterms.py: not filler, not the
    # words every failure is told in) and is close in meaning, in the model's space when the lesson's vector
    # is in it and the model answers in time, else in the hashed space; the most shared terms first.
    terms = set(key_terms(query))
    space = _ModelSpace(model, query, deadline)
    scored: list[tuple[int, float, list[q.Candidate]]] = []
    below: list[tuple[float, list[q.Candidate]]] = []
    for group in groups:
        row = group[0]
        in_model = space.holds(row)
        need = MODEL_MIN_SHARED_TERMS if in_model else MIN_SHARED_TERMS
        if need:
            text = row.text.lower()
            if sum(1 for term in terms if term in text) < need:
                continue  # the cheap test first (a word found is at least a substring): most lessons share none
        shared = len(terms & set(key_terms(row.text)))
        if shared < need:
            continue
        found = space.cosine(row) if in_model else None
        if found is not None:
            cosine, floor = found, MODEL_MIN_COSINE
        else:
            lesson = from_blob(row.embedding) if row.space == HASHED_SPACE and row.embedding else hashed(row.text)
            cosine, floor = dot(vector, lesson), MIN_COSINE
            if shared < MIN_SHARED_TERMS:
                continue  # the model did not answer: the hashed space's rule, whole
        if cosine >= floor:
            scored.append((shared, cosine, group))
        elif notes is not None:
            below.append((cosine, group))
    scored.sort(key=lambda item: (-item[0], -item[1]))
    if notes is not None:
        below.sort(key=lambda item: -item[0])
        if model is not None:
            notes.append(space.explained())
        notes.append(f"{len(scored)} bear on it (key terms shared: {MIN_SHARED_TERMS}, cosine >= {MIN_COSINE} hashed"
                     + (f"; {MODEL_MIN_SHARED_TERMS} and >= {MODEL_MIN_COSINE} in {model.space}" if model else "")
                     + f"), {len(below)} more share them but score below")
        notes.extend(f"  bears on it, {n} key terms, cosine {c:.2f}: {_about(g)}" for n, c, g in scored[:5])
        notes.extend(f"  below the floor, cosine {c:.2f}: {_about(g)}" for c, g in below[:3])
    return [group for _, _, group in scored]


class _ModelSpace:
    """A query's vector in the configured model's space, asked once and only when a lesson needs it."""

    def __init__(self, model: ModelQuery | None, query: str, deadline: float) -> None:
        self.model, self.query, self.deadline = model, query, deadline
        self._vector: list[float] | None = None
        self._asked = False
        self.compared = 0

    def holds(self, row: q.Candidate) -> bool:
        """Whether ``row``'s vector is in the model's space (and the model has not failed this call)."""
        if self.model is None or row.space != self.model.space or not row.embedding:
            return False
        return not self._asked or self._vector is not None

    def cosine(self, row: q.Candidate) -> float | None:
        """The query's cosine with ``row`` in the model's space; None when the model did not answer."""
        assert self.model is not None and row.embedding is not None
        if not self._asked:
            self._asked = True
            self._vector = self.model.vector(self.query, self.deadline)
        if self._vector is None:
            return None
        lesson = dense(row.embedding)
        if len(lesson) != len(self._vector):
            return None  # stored by another build of the model: the next sleep re-embeds it
        self.compared += 1
        return float(sum(map(mul, self._vector, lesson)))  # a third of the time of a generator over zip

    def explained(self) -> str:
        assert self.model is not None
        if not self._asked:
            return f"the model's space ({self.model.space}): no lesson needed it"
        if self._vector is None:
            return f"the model's space ({self.model.space}) not used, the hashed space instead: {self.model.last_error}"
        return f"the model's space ({self.model.space}): {self.compared} lesson(s) compared in it"


def dense(blob: bytes) -> list[float]:
    """A vector stored dense by ``neverest.memory.embed.to_blob`` (little-endian float32)."""
    values = array("f")
    values.frombytes(blob[:len(blob) - len(blob) % 4])
    if sys.byteorder != "little":
        values.byteswap()
    return values.tolist()


def judge(db: sqlite3.Connection, home: Path, hashes: set[str], now: datetime) -> dict[str, tuple[str, int]]:
    """The commons states of ``hashes`` as every door shows them (the slow path: imports the whole rule)."""
    from neverest.config import load_config
    from neverest.identity import load_or_create
    from neverest.memory import views

    origin = load_or_create(home).origin if (home / KEY_FILE).exists() else ""
    return views.judge(db, hashes, now=now, config=load_config(home), own_origin=origin)


def frame(group: list[q.Candidate], state: str, others: int) -> str:
    own = group[0].origin == ""
    if own:
        source = "this memory" + (f" and {others} other memories" if others else "")
    else:
        source = f"{max(others, 1)} other memor{'y' if max(others, 1) == 1 else 'ies'}"
    # Scrubbed on the way out (a received text is signed as is).
    return f"- Observation from {source} ({group[0].kind}, {state}): {one_line(group[0].text, MAX_LESSON_CHARS)}"


def lessons_for(store: Store, home: Path, payload: dict[str, Any], event: str, session: str, holdout: float,
                now: datetime, deadline: float, notes: Notes = None, *, model: ModelQuery | None = None) -> str:
    """The context to give for ``event`` (and what is given logged); ``model``: the configured embedding
    model (``hook_model.py``), None for the hashed space only."""
    db = store.db
    stamp = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    with store.read():
        pool = q.candidates(db, kind=KIND[event])
        if notes is not None:
            notes.append(f"{event}: {len(pool)} unarchived lesson row(s)"
                         + (f" of kind {KIND[event]}" if KIND[event] else "") + " to choose from")
        groups = rank(event, pool, payload, notes, model=model, deadline=deadline)
        given = q.already_given(db, session)
        fresh_groups = [g for g in groups if g[0].hash not in given]
        if notes is not None and len(fresh_groups) < len(groups):
            notes.append(f"{len(groups) - len(fresh_groups)} of them already given in this session (once each)")
        groups = fresh_groups[:4 * TOP[event]]
        # What the last Stop kept for this prompt (logged then, given now).
        pending = q.pending(db, session) if event == "UserPromptSubmit" else []
        if pending:
            ranked = {g[0].hash for g in groups}
            by_hash = {g[0].hash: g for g in _group([r for r in pool if r.hash in set(pending)])}
            groups += [by_hash[h] for h in pending if h in by_hash and h not in ranked]
            if notes is not None:
                notes.append(f"{len(pending)} kept by the last Stop for this prompt")
        recorded = q.session_held_out(db, session)
        # Own lessons no record is about are local; the state of the others needs the commons rule.
        published = q.published(db, (g[0].hash for g in groups))
        labels = {g[0].hash: state_label(own=g[0].origin == "", recorded=g[0].hash in published) for g in groups}
        needing = {digest for digest, label in labels.items() if label is None}
        since = (now - timedelta(seconds=STATE_TTL_S)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        states = q.cached_states(db, needing, since=since)
        fresh: dict[str, tuple[str, int]] = {}
        if needing - set(states):
            if time.monotonic() < deadline - JUDGE_BUDGET_S:
                fresh = judge(db, home, needing - set(states), now)
            else:  # no time left to judge: the states judged before, however old; the others are left out
                states = q.cached_states(db, needing, since="")
        states |= fresh
    chosen: list[tuple[list[q.Candidate], str]] = []
    for group in groups:
        own = group[0].origin == ""
        if group[0].hash in needing and group[0].hash not in states:
            if notes is not None:
                notes.append(f"left out, its commons state not known in time: {_about(group)}")
            continue
        state = labels[group[0].hash] or states[group[0].hash][0]
        if (own and state != "revoked") or (not own and state == "common"):
            chosen.append((group, state))
        elif notes is not None:
            notes.append(f"left out, {'revoked' if own else state + ' (only common received lessons are given)'}: "
                         f"{_about(group)}")
    kept_for_prompt = set(pending)
    chosen = ([c for c in chosen if c[0][0].hash not in kept_for_prompt][:TOP[event]]
              + [c for c in chosen if c[0][0].hash in kept_for_prompt][:TOP["Stop"]])
    hold = held_out(session, holdout) if recorded is None else recorded
    if notes is not None:
        notes.append(f"session {session} is {'held out' if hold else 'not held out'} (holdout {holdout:g}; "
                     + ("decided when the hook first saw it)" if recorded is not None else "decided now)"))
    if event == "Stop":
        return _stop(store, session, [g[0].hash for g, _ in chosen], hold=hold, recorded=recorded, fresh=fresh,
                     payload=payload, stamp=stamp, now=now, notes=notes)
    lines: list[str] = []
    size = len(HEADER)
    for group, state in chosen:
        line = frame(group, state, q.other_origins(db, group[0].hash))
        if size + 1 + len(line) > MAX_CONTEXT_CHARS:
            break
        lines.append(line)
        size += 1 + len(line)
    shown = [group[0].hash for group, _ in chosen[:len(lines)]]
    if notes is not None and len(lines) < len(chosen):
        notes.append(f"{len(chosen) - len(lines)} cut: the context is at most {MAX_CONTEXT_CHARS} characters")
    if recorded is not None and not shown and not fresh and not pending:
        if notes is not None:
            notes.append("nothing given")
        return ""  # nothing to log: no write
    with store.write() as w:
        if recorded is None:
            q.add_session(w, session, held_out=hold, cwd=_text(payload.get("cwd"), 4096), at=stamp)
        if fresh:
            q.save_states(w, fresh, stamp)
        new = set(q.log(w, session, shown, event=event, at=stamp, held_out=hold))
        if pending:
            q.set_pending(w, session, [], at=stamp, stale_before=_stale(now))
    if hold:
        if notes is not None:
            notes.append(f"held out: {len(new)} lesson(s) withheld and logged, nothing said")
        return ""
    kept = [line for line, digest in zip(lines, shown, strict=True) if digest in new or digest in kept_for_prompt]
    if notes is not None:
        notes.append(f"given {len(kept)} lesson(s)" if kept else "nothing given")
    return "\n".join([HEADER, *kept]) if kept else ""


def _stale(now: datetime) -> str:
    return (now - timedelta(seconds=PENDING_TTL_S)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _stop(store: Store, session: str, shown: list[str], *, hold: bool, recorded: bool | None,
          fresh: dict[str, tuple[str, int]], payload: dict[str, Any], stamp: str, now: datetime, notes: Notes) -> str:
    """Stop: the lessons chosen are logged now and, unless the session is held out, kept for its next
    prompt; nothing is printed (Claude Code adds no context from a Stop hook)."""
    if recorded is not None and not shown and not fresh:
        if notes is not None:
            notes.append("Stop: nothing to keep for the next prompt")
        return ""
    with store.write() as w:
        if recorded is None:
            q.add_session(w, session, held_out=hold, cwd=_text(payload.get("cwd"), 4096), at=stamp)
        if fresh:
            q.save_states(w, fresh, stamp)
        new = q.log(w, session, shown, event="Stop", at=stamp, held_out=hold)
        if new and not hold:
            q.set_pending(w, session, list(dict.fromkeys([*new, *q.pending(w, session)]))[:2 * TOP["Stop"]],
                          at=stamp, stale_before=_stale(now))
    if notes is not None:
        notes.append(f"Stop: Claude Code takes no context from a Stop hook; {len(new)} lesson(s) logged, "
                     + ("withheld (held out)" if hold else "kept for the session's next prompt"))
    return ""


# -- storing a failure --------------------------------------------------------------------------


def store_failure(home: Path, payload: dict[str, Any], error: str, now: datetime, deadline: float) -> None:
    event = error_event(payload, error, now)
    from neverest.client import ControlError, ask_daemon  # only a failed tool call needs the socket

    try:
        if ask_daemon(home, {"op": "remember", "events": [event]},
                      timeout_s=max(deadline - time.monotonic() - 0.1, 0.05)) is not None:
            return
    except ControlError:
        pass  # the daemon refused, failed or was slow: store it here all the same
    # No daemon (or it failed): the one ingest function, here.  Storing twice is harmless (an event's
    # id is its content), so a daemon that stored it but did not answer in time loses nothing.
    from neverest.memory.events import ingest

    with Store(home / STORE_FILE, busy_timeout_s=BUSY_TIMEOUT_S) as store:
        ingest(store, [event], now=now)


# -- the whole call -----------------------------------------------------------------------------


def now_utc() -> datetime:
    pinned = os.environ.get("NEVEREST_NOW")  # neverest.clock.NOW_ENV: tests pin the clock
    if pinned:
        at = datetime.fromisoformat(pinned.strip())
        return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    return datetime.now(UTC)


def respond(raw: bytes, home: Path, *, holdout: float, deadline: float, close: bool = True,
            notes: Notes = None) -> str:
    """The text to print for the hook input ``raw`` (may raise: the caller prints nothing then).

    ``close=False`` leaves the store's connection to the process's end: a process that ends with
    ``os._exit`` then skips the WAL checkpoint SQLite runs when the last connection closes (every
    transaction is already committed and durable; the next connection or the daemon checkpoints)."""
    payload = json.loads(raw)
    if not isinstance(payload, dict):
        raise Skip("not a JSON object")
    event = payload.get("hook_event_name")
    session = payload.get("session_id")
    if not isinstance(event, str) or not isinstance(session, str) or not session or len(session) > SESSION_MAX_CHARS:
        raise Skip("not a Claude Code hook call")
    if not (home / STORE_FILE).is_file():
        raise Skip(f"no memory at {home}")  # the hook never creates one
    now = now_utc()
    if event in FAILURE_EVENTS:
        error = failure(payload)
        if error is not None:
            store_failure(home, payload, error, now, deadline)
        if notes is not None:
            notes.append(f"{event}: " + ("the failed call was stored as an error event" if error is not None
                                         else "the call did not fail: nothing stored") + "; nothing said")
        return ""
    if event not in TOP:
        raise Skip(f"event {event} is not answered (only {', '.join(TOP)} and {', '.join(FAILURE_EVENTS)})")
    # Only the words of a prompt or a hand-back are matched by meaning (rank): only they need the model.
    found = hook_model.configured(home) if event in ("UserPromptSubmit", "Stop") else None
    model = ModelQuery(*found, latch=home / hook_model.LATCH_FILE, now=now) if found else None
    store = Store(home / STORE_FILE, busy_timeout_s=BUSY_TIMEOUT_S)
    try:
        context = lessons_for(store, home, payload, event, session, holdout, now, deadline, notes, model=model)
    finally:
        if close:
            store.close()
    if not context:
        return ""
    return json.dumps({"hookSpecificOutput": {"hookEventName": event, "additionalContext": context}},
                      ensure_ascii=False)


def _holdout(value: float | None, home: Path) -> float:
    """The flag, else $NEVEREST_HOLDOUT, else the home's config.toml ``holdout``, else the default."""
    if value is None:
        text = os.environ.get(HOLDOUT_ENV)
        value = float(text) if text else _configured_holdout(home)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"holdout {value} is not a fraction between 0 and 1")
    return value


def _configured_holdout(home: Path) -> float:
    import tomllib  # small, and only read when neither the flag nor the environment says

    try:
        with open(home / "config.toml", "rb") as f:
            value = tomllib.load(f).get("holdout", DEFAULT_HOLDOUT)
    except FileNotFoundError:
        return DEFAULT_HOLDOUT
    return float(value)


def run(stdin: IO[bytes], stdout: IO[str], *, home_flag: str | None, holdout: float | None,
        watchdog: bool = True, close: bool = True, explain: bool = False) -> int:
    """Answer one hook call; always 0.  With ``watchdog`` the process ends (status 0, nothing printed)
    when the deadline passes; ``close`` as in ``respond``.  ``explain`` (or $NEVEREST_HOOK_EXPLAIN) says
    on standard error why the call gave what it gave."""
    deadline = time.monotonic() + DEADLINE_S
    notes: Notes = [] if explain or os.environ.get(EXPLAIN_ENV) else None
    timer = threading.Timer(DEADLINE_S, os._exit, args=(0,)) if watchdog else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        raw = stdin.read(MAX_INPUT_BYTES + 1)
        if len(raw) > MAX_INPUT_BYTES:
            raise Skip(f"input over {MAX_INPUT_BYTES} bytes")
        home = resolve_home(home_flag)
        out = respond(raw, home, holdout=_holdout(holdout, home), deadline=deadline, close=close, notes=notes)
        if out:
            stdout.write(out + "\n")
            stdout.flush()
    except Skip as exc:
        if notes is not None:
            notes.append(f"nothing: {exc}")
    except (Exception, RecursionError) as exc:  # whatever it is, the agent goes on without us
        if notes is not None:
            notes.append(f"nothing: {type(exc).__name__}: {exc}")
        elif os.environ.get(DEBUG_ENV):
            print(f"neverest hook: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        if timer is not None:
            timer.cancel()
        if notes is not None:
            sys.stderr.write("".join(f"neverest hook: {line}\n" for line in notes))
            sys.stderr.flush()
    return 0


def cmd_hook(args: argparse.Namespace) -> int:
    return run(sys.stdin.buffer, sys.stdout, home_flag=getattr(args, "home", None), holdout=args.holdout,
               explain=args.explain)


def main(argv: Sequence[str] | None = None, *, fast_exit: bool = False) -> int:
    """``neverest-hook [--home DIR] [--holdout F] [--explain]``: the same as ``neverestctl hook``, without loading
    the rest of neverestctl first.  Always 0, even for a wrong command line (the agent must go on).

    ``fast_exit`` (the console script and ``python -m``) ends the process once the answer is written
    and every transaction committed, without the interpreter's teardown or the connection's closing
    checkpoint: a third of the hook's own time."""
    parser = argparse.ArgumentParser(prog="neverest-hook", description="Answer one Claude Code hook call.")
    parser.add_argument("--home", default=None)
    parser.add_argument("--holdout", type=float, default=None)
    parser.add_argument("--explain", action="store_true")
    try:
        args = parser.parse_args(argv)
    except SystemExit:
        return 0
    os.umask(0o077)  # neverest.paths.PRIVATE_UMASK: the store's -wal and -shm are born private
    run(sys.stdin.buffer, sys.stdout, home_flag=args.home, holdout=args.holdout, close=not fast_exit,
        explain=args.explain)
    if fast_exit:
        os._exit(0)
    return 0


def entry() -> None:
    """The console script ``neverest-hook``."""
    main(fast_exit=True)


if __name__ == "__main__":
    entry()
