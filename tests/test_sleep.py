"""The sleep passes, each alone on hand-made episodes with a fixed clock, and the whole night."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from neverest.clock import FixedClock, iso
from neverest.config import Config
from neverest.memory.embed import HashedEmbedder, ModelEmbedder, model_space
from neverest.memory.events import ingest
from neverest.memory.model import Endpoint, Writer
from neverest.memory.queries import episodes as episode_queries
from neverest.memory.queries import lessons as lesson_queries
from neverest.memory.sleep import SleepReport, decay_pass, sleep
from neverest.memory.store import Store, open_store
from neverest.records import lesson_hash
from neverest.safety import imperative_reason
from tests.fake_model import FakeModelServer
from tests.fake_model import model_server as model_server  # a fixture

T0 = datetime(2026, 1, 5, 3, 0, tzinfo=UTC)
CONFIG = Config()


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(tmp_path)


def add(store: Store, at: datetime, **event: str) -> None:
    result = ingest(store, [event | {"at": iso(at)}], now=at)
    assert result.stored == 1, result


def night(store: Store, at: datetime) -> SleepReport:
    return sleep(store, now=at, embedder=HashedEmbedder(), config=CONFIG)


def lessons(store: Store) -> list[dict[str, Any]]:
    cols = ("id", "kind", "text", "seen", "strength", "archived")
    rows = [dict(zip(cols, r, strict=True)) for r in store.db.execute(
        "SELECT id, kind, text, seen, strength, archived FROM lessons ORDER BY id")]
    return [row | {"sources": lesson_queries.sources(store.db, row["id"])} for row in rows]


PIP = {"kind": "error", "title": "pip install -e /home/ann/proj", "happened": "fails without --no-build-isolation"}


def test_one_correction_makes_a_lesson_at_once(store: Store) -> None:
    add(store, T0, kind="correction", said="don't push directly to main", agent="a", session="s1")
    report = night(store, T0)
    [lesson] = lessons(store)
    assert lesson["kind"] == "correction" and lesson["seen"] == 1
    assert imperative_reason(lesson["text"]) is None
    assert "push directly to main" in lesson["text"]
    assert report.learned and report.predicted == 1


def test_an_error_must_repeat_and_then_becomes_one_lesson(store: Store) -> None:
    add(store, T0, **PIP, agent="a", session="s1")
    assert night(store, T0).waiting == 1
    assert lessons(store) == []
    add(store, T0 + timedelta(days=2), **PIP, agent="a", session="s2")
    night(store, T0 + timedelta(days=2))
    [lesson] = lessons(store)
    assert lesson["seen"] == 2 and len(lesson["sources"]) == 2
    assert "/home/ann" not in lesson["text"] and "pip install" in lesson["text"]


def test_unrelated_errors_do_not_make_a_lesson(store: Store) -> None:
    add(store, T0, **PIP, agent="a", session="s1")
    add(store, T0, kind="error", title="docker compose up", happened="port 5432 already allocated", session="s2")
    night(store, T0)
    assert lessons(store) == []


def test_environment_episodes_and_notes_never_consolidate(store: Store) -> None:
    for i in range(3):
        add(store, T0, kind="environment", text="Python 3.11 on Debian 12", session=f"s{i}")
        add(store, T0, kind="note", text="the build uses make", session=f"s{i}")
    report = night(store, T0)
    assert report.considered == 6 and lessons(store) == []


def test_a_third_similar_error_joins_the_existing_lesson(store: Store) -> None:
    for i in range(2):
        add(store, T0, **PIP, session=f"s{i}")
    night(store, T0)
    add(store, T0 + timedelta(days=1), **PIP, session="s9")
    report = night(store, T0 + timedelta(days=1))
    [lesson] = lessons(store)
    assert report.joined == 1 and lesson["seen"] == 3
    assert lesson["strength"] == pytest.approx(CONFIG.lesson_initial_strength * 2 ** (-1 / 45) + CONFIG.join_step
                                               + CONFIG.confirm_step)  # the join also confirmed its prediction


def test_decay_counts_each_day_once(store: Store) -> None:
    add(store, T0, kind="note", text="x")
    report = SleepReport(started="")
    decay_pass(store, T0, CONFIG.sections.sleep, report)  # first run: starts the count
    for hour in (0, 5, 12):
        decay_pass(store, T0 + timedelta(days=45, hours=hour), CONFIG.sections.sleep, report)
    strength = store.db.execute("SELECT strength FROM episodes").fetchone()[0]
    assert strength == pytest.approx(0.5)
    decay_pass(store, T0 + timedelta(days=45 + 90), CONFIG.sections.sleep, report)  # 0.5 × 0.25 < 0.15
    assert store.db.execute("SELECT archived FROM episodes").fetchone()[0] == 1
    assert report.archived_episodes == 1


def powershell(store: Store, at: datetime, said: str, reaction: str, command: str) -> None:
    add(store, at, kind="correction", said=said, reaction=reaction, session="s1",
        agent_did=f"ran shell: powershell.exe -NoProfile -Command '{command}'")


def test_corrections_objecting_to_one_command_are_one_lesson(store: Store) -> None:
    # As in a public Codex session of the corpus (tests/data/sessions): powershell.exe refused without a word,
    # stopped with "dont run", refused with "stop trying to run powershell stuff".  Their episodes' vectors are
    # far apart (the join's cosine misses); what the person wants is one thing.
    powershell(store, T0, "", "rejected", 'rg "specify"')
    powershell(store, T0 + timedelta(minutes=1), "dont run", "interrupted", "(Invoke-WebRequest x).Content")
    powershell(store, T0 + timedelta(minutes=2), "stop trying to run powershell stuff", "rejected", "python - <<PY")
    # Another command, and words about something else: lessons of their own.
    add(store, T0 + timedelta(minutes=3), kind="correction", reaction="rejected", session="s1",
        agent_did="ran Bash: git push --force")
    add(store, T0 + timedelta(minutes=4), kind="correction", reaction="rejected", session="s1",
        said="the build folder is shared with the release job", agent_did="ran Bash: rm -rf build")
    night(store, T0 + timedelta(hours=1))
    live = [r for r in lessons(store) if not r["archived"]]
    assert sorted((r["text"], r["seen"]) for r in live) == [
        ("The person corrected the agent: the build folder is shared with the release job", 1),
        ("The person refused to let the agent run git push", 1),
        ("The person refused to let the agent run powershell.exe", 3)]
    # A later night's objection to powershell.exe joins the lesson the store holds.
    powershell(store, T0 + timedelta(days=1), "no", "interrupted", "Get-Command rg")
    night(store, T0 + timedelta(days=1, hours=1))
    [held] = [r for r in lessons(store) if "powershell" in r["text"] and not r["archived"]]
    assert held["seen"] == 4 and len(held["sources"]) == 4


def test_two_lessons_objecting_to_one_command_merge_when_one_changes(store: Store) -> None:
    # A store made before objections joined holds two lessons about powershell.exe: one from a refused call,
    # one from "dont run" (made here as that consolidation made it).
    powershell(store, T0, "", "rejected", 'rg "specify"')
    night(store, T0 + timedelta(hours=1))
    powershell(store, T0 + timedelta(hours=2), "dont run", "interrupted", "Get-Content x")
    [(episode, space, vector)] = store.db.execute(
        "SELECT id, space, embedding FROM episodes WHERE said = 'dont run'").fetchall()
    text = "The person stopped the agent while it ran powershell.exe"
    with store.write() as db:
        apart = lesson_queries.create(db, lesson_queries.NewLesson(
            hash=lesson_hash("correction", text), kind="correction", text=text, cwd="", strength=1.0, seen=1,
            created=iso(T0), origin="", layer="personal", space=space, embedding=vector, centroid=vector,
            sources=[episode]))
        episode_queries.assign(db, apart, [episode])
        episode_queries.considered(db, [episode])
    [first] = [r["id"] for r in lessons(store) if r["id"] != apart]
    # The next objection joins the older one; the merge pass folds the other into it.
    powershell(store, T0 + timedelta(days=1), "no", "interrupted", "Get-Command rg")
    report = night(store, T0 + timedelta(days=1, hours=1))
    assert report.merged == [{"theme": first, "alias": apart}]
    [held] = [r for r in lessons(store) if not r["archived"]]
    assert held["id"] == first and held["seen"] == 3 and len(held["sources"]) == 3


def test_merge_makes_a_theme_with_aliases(store: Store) -> None:
    # Two corrections phrased differently make two lessons in one night; their
    # sources mean the same thing, so the merge pass folds one into the other.
    add(store, T0, kind="correction", said="use tabs for indentation in this project", session="s1")
    add(store, T0, kind="correction", said="use tabs for indentation in this project please", session="s2")
    report = night(store, T0)
    rows = lessons(store)
    live = [r for r in rows if not r["archived"]]
    assert len(live) == 1 and live[0]["seen"] == 2
    if len(rows) == 2:  # two lessons were made, then merged
        assert report.merged and store.db.execute("SELECT old, new FROM aliases").fetchone() == (
            rows[1]["id"], rows[0]["id"])


def test_prediction_confirmed_by_a_later_episode(store: Store) -> None:
    for i in range(2):
        add(store, T0, **PIP, session=f"s{i}")
    night(store, T0)
    add(store, T0 + timedelta(days=5), **PIP, session="later")
    report = night(store, T0 + timedelta(days=5))
    assert len(report.confirmed) == 1 and report.confirmed[0]["episode"]
    outcome = store.db.execute("SELECT outcome FROM predictions ORDER BY id LIMIT 1").fetchone()[0]
    assert outcome == "confirmed"


def test_prediction_fails_after_14_days(store: Store) -> None:
    add(store, T0, kind="correction", said="the staging database is read-only", session="s1")
    night(store, T0)
    assert night(store, T0 + timedelta(days=13)).failed == []
    report = night(store, T0 + timedelta(days=14))
    assert len(report.failed) == 1
    [lesson] = lessons(store)
    # 14 days of decay, then the failure step; strength < 1 so no new prediction.
    assert lesson["strength"] == pytest.approx(2 ** (-14 / 45) - CONFIG.fail_step)
    assert report.predicted == 0


def test_second_sleep_does_work_in_proportion_to_what_is_new(store: Store) -> None:
    for i in range(300):
        add(store, T0, kind="error", title=f"tool{i % 30} run", happened=f"failure mode {i % 7} number {i}",
            session=f"s{i}")
    # Episodes are embedded (hashed) as they are stored, so the night only embeds what it predicts.
    assert store.db.execute("SELECT count(*) FROM episodes WHERE embedding IS NOT NULL").fetchone()[0] == 300
    first = night(store, T0)
    assert first.considered == 300
    for i in range(10):
        add(store, T0, kind="error", title=f"tool{i} run", happened=f"failure mode {i % 7}", session=f"n{i}")
    second = night(store, T0 + timedelta(hours=1))
    assert second.considered == 10
    # No lesson's centroid is recomputed night after night (its sources did not change space).
    assert lesson_queries.needing_centroid(store.db, second.space) == []
    assert second.embedded <= 10 + second.predicted + len(second.learned)


def test_sixty_days(tmp_path: Path) -> None:
    """A repeated error becomes a lesson whose prediction is confirmed; a correction becomes a lesson
    at once, its prediction fails, and it decays until archived; nightly sleeps on the injected clock."""
    store = open_store(tmp_path)
    clock = FixedClock(T0)
    add(store, T0, **PIP, agent="a", session="d0")
    add(store, T0, kind="correction", said="stop editing the generated parser files", agent="a", session="d0")
    reports: dict[int, SleepReport] = {}
    for day in range(0, 63):
        clock.set(T0 + timedelta(days=day))
        if day == 3:
            add(store, clock.now(), **PIP, agent="b", session="d3")
        if day == 10:
            add(store, clock.now(), **PIP, agent="a", session="d10")
        reports[day] = night(store, clock.now())
    assert [x["kind"] for x in reports[0].learned] == ["correction"]
    assert [x["kind"] for x in reports[3].learned] == ["error"]
    assert len(reports[10].confirmed) == 1 and reports[10].confirmed[0]["text"].startswith("pip install")
    assert any(r.failed for r in reports.values())
    by_kind = {r["kind"]: r for r in lessons(store)}
    assert by_kind["correction"]["archived"] == 1, by_kind["correction"]
    assert by_kind["error"]["archived"] == 0 and by_kind["error"]["seen"] == 3
    assert sum(r.archived_lessons for r in reports.values()) == 1


# -- the optional models, against a real (fake) OpenAI-compatible server on loopback ------------



@pytest.mark.parametrize(("reply", "used"), [
    ("Editable pip installs here need build isolation turned off.", True),
    ("Always pass --no-build-isolation to pip.", False),  # an order: the template stands
])
def test_a_model_written_sentence_passes_the_same_check(store: Store, model_server: FakeModelServer,
                                                        reply: str, used: bool) -> None:
    model_server.reply = reply
    for i in range(2):
        add(store, T0, **PIP, session=f"s{i}")
    with Writer(Endpoint(model_server.url, "writer")) as writer:
        sleep(store, now=T0, embedder=HashedEmbedder(), config=CONFIG, writer=writer)
    [lesson] = lessons(store)
    assert (lesson["text"] == reply) is used
    if not used:
        assert lesson["text"] == "pip install fails without --no-build-isolation"


def test_a_model_space_is_used_and_a_dead_model_falls_back_to_hashed(store: Store,
                                                                    model_server: FakeModelServer) -> None:
    add(store, T0, kind="correction", said="the staging database is read-only", session="s1")
    embedder = ModelEmbedder(Endpoint(model_server.url, "embedder"))
    report = sleep(store, now=T0, embedder=embedder, config=CONFIG)
    assert report.space == model_space("embedder")
    assert store.db.execute("SELECT DISTINCT space FROM episodes").fetchall() == [(model_space("embedder"),)]
    model_server.mode = "500"  # the model breaks: the next night re-embeds everything in the hashed space
    report = sleep(store, now=T0 + timedelta(days=1), embedder=embedder, config=CONFIG)
    assert report.space == "hashed-256"
    assert store.db.execute("SELECT DISTINCT space FROM episodes").fetchall() == [("hashed-256",)]
    assert len(lessons(store)) == 1  # the lesson survived the change of space
