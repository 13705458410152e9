"""Reading coding agents' session files into turns, tolerantly and with bounded memory.

Two formats, both JSON Lines and both the vendors' own (internal, unstable), so every
field is optional and every surprise is counted rather than raised:

- **Claude Code**: ``~/.claude/projects/<project>/<session>.jsonl`` (subagents in a
  subfolder of the session).  ``user`` and ``assistant`` lines carry ``message`` in the
  Messages format: text, ``tool_use`` and ``tool_result`` blocks.  One assistant turn is
  streamed over several lines sharing ``message.id``: they are merged into one turn.
  ``summary``, ``system``, ``file-history-snapshot`` lines, ``isMeta`` lines and the
  harness's own user text (``<command-name>``, ``<system-reminder>``, ``Caveat:``…) are
  left out.
- **Codex CLI**: ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl``, each line
  ``{"timestamp", "type", "payload"}``.  ``session_meta`` names the session and its
  folder; ``response_item`` carries messages, ``function_call`` and
  ``function_call_output``; ``event_msg`` ``exec_command_end`` carries a command's exit
  code.  ``turn_context``, reasoning, the developer role and other events are left out.

``read_complete_lines`` reads only complete lines (a live session's last line may be
half-written) from a byte offset, each capped at ``MAX_LINE_BYTES``: a longer line (a
100 MB tool result) is drained in 64 KiB chunks, never held, and reported as None.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Final

MAX_LINE_BYTES: Final = 1024 * 1024
# Text kept from one tool result or message: the detectors read the start of an error,
# and a stored field is cut to 8 KiB anyway.
MAX_TEXT_CHARS: Final = 16 * 1024
_SKIP_CHUNK: Final = 64 * 1024
_COMMAND_CHARS: Final = 500

CLAUDE_AGENT: Final = "claude-code"
CODEX_AGENT: Final = "codex"

# Claude Code line types that carry no turn: known, left out, not counted as unknown.
_CLAUDE_SKIPPED: Final = frozenset({"summary", "system", "file-history-snapshot", "queue-operation", "progress"})
_CODEX_SKIPPED: Final = frozenset({"turn_context", "compacted"})
# User text the harness writes in the person's place (slash commands, reminders, caveats).
_HARNESS_PREFIXES: Final = ("<command-", "<local-command-", "<system-reminder>", "Caveat:", "<environment_context>",
                            "<user_instructions>", "# AGENTS.md", "<user-prompt-submit-hook>",
                            "[Request interrupted by user")
_EXIT_RE: Final = re.compile(r"(?:exit code|exited with code|exit status)[:\s]+(-?\d+)", re.IGNORECASE)


@dataclass
class ToolCall:
    id: str
    name: str
    # A shell call's command (a string or a list of words, cut), else None.  Its program is
    # found only when the call fails: tokenising every command would cost more than all the rest.
    command: str | list[str] | None


@dataclass
class ToolResult:
    call_id: str
    text: str
    is_error: bool
    exit_code: int | None


@dataclass
class Turn:
    """One merged message: the person's words, the agent's text and calls, or tool results."""

    role: str  # "user" or "assistant"
    at: str | None
    text: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    results: list[ToolResult] = field(default_factory=list)
    message_id: str = ""


@dataclass
class LineInfo:
    """What one line contributes: a turn part, or session facts, or nothing (with why)."""

    turn: Turn | None = None
    session: str = ""
    cwd: str = ""
    skipped: str = ""  # "" when used; else "left_out", "unknown" or "malformed"
    exit_code: tuple[str, int] | None = None  # Codex exec_command_end: (call_id, exit code)


def read_complete_lines(stream: BinaryIO, offset: int, max_lines: int
                        ) -> Iterator[tuple[int, bytes | None]]:
    """Yield ``(end_offset, line)`` for each complete line after ``offset``, at most ``max_lines``.

    ``line`` is None for a line over ``MAX_LINE_BYTES`` (drained, never held).  A last line
    without its newline is not yielded: it is read again, whole, once it is complete.
    """
    stream.seek(offset)
    for _ in range(max_lines):
        line = stream.readline(MAX_LINE_BYTES + 2)
        if not line.endswith(b"\n"):
            if len(line) <= MAX_LINE_BYTES:
                return  # end of file, or a line still being written
            skipped = len(line)
            while True:
                rest = stream.readline(_SKIP_CHUNK)
                skipped += len(rest)
                if not rest:
                    return  # an oversize line still being written: wait for its end
                if rest.endswith(b"\n"):
                    break
            offset += skipped
            yield offset, None
            continue
        offset += len(line)
        body = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        yield offset, (body if len(body) <= MAX_LINE_BYTES else None)


def _text(value: object) -> str:
    """The text of a content value: a string, or the text blocks of a list."""
    if isinstance(value, str):
        return value[:MAX_TEXT_CHARS]
    if isinstance(value, list):
        parts: list[str] = []
        size = 0
        for block in value:
            if isinstance(block, dict):
                text = block.get("text")
                if isinstance(text, str):
                    parts.append(text)
                    size += len(text)
            elif isinstance(block, str):
                parts.append(block)
                size += len(block)
            if size >= MAX_TEXT_CHARS:
                break
        return "\n".join(parts)[:MAX_TEXT_CHARS]
    return ""


def program_of(command: object) -> str:
    """The program a shell command runs: its first word after ``env``-style assignments and
    ``sudo``; for ``bash -lc '<script>'`` the script's first program."""
    if isinstance(command, list):
        words = [w for w in command if isinstance(w, str)]
        if len(words) >= 3 and words[0].rsplit("/", 1)[-1] in ("bash", "sh", "zsh") and words[1] in ("-c", "-lc"):
            return program_of(words[2])
    elif isinstance(command, str):
        try:
            words = shlex.split(command[:2000], comments=True)
        except ValueError:
            words = command[:2000].split()
    else:
        return ""
    segment: list[str] = []
    for word in [*words, ";"]:
        if word not in _SEPARATORS:
            segment.append(word)
            continue
        program = _segment_program(segment)
        if program:
            return program
        segment = []
    return ""


_SEPARATORS: Final = frozenset({"&&", "||", ";", "|", "&"})
_PREFIX_WORDS: Final = frozenset({"sudo", "env", "time", "nohup", "exec", "command", "(", "{"})
# A segment that only sets up the shell: the command's program is in a later one.
_SETUP_WORDS: Final = frozenset({"cd", "pushd", "export", "source", ".", "set", "unset", "true"})


def _segment_program(segment: list[str]) -> str:
    for word in segment:
        if word in _PREFIX_WORDS or "=" in word.split("/", 1)[0]:
            continue
        if word in _SETUP_WORDS:
            return ""
        return word.rsplit("/", 1)[-1][:80]
    return ""


def _call(call_id: object, name: object, arguments: object) -> ToolCall:
    name_s = name if isinstance(name, str) else "tool"
    command: str | list[str] | None = None
    if isinstance(arguments, dict):
        given = arguments.get("command", arguments.get("cmd"))
        if isinstance(given, str):
            command = given[:_COMMAND_CHARS]
        elif isinstance(given, list):
            command = [w[:_COMMAND_CHARS] for w in given[:8] if isinstance(w, str)]
    return ToolCall(call_id if isinstance(call_id, str) else "", name_s[:80], command)


def _exit_in(text: str) -> int | None:
    match = _EXIT_RE.search(text[:400])
    return int(match.group(1)) if match else None


def is_harness_text(text: str) -> bool:
    return text.lstrip().startswith(_HARNESS_PREFIXES)


def parse_claude(obj: dict[str, Any]) -> LineInfo:
    kind = obj.get("type")
    if kind in _CLAUDE_SKIPPED:
        return LineInfo(skipped="left_out")
    if kind not in ("user", "assistant"):
        return LineInfo(skipped="unknown")
    session = obj.get("sessionId")
    cwd = obj.get("cwd")
    info = LineInfo(session=session if isinstance(session, str) else "", cwd=cwd if isinstance(cwd, str) else "")
    message = obj.get("message")
    if obj.get("isMeta") or obj.get("isCompactSummary") or not isinstance(message, dict):
        info.skipped = "left_out"
        return info
    at = obj.get("timestamp")
    turn = Turn(role=kind, at=at if isinstance(at, str) else None)
    mid = message.get("id")
    turn.message_id = mid if isinstance(mid, str) else ""
    content = message.get("content")
    if isinstance(content, str):
        turn.text = content[:MAX_TEXT_CHARS]
    elif isinstance(content, list):
        texts: list[str] = []
        for block in content:
            if not isinstance(block, dict):
                continue
            btype = block.get("type")
            if btype == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"][:MAX_TEXT_CHARS])
            elif btype == "tool_use":
                turn.calls.append(_call(block.get("id"), block.get("name"), block.get("input")))
            elif btype == "tool_result":
                text = _text(block.get("content"))
                is_error = block.get("is_error") is True
                call_id = block.get("tool_use_id")
                turn.results.append(ToolResult(call_id if isinstance(call_id, str) else "", text, is_error,
                                               _exit_in(text) if is_error else None))
        turn.text = "\n".join(texts)[:MAX_TEXT_CHARS]
    # A subagent's (sidechain's) "user" is the lead agent, not the person: its words are no
    # prompt and no correction; its tool results still count.
    if kind == "user" and not turn.results and (is_harness_text(turn.text) or obj.get("isSidechain") is True):
        info.skipped = "left_out"
        return info
    info.turn = turn
    return info


def _codex_output(raw: object) -> tuple[str, int | None]:
    """A function_call_output's text and exit code: older versions send a JSON string
    ``{"output", "metadata": {"exit_code"}}``, newer ones text starting "Exit code: N"."""
    if isinstance(raw, dict):
        raw = raw.get("content", raw.get("output", ""))
    text = _text(raw)
    if text.startswith("{"):
        try:
            decoded = json.loads(text)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict):
            metadata = decoded.get("metadata")
            code = metadata.get("exit_code") if isinstance(metadata, dict) else None
            return _text(decoded.get("output", "")), code if isinstance(code, int) else None
    return text, _exit_in(text)


def parse_codex(obj: dict[str, Any]) -> LineInfo:
    kind = obj.get("type")
    payload = obj.get("payload")
    at = obj.get("timestamp")
    at_s = at if isinstance(at, str) else None
    if kind in _CODEX_SKIPPED:
        return LineInfo(skipped="left_out")
    if not isinstance(payload, dict):
        return LineInfo(skipped="unknown" if kind not in ("session_meta", "response_item", "event_msg")
                        else "malformed")
    if kind == "session_meta":
        sid, cwd = payload.get("id"), payload.get("cwd")
        return LineInfo(session=sid if isinstance(sid, str) else "", cwd=cwd if isinstance(cwd, str) else "")
    if kind == "event_msg":
        if payload.get("type") == "exec_command_end":
            call_id, code = payload.get("call_id"), payload.get("exit_code")
            if isinstance(call_id, str) and isinstance(code, int):
                return LineInfo(exit_code=(call_id, code))
        return LineInfo(skipped="left_out")
    if kind != "response_item":
        return LineInfo(skipped="unknown")
    ptype = payload.get("type")
    if ptype == "message":
        role = payload.get("role")
        if role not in ("user", "assistant"):
            return LineInfo(skipped="left_out")
        text = _text(payload.get("content"))
        if role == "user" and is_harness_text(text):
            return LineInfo(skipped="left_out")
        return LineInfo(turn=Turn(role=str(role), at=at_s, text=text))
    if ptype in ("function_call", "custom_tool_call", "local_shell_call"):
        arguments: object = payload.get("arguments", payload.get("input"))
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = {"command": arguments} if payload.get("name") in ("shell", "exec_command") else {}
        if ptype == "local_shell_call":
            action = payload.get("action")
            arguments = action if isinstance(action, dict) else {}
        call = _call(payload.get("call_id"), payload.get("name", "shell"), arguments)
        return LineInfo(turn=Turn(role="assistant", at=at_s, calls=[call]))
    if ptype in ("function_call_output", "custom_tool_call_output"):
        text, code = _codex_output(payload.get("output"))
        call_id = payload.get("call_id")
        result = ToolResult(call_id if isinstance(call_id, str) else "", text, False, code)
        return LineInfo(turn=Turn(role="user", at=at_s, results=[result]))
    if ptype in ("reasoning", "web_search_call"):
        return LineInfo(skipped="left_out")
    return LineInfo(skipped="unknown")


def parse_line(raw: bytes, agent: str) -> LineInfo:
    """One line of an ``agent``'s session file; ``skipped="malformed"`` when it is not a JSON object."""
    try:
        obj = json.loads(raw.decode("utf-8"))  # decoded here: json's own encoding sniffing costs more
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return LineInfo(skipped="malformed")
    if not isinstance(obj, dict):
        return LineInfo(skipped="malformed")
    return parse_claude(obj) if agent == CLAUDE_AGENT else parse_codex(obj)


def merge(previous: Turn | None, turn: Turn) -> bool:
    """Fold ``turn`` into ``previous`` when it is another streamed part of the same assistant
    message (same message id); True when merged."""
    if (previous is None or turn.role != "assistant" or previous.role != "assistant"
            or not turn.message_id or turn.message_id != previous.message_id):
        return False
    if turn.text:
        previous.text = (previous.text + "\n" + turn.text if previous.text else turn.text)[:MAX_TEXT_CHARS]
    previous.calls.extend(turn.calls)
    return True
