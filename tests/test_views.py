"""The read model every door shows a lesson through: one state, one provenance, one framing."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import nacl.signing
import pytest

from neverest.agents import hook, mcp_server
from neverest.agents.memory_file import section
from neverest.clock import iso
from neverest.config import Config
from neverest.memory import views
from neverest.memory.receive import receive
from neverest.memory.render import render
from neverest.memory.store import Store, open_store
from neverest.records import lesson_hash, sign_lesson

NOW = datetime(2026, 4, 1, tzinfo=UTC)
OWN = "f" * 16
OTHER = nacl.signing.SigningKey(bytes([7]) * 32)
OWN_TEXT = "npm ci fails behind the proxy"
RECEIVED_TEXT = "tsc reports a stale schema after a rebase"


@pytest.mark.parametrize(("own", "recorded", "archived", "expected"), [
    (True, False, False, views.LOCAL),
    (True, True, False, None),  # published: the records say
    (True, False, True, views.ARCHIVED),
    (True, True, True, views.ARCHIVED),  # a row archived here is listed as archived whatever the commons says
    (False, True, False, None),
    (False, False, False, None),  # received without a record: judged (a candidate), never local
])
def test_the_state_label(own: bool, recorded: bool, archived: bool, expected: str | None) -> None:
    assert views.state_label(own=own, recorded=recorded, archived=archived) == expected


def _store(tmp_path: Path) -> Store:
    """This memory's own lesson, never published, and one received from another memory, unconfirmed."""
    store = open_store(tmp_path)
    with store.write() as db:
        db.execute("INSERT INTO lessons (hash, kind, text, strength, seen, created, updated) "
                   "VALUES (?, 'error', ?, 1.5, 2, ?, ?)",
                   (lesson_hash("error", OWN_TEXT), OWN_TEXT, iso(NOW), iso(NOW)))
    record = sign_lesson(OTHER, kind="error", text=RECEIVED_TEXT, seen=1, strength=1.0, updated=iso(NOW), seq=1)
    assert receive(store, [record.raw], source="t", own_origin=OWN, config=Config(), now=NOW).accepted == 1
    return store


def test_own_unpublished_is_local_and_received_unconfirmed_is_a_candidate_at_every_door(tmp_path: Path) -> None:
    store = _store(tmp_path)
    loaded = {v.text: v for v in views.load(store.db, now=NOW, config=Config(), own_origin=OWN)}
    own, received = loaded[OWN_TEXT], loaded[RECEIVED_TEXT]
    assert (own.own, own.state, own.support, own.origin) == (True, "local", 0, OWN)
    assert (received.own, received.state, received.support) == (False, "candidate", 0)
    assert own.provenance.startswith("learned here; first 2026-04-01")
    assert received.source == f"received from memory {received.origin}" and received.origin != OWN
    # show says what the listing says (it used to call a lesson never published a candidate).
    for v in (own, received):
        shown = views.details(store.db, v.hash[:8], now=NOW, config=Config(), own_origin=OWN)
        assert (shown["state"], shown["support"], shown["provenance"]) == (v.state, v.support, v.provenance)
    render(store, tmp_path, list(loaded.values()))
    markdown = (tmp_path / "lessons.md").read_text(encoding="utf-8")
    assert "(local, personal layer" in markdown and "(received, candidate, strength" in markdown
    with pytest.raises(views.LessonNotFound):
        views.details(store.db, "abc", now=NOW, config=Config(), own_origin=OWN)
    store.close()


def test_every_door_frames_lessons_in_the_same_words(tmp_path: Path) -> None:
    many, one = views.framing(), views.framing(one=True)
    assert "not instructions" in many and "not an instruction" in one
    assert many in hook.HEADER and mcp_server.FRAMING == one
    assert many in section(["- a line"]).decode("utf-8")
    store = _store(tmp_path)
    render(store, tmp_path, views.load(store.db, now=NOW, config=Config(), own_origin=OWN))
    assert many[1:] in (tmp_path / "lessons.md").read_text(encoding="utf-8")
    store.close()


def test_a_line_for_an_agent_is_scrubbed_on_one_line_and_cut() -> None:
    assert views.one_line("pip  fails\n on build01.acme-corp.com", 100) == "pip fails on a host"
    assert views.one_line("word " * 50, 20) == "word word word word…"
