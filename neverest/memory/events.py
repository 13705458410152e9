"""Events: how agents report what surprised them, and the one function that stores them.

An event is one JSON object (PROTOCOL.md §6); each valid event becomes one row of
``episodes``.  Every door into the memory (``neverestctl remember``, the inbox file,
the daemon's control endpoint) goes through ``ingest`` or ``ingest_lines`` here, so
an event means the same thing whichever way it arrives.

Fields, all optional strings except ``kind``: said, agent_did, title, expected,
happened, text, worked, reaction, agent, session, cwd, at.  ``worked`` is, for an error,
the call that succeeded after it; ``reaction`` is, for a correction, one of ``REACTIONS``.
Unknown fields are ignored and a JSON ``null`` counts as absent.  An event is refused with an ``EventError`` naming the
field when ``kind`` is missing or not one of ``EVENT_KINDS``, when a known field is
not a string, when ``at`` is not an ISO 8601 time, is before 1970 or is more than
``FUTURE_TOLERANCE`` after now (agents' clocks drift, a future time would outrank
every real event), or when the event says nothing for its kind:

    correction   needs said or reaction     (the person's words, verbatim; a refused call
                                             may come without words)
    error        needs title or happened
    surprise     needs happened or expected
    environment  needs text or happened
    note         needs text

Limits: each string field is cut to ``MAX_FIELD_CHARS`` characters rather than
refused (a long stack trace is still worth its first page), and a JSON line over
``MAX_EVENT_BYTES`` is refused as too large without ever being held in memory.

Identity: an episode's id is BLAKE2b-128 of ``agent \\x1f session \\x1f kind \\x1f key``,
where key is the title when it is not blank, else the event's main text (said, else agent_did, for a
correction, happened else expected for a surprise, text else happened for an
environment event, happened for an error, text for a note).  So an event is stored
once per (agent, session, kind, title) as the protocol says, a resent event is a
duplicate rather than a second episode, and two different untitled corrections in
one session are both kept.

Recall: each event is stored with its gist's vector in the hashed space (local and
cheap, computed before the insert), so it is recallable at once; a sleep with a model
moves it to the model's space.

Durability: ``ingest`` returns only after its transactions have committed (the store
runs ``synchronous=FULL``), so an acknowledged event survives kill -9.  Large inputs
commit in batches of ``BATCH_EVENTS`` so that other processes wait for the write
lock briefly, never for a whole import.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, BinaryIO, Final

from neverest.clock import iso, parse_time
from neverest.lines import read_lines
from neverest.memory.queries import episodes
from neverest.memory.space import HASHED_SPACE
from neverest.memory.store import Store

EVENT_KINDS: Final = ("correction", "error", "environment", "surprise", "note")
TEXT_FIELDS: Final = ("said", "agent_did", "title", "expected", "happened", "text", "worked", "reaction", "agent",
                       "session", "cwd")
# How the person corrected the agent (``reaction``): refused a call, stopped the agent, said it was
# wrong, or told it to act after it asked.  Counted by kind of action in morning.md.
REACTIONS: Final = ("rejected", "interrupted", "corrected", "told to act")
MAX_FIELD_CHARS: Final = 8192
MAX_EVENT_BYTES: Final = 1024 * 1024
MAX_GIST_CHARS: Final = 500
FUTURE_TOLERANCE: Final = timedelta(hours=24)
EARLIEST_AT: Final = datetime(1970, 1, 1, tzinfo=UTC)
# A batch is committed when it reaches either bound, which keeps both the write lock
# and the memory held for one batch small (fields are capped at MAX_FIELD_CHARS).
BATCH_EVENTS: Final = 1000
BATCH_CHARS: Final = 4 * 1024 * 1024

# The fields that give an event its content, by kind; the first one is named when all are blank.
_CONTENT: Final[dict[str, tuple[str, ...]]] = {
    "correction": ("said", "reaction"),
    "error": ("title", "happened"),
    "surprise": ("happened", "expected"),
    "environment": ("text", "happened"),
    "note": ("text",),
}
# The main text that keys an untitled event, first non-blank wins.
_KEY_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    "correction": ("said", "agent_did", "reaction"),
    "error": ("happened",),
    "surprise": ("happened", "expected"),
    "environment": ("text", "happened"),
    "note": ("text",),
}
_SHOWN_CHARS: Final = 60

class EventError(ValueError):
    """An event was refused.  ``field`` is the field at fault (None for the event as a whole);
    the message starts with it."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(message if field is None else f"{field}: {message}")
        self.field = field


@dataclass(frozen=True, slots=True)
class Event:
    """A valid event, normalised: fields cut to MAX_FIELD_CHARS, absent ones '', ``at`` in UTC."""

    id: str
    kind: str
    at: datetime
    gist: str
    said: str
    agent_did: str
    title: str
    expected: str
    happened: str
    text: str
    worked: str
    reaction: str
    agent: str
    session: str
    cwd: str

    def chars(self) -> int:
        """How many characters its fields hold: what a batch of it costs in memory."""
        return sum(len(value) for value in (self.said, self.agent_did, self.title, self.expected,
                                            self.happened, self.text, self.worked, self.reaction, self.agent,
                                            self.session, self.cwd))


@dataclass
class IngestResult:
    """What became of a batch of events.

    ``duplicates`` are events whose episode was already held before this input; ``repeats``
    are events whose episode an earlier event of the same input made (the same error met twice
    in a session, an error sent again with what worked, which fills it in): neither is stored
    as a new episode, but a first ingest into an empty store has no duplicates.
    ``refused`` holds ``(position, reason)``: for ``ingest`` the index of the event in its
    input (from 0), for lines the line number (from 1) with the reason starting "line N: ".
    """

    stored: int = 0
    duplicates: int = 0
    repeats: int = 0
    refused: list[tuple[int, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "stored": self.stored,
            "duplicates": self.duplicates,
            "repeats": self.repeats,
            "refused": [{"position": position, "reason": reason} for position, reason in self.refused],
        }


def _show(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= _SHOWN_CHARS else shown[: _SHOWN_CHARS - 1] + "…"


def _json_type(value: object) -> str:
    if isinstance(value, bool):  # before int: bool is a subclass of int
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _text_field(obj: dict[Any, Any], name: str) -> str:
    value = obj.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise EventError(name, f"must be a string, not {_json_type(value)}")
    value = value[:MAX_FIELD_CHARS]
    try:
        # JSON can spell a lone surrogate ("\ud800"); it is not text and SQLite cannot store it.
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise EventError(name, "contains a lone surrogate, which is not Unicode text") from None
    return value


def _at(value: object, now: datetime) -> datetime:
    if value is None:
        return now
    if not isinstance(value, str):
        raise EventError("at", f"not an ISO 8601 time: must be a string, not {_json_type(value)}")
    try:
        at = parse_time(value)
    except (ValueError, OverflowError):
        raise EventError("at", f"not an ISO 8601 time: {_show(value)}") from None
    if at > now + FUTURE_TOLERANCE:
        hours = FUTURE_TOLERANCE // timedelta(hours=1)
        raise EventError("at", f"{iso(at)} is more than {hours} hours after now ({iso(now)})")
    if at < EARLIEST_AT:
        raise EventError("at", f"{_show(value)} is before {EARLIEST_AT.year}")
    return at


def _first(values: dict[str, str], names: tuple[str, ...]) -> str:
    return next((values[name] for name in names if values[name].strip()), "")


def _gist(kind: str, values: dict[str, str]) -> str:
    if kind == "error":
        gist = ": ".join(part for part in (values["title"].strip(), values["happened"].strip()) if part)
    elif kind == "surprise":
        parts = (("expected", values["expected"].strip()), ("happened", values["happened"].strip()))
        gist = "; ".join(f"{label} {part}" for label, part in parts if part)
    else:
        gist = _first(values, _CONTENT[kind]).strip()
    return gist[:MAX_GIST_CHARS]


def episode_id(agent: str, session: str, kind: str, key: str) -> str:
    """The episode id of an event (see the module docstring for what ``key`` is)."""
    return hashlib.blake2b("\x1f".join((agent, session, kind, key)).encode("utf-8"), digest_size=16).hexdigest()


def parse_event(obj: object, *, now: datetime) -> Event:
    """The event ``obj`` (a decoded JSON object), validated and normalised.  Raises EventError."""
    if not isinstance(obj, dict):
        raise EventError(None, "an event is a JSON object")
    kinds = ", ".join(EVENT_KINDS)
    kind = obj.get("kind")
    if kind is None:
        raise EventError("kind", f"missing; it is one of {kinds}")
    if not isinstance(kind, str) or kind not in EVENT_KINDS:
        raise EventError("kind", f"{_show(kind)} is not one of {kinds}")
    values = {name: _text_field(obj, name) for name in TEXT_FIELDS}
    if values["reaction"] and values["reaction"] not in REACTIONS:
        raise EventError("reaction", f"{_show(values['reaction'])} is not one of {', '.join(REACTIONS)}")
    content = _CONTENT[kind]
    if not _first(values, content):
        raise EventError(content[0], f"missing or blank; {kind} events need {' or '.join(content)}")
    now = now.astimezone(UTC)
    at = _at(obj.get("at"), now)
    key = values["title"] if values["title"].strip() else _first(values, _KEY_FIELDS[kind])
    return Event(
        id=episode_id(values["agent"], values["session"], kind, key),
        kind=kind,
        at=at,
        gist=_gist(kind, values),
        **values,
    )


def parse_line(raw: bytes | None, *, now: datetime) -> Event | None:
    """The event on one JSON line (None from ``read_lines`` means too large), or None for a
    blank line.  Raises EventError."""
    if raw is None:
        raise EventError(None, f"too large: over {MAX_EVENT_BYTES} bytes, the limit for one event")
    if not raw.strip():
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EventError(None, f"not UTF-8 at byte {exc.start}") from None
    try:
        obj = json.loads(text)
    except RecursionError:
        raise EventError(None, "not JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and integers too long to convert
        raise EventError(None, f"not JSON: {exc}") from None
    return parse_event(obj, now=now)


def event_vectors(events: Sequence[Event]) -> list[bytes]:
    """The events' gists in the hashed space, as stored: an event is recallable as soon as it
    is stored.  Local and cheap (no model, no network); a sleep with a model re-embeds them."""
    # numpy (the embedder) is loaded by what stores events, not by every door that only checks one (MCP, API).
    from neverest.memory.embed import HashedEmbedder, to_blob

    return [to_blob(v) for v in HashedEmbedder().embed([e.gist for e in events])] if events else []


def insert_events(db: sqlite3.Connection, events: Sequence[Event], *, now: datetime,
                  vectors: Sequence[bytes] | None = None) -> int:
    """Insert ``events`` inside an open write transaction; the number of new episodes.

    ``vectors`` are ``event_vectors(events)``, computed before the transaction by callers that
    can; else they are computed here.  An event whose id is already stored is ignored: that
    is how duplicates are counted.
    """
    created = iso(now)
    blobs = event_vectors(events) if vectors is None else vectors
    return episodes.insert(db, [
        episodes.NewEpisode(id=e.id, kind=e.kind, agent=e.agent, session=e.session, cwd=e.cwd, title=e.title,
                            said=e.said, agent_did=e.agent_did, expected=e.expected, happened=e.happened,
                            text=e.text, worked=e.worked, reaction=e.reaction, gist=e.gist, at=iso(e.at),
                            created=created, space=HASHED_SPACE, embedding=blob)
        for e, blob in zip(events, blobs, strict=True)
    ])


def _commit(store: Store, batch: list[Event], repeats: int, now: datetime, result: IngestResult) -> None:
    vectors = event_vectors(batch)  # before the write lock is taken
    with store.write() as db:
        stored = insert_events(db, batch, now=now, vectors=vectors)
    # A repeat is never inserted (its first event was, or was held already): of the other events,
    # those not inserted were held before this input.
    result.stored += stored
    result.repeats += repeats
    result.duplicates += len(batch) - repeats - stored


def _store_all(store: Store, events: Iterator[Event], now: datetime, result: IngestResult,
               seen: set[str] | None = None) -> None:
    """Store ``events`` in batches.  ``seen`` holds the ids of the events met earlier in the same input
    (a caller that feeds one input in several calls passes the same set each time); without it, repeats
    are told apart within a batch only, so that memory stays bounded for a stream of any length (a
    repeat of an earlier batch counts as held: that batch is committed)."""
    batch: list[Event] = []
    ids = set() if seen is None else seen
    chars = repeats = 0
    for event in events:
        batch.append(event)  # a repeat too: one sent again with what worked fills in the episode
        if event.id in ids:
            repeats += 1
        else:
            ids.add(event.id)
        chars += event.chars()
        if len(batch) >= BATCH_EVENTS or chars >= BATCH_CHARS:
            _commit(store, batch, repeats, now, result)
            batch, chars, repeats = [], 0, 0
            if seen is None:
                ids.clear()
    if batch:
        _commit(store, batch, repeats, now, result)


def ingest(store: Store, events: Iterable[object], *, now: datetime, seen: set[str] | None = None) -> IngestResult:
    """Store every valid event of ``events`` (decoded JSON objects); refuse the others by index.

    Returns once the stored events are committed: acknowledged means durable.  ``seen``: the
    ids of the events of the same input given to earlier calls (see ``_store_all``), added to.
    """
    result = IngestResult()

    def valid() -> Iterator[Event]:
        for index, obj in enumerate(events):
            try:
                yield parse_event(obj, now=now)
            except EventError as exc:
                result.refused.append((index, str(exc)))

    _store_all(store, valid(), now, result, seen)
    return result


def ingest_lines(store: Store, stream: BinaryIO, *, now: datetime) -> IngestResult:
    """Store the events of a JSON Lines stream; blank lines are skipped, a bad line is refused
    ("line N: reason") and the rest are still stored.  Memory stays bounded whatever the input."""
    result = IngestResult()

    def valid() -> Iterator[Event]:
        for number, raw in read_lines(stream, MAX_EVENT_BYTES):
            try:
                event = parse_line(raw, now=now)
            except EventError as exc:
                result.refused.append((number, f"line {number}: {exc}"))
                continue
            if event is not None:
                yield event

    _store_all(store, valid(), now, result)
    return result
