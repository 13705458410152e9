"""Recall: the seed's score formula, the top k, and touching what was returned."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from neverest.clock import iso
from neverest.memory.embed import HashedEmbedder, hashed_vector
from neverest.memory.events import ingest
from neverest.memory.keyterms import key_terms, matches
from neverest.memory.recall import BM25_WEIGHT, KEY_TERM_BONUS, recall
from neverest.memory.sleep import embed_pass
from neverest.memory.store import open_store

NOW = datetime(2026, 5, 1, tzinfo=UTC)


def test_score_formula_top_k_and_touch(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    texts = {"old": ("pytest hangs when the database container is down", 60),
             "new": ("pytest hangs when the database container is not running", 1),
             "other": ("the person prefers tabs for indentation", 0)}
    for session, (text, age) in texts.items():
        ingest(store, [{"kind": "note", "text": text, "session": session, "at": iso(NOW - timedelta(days=age))}],
               now=NOW)
    embed_pass(store, HashedEmbedder())
    store.db.execute("UPDATE episodes SET strength = 3.0 WHERE session = 'old'")  # capped at 2 in the score
    query = "pytest hangs because the database container is down"
    hits = recall(store, query, now=NOW, embedder=HashedEmbedder(), k=2)
    assert {h.text for h in hits} == {texts["old"][0], texts["new"][0]}
    q = hashed_vector(query)
    # Both share key terms of the query (pytest, hangs, database, container): +1, and their BM25 weight.
    weights = matches(store.db, "episodes", key_terms(query))
    rowids = dict(store.db.execute("SELECT gist, rowid FROM episodes"))
    for hit in hits:
        text, age = next(v for v in texts.values() if v[0] == hit.text)
        cos = float(np.dot(hashed_vector(text), q))
        strength = 3.0 if age == 60 else 1.0
        expected = (0.6 * cos + 0.25 * 2 ** (-age / 30) + 0.15 * min(strength, 2) / 2
                    + KEY_TERM_BONUS + BM25_WEIGHT * weights[rowids[text]])
        assert hit.score == pytest.approx(expected, abs=1e-3)
    assert hits[0].score >= hits[1].score
    touched = dict(store.db.execute("SELECT session, recalls FROM episodes"))
    assert touched == {"old": 1, "new": 1, "other": 0}
    strength = store.db.execute("SELECT strength FROM episodes WHERE session = 'new'").fetchone()[0]
    assert strength == pytest.approx(1.1)


def test_archived_episodes_are_not_recalled(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    ingest(store, [{"kind": "note", "text": "the cache fills up", "at": iso(NOW)}], now=NOW)
    embed_pass(store, HashedEmbedder())
    assert len(recall(store, "cache", now=NOW, embedder=HashedEmbedder(), touch=False)) == 1
    store.db.execute("UPDATE episodes SET archived = 1")
    assert recall(store, "cache", now=NOW, embedder=HashedEmbedder()) == []


def test_a_row_sharing_the_querys_key_terms_ranks_above_one_sharing_none(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    ingest(store, [{"kind": "error", "title": "Bash: cargo", "happened": "cargo: error: linker cc not found",
                    "session": "a"},
                   {"kind": "error", "title": "Bash: pytest", "happened": "ModuleNotFoundError: No module named "
                    "'fastapi'", "session": "b"}], now=NOW)
    hits = recall(store, "fastapi module not found", now=NOW, embedder=HashedEmbedder(), touch=False)
    # "module" is found inside ModuleNotFoundError; "not found" is how every failure reads.
    assert [h.text.split(":")[1].strip() for h in hits] == ["pytest", "cargo"]
    assert hits[0].score > hits[1].score + 1.0
