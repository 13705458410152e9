"""Detectors: the turns of a session become events (PROTOCOL.md §6), by simple, documented rules.

The rules read English only (a correction or surprise said in another language is not
detected; errors are detected whatever the language, from the result's flag or exit code).
The person's words are read out of the wrappers the harness and the IDE put around them
(``transcripts.person_words``) before any rule sees them.

- **error**: a tool call that failed: a result marked ``is_error``, or a command whose exit
  code is not 0 (Codex reports it in the output or in ``exec_command_end``), unless the exit
  is an answer (``error_class.benign_exit``: grep/rg/diff exit 1, ``test``, ``git diff
  --quiet``, "nothing to commit").  A call the person refused is not an error (see below).
  ``title`` is the tool, for a shell call the command's program, and the failure's class when
  it is known ("Bash: ls (shell syntax)"), so one session stores one error per program and
  class (the protocol keys an episode by agent, session, kind and title); ``happened`` is the
  first meaningful line of the output; ``agent_did`` the failed command.
- **what worked**: when, within the next ``FIX_WINDOW`` shell calls of the session, a call
  succeeds that runs the same program (or shares the failed command's arguments) and differs
  from the failed one, the error is sent again with ``worked`` = that command; the store fills
  it in (``queries.episodes.insert``).  The phrasing says what the difference was.
- **correction** (``reaction`` says which):
  ``rejected``: the person refused a tool call (Claude Code's permission prompt, Codex's
  approval); ``said`` is the words given with the refusal or right after it.
  ``interrupted``: the person stopped the agent; ``said`` is what they said next.
  ``corrected``: the person's words right after the agent acted or handed back redirect,
  contradict or complain ("no", "stop", "wait", "don't", "not the …", "wtf", "you just deleted
  …", "still broken", "not what I asked"…).
  ``told to act``: the agent handed back asking or offering, and the person told it to act.
  ``agent_did`` is what the agent last did ("ran Bash: rm -rf build").  A refusal or an
  interrupt with no words before the agent goes on is still stored (counted in morning.md); it
  makes no lesson by itself.
- **surprise**: a sentence of the agent's own text, in the two agent turns after a failure,
  saying something did not behave as it thought ("turns out", "actually …" that is not a plan,
  "I expected … but", "unexpectedly"…).  ``happened`` is that sentence (for "expected X but
  Y": ``expected`` X and ``happened`` Y); at most one per agent turn.
- **session episode**: one ``note`` per session, titled "<agent> session <id>", saying
  where it ran and what the person first asked; stored when the first prompt is read.

The detector's state (the open tool calls, recent failures, a pending refusal) is small,
bounded and JSON-able: the ingest driver keeps it with the file's cursor so that a session
read in several steps is judged as one.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Final

from neverest.agents.transcripts import ToolResult, Turn, program_of
from neverest.memory import error_class, shellwords

MAX_OPEN_CALLS: Final = 256
MAX_SAID_CHARS: Final = 2000
MAX_LINE_CHARS: Final = 500
MAX_FAILURES: Final = 8
FIX_WINDOW: Final = 6  # shell calls after a failure in which a success counts as what worked
SURPRISE_WINDOW: Final = 2  # agent turns after a failure in which a stated surprise is read

_CORRECTION_START: Final = re.compile(
    r"^(?:no|nope|nah|wrong|stop|wait|hold on|don'?t|do not|never|actually|instead|undo|revert|"
    r"not|that'?s not|that is not|not that|why did you|why are you|why would you|why is|why does|i said|"
    r"i told you|i asked|you should(?:n'?t| not)?|please (?:don'?t|do not|stop|revert|undo)|you forgot|"
    r"you missed|you just|you (?:deleted|removed|broke|overwrote|reverted|lost|ignored|changed)|"
    r"that'?s wrong|that is wrong|incorrect|wtf|what the (?:hell|heck|fuck)|ugh|seriously|"
    r"it'?s still|it is still|still (?:not|no|broken|failing|the same|doesn'?t|isn'?t|getting|seeing))\b",
    re.IGNORECASE)
_CORRECTION_ANYWHERE: Final = re.compile(
    r"\b(?:not what i (?:asked|wanted|meant|said)|i (?:already )?told you|that'?s (?:not right|wrong)|"
    r"you (?:broke|ignored|didn'?t listen|deleted|removed|overwrote)|i said not to|i asked you not to|wtf|"
    r"(?:is|are) still (?:not|broken|failing|missing|there|showing|empty)|(?:doesn'?t|does not|didn'?t|did not) "
    r"(?:work|fix|change)|(?:isn'?t|is not|aren'?t|are not|nothing(?: is)?) (?:loading|showing|working|rendering|"
    r"displaying|happening)|still (?:broken|failing|the same|not working))\b",
    re.IGNORECASE)
# A person's reply that is a new request rather than a correction, though it opens like one.
_NOT_CORRECTION: Final = re.compile(
    r"^(?:no (?:problem|worries|thanks|need)|not (?:bad|yet|now|sure)|nothing else|wait for|never mind|nvm)\b",
    re.IGNORECASE)
_TELL_TO_ACT: Final = re.compile(
    r"^(?:yes,?\s*)?(?:just |please )?(?:do it|go ahead|proceed|go for it)\b|\bjust do it\b|\bdon'?t (?:ask|wait)\b|"
    r"\bwhy (?:are|do) you (?:keep )?ask|\bdo it yourself\b|\byou (?:can|could) (?:just )?do (?:it|that)\b",
    re.IGNORECASE)
_OFFER: Final = re.compile(
    r"\b(?:should i|shall i|do you want me to|would you like me to|want me to|let me know if|"
    r"i can (?:also )?(?:do|make|run|fix|add|update)|if you(?:'d)? like,? i)\b", re.IGNORECASE)
_SURPRISE: Final = re.compile(
    r"\b(?:unexpected(?:ly)?|surprising(?:ly)?|strangely|oddly|turns out|it turned out|"
    r"(?:did ?n[o']t|does ?n[o']t) (?:work|behave) as expected|not as expected|not what i expected|"
    r"contrary to (?:what )?(?:i|we) expected|(?:i|we) expected\b[^.\n]{0,160}\bbut\b|"
    r"should have\b[^.\n]{0,120}\bbut\b|"
    r"actually(?!,?\s+(?:let me|let's|i'?ll|i will|i need|i should|we need|we should|i can|i think|"
    r"wait|no|first|before|looking|re-?reading|now)\b)\s+(?:is|are|was|were|has|have|does|doesn'?t|needs|"
    r"uses|lives|runs|returns|points|lies|sits|comes))",
    re.IGNORECASE)
_EXPECTED_BUT: Final = re.compile(r"\b(?:i|we) expected (?:that )?(.{3,160}?),? but (.{3,})", re.IGNORECASE)
_SENTENCE_END: Final = re.compile(r"(?<=[.!?])\s+|\n+")
_ERRORISH: Final = re.compile(
    r"(?:error|exception)s?\b|"  # also the end of a name: ModuleNotFoundError, IOException
    r"\b(?:failed|failure|fatal|denied|not found|no such|cannot|can'?t|unable|invalid|"
    r"refused|timed? ?out|panic(?:ked)?|abort(?:ed)?|not permitted|does not exist)\b",
    re.IGNORECASE)
_BANNER: Final = re.compile(
    r"^(?:error:?\s*)?(?:exit code:?\s*-?\d+|process exited with code -?\d+|wall time:.*|output:|"
    r"traceback \(most recent call last\):|file \".*|-+|=+|</?tool_use_error>|chunk id:.*|"
    r"original token count:.*|total output lines:.*)$",
    re.IGNORECASE)
_TAG: Final = re.compile(r"</?tool_use_error>")
_SHELL_TOOLS: Final = frozenset({"bash", "shell", "exec_command", "local_shell", "run_terminal_cmd", "terminal",
                                 "container.exec", "shell_command"})


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
    if _NOT_CORRECTION.match(said):
        return False
    return bool(_CORRECTION_START.match(said) or _CORRECTION_ANYWHERE.search(said[:MAX_SAID_CHARS]))


def surprise_sentence(text: str) -> str:
    """The first sentence of ``text`` stating a surprise, or '' (words inside a quoted `output` are
    the output's, not the agent's)."""
    match = next((m for m in _SURPRISE.finditer(text) if text.count("`", 0, m.start()) % 2 == 0), None)
    if match is None:
        return ""
    start = max((m.end() for m in _SENTENCE_END.finditer(text, 0, match.start())), default=0)
    end_match = _SENTENCE_END.search(text, match.end())
    end = end_match.start() if end_match else len(text)
    return text[start:end].strip()[:MAX_LINE_CHARS]


def _words(command: object) -> list[str]:
    """The words of the simple commands that do the work (``cd x &&`` and the like left out: two calls that
    only share the folder they start from are not two attempts at one thing)."""
    if not isinstance(command, str | list):
        return []
    return [w for segment in shellwords.working(command) for w in segment]


def fixes(failed: str | list[str], tried: str | list[str]) -> bool:
    """Whether the successful command ``tried`` is a second attempt at the failed ``failed``, not the very
    same command: it shares at least half of the failed one's arguments (whatever its program: ``python3``
    for ``python``), or, when the failed one had none, runs the same program.  ``ls a`` then ``ls -l b`` is
    the agent moving on, not what worked."""
    if failed == tried:
        return False
    before, after = _words(failed), _words(tried)
    if not before or not after:
        return False
    if before == after:
        return True  # the same words once the shell has read them: the quoting changed
    args = _arguments(before[1:])
    if not args:
        return bool(program_of(failed)) and program_of(failed) == program_of(tried)
    return len(args & _arguments(after)) * 2 >= len(args)


def _arguments(words: list[str]) -> set[str]:
    """Arguments compared across two attempts: redirections left out, and a flag without its dashes or
    slash ("/change" and "-change" are the same wish in two syntaxes)."""
    return {w.lstrip("-/") for w in words if len(w.lstrip("-/")) > 1 and not re.search(r"[<>|&]", w)}


class Detector:
    """Turns of one session file in, events out; ``state()`` / ``Detector(state)`` carry it
    from one read of the file to the next."""

    def __init__(self, agent: str, state: dict[str, Any] | None = None, *, session: str = "",
                 label: str = "") -> None:
        state = state or {}
        self.agent = agent
        self.label = label  # how the session episode names the agent ("" = from ``agent``)
        self.session: str = str(state.get("session") or "")  # as the file names it
        self.fallback = session  # until it does: the file's name
        self.cwd: str = str(state.get("cwd") or "")
        self.acted: bool = bool(state.get("acted"))
        self.episode: bool = bool(state.get("episode"))
        self.did: str = str(state.get("did") or "")
        self.asked: bool = bool(state.get("asked"))  # the agent's last hand-back asked or offered
        self.since_failure: int = int(state.get("since_failure") or 0)
        calls = state.get("calls")
        # call id -> [tool name, command or None]
        self.calls: dict[str, list[Any]] = dict(calls) if isinstance(calls, dict) else {}
        exits = state.get("exits")
        self.exits: dict[str, int] = dict(exits) if isinstance(exits, dict) else {}
        failures = state.get("failures")
        # recent failed shell calls waiting for what worked: {"event": {...}, "command": ..., "left": n}
        self.failures: list[dict[str, Any]] = [f for f in failures if isinstance(f, dict)] \
            if isinstance(failures, list) else []
        refusal = state.get("refusal")
        self.refusal: dict[str, Any] | None = refusal if isinstance(refusal, dict) else None

    def state(self) -> dict[str, Any]:
        return {"session": self.session, "cwd": self.cwd, "acted": self.acted, "episode": self.episode,
                "did": self.did, "asked": self.asked, "since_failure": self.since_failure, "calls": self.calls,
                "exits": self.exits, "failures": self.failures, "refusal": self.refusal}

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
        if turn.role == "assistant":
            return self._agent_turn(turn)
        events: list[dict[str, Any]] = []
        for result in turn.results:
            events.extend(self._result(result, turn.at))
        if turn.interrupted and self.refusal is None:
            self.refusal = {"reaction": "interrupted", "did": self.did, "at": turn.at}
        said = turn.text.strip()
        if not said:
            return events
        if self.refusal is not None:
            refusal, self.refusal = self.refusal, None
            events.append(self._correction(said, str(refusal.get("did") or ""), str(refusal["reaction"]), turn.at))
        elif self.acted and self.asked and _TELL_TO_ACT.search(said[:300]):
            events.append(self._correction(said, self.did, "told to act", turn.at))
        elif self.acted and is_correction(said):
            events.append(self._correction(said, self.did, "corrected", turn.at))
        if not self.episode:
            self.episode = True
            where = f" in {self.cwd}" if self.cwd else ""
            name = self.label or ("Claude Code" if self.agent == "claude-code" else "Codex" if self.agent == "codex"
                                  else self.agent)
            first = said.splitlines()[0][:300]
            events.append(self._event("note", turn.at, title=f"{self.agent} session {self.session or self.fallback}",
                                      text=f"{name} session{where}; first asked: {first}"))
        self.acted = False
        return events

    def finish(self) -> list[dict[str, Any]]:
        """What is still pending when a session ends: a refusal nobody explained."""
        events: list[dict[str, Any]] = []
        if self.refusal is not None and self.refusal.get("reaction") == "rejected":
            refusal, self.refusal = self.refusal, None
            events.append(self._correction("", str(refusal.get("did") or ""), "rejected", refusal.get("at")))
        return events

    def _correction(self, said: str, did: str, reaction: str, at: str | None) -> dict[str, Any]:
        fields = {"said": said[:MAX_SAID_CHARS], "reaction": reaction}
        if did:
            fields["agent_did"] = did
        return self._event("correction", at, **fields)

    def _agent_turn(self, turn: Turn) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self.refusal is not None and turn.calls:
            # The agent went on after a refusal with no words: the refusal alone is the correction.
            events.extend(self.finish())
            self.refusal = None
        for call in turn.calls:
            if call.id:
                self.calls[call.id] = [call.name, call.command]
                _bound(self.calls)
        text = turn.text.strip()
        if turn.calls:
            last = turn.calls[-1]
            self.did = f"ran {last.name}" + (f": {_cut(last.command)}" if last.command else "")
            self.asked = False
        elif text:
            self.did = "said: " + text.splitlines()[0][:200]
            self.asked = bool(_OFFER.search(text[-600:])) or text.rstrip().endswith("?")
        if text and self.since_failure > 0:
            sentence = surprise_sentence(text)
            if sentence:
                events.append(self._surprise(sentence, turn.at))
        if self.since_failure > 0:
            self.since_failure -= 1
        self.acted = True
        return events

    def _surprise(self, sentence: str, at: str | None) -> dict[str, Any]:
        split = _EXPECTED_BUT.search(sentence)
        if split:
            return self._event("surprise", at, expected=split.group(1).strip(), happened=split.group(2).strip(" ."))
        return self._event("surprise", at, happened=sentence)

    def _result(self, result: ToolResult, at: str | None) -> list[dict[str, Any]]:
        call = self.calls.pop(result.call_id, None)
        code = result.exit_code if result.exit_code is not None else self.exits.pop(result.call_id, None)
        self.exits.pop(result.call_id, None)
        name, command = (str(call[0]), call[1]) if call and len(call) == 2 else ("tool", None)
        did = f"ran {name}" + (f": {_cut(command)}" if command else "")
        if result.interrupted:  # the person stopped the call: the words that follow say why
            self.refusal = {"reaction": "interrupted", "did": did, "at": at}
            return []
        if result.rejected:
            if result.said:
                return [self._correction(result.said, did, "rejected", at)]
            self.refusal = {"reaction": "rejected", "did": did, "at": at}
            return []
        failed = result.is_error or (code is not None and code != 0)
        if failed and error_class.benign_exit(command, code, result.text):
            failed = False
        events: list[dict[str, Any]] = []
        shell = command is not None and (name.lower() in _SHELL_TOOLS or isinstance(command, list))
        if shell and command is not None:
            events.extend(self._follow_up(command, succeeded=not failed))
        if not failed:
            return events
        self.since_failure = SURPRISE_WINDOW
        program = program_of(command) if command is not None else ""
        happened = first_meaningful_line(result.text) or (f"exit code {code}" if code else "failed")
        cls = error_class.classify(happened if happened else result.text)
        title = f"{name}: {program}" if program else name
        if cls != error_class.OTHER:
            title += f" ({cls})"
        fields = {"title": title, "happened": happened}
        if command is not None:
            fields["agent_did"] = _cut(command, 2000)
        event = self._event("error", at, **fields)
        events.append(event)
        if shell and command is not None:
            self.failures.append({"event": event, "command": command, "left": FIX_WINDOW})
            del self.failures[:-MAX_FAILURES]
        return events

    def _follow_up(self, command: str | list[str], *, succeeded: bool) -> list[dict[str, Any]]:
        """A shell call's answer to the failures before it: the first one it fixes learns what worked."""
        events: list[dict[str, Any]] = []
        kept: list[dict[str, Any]] = []
        fixed = False
        for failure in self.failures:
            if succeeded and not fixed and fixes(failure["command"], command):
                events.append(failure["event"] | {"worked": _cut(command, 2000)})
                fixed = True
                continue
            failure["left"] = int(failure.get("left", 0)) - 1
            if failure["left"] > 0:
                kept.append(failure)
        self.failures = kept
        return events


def _text(value: str) -> str:
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "replace").decode("utf-8")


def _cut(command: str | list[str], size: int = 200) -> str:
    """A command as one line: a Codex argument list ``["bash", "-lc", script]`` is its script, another list
    its words quoted as a shell would need them."""
    if isinstance(command, str):
        return command[:size]
    words = [w for w in command if isinstance(w, str)]
    if len(words) >= 3 and words[0].rsplit("/", 1)[-1] in ("bash", "sh", "zsh") and words[1] in ("-c", "-lc"):
        return words[2][:size]
    return shlex.join(words)[:size]


def _bound(table: dict[str, Any]) -> None:
    """Drop the oldest entries (dicts keep insertion order): calls never answered don't pile up."""
    while len(table) > MAX_OPEN_CALLS:
        del table[next(iter(table))]
