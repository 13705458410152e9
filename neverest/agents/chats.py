"""Conversations with any model: OpenAI, Anthropic and Gemini message arrays become sessions.

What a proxy sees in a request, or what a program kept of its conversations, is a message array in
one provider's format.  Each is read into the transcript model (``transcripts.Turn``: the person's
words, the agent's text and tool calls, tool results), and the turns go through the session
detectors (``detect.Detector``) and the one ingest function (``Memory.ingest``), so an error, a
correction or a surprise means the same thing whichever door it came in by.

- **openai** (Chat Completions): ``role`` system and developer (left out: the program's words, not
  the person's), user, assistant, tool (and the older function); ``content`` a string or a list of
  parts (``text`` parts read, images and audio left out); an assistant's ``tool_calls``
  (``function.arguments`` a JSON string) and the older ``function_call``; a ``tool`` message answers
  its ``tool_call_id``.  OpenAI has no error flag on a tool's result, so a result *failed* when it
  reports an exit code other than 0 near its start ("Exit code: 1"), when it is a JSON object with an
  ``error`` (or ``is_error``/``isError`` true, or a non-zero ``exit_code``/``returncode``), or when its
  text opens like an error ("Error: ...", "Traceback (most recent call last):", "fatal: ...").
- **anthropic** (Messages): ``role`` user or assistant, ``content`` a string or blocks: text,
  tool_use, tool_result with ``is_error``; read by the Claude Code parser, whose lines carry the same
  messages.  The request's top-level ``system`` is not a message and is not read.
- **gemini** (generateContent): ``contents`` of ``role`` user or model (function or tool in older
  requests) with ``parts``: text (``thought`` parts left out), ``functionCall`` (``args`` an object),
  ``functionResponse`` (``response`` an object; one with an ``error`` key failed, the convention
  Google's documentation gives).  snake_case spellings (``function_call``) are read too.  A call
  without an ``id`` is answered by the next response of the same name.

A conversation's **session** is the caller's ``session`` when given, else ``chat-`` and 16 hex digits
of a hash of its ``project`` and first message from the person: a proxy that sends the growing
history of one conversation again and again gets the same session each time, so the episodes it
already gave are duplicates, not new ones.  Its ``project`` (a working folder) is the events'
``cwd``, which publishing opts in by; ``at`` (ISO 8601) dates every event of it, else the time of the
ingest.  Every event's ``agent`` is ``chat`` whatever the model (one conversation sent under two model
names stays one session); the session's note names the model.

The file format of ``neverestctl ingest --chats FILE`` (``read_conversations``): JSON Lines, one
conversation per line: ``{"model", "format", "messages" (or "contents"), "project", "session", "at"}``,
every key but the messages optional (``format`` guessed when absent, see ``guess_format``), or a bare
array of messages; or the whole file one JSON document: one such object, one array of messages, or an
array of such objects.  Bounds: ``MAX_CONVERSATION_BYTES`` per conversation and
``MAX_MESSAGES`` messages; a conversation over either is refused, and the next one read.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Final

from neverest.agents.detect import Detector
from neverest.agents.transcripts import (
    ToolCall,
    ToolResult,
    Turn,
    clean,
    exit_code_in,
    parse_claude,
    person_turn,
    rejection,
    tool_call,
)
from neverest.clock import parse_time
from neverest.lines import read_lines
from neverest.memory.events import IngestResult
from neverest.memory.service import Memory

FORMATS: Final = ("openai", "anthropic", "gemini")
CHAT_AGENT: Final = "chat"
MAX_CONVERSATION_BYTES: Final = 16 * 1024 * 1024
MAX_MESSAGES: Final = 20_000
MAX_TEXT_CHARS: Final = 16 * 1024  # kept of one message or result, as for the session files
MAX_NAME_CHARS: Final = 200  # model, session
MAX_PROJECT_CHARS: Final = 4096
MAX_ERRORS_SHOWN: Final = 20

# How a tool's text result opens when it failed (OpenAI results carry no flag).
_ERROR_START: Final = re.compile(
    r"\s*(?:error\b|[a-z_.]*(?:error|exception)\b:|exception\b|traceback \(most recent call last\)|fatal:|"
    r"failed\b|failure\b|command failed|permission denied|no such file or directory)", re.IGNORECASE)
_EXIT_KEYS: Final = ("exit_code", "exitCode", "returncode", "return_code")
# The keys of a result object that hold its output, in the order they are read.
_OUTPUT_KEYS: Final = ("output", "result", "content", "stdout", "stderr")


class ChatError(ValueError):
    """A conversation cannot be read; ``field`` names the part at fault (None: the whole)."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(message if field is None else f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class Conversation:
    """One conversation as given: its messages in ``fmt``, and what is known around them."""

    fmt: str
    messages: Sequence[Any]
    model: str = ""
    project: str = ""
    session: str = ""
    at: str | None = None


# -- the formats -------------------------------------------------------------------------------------

def guess_format(messages: Sequence[Any], model: str = "") -> str:
    """The format of ``messages`` from their shape, else from the model's name, else openai (a
    conversation of plain text reads the same in the three)."""
    for message in messages[:MAX_MESSAGES]:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if "parts" in message or role == "model":
            return "gemini"
        if role in ("system", "developer", "tool", "function") or \
                any(key in message for key in ("tool_calls", "function_call", "tool_call_id")):
            return "openai"
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") in ("tool_use", "tool_result", "thinking",
                                                                     "redacted_thinking"):
                    return "anthropic"
                if isinstance(block, dict) and block.get("type") in ("image_url", "input_audio", "refusal"):
                    return "openai"
    name = model.lower()
    if name.startswith("claude") or "anthropic" in name:
        return "anthropic"
    if name.startswith(("gemini", "gemma", "models/gemini")):
        return "gemini"
    return "openai"


def session_of(messages: Sequence[Any], fmt: str, *, at: str | None = None) -> list[Turn]:
    """The turns of a conversation in ``fmt`` (one of ``FORMATS``): what the detectors read.  Messages
    that are not objects or have a role nobody reads are left out.  Raises ChatError for an unknown
    format."""
    if fmt not in FORMATS:
        raise ChatError("format", f"{fmt!r} is not one of {', '.join(FORMATS)}")
    turns: list[Turn] = []
    calls = _Calls()
    for message in messages[:MAX_MESSAGES]:
        if not isinstance(message, dict):
            continue
        if fmt == "anthropic":
            turn = _anthropic(message, at)
        elif fmt == "openai":
            turn = _openai(message, at, calls)
        else:
            turn = _gemini(message, at, calls)
        if turn is not None:
            turns.append(turn)
    return turns


class _Calls:
    """Tool calls that carry no id (Gemini's, OpenAI's older function_call): each gets one, and a
    response by name answers the oldest open call of that name."""

    def __init__(self) -> None:
        self.open: dict[str, deque[str]] = {}
        self.count = 0

    def made(self, name: str, given: object) -> str:
        if isinstance(given, str) and given:
            return given
        self.count += 1
        call_id = f"{name}#{self.count}"
        self.open.setdefault(name, deque()).append(call_id)
        return call_id

    def answered(self, name: str, given: object) -> str:
        if isinstance(given, str) and given:
            return given
        waiting = self.open.get(name)
        return waiting.popleft() if waiting else f"{name}#?"


def _anthropic(message: dict[str, Any], at: str | None) -> Turn | None:
    role = message.get("role")
    if role not in ("user", "assistant"):
        return None
    line: dict[str, Any] = {"type": role, "message": {"role": role, "content": message.get("content")}}
    if at:
        line["timestamp"] = at
    return parse_claude(line).turn


def _parts_text(content: object) -> str:
    """The text of a content value: a string, or the text parts of a list (other parts left out)."""
    if isinstance(content, str):
        return clean(content[:MAX_TEXT_CHARS])
    texts: list[str] = []
    if isinstance(content, list):
        size = 0
        for part in content:
            text = part if isinstance(part, str) else part.get("text") if isinstance(part, dict) else None
            if isinstance(part, dict) and part.get("type") not in (None, "text", "input_text", "output_text"):
                continue
            if isinstance(text, str):
                texts.append(text)
                size += len(text)
                if size >= MAX_TEXT_CHARS:
                    break
    return clean("\n".join(texts)[:MAX_TEXT_CHARS])


def _user(text: str, at: str | None) -> Turn | None:
    turn = Turn(role="user", at=at, text=text)
    return turn if person_turn(turn) else None


def _arguments(raw: object) -> object:
    """A call's arguments: OpenAI sends them as a JSON string, Gemini as an object."""
    if isinstance(raw, str):
        try:
            return json.loads(raw[:MAX_TEXT_CHARS])
        except (ValueError, RecursionError):
            return {}
    return raw


def _openai(message: dict[str, Any], at: str | None, calls: _Calls) -> Turn | None:
    role = message.get("role")
    if role == "user":
        return _user(_parts_text(message.get("content")), at)
    if role == "assistant":
        turn = Turn(role="assistant", at=at, text=_parts_text(message.get("content")))
        tool_calls = message.get("tool_calls")
        for item in tool_calls if isinstance(tool_calls, list) else ():
            if not isinstance(item, dict):
                continue
            function = item.get("function")
            function = function if isinstance(function, dict) else {}
            name = function.get("name")
            turn.calls.append(tool_call(item.get("id"), name, _arguments(function.get("arguments"))))
        legacy = message.get("function_call")
        if isinstance(legacy, dict):
            name = legacy.get("name") if isinstance(legacy.get("name"), str) else "function"
            turn.calls.append(tool_call(calls.made(str(name), None), name, _arguments(legacy.get("arguments"))))
        return turn if turn.text or turn.calls else None
    if role in ("tool", "function"):
        if role == "tool":
            call_id = message.get("tool_call_id")
        else:
            name = message.get("name")
            call_id = calls.answered(name if isinstance(name, str) else "function", None)
        return Turn(role="user", at=at, results=[_result(call_id, message.get("content"))])
    return None  # system, developer: the program's words, not the person's


def _gemini(message: dict[str, Any], at: str | None, calls: _Calls) -> Turn | None:
    role = message.get("role")
    parts = message.get("parts")
    if not isinstance(parts, list):
        return None
    texts: list[str] = []
    found: list[ToolCall] = []
    results: list[ToolResult] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        call = part.get("functionCall", part.get("function_call"))
        response = part.get("functionResponse", part.get("function_response"))
        if isinstance(call, dict):
            name = call.get("name") if isinstance(call.get("name"), str) else "function"
            found.append(tool_call(calls.made(str(name), call.get("id")), name, _arguments(call.get("args"))))
        elif isinstance(response, dict):
            name = response.get("name") if isinstance(response.get("name"), str) else "function"
            results.append(_result(calls.answered(str(name), response.get("id")), response.get("response")))
        elif isinstance(part.get("text"), str) and part.get("thought") is not True:
            texts.append(part["text"])
    text = clean("\n".join(texts)[:MAX_TEXT_CHARS])
    if role == "model":
        return Turn(role="assistant", at=at, text=text, calls=found) if text or found else None
    if role not in ("user", "function", "tool", None):
        return None
    if results:
        return Turn(role="user", at=at, text=text, results=results)
    return _user(text, at) if text else None


def _result(call_id: object, content: object) -> ToolResult:
    """A tool's result, failed or not by the rules of the module docstring."""
    text, failed, code = _outcome(content)
    rejected, said = rejection(text) if failed or len(text) < 2000 else (False, "")
    return ToolResult(call_id if isinstance(call_id, str) else "", text, failed and not rejected, code,
                      rejected, said)


def _outcome(value: object) -> tuple[str, bool, int | None]:
    """(text, failed, exit code) of a tool's result: a string, a list of parts, or an object."""
    if isinstance(value, list):
        value = _parts_text(value)
    if isinstance(value, str):
        text = clean(value[:MAX_TEXT_CHARS])
        if text.lstrip().startswith("{"):
            try:
                decoded = json.loads(text)
            except (ValueError, RecursionError):
                decoded = None
            if isinstance(decoded, dict):
                return _outcome(decoded)
        code = exit_code_in(text)
        return text, bool(code) if code is not None else bool(_ERROR_START.match(text[:300])), code
    if not isinstance(value, dict):
        return "", False, None
    error = value.get("error")
    code = next((value[k] for k in _EXIT_KEYS if isinstance(value.get(k), int)
                 and not isinstance(value.get(k), bool)), None)
    metadata = value.get("metadata")
    if code is None and isinstance(metadata, dict) and isinstance(metadata.get("exit_code"), int):
        code = metadata["exit_code"]
    if error not in (None, "", False, {}, []):
        return _json_text(error), True, code
    outputs = [_parts_text(value[k]) for k in _OUTPUT_KEYS if isinstance(value.get(k), str | list)]
    text = "\n".join(t for t in outputs if t)[:MAX_TEXT_CHARS] if outputs else _json_text(value)
    if code is None:
        code = exit_code_in(text)
    flagged = value.get("is_error") is True or value.get("isError") is True
    return text, flagged or bool(code), code


def _json_text(value: object) -> str:
    if isinstance(value, str):
        return clean(value[:MAX_TEXT_CHARS])
    if isinstance(value, dict) and isinstance(value.get("message"), str):
        return clean(value["message"][:MAX_TEXT_CHARS])
    return clean(json.dumps(value, ensure_ascii=False)[:MAX_TEXT_CHARS])


# -- from conversations to events ---------------------------------------------------------------------

def session_id(messages: Sequence[Any], project: str = "") -> str:
    """The session of a conversation the caller named none for: its project and first message from the
    person, hashed (so the growing history of one conversation keeps one session)."""
    first = next((m for m in messages if isinstance(m, dict) and m.get("role") == "user"), None)
    seed = json.dumps([project, first], sort_keys=True, ensure_ascii=False, default=str)
    return "chat-" + hashlib.blake2b(seed.encode("utf-8", "replace"), digest_size=8).hexdigest()


def events_of(conversation: Conversation) -> tuple[list[dict[str, Any]], int]:
    """The events the detectors find in ``conversation``, and how many turns it had.  Pure: no store,
    no clock (a caller on an event loop can find them there and store them in a worker)."""
    turns = session_of(conversation.messages, conversation.fmt, at=conversation.at)
    session = conversation.session or session_id(conversation.messages, conversation.project)
    label = f"{conversation.model} chat" if conversation.model else "chat"
    detector = Detector(CHAT_AGENT, session=session, label=label)
    detector.saw(session, conversation.project)
    events: list[dict[str, Any]] = []
    for turn in turns:
        events.extend(detector.turn(turn))
    events.extend(detector.finish())
    return events, len(turns)


def ingest_chat(memory: Memory, messages: Sequence[Any], fmt: str | None = None, *, model: str = "",
                project: str = "", session: str = "", at: str | None = None) -> IngestResult:
    """Store what the detectors find in one conversation (``fmt`` None: guessed) through the one
    ingest function; what the proxy calls for each request it sees."""
    conversation = conversation_of({"messages": list(messages), "format": fmt, "model": model or None,
                                    "project": project or None, "session": session or None, "at": at})
    events, _ = events_of(conversation)
    return memory.ingest(events)


# -- conversations as given -------------------------------------------------------------------------

def _optional_str(obj: dict[str, Any], name: str, limit: int) -> str:
    value = obj.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ChatError(name, f"must be a string, not {type(value).__name__}")
    if len(value) > limit:
        raise ChatError(name, f"over {limit} characters")
    return value


def conversation_of(obj: object) -> Conversation:
    """A conversation from a decoded JSON value: an object with ``messages`` (or ``contents``), or a
    bare array of messages.  Raises ChatError naming the field at fault."""
    if isinstance(obj, list):
        obj = {"messages": obj}
    if not isinstance(obj, dict):
        raise ChatError(None, "a conversation is an object with messages (or contents), or an array of messages")
    messages = obj.get("messages")
    key = "messages"
    if messages is None and obj.get("contents") is not None:
        messages, key = obj.get("contents"), "contents"
    if messages is None:
        raise ChatError("messages", "missing (Gemini's requests call them contents)")
    if not isinstance(messages, list):
        raise ChatError(key, "must be an array of messages")
    if len(messages) > MAX_MESSAGES:
        raise ChatError(key, f"{len(messages)} messages; at most {MAX_MESSAGES} are read")
    model = _optional_str(obj, "model", MAX_NAME_CHARS)
    fmt = _optional_str(obj, "format", 20).lower()
    if fmt and fmt not in FORMATS:
        raise ChatError("format", f"{fmt!r} is not one of {', '.join(FORMATS)}")
    if not fmt:
        fmt = "gemini" if key == "contents" else guess_format(messages, model)
    at = obj.get("at")
    if at is not None:
        try:
            parse_time(at if isinstance(at, str) else "")
        except (ValueError, OverflowError):
            raise ChatError("at", f"{str(at)[:60]!r} is not an ISO 8601 time") from None
    return Conversation(fmt=fmt, messages=messages, model=model,
                        project=_optional_str(obj, "project", MAX_PROJECT_CHARS),
                        session=_optional_str(obj, "session", MAX_NAME_CHARS), at=at or None)


def _conversations_in(document: object) -> list[object]:
    """The conversations of one JSON document: an array of conversation objects is many, any other
    value one."""
    if isinstance(document, list) and document and all(
            isinstance(item, dict) and ("messages" in item or "contents" in item) for item in document):
        return list(document)
    return [document]


def _decode(raw: bytes) -> object:
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ChatError(None, f"not UTF-8 at byte {exc.start}") from None
    except RecursionError:
        raise ChatError(None, "not JSON: nested too deeply") from None
    except ValueError as exc:
        raise ChatError(None, f"not JSON: {exc}") from None


def read_conversations(stream: BinaryIO) -> Iterator[tuple[int, Conversation | ChatError]]:
    """``(line, conversation or why not)`` for each conversation of a chats file (module docstring):
    JSON Lines, or one JSON document when its first line is not a JSON value by itself."""
    lines = read_lines(stream, MAX_CONVERSATION_BYTES)
    first: tuple[int, bytes | None] | None = None
    for number, raw in lines:
        if raw is None or raw.strip():
            first = (number, raw)
            break
    if first is None:
        return
    number, raw = first
    document: object = None
    if raw is not None:
        try:
            document = _decode(raw)
        except ChatError:
            # A pretty-printed document: the whole input is one JSON value.
            rest = stream.read(MAX_CONVERSATION_BYTES - len(raw) + 1)
            if len(raw) + 1 + len(rest) > MAX_CONVERSATION_BYTES:
                yield number, ChatError(None, f"too large: over {MAX_CONVERSATION_BYTES} bytes")
                return
            try:
                document = _decode(raw + b"\n" + rest)
            except ChatError as exc:
                yield number, exc
                return
            yield from _each(number, document)
            return
    yield from _line(number, raw, document)
    for number, raw in lines:
        if raw is not None and not raw.strip():
            continue
        try:
            document = _decode(raw) if raw is not None else None
        except ChatError as exc:
            yield number, exc
            continue
        yield from _line(number, raw, document)


def _line(number: int, raw: bytes | None, document: object) -> Iterator[tuple[int, Conversation | ChatError]]:
    if raw is None:
        yield number, ChatError(None, f"too large: over {MAX_CONVERSATION_BYTES} bytes on one line")
        return
    yield from _each(number, document)


def _each(number: int, document: object) -> Iterator[tuple[int, Conversation | ChatError]]:
    for obj in _conversations_in(document):
        try:
            yield number, conversation_of(obj)
        except ChatError as exc:
            yield number, exc


@dataclass
class ChatsReport:
    """What one ``ingest --chats`` did."""

    conversations: int = 0
    formats: Counter[str] = field(default_factory=Counter)
    turns: int = 0
    detected: Counter[str] = field(default_factory=Counter)
    stored: int = 0
    duplicates: int = 0
    repeats: int = 0
    refused: int = 0
    unread: int = 0  # conversations that could not be read
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"conversations": self.conversations, "formats": dict(sorted(self.formats.items())),
                "turns": self.turns, "detected": dict(sorted(self.detected.items())), "stored": self.stored,
                "duplicates": self.duplicates, "repeats": self.repeats, "refused": self.refused,
                "unread": self.unread, "problems": self.problems}

    def _problem(self, text: str) -> None:
        if len(self.problems) < MAX_ERRORS_SHOWN:
            self.problems.append(text)


def ingest_chats(memory: Memory, stream: BinaryIO) -> ChatsReport:
    """Every conversation of a chats file through the detectors and the one ingest function, one
    conversation (one transaction) at a time; a conversation that cannot be read is counted and
    named in ``problems``, and the next one read."""
    report = ChatsReport()
    for number, item in read_conversations(stream):
        if isinstance(item, ChatError):
            report.unread += 1
            report._problem(f"line {number}: {item}")
            continue
        events, turns = events_of(item)
        report.conversations += 1
        report.formats[item.fmt] += 1
        report.turns += turns
        for event in events:
            report.detected["worked" if "worked" in event else event["kind"]] += 1
        result = memory.ingest(events)
        report.stored += result.stored
        report.duplicates += result.duplicates
        report.repeats += result.repeats
        report.refused += len(result.refused)
        for _, reason in result.refused:
            report._problem(f"line {number}: event refused: {reason}")
    return report
