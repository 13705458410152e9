"""Recall finds what the memory holds as soon as it holds it, and nothing for a query it has no words for.

Each test failed on release 0.1: own lessons were stored without a sentence vector,
events had no vector until the next sleep, and a query sharing nothing still returned
the most recent rows at cosine 0.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from neverest.clock import iso
from neverest.config import Config
from neverest.memory.embed import HASHED_SPACE, HashedEmbedder, ModelEmbedder, model_space
from neverest.memory.events import ingest
from neverest.memory.model import Endpoint
from neverest.memory.recall import HASHED_MIN_COSINE, recall
from neverest.memory.sleep import sleep
from neverest.memory.store import Store, open_store
from tests.fake_model import FakeModelServer
from tests.fake_model import model_server as model_server  # a fixture

NOW = datetime(2026, 5, 1, 3, 0, tzinfo=UTC)
CORRECTION = {"kind": "correction", "said": "the staging database is read-only, never migrate it"}
NOTES = ["pytest hangs when the database container is down", "the person prefers tabs for indentation",
         "npm ci fails on node 18 because of the lockfile version", "cargo build needs the openssl headers"]


def remember(store: Store, *events: dict[str, str]) -> None:
    result = ingest(store, [e | {"at": iso(NOW)} for e in events], now=NOW)
    assert result.stored == len(events), result


def test_an_event_is_recalled_as_soon_as_it_is_stored(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    remember(store, {"kind": "note", "text": NOTES[0], "session": "s1"})
    # No sleep in between: the event carries its vector from the moment it is stored.
    hits = recall(store, "pytest hangs, database container down", now=NOW, embedder=HashedEmbedder())
    assert [(h.type, h.text) for h in hits] == [("episode", NOTES[0])]


def test_an_own_lesson_is_recalled_as_soon_as_it_exists(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    remember(store, CORRECTION | {"session": "s1"})
    report = sleep(store, now=NOW, embedder=HashedEmbedder(), config=Config())
    [learned] = report.learned
    hits = recall(store, learned["text"], now=NOW, embedder=HashedEmbedder(), touch=False)
    lesson_hits = [h for h in hits if h.type == "lesson"]
    assert [(h.id, h.text) for h in lesson_hits] == [(str(learned["id"]), learned["text"])]
    assert lesson_hits[0].cosine > 0.99  # its own sentence, in the space of the night


def test_a_lesson_stored_without_its_vector_by_an_older_release_is_recalled(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    remember(store, CORRECTION | {"session": "s1"})
    [learned] = sleep(store, now=NOW, embedder=HashedEmbedder(), config=Config()).learned
    store.db.execute("UPDATE lessons SET embedding = NULL")  # as release 0.1 left them
    hits = recall(store, learned["text"], now=NOW, embedder=HashedEmbedder(), touch=False)
    assert [h.text for h in hits if h.type == "lesson"] == [learned["text"]]


def test_a_lesson_learned_in_a_model_space_is_recalled_in_it(tmp_path: Path, model_server: FakeModelServer) -> None:
    store = open_store(tmp_path)
    remember(store, CORRECTION | {"session": "s1"})
    embedder = ModelEmbedder(Endpoint(model_server.url, "embedder"))
    [learned] = sleep(store, now=NOW, embedder=embedder, config=Config()).learned
    hits = recall(store, learned["text"], now=NOW, embedder=embedder, touch=False)
    assert any(h.type == "lesson" and h.text == learned["text"] and h.cosine > 0.99 for h in hits)


def test_nonsense_recalls_nothing(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    remember(store, *({"kind": "note", "text": text, "session": f"s{i}"} for i, text in enumerate(NOTES)))
    sleep(store, now=NOW, embedder=HashedEmbedder(), config=Config())
    for nonsense in ("xyzzy plugh", "qwfp arst zxcv", "banana smoothie recipe", "zzq"):
        assert recall(store, nonsense, now=NOW, embedder=HashedEmbedder()) == [], nonsense
    # A query with a word in common still finds it, above the floor.
    [hit] = recall(store, "openssl", now=NOW, embedder=HashedEmbedder())
    assert hit.text == NOTES[3] and hit.cosine >= HASHED_MIN_COSINE


def test_with_a_model_recall_embeds_what_is_not_in_its_space_yet(tmp_path: Path,
                                                                 model_server: FakeModelServer) -> None:
    store = open_store(tmp_path)
    remember(store, {"kind": "note", "text": NOTES[0], "session": "s1"})
    sleep(store, now=NOW, embedder=ModelEmbedder(Endpoint(model_server.url, "embedder")), config=Config())
    later = NOW + timedelta(minutes=5)
    ingest(store, [{"kind": "note", "text": NOTES[2], "session": "s2", "at": iso(later)}], now=later)
    embedder = ModelEmbedder(Endpoint(model_server.url, "embedder"))
    # The fake model's vectors are hashes of the whole text: only the exact text matches.
    hits = recall(store, NOTES[2], now=later, embedder=embedder, touch=False)
    assert [h.text for h in hits][:1] == [NOTES[2]]
    spaces = dict(store.db.execute("SELECT session, space FROM episodes"))
    assert spaces == {"s1": model_space("embedder"), "s2": model_space("embedder")}


def test_with_a_dead_model_recall_falls_back_to_the_hashed_space(tmp_path: Path,
                                                                 model_server: FakeModelServer) -> None:
    store = open_store(tmp_path)
    remember(store, {"kind": "note", "text": NOTES[1], "session": "s1"})
    model_server.mode = "500"
    embedder = ModelEmbedder(Endpoint(model_server.url, "embedder"))
    hits = recall(store, "prefers tabs for indentation", now=NOW, embedder=embedder)
    assert [h.text for h in hits] == [NOTES[1]]
    assert store.db.execute("SELECT DISTINCT space FROM episodes").fetchall() == [(HASHED_SPACE,)]
