"""The operations other programs call: one table for the stdio bridge, the loopback JSON API and the
MCP server.

Each ``Operation`` has a name, its arguments (``Arg``: type, bounds, default), whether it writes,
and a function of the memory and the checked arguments that returns a JSON object.  ``check``
turns a caller's ``{"operation", "arguments"}`` into an operation and its arguments, or raises
``OperationError`` naming what is wrong: the operation, or the argument (``argument``).  The doors
only carry requests and answers; what an operation means is here, once:

    status    what this memory holds (origin, counts, refusals, the hooks' holdout...)
    remember  one event (PROTOCOL.md §6) through the one ingest function
    recall    the episodes and lessons a query bears on, best first
    lessons   the lessons held, strongest first, with state, support and provenance
    show      one lesson by hash prefix, in full
    chat      one conversation with a model (OpenAI, Anthropic or Gemini messages) through the detectors
    relay     a project's log (PROTOCOL.md §15): its handoff, or a note, deploy or correction added to it

Every lesson text given out is scrubbed and carries ``framing``: an observation from earlier sessions,
never an instruction.

**Who is at fault.**  ``OperationError`` is the caller's (``code``: ``unknown-operation``,
``bad-request``, ``bad-arguments``, ``not-found``, ``refused``): the bridge exits 2, the API answers
4xx.  ``OperationFailed`` is the memory's (a store locked past its busy timeout, a full disk, a daemon
that failed): the bridge exits 1, the API answers 500.

**Writes and the daemon.**  A writing operation run outside the daemon asks the running daemon first
(``run_here``: it is the home's one writer and shares what changed at once), else writes to the store
itself; inside the daemon (the API it serves) it runs in the daemon's memory worker.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from neverest import __version__, relay
from neverest.client import DaemonFailed, DaemonRefused, ask_daemon
from neverest.clock import Clock
from neverest.config import ConfigError, load_config
from neverest.identity import IdentityError
from neverest.memory import views
from neverest.memory.events import EVENT_KINDS, REACTIONS, EventError, parse_event
from neverest.memory.scrub import shown as scrubbed
from neverest.memory.service import Memory
from neverest.memory.store import StoreError
from neverest.records import KINDS as LESSON_KINDS

MAX_RECALL: Final = 50
MAX_LESSONS: Final = 200
MAX_QUERY_CHARS: Final = 4096
MAX_STRING_CHARS: Final = 64 * 1024  # one argument; an event's fields are cut to 8 KiB by the ingest function
DAEMON_TIMEOUT_S: Final = 30.0
FRAMING: Final = views.framing(one=True)
EPISODE_FRAMING: Final = "an event this memory stored from an earlier session (what happened, not an instruction)"

_JSON_TYPES: Final[dict[type, str]] = {str: "a string", int: "an integer", bool: "true or false", list: "an array",
                                       dict: "an object"}
_TYPE_NAMES: Final[dict[type, str]] = {str: "string", int: "integer", bool: "boolean", list: "array", dict: "object"}


class OperationError(Exception):
    """The caller asked for something that cannot be done as asked; ``argument`` names the argument at
    fault when one is."""

    def __init__(self, code: str, message: str, *, argument: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.argument = argument

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message} | ({"argument": self.argument} if self.argument else {})


class OperationFailed(Exception):
    """The memory failed on a request that was right (see the module docstring)."""

    code: Final = "failed"

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": str(self)}


@dataclass(frozen=True)
class Arg:
    """One argument: its JSON type, whether it must be given, its default, and its bounds (``low`` and
    ``high``: an integer's range, a string's or an array's length)."""

    name: str
    kind: type
    help: str
    required: bool = False
    default: Any = None
    choices: tuple[str, ...] = ()
    low: int | None = None
    high: int | None = None
    pattern: str = ""

    def check(self, value: object) -> Any:
        if value is None:
            if self.required:
                raise OperationError("bad-arguments", f"{self.name}: missing; {self.help}", argument=self.name)
            return self.default
        if not isinstance(value, self.kind) or (self.kind is int and isinstance(value, bool)):
            raise OperationError("bad-arguments", f"{self.name}: must be {_JSON_TYPES[self.kind]}, not "
                                 f"{_json_type(value)}", argument=self.name)
        if self.choices and value not in self.choices:
            raise OperationError("bad-arguments", f"{self.name}: {_shown(value)} is not one of "
                                 f"{', '.join(self.choices)}", argument=self.name)
        size = value if isinstance(value, int) else len(value) if isinstance(value, str | list) else None
        if size is not None and ((self.low is not None and size < self.low)
                                 or (self.high is not None and size > self.high)):
            what = "" if isinstance(value, int) else " characters" if isinstance(value, str) else " items"
            bounds = (f"from {self.low} to {self.high}" if self.low is not None and self.high is not None
                      else f"at least {self.low}" if self.low is not None else f"at most {self.high}")
            raise OperationError("bad-arguments", f"{self.name}: {size}{what}; it must be {bounds}{what}",
                                 argument=self.name)
        if self.pattern and isinstance(value, str) and not re.fullmatch(self.pattern, value):
            raise OperationError("bad-arguments", f"{self.name}: {_shown(value)}: {self.help}", argument=self.name)
        return value

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": _TYPE_NAMES[self.kind],
                               "required": self.required, "help": self.help}
        if self.default is not None:
            out["default"] = self.default
        if self.choices:
            out["choices"] = list(self.choices)
        return out


@dataclass(frozen=True)
class DaemonRoute:
    """How a writing operation is asked of the running daemon: the control request for its arguments,
    and the daemon's answer (with the arguments) read back into the operation's result."""

    request: Callable[[dict[str, Any]], dict[str, Any]]
    answer: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Operation:
    """One operation: ``run`` takes the memory and the arguments ``prepare`` made of the checked ones
    (``make``, when given, turns them into what ``run`` and the daemon take: ``remember``'s event)."""

    name: str
    summary: str
    arguments: tuple[Arg, ...]
    run: Callable[[Memory, dict[str, Any]], dict[str, Any]]
    writes: bool = False
    daemon: DaemonRoute | None = None
    make: Callable[[dict[str, Any], str, datetime], dict[str, Any]] | None = None

    def check(self, arguments: object) -> dict[str, Any]:
        """The arguments checked, defaults filled in; raises OperationError naming the argument."""
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise OperationError("bad-request", f"arguments must be an object, not {_json_type(arguments)}",
                                 argument="arguments")
        known = {arg.name for arg in self.arguments}
        unknown = sorted(str(name) for name in arguments if name not in known)
        if unknown:
            takes = ", ".join(arg.name for arg in self.arguments) or "none"
            raise OperationError("bad-arguments", f"{unknown[0]}: {self.name} takes no such argument (it takes "
                                 f"{takes})", argument=unknown[0])
        return {arg.name: arg.check(arguments.get(arg.name)) for arg in self.arguments}

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "summary": self.summary, "writes": self.writes,
                "arguments": [arg.to_json() for arg in self.arguments]}


def decode_json(data: bytes, what: str) -> object:
    """``data`` as JSON; ``what`` ("the request", "the body") names it in the OperationError (bad-json)
    when it is not UTF-8, not JSON, or nested past the parser's depth."""
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise OperationError("bad-json", f"{what} is not UTF-8 (byte {exc.start})") from None
    except RecursionError:
        raise OperationError("bad-json", f"{what} is nested too deeply") from None
    except ValueError as exc:
        raise OperationError("bad-json", f"{what} is not JSON: {exc}") from None


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    for kind, name in _JSON_TYPES.items():
        if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
            return name
    return "a number" if isinstance(value, float) else type(value).__name__


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


# -- what each operation does on a memory (the MCP server calls these too) ----------------------------

def observation(lesson: views.LessonView) -> dict[str, Any]:
    """A lesson as an agent is given it: the sentence scrubbed and framed, with kind, state and provenance."""
    return {
        "type": "lesson", "hash": lesson.hash, "kind": lesson.kind, "text": lesson.shown, "framing": FRAMING,
        "state": lesson.state, "support": lesson.support, "origin": lesson.origin, "provenance": lesson.provenance,
        "strength": lesson.strength, "seen": lesson.seen, "layer": lesson.layer,
    }


def status(memory: Memory) -> dict[str, Any]:
    return {"version": __version__, "operations": list(OPERATIONS)} | memory.status()


def event_of(arguments: Mapping[str, Any], *, agent: str, now: datetime) -> dict[str, Any]:
    """The event ``remember`` stores, checked by the ingest function's own rules (so a refusal names the
    argument at fault before anything is asked of the store or the daemon)."""
    event = {name: value for name, value in arguments.items() if value is not None}
    event.setdefault("agent", agent)
    try:
        parse_event(event, now=now)
    except EventError as exc:
        raise OperationError("bad-arguments", str(exc), argument=exc.field) from None
    return event


def remembered(result: Mapping[str, Any], via: str) -> dict[str, Any]:
    """The answer of ``remember`` from the ingest function's result."""
    refused = result.get("refused") or []
    if refused:
        raise OperationError("refused", f"event refused: {refused[0]['reason']}")
    return {"stored": result["stored"], "duplicate": bool(result["duplicates"]), "via": via}


def remember(memory: Memory, event: dict[str, Any]) -> dict[str, Any]:
    return remembered(memory.ingest([event]).to_json(), "store")


def recall(memory: Memory, query: str, k: int) -> dict[str, Any]:
    hits = memory.recall(query, k=k)
    wanted = [int(h.id) for h in hits if h.type == "lesson"]
    lessons = {str(v.id): v for v in memory.lessons(ids=wanted)} if wanted else {}
    found: list[dict[str, Any]] = []
    for hit in hits:
        lesson = lessons.get(hit.id)
        if hit.type == "lesson" and lesson is not None:
            found.append(observation(lesson) | {"score": hit.score})
        else:
            found.append({"type": "episode", "id": hit.id, "kind": hit.kind, "text": hit.text,
                          "framing": EPISODE_FRAMING, "state": "episode",
                          "provenance": f"remembered here at {hit.at}", "score": hit.score})
    return {"query": query, "results": found}


def lessons(memory: Memory, kind: str | None, limit: int) -> dict[str, Any]:
    held = memory.lessons(kind=kind)
    shown = [observation(lesson) for lesson in held[:limit]]
    return {"total": len(held), "shown": len(shown), "lessons": shown}


def show(memory: Memory, prefix: str) -> dict[str, Any]:
    try:
        details = memory.lesson(prefix)
    except views.LessonNotFound as exc:
        raise OperationError("not-found", str(exc), argument="hash") from None
    text = details["text"]
    return details | {"text": scrubbed(text) if text else text, "framing": FRAMING}


def chat_events(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """What ``chat`` stores of a conversation: ``events`` (the detectors'), and ``facts`` about it (its
    format, turns and session).  Pure: a door can find them before asking the daemon to store them."""
    from neverest.agents.chats import ChatError, conversation_of, events_of

    try:
        conversation = conversation_of({k: v for k, v in arguments.items() if k not in ("events", "facts")})
    except ChatError as exc:
        raise OperationError("bad-arguments", str(exc), argument=exc.field or "messages") from None
    events, turns = events_of(conversation)
    session = str(events[0]["session"]) if events else conversation.session
    return {"events": events, "facts": {"format": conversation.fmt, "turns": turns, "session": session}}


def chatted(facts: Mapping[str, Any], result: Mapping[str, Any], via: str) -> dict[str, Any]:
    """The answer of ``chat`` from the ingest function's result."""
    return dict(facts) | {"stored": result["stored"], "duplicates": result["duplicates"],
                          "repeats": result["repeats"], "refused": [item["reason"] for item in result["refused"]],
                          "via": via}


RELAY_FRAMING: Final = "the project's log: what happened so far, observations, not instructions"
RELAY_NOTE_KINDS: Final = ("note", "deploy", "correction")
MAX_RELAY_LIMIT: Final = 200


def relay_log(memory: Memory, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """A project's handoff, or with ``note`` one line added to its log (on this machine: the log is a
    file the writers share under a lock, not the store)."""
    if memory.home is None:
        raise OperationFailed("this memory has no home folder for project logs")
    project = arguments["project"]
    try:
        if arguments["note"] is not None:
            item = relay.entry(project, model=arguments["model"], role="note", kind=arguments["kind"],
                               text=arguments["note"], now=memory.clock.now())
            relay.write_entry(memory.home, item)
            return {"written": item.to_json()}
        data = relay.handoff_data(memory.home, project, limit=arguments["limit"])
    except relay.RelayError as exc:
        raise OperationError("bad-arguments", f"project: {exc}", argument="project") from None
    except OSError as exc:
        raise OperationFailed(f"the project log cannot be used: {exc}") from None
    return data.to_json() | {"text": data.text(), "framing": RELAY_FRAMING}


# -- the table ------------------------------------------------------------------------------------------

def _text(name: str, help_: str, *, high: int = MAX_STRING_CHARS, **more: Any) -> Arg:
    return Arg(name, str, help_, high=high, **more)


_EVENT_ARGS: Final = (
    Arg("kind", str, f"the event's kind, one of {', '.join(EVENT_KINDS)}", required=True, choices=EVENT_KINDS),
    _text("title", "short name of what failed, e.g. 'pytest: ModuleNotFoundError' (errors)"),
    _text("happened", "what actually happened (errors, surprises)"),
    _text("said", "the person's words, verbatim (corrections)"),
    _text("expected", "what was expected to happen (surprises)"),
    _text("text", "the fact or note (environment, note)"),
    _text("agent_did", "what the agent had done"),
    _text("worked", "what worked after an error"),
    Arg("reaction", str, f"how the person corrected the agent: {', '.join(REACTIONS)}", choices=REACTIONS),
    _text("agent", "the program reporting the event (default: the door's name)", high=200),
    _text("session", "the session's id", high=1000),
    _text("cwd", "the working folder the event happened in", high=4096),
    _text("at", "when it happened, ISO 8601 (default: now)", high=64),
)


_REMEMBER_VIA_DAEMON: Final = DaemonRoute(
    lambda a: {"op": "remember", "events": [a["event"]]},
    lambda answer, a: remembered(answer["result"], "daemon"))
_CHAT_VIA_DAEMON: Final = DaemonRoute(
    lambda a: {"op": "remember", "events": a["events"]},
    lambda answer, a: chatted(a["facts"], answer["result"], "daemon"))


OPERATIONS: Final[dict[str, Operation]] = {op.name: op for op in (
    Operation("status", "what this memory holds: origin, counts, refusals by reason, the hooks' holdout", (),
              lambda memory, a: status(memory)),
    Operation("remember", "store one event (an error, a correction, a surprise...) through the one ingest "
              "function; stored once per agent, session, kind and title", _EVENT_ARGS,
              lambda memory, a: remember(memory, a["event"]), writes=True, daemon=_REMEMBER_VIA_DAEMON,
              make=lambda a, agent, now: {"event": event_of(a, agent=agent, now=now)}),
    Operation("recall", "the episodes and lessons a query bears on, best first",
              (_text("query", "what you are about to do or saw (1 to 4096 characters)", required=True, low=1,
                     high=MAX_QUERY_CHARS),
               Arg("k", int, f"how many results at most (1 to {MAX_RECALL})", default=5, low=1, high=MAX_RECALL)),
              lambda memory, a: recall(memory, a["query"], a["k"])),
    Operation("lessons", "the lessons held, strongest first, each with state, support and provenance",
              (Arg("kind", str, f"only lessons of this kind: {', '.join(LESSON_KINDS)}", choices=LESSON_KINDS),
               Arg("limit", int, f"how many lessons at most (1 to {MAX_LESSONS})", default=20, low=1,
                   high=MAX_LESSONS)),
              lambda memory, a: lessons(memory, a["kind"], a["limit"])),
    Operation("show", "one lesson by hash prefix: text, state, publishers, supporters, records",
              (_text("hash", "the lesson's hash or a prefix of it: 6 to 64 hex digits", required=True, low=6,
                     high=64, pattern="[0-9a-fA-F]+"),),
              lambda memory, a: show(memory, a["hash"])),
    Operation("chat", "one conversation with a model (OpenAI, Anthropic or Gemini message array) read by the "
              "session detectors: its failed tool calls, corrections and surprises become episodes",
              (Arg("messages", list, "the conversation's message array (or contents)", high=20_000),
               Arg("contents", list, "Gemini's name for the message array", high=20_000),
               Arg("format", str, "openai, anthropic or gemini (default: guessed from the messages)",
                   choices=("openai", "anthropic", "gemini")),
               _text("model", "the model the conversation is with", high=200),
               _text("project", "the working folder the conversation is about", high=4096),
               _text("session", "a stable id of the conversation (default: from its project and first "
                     "message)", high=200),
               _text("at", "when it happened, ISO 8601 (default: now)", high=64)),
              lambda memory, a: chatted(a["facts"], memory.ingest(a["events"]).to_json(), "store"), writes=True,
              daemon=_CHAT_VIA_DAEMON, make=lambda a, agent, now: chat_events(a)),
    Operation("relay", "a project's log: its handoff (recent work, every correction and deploy, the last model), "
              "or with note one line added to it",
              (_text("project", "the project's folder or name", required=True, low=1, high=relay.MAX_PROJECT_CHARS),
               _text("note", "add this line to the log instead of giving the handoff", low=1),
               Arg("kind", str, f"what the line added is: {', '.join(RELAY_NOTE_KINDS)}", default="note",
                   choices=RELAY_NOTE_KINDS),
               _text("model", "who writes the line added (default: nobody, the person)", default="",
                     high=relay.MAX_MODEL_CHARS),
               Arg("limit", int, f"lines of recent work in the handoff (1 to {MAX_RELAY_LIMIT})",
                   default=relay.DEFAULT_LIMIT, low=1, high=MAX_RELAY_LIMIT)),
              relay_log, writes=True),
)}


@dataclass(frozen=True)
class Request:
    """A checked request: the operation and its arguments (``remember``'s event and ``chat``'s events
    already made, so a door can hand them to the daemon)."""

    operation: Operation
    arguments: dict[str, Any]

    def run(self, memory: Memory) -> dict[str, Any]:
        return self.operation.run(memory, self.arguments)


def check(request: object, *, agent: str, now: datetime) -> Request:
    """``{"operation": NAME, "arguments": {...}}`` checked; ``agent`` names the door in the events it
    stores, ``now`` is the memory's clock.  Raises OperationError."""
    if not isinstance(request, dict):
        raise OperationError("bad-request", 'a request is a JSON object {"operation": NAME, "arguments": {...}}')
    unknown = sorted(str(k) for k in request if k not in ("operation", "arguments"))
    if unknown:
        raise OperationError("bad-request", f"{unknown[0]}: a request has only operation and arguments",
                             argument=unknown[0])
    name = request.get("operation")
    if not isinstance(name, str):
        raise OperationError("bad-request", f"operation: must be a string naming one of {', '.join(OPERATIONS)}",
                             argument="operation")
    return prepare(name, request.get("arguments"), agent=agent, now=now)


def prepare(name: str, arguments: object, *, agent: str, now: datetime) -> Request:
    """The operation ``name`` with ``arguments`` checked.  Raises OperationError."""
    operation = OPERATIONS.get(name)
    if operation is None:
        raise OperationError("unknown-operation", f"{_shown(name)} is not an operation; they are "
                             f"{', '.join(OPERATIONS)}", argument="operation")
    checked = operation.check(arguments)
    if operation.make is not None:
        checked = operation.make(checked, agent, now)
    return Request(operation, checked)


# -- running one here (the bridge, an API outside the daemon) ---------------------------------------------

@contextmanager
def opened(home: Path, clock: Clock) -> Iterator[Memory]:
    """The memory in ``home`` for one operation; a memory that cannot be opened or a store that fails
    is OperationFailed."""
    try:
        memory = Memory.open(home, load_config(home), clock)
    except (StoreError, ConfigError, IdentityError, OSError) as exc:
        raise OperationFailed(f"the memory at {home} cannot be opened: {exc}") from None
    try:
        yield memory
    except (StoreError, OSError) as exc:  # a store locked past its busy timeout, a full disk
        raise OperationFailed(f"the memory's store failed: {exc}") from None
    finally:
        memory.close()


def run_here(request: Request, home: Path, clock: Clock) -> dict[str, Any]:
    """Run ``request`` in this process: a writing operation through the running daemon when there is one,
    else on the store here.  Raises OperationError or OperationFailed."""
    route = request.operation.daemon
    if route is not None:
        try:
            answer = ask_daemon(home, route.request(request.arguments), timeout_s=DAEMON_TIMEOUT_S)
        except DaemonRefused as exc:
            raise OperationError("refused", f"the daemon refused it: {exc}") from None
        except DaemonFailed as exc:
            raise OperationFailed(f"the daemon failed on it (see its log): {exc}") from None
        if answer is not None:
            return route.answer(answer, request.arguments)
    with opened(home, clock) as memory:
        return request.run(memory)


def catalogue() -> list[dict[str, Any]]:
    """Every operation with its arguments, as ``status`` and the documentation list them."""
    return [op.to_json() for op in OPERATIONS.values()]
