"""Detectors: the turns of a session become events (PROTOCOL.md §0), by simple, documented rules.

The rules read English only (a correction or surprise said in another language is not
detected; errors are detected whatever the language, from the result's flag or exit code).

- **error**: a tool result marked ``is_error``, or a command whose exit code is not 0
  (Codex reports it in the output or in ``exec_command_end``).  ``title`` is the tool and,
  for a shell call, the command's program ("Bash: pytest"); ``happened`` is the first
  meaningful line of the output: the first line that reads like an error (error,
  exception, failed, not found, denied…), else the first line that is not an exit-code or
  traceback banner.  So one session stores one error per tool and program (the protocol
  keys an episode by agent, session, kind and title).
- **correction**: the person's words right after the agent acted or handed back (any
  agent turn since the person last spoke) that redirect or contradict it: they start with
  "no", "stop", "wait", "don't", "actually", "instead", "undo", "revert", "why did you"…,
  or say "not what I asked", "I told you", "that's wrong"… anywhere.  ``said`` is the
  person's words; ``agent_did`` what the agent last did.
- **surprise**: a sentence of the agent's own text saying something did not behave as
  expected ("unexpectedly", "surprisingly", "turns out", "I expected … but", "didn't work
  as expected"…).  ``happened`` is that sentence; at most one per agent turn.
- **session episode**: one ``note`` per session, titled "<agent> session <id>", saying
  where it ran and what the person first asked; stored when the first prompt is read.

The detector's state (the open tool calls, whether the agent acted) is small, bounded and
JSON-able: the ingest driver keeps it with the file's cursor so that a session read in
several steps is judged as one.
"""

from __future__ import annotations

import re
from typing import Any, Final

from neverest.agents.transcripts import ToolResult, Turn, program_of

MAX_OPEN_CALLS: Final = 256
MAX_SAID_CHARS: Final = 2000
MAX_LINE_CHARS: Final = 500

_CORRECTION_START: Final = re.compile(
    r"^(?:no|nope|nah|wrong|stop|wait|hold on|don'?t|do not|never|actually|instead|undo|revert|"
    r"that'?s not|that is not|not that|why did you|why are you|why would you|i said|i told you|i asked|"
    r"you should(?:n'?t| not)?|please (?:don'?t|do not|stop|revert|undo)|you forgot|you missed|"
    r"that'?s wrong|that is wrong|incorrect)\b",
    re.IGNORECASE)
_CORRECTION_ANYWHERE: Final = re.compile(
    r"\b(?:not what i (?:asked|wanted|meant|said)|i (?:already )?told you|that'?s (?:not right|wrong)|"
    r"you (?:broke|ignored|didn'?t listen)|i said not to|i asked you not to)\b",
    re.IGNORECASE)
_SURPRISE: Final = re.compile(
    r"\b(?:unexpected(?:ly)?|surprising(?:ly)?|strangely|oddly|turns out|it turned out|"
    r"(?:did ?n[o']t|does ?n[o']t) (?:work|behave) as expected|not as expected|not what i expected|"
    r"contrary to (?:what )?(?:i|we) expected|(?:i|we) expected\b[^.\n]{0,160}\bbut\b|"
    r"should have\b[^.\n]{0,120}\bbut\b)",
    re.IGNORECASE)
_SENTENCE_END: Final = re.compile(r"(?<=[.!?])\s+|\n+")
_ERRORISH: Final = re.compile(
    r"(?:error|exception)s?\b|"  # also the end of a name: ModuleNotFoundError, IOException
    r"\b(?:failed|failure|fatal|denied|not found|no such|cannot|can'?t|unable|invalid|"
    r"refused|timed? ?out|panic(?:ked)?|abort(?:ed)?)\b",
    re.IGNORECASE)
_BANNER: Final = re.compile(
    r"^(?:error:?\s*)?(?:exit code:?\s*-?\d+|process exited with code -?\d+|wall time:.*|output:|"
    r"traceback \(most recent call last\):|file \".*|-+|=+|</?tool_use_error>)$",
    re.IGNORECASE)
_TAG: Final = re.compile(r"</?tool_use_error>")


def first_meaningful_line(text: str) -> str:
    """The line of ``text`` that says what went wrong (see the module docstring)."""
    lines = [line.strip() for line in _TAG.sub("", text[:16384]).splitlines()]
    lines = [line for line in lines if line and not _BANNER.match(line)]
    for line in lines:
        if _ERRORISH.search(line):
            return line[:MAX_LINE_CHARS]
    return lines[0][:MAX_LINE_CHARS] if lines else ""


def is_correction(text: str) -> bool:
    said = text.strip()
    return bool(_CORRECTION_START.match(said) or _CORRECTION_ANYWHERE.search(said[:MAX_SAID_CHARS]))


def surprise_sentence(text: str) -> str:
    """The first sentence of ``text`` stating a surprise, or ''."""
    match = _SURPRISE.search(text)
    if match is None:
        return ""
    start = max((m.end() for m in _SENTENCE_END.finditer(text, 0, match.start())), default=0)
    end_match = _SENTENCE_END.search(text, match.end())
    end = end_match.start() if end_match else len(text)
    return text[start:end].strip()[:MAX_LINE_CHARS]


class Detector:
    """Turns of one session file in, events out; ``state()`` / ``Detector(state)`` carry it
    from one read of the file to the next."""

    def __init__(self, agent: str, state: dict[str, Any] | None = None, *, session: str = "") -> None:
        state = state or {}
        self.agent = agent
        self.session: str = str(state.get("session") or "")  # as the file names it
        self.fallback = session  # until it does: the file's name
        self.cwd: str = str(state.get("cwd") or "")
        self.acted: bool = bool(state.get("acted"))
        self.episode: bool = bool(state.get("episode"))
        self.did: str = str(state.get("did") or "")
        calls = state.get("calls")
        # call id -> [tool name, command or None]
        self.calls: dict[str, list[Any]] = dict(calls) if isinstance(calls, dict) else {}
        exits = state.get("exits")
        self.exits: dict[str, int] = dict(exits) if isinstance(exits, dict) else {}

    def state(self) -> dict[str, Any]:
        return {"session": self.session, "cwd": self.cwd, "acted": self.acted, "episode": self.episode,
                "did": self.did, "calls": self.calls, "exits": self.exits}

    def saw(self, session: str, cwd: str) -> None:
        """Session facts from a line's envelope (the first ones win for the session)."""
        if session and not self.session:
            self.session = session
        if cwd:
            self.cwd = cwd

    def exit_code(self, call_id: str, code: int) -> None:
        self.exits[call_id] = code
        _bound(self.exits)

    def _event(self, kind: str, at: str | None, **fields: str) -> dict[str, Any]:
        event: dict[str, Any] = {"kind": kind, "agent": self.agent, "session": self.session or self.fallback,
                                 "cwd": self.cwd}
        if at:
            event["at"] = at
        # JSON can spell lone surrogates (binary in a tool result); the store refuses them, so
        # they become "?" here rather than cost the whole event.
        return {name: _text(value) for name, value in (event | fields).items()}

    def turn(self, turn: Turn) -> list[dict[str, Any]]:
        """The events ``turn`` gives, given what came before it."""
        events: list[dict[str, Any]] = []
        if turn.role == "assistant":
            for call in turn.calls:
                if call.id:
                    self.calls[call.id] = [call.name, call.command]
                    _bound(self.calls)
            if turn.calls:
                last = turn.calls[-1]
                self.did = f"ran {last.name}" + (f": {_cut(last.command)}" if last.command else "")
            elif turn.text.strip():
                self.did = "said: " + turn.text.strip().splitlines()[0][:200]
            if turn.text:
                sentence = surprise_sentence(turn.text)
                if sentence:
                    events.append(self._event("surprise", turn.at, happened=sentence))
            self.acted = True
            return events
        for result in turn.results:
            error = self._error(result, turn.at)
            if error is not None:
                events.append(error)
        said = turn.text.strip()
        if not said:
            return events
        if self.acted and is_correction(said):
            fields = {"said": said[:MAX_SAID_CHARS]}
            if self.did:
                fields["agent_did"] = self.did
            events.append(self._event("correction", turn.at, **fields))
        if not self.episode:
            self.episode = True
            where = f" in {self.cwd}" if self.cwd else ""
            name = "Claude Code" if self.agent == "claude-code" else "Codex" if self.agent == "codex" else self.agent
            first = said.splitlines()[0][:300]
            events.append(self._event("note", turn.at, title=f"{self.agent} session {self.session or self.fallback}",
                                      text=f"{name} session{where}; first asked: {first}"))
        self.acted = False
        return events

    def _error(self, result: ToolResult, at: str | None) -> dict[str, Any] | None:
        call = self.calls.pop(result.call_id, None)
        code = result.exit_code if result.exit_code is not None else self.exits.pop(result.call_id, None)
        self.exits.pop(result.call_id, None)
        if not result.is_error and (code is None or code == 0):
            return None
        name, program = (str(call[0]), program_of(call[1])) if call and len(call) == 2 else ("tool", "")
        title = f"{name}: {program}" if program else name
        happened = first_meaningful_line(result.text) or (f"exit code {code}" if code else "failed")
        return self._event("error", at, title=title, happened=happened)


def _text(value: str) -> str:
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "replace").decode("utf-8")


def _cut(command: str | list[str]) -> str:
    text = command if isinstance(command, str) else " ".join(command)
    return text[:200]


def _bound(table: dict[str, Any]) -> None:
    """Drop the oldest entries (dicts keep insertion order): calls never answered don't pile up."""
    while len(table) > MAX_OPEN_CALLS:
        del table[next(iter(table))]
