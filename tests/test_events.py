"""Events: validation, normalisation, identity, and the one ingest function behind every door."""

from __future__ import annotations

import hashlib
import io
import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from neverest.clock import iso
from neverest.memory.events import (
    EVENT_KINDS,
    FUTURE_TOLERANCE,
    MAX_EVENT_BYTES,
    MAX_FIELD_CHARS,
    MAX_GIST_CHARS,
    EventError,
    IngestResult,
    episode_id,
    ingest,
    ingest_lines,
    parse_event,
)
from neverest.memory.store import Store, open_store
from neverest.paths import STORE_FILE

NOW = datetime(2026, 11, 21, 3, 0, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path) as s:
        yield s


def rows(store: Store, *columns: str) -> list[tuple[object, ...]]:
    return list(store.db.execute(f"SELECT {', '.join(columns)} FROM episodes ORDER BY rowid"))


def line(**fields: object) -> bytes:
    return json.dumps(fields).encode() + b"\n"


# -- each kind, with its fields ------------------------------------------------------------


KIND_EXAMPLES: list[tuple[dict[str, object], str]] = [
    ({"kind": "correction", "said": "No, use the staging bucket", "agent_did": "I will deploy to prod"},
     "No, use the staging bucket"),
    ({"kind": "error", "title": "pytest -x", "happened": "ImportError: no module named foo"},
     "pytest -x: ImportError: no module named foo"),
    ({"kind": "error", "happened": "segfault in the linker"}, "segfault in the linker"),
    ({"kind": "surprise", "expected": "the cache to be warm", "happened": "a cold start"},
     "expected the cache to be warm; happened a cold start"),
    ({"kind": "surprise", "happened": "the port was taken"}, "happened the port was taken"),
    ({"kind": "environment", "text": "LANG is unset on this host"}, "LANG is unset on this host"),
    ({"kind": "environment", "happened": "disk full at /tmp"}, "disk full at /tmp"),
    ({"kind": "note", "text": "the repo uses tabs"}, "the repo uses tabs"),
]


@pytest.mark.parametrize(("fields", "gist"), KIND_EXAMPLES)
def test_every_kind_is_accepted_with_its_fields(store: Store, fields: dict[str, object], gist: str) -> None:
    event = {**fields, "agent": "claude", "session": "s1", "cwd": "/src/app", "at": "2026-11-20T10:00:00+01:00"}
    result = ingest(store, [event], now=NOW)
    assert (result.stored, result.duplicates, result.refused) == (1, 0, [])
    [row] = store.db.execute("SELECT * FROM episodes").fetchall()
    names = [d[0] for d in store.db.execute("SELECT * FROM episodes").description]
    stored = dict(zip(names, row, strict=True))
    for name, value in fields.items():
        assert stored[name] == value
    assert stored["agent"] == "claude" and stored["session"] == "s1" and stored["cwd"] == "/src/app"
    assert stored["gist"] == gist
    assert stored["at"] == "2026-11-20T09:00:00.000000Z"
    assert stored["created"] == iso(NOW)
    assert (stored["strength"], stored["pending"]) == (1.0, 1)
    assert stored["id"] == parse_event(event, now=NOW).id


def test_kinds_are_the_protocol_kinds() -> None:
    assert EVENT_KINDS == ("correction", "error", "environment", "surprise", "note")


def test_missing_at_is_now_and_absent_fields_are_empty() -> None:
    event = parse_event({"kind": "note", "text": "hello", "title": None}, now=NOW)
    assert event.at == NOW
    assert (event.said, event.title, event.agent, event.session, event.cwd) == ("", "", "", "", "")


def test_unknown_fields_are_ignored(store: Store) -> None:
    plain = {"kind": "note", "text": "hello"}
    extra = {**plain, "mood": ["grumpy"], "score": 3, "v": None}
    assert parse_event(extra, now=NOW) == parse_event(plain, now=NOW)
    assert ingest(store, [extra], now=NOW).stored == 1


# -- refusals name the field ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "field", "words"),
    [
        (["kind", "note"], None, "an event is a JSON object"),
        ("note", None, "an event is a JSON object"),
        ({"text": "no kind"}, "kind", "missing"),
        ({"kind": "oops", "text": "x"}, "kind", "'oops' is not one of correction, error, environment"),
        ({"kind": 3, "text": "x"}, "kind", "is not one of"),
        ({"kind": "error", "title": 42}, "title", "must be a string, not a number"),
        ({"kind": "correction", "said": ["no"]}, "said", "must be a string, not an array"),
        ({"kind": "note", "text": "x", "agent": {"name": "a"}}, "agent", "not an object"),
        ({"kind": "note", "text": "x", "cwd": True}, "cwd", "not a boolean"),
        ({"kind": "note", "text": "\ud800"}, "text", "lone surrogate"),
        ({"kind": "note", "text": "x", "at": "yesterday"}, "at", "not an ISO 8601 time"),
        ({"kind": "note", "text": "x", "at": 1700000000}, "at", "not an ISO 8601 time"),
        ({"kind": "note", "text": "x", "at": "2026-11-22T03:00:01Z"}, "at", "more than 24 hours after now"),
        ({"kind": "note", "text": "x", "at": "0001-01-01T00:00:00Z"}, "at", "before 1970"),
        ({"kind": "correction", "agent_did": "deleted the branch"}, "said", "correction events need said"),
        ({"kind": "correction", "said": "   "}, "said", "missing or blank"),
        ({"kind": "error", "agent": "a"}, "title", "error events need title or happened"),
        ({"kind": "surprise", "text": "x"}, "happened", "surprise events need happened or expected"),
        ({"kind": "environment", "title": "x"}, "text", "environment events need text or happened"),
        ({"kind": "note", "said": "x"}, "text", "note events need text"),
    ],
)
def test_refusals_name_the_field(store: Store, obj: object, field: str | None, words: str) -> None:
    with pytest.raises(EventError) as err:
        parse_event(obj, now=NOW)
    assert err.value.field == field
    if field is not None:
        assert str(err.value).startswith(f"{field}: ")
    assert words in str(err.value)
    result = ingest(store, [obj], now=NOW)
    assert (result.stored, result.refused) == (0, [(0, str(err.value))])
    assert rows(store, "id") == []


def test_at_up_to_the_tolerance_is_accepted() -> None:
    event = parse_event({"kind": "note", "text": "x", "at": iso(NOW + FUTURE_TOLERANCE)}, now=NOW)
    assert event.at == NOW + FUTURE_TOLERANCE


# -- identity and duplicates ---------------------------------------------------------------


def test_same_agent_session_kind_and_title_is_stored_once(store: Store) -> None:
    first = {"kind": "error", "title": "npm ci", "happened": "EACCES", "agent": "a", "session": "s"}
    again = {**first, "happened": "EACCES again, worded differently", "at": "2026-11-21T02:00:00Z"}
    other_session = {**first, "session": "t"}
    other_agent = {**first, "agent": "b"}
    result = ingest(store, [first, again, other_session, other_agent], now=NOW)
    # The same event again in one input is a repeat: nothing was held before it.
    assert (result.stored, result.duplicates, result.repeats) == (3, 0, 1)
    assert rows(store, "happened", "session", "agent") == [("EACCES", "s", "a"), ("EACCES", "t", "a"),
                                                            ("EACCES", "s", "b")]
    # A later call sees the stored event as a duplicate too.
    assert ingest(store, [first], now=NOW + timedelta(days=1)).to_json() == {
        "stored": 0, "duplicates": 1, "repeats": 0, "refused": []}


def test_two_untitled_corrections_in_one_session_are_both_stored(store: Store) -> None:
    events = [{"kind": "correction", "said": "no, the other file", "session": "s"},
              {"kind": "correction", "said": "stop, run the tests first", "session": "s"},
              {"kind": "correction", "said": "no, the other file", "session": "s"}]
    result = ingest(store, events, now=NOW)
    assert (result.stored, result.duplicates, result.repeats) == (2, 0, 1)


def test_id_is_blake2b_of_agent_session_kind_key() -> None:
    titled = parse_event({"kind": "error", "title": "make", "happened": "x", "agent": "a", "session": "s"}, now=NOW)
    untitled = parse_event({"kind": "surprise", "expected": "e", "happened": "h", "agent": "a"}, now=NOW)
    assert titled.id == hashlib.blake2b(b"a\x1fs\x1ferror\x1fmake", digest_size=16).hexdigest()
    assert untitled.id == episode_id("a", "", "surprise", "h")


# -- limits ---------------------------------------------------------------------------------


def test_a_10_mb_field_is_cut_to_max_field_chars(store: Store) -> None:
    trace = "Traceback (most recent call last):\n" + "x" * (10 * 1024 * 1024)
    data = line(kind="error", title="build", happened=trace)
    result = ingest_lines(store, io.BytesIO(data), now=NOW)
    assert result.refused == [(1, f"line 1: too large: over {MAX_EVENT_BYTES} bytes, the limit for one event")]
    result = ingest(store, [{"kind": "error", "title": "build", "happened": trace}], now=NOW)
    assert result.stored == 1
    [(happened, gist)] = rows(store, "happened", "gist")
    assert happened == trace[:MAX_FIELD_CHARS]
    assert isinstance(gist, str) and len(gist) == MAX_GIST_CHARS and gist.startswith("build: Traceback")


def test_a_2_mb_line_is_refused_and_the_lines_after_it_are_stored(store: Store) -> None:
    big = line(kind="note", text="y" * (2 * 1024 * 1024))
    data = line(kind="note", text="before") + big + line(kind="note", text="after") + b"\n"
    result = ingest_lines(store, io.BytesIO(data), now=NOW)
    assert result.stored == 2
    [(number, reason)] = result.refused
    assert number == 2 and reason.startswith("line 2: too large")
    assert rows(store, "text") == [("before",), ("after",)]


def test_malformed_lines_are_refused_with_reasons_and_the_rest_stored(store: Store) -> None:
    good = [line(kind="note", text=f"good {i}") for i in range(4)]
    data = b"".join([
        good[0],
        b'{"kind": "note", "text": "trunc\n',
        b"\x00\x01\x02\xfe\xff garbage\n",
        good[1],
        b'{"kind": "note", "text": "caf\xe9"}\n',
        b'[{"kind": "note", "text": "in an array"}]\n',
        b"   \n",
        b"[" * 100_000 + b"\n",
        b'{"kind": "note", "text": "x", "at": "tomorrow"}\r\n',
        good[2],
        good[3].rstrip(b"\n"),  # the last line may lack its newline
    ])
    result = ingest_lines(store, io.BytesIO(data), now=NOW)
    assert result.stored == 4
    reasons = dict(result.refused)
    assert sorted(reasons) == [2, 3, 5, 6, 8, 9]
    assert reasons[2].startswith("line 2: not JSON")
    assert reasons[3].startswith("line 3: not UTF-8 at byte 3")
    assert reasons[5].startswith("line 5: not UTF-8")
    assert reasons[6] == "line 6: an event is a JSON object"
    assert reasons[8].startswith("line 8: not JSON")
    assert reasons[9].startswith("line 9: at: not an ISO 8601 time")
    assert rows(store, "text") == [(f"good {i}",) for i in range(4)]
    assert json.loads(json.dumps(result.to_json()))["refused"][0] == {"position": 2, "reason": reasons[2]}


def test_many_events_are_committed_in_batches(store: Store) -> None:
    data = b"".join(line(kind="note", text=f"n{i}", session="s") for i in range(2500))
    result = ingest_lines(store, io.BytesIO(data), now=NOW)
    assert (result.stored, result.duplicates, result.refused) == (2500, 0, [])
    assert ingest_lines(store, io.BytesIO(data), now=NOW) == IngestResult(stored=0, duplicates=2500)


def test_ingest_is_durable_when_it_returns(tmp_path: Path) -> None:
    with open_store(tmp_path) as s:
        result = ingest(s, [{"kind": "note", "text": "kept"}], now=NOW)
        assert result.stored == 1
        # Another connection, as another process would open it, sees the row at once.
        other = sqlite3.connect(tmp_path / STORE_FILE)
        try:
            assert other.execute("SELECT text FROM episodes").fetchall() == [("kept",)]
        finally:
            other.close()
