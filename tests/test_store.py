"""The SQLite store: WAL, bounded lock waits, forward migration, refusal of newer schemas."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from neverest.memory.queries import fulltext, lessons
from neverest.memory.store import (
    MIGRATIONS,
    PASS_CACHE_KIB,
    SCHEMA_VERSION,
    Store,
    StoreBusy,
    StoreError,
    open_store,
    statements,
)


def test_new_store_is_wal_and_versioned(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        tables = {r[0] for r in store.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"episodes", "lessons", "predictions", "aliases", "records", "peers", "meta"} <= tables


def test_reopen_keeps_data_and_does_not_migrate_twice(tmp_path: Path) -> None:
    with open_store(tmp_path) as store, store.write() as db:
        store.set_meta(db, "x", "1")
    with open_store(tmp_path) as store:
        assert store.get_meta("x") == "1"


def test_store_from_a_newer_release_is_refused(tmp_path: Path) -> None:
    open_store(tmp_path).close()
    db = sqlite3.connect(tmp_path / "memory.db")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(StoreError, match="newer Neverest"):
        open_store(tmp_path)


def test_write_rolls_back_on_error(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        with pytest.raises(RuntimeError), store.write() as db:
            store.set_meta(db, "y", "1")
            raise RuntimeError("boom")
        assert store.get_meta("y") is None


def test_lock_held_by_another_process_gives_a_bounded_wait_and_a_clear_message(tmp_path: Path) -> None:
    open_store(tmp_path).close()
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sqlite3, sys, time\n"
         f"db = sqlite3.connect({str(tmp_path / 'memory.db')!r}, isolation_level=None)\n"
         "db.execute('BEGIN IMMEDIATE'); print('locked', flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with open_store(tmp_path, busy_timeout_s=0.3) as store:
            start = time.monotonic()
            with pytest.raises(StoreBusy, match="locked by another process"), store.write():
                pass
            assert time.monotonic() - start < 5
            # Readers are not blocked by a writer in WAL mode.
            assert store.get_meta("anything") is None
    finally:
        holder.kill()
        holder.wait()


def test_a_version_1_store_migrates_forward_and_keeps_its_data(tmp_path: Path) -> None:
    from neverest.memory.store import MIGRATIONS

    db = sqlite3.connect(tmp_path / "memory.db", isolation_level=None)
    for statement in MIGRATIONS[0].split(";"):
        if statement.strip():
            db.execute(statement)
    db.execute("PRAGMA user_version = 1")
    db.execute("INSERT INTO episodes (id, kind, gist, at, created) VALUES ('e1', 'note', 'x', 't', 't')")
    db.execute("INSERT INTO records (origin, seq, type, target, raw, source, received) "
               "VALUES ('o', 1, 'lesson', 'h', x'7b7d', 'folder', 't')")
    db.close()
    with open_store(tmp_path) as store:
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 2
        assert store.db.execute("SELECT id FROM episodes").fetchall() == [("e1",)]
        assert store.db.execute("SELECT origin, superseded FROM records").fetchall() == [("o", 0)]
        assert store.db.execute("SELECT count(*) FROM tombstones").fetchone()[0] == 0


def test_passing_over_holds_the_page_cache_small_and_gives_it_its_size_back(tmp_path: Path) -> None:
    def cache_size(store: Store) -> int:
        return int(store.db.execute("PRAGMA cache_size").fetchone()[0])

    with open_store(tmp_path) as store:
        before = cache_size(store)
        assert before != -PASS_CACHE_KIB
        with store.passing_over():
            assert cache_size(store) == -PASS_CACHE_KIB
            assert store.db.execute("SELECT count(*) FROM records").fetchone() == (0,)
        assert cache_size(store) == before
        with pytest.raises(RuntimeError), store.passing_over():
            raise RuntimeError("a read that failed")
        assert cache_size(store) == before


def _lesson(text: str) -> lessons.NewLesson:
    return lessons.NewLesson(hash=text[:32].ljust(32, "0"), kind="error", text=text, cwd="", strength=0.5, seen=1,
                             created="2026-04-01T00:00:00.000000Z", origin="", layer="personal", space=None,
                             embedding=None, centroid=None)


def _indexed_once(db: sqlite3.Connection) -> None:
    """Every lesson's text is in the full-text index, and once: FTS5 counts the rows it indexed in its
    "averages" record (the first varint of the row with id 1 of its data table), and a row indexed
    twice (by a trigger and by lessons.create) counts twice.  (Its integrity-check does not compare an
    external-content index with its table before SQLite 3.44.)"""
    averages = db.execute("SELECT block FROM lessons_fts_data WHERE id = 1").fetchone()[0]
    held = db.execute("SELECT count(*) FROM lessons").fetchone()[0]
    assert held < 128 and averages[0] == held  # one byte: a varint under 128
    assert not db.execute("SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = 'lessons_fts_in'").fetchone()


def test_a_new_lesson_is_in_the_full_text_index_once(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        with store.write() as db:
            first = lessons.create(db, _lesson("pytest collection fails when conftest imports the package"))
            lessons.create(db, _lesson("the linter times out on generated protobuf modules"))
        _indexed_once(store.db)
        assert [row for row, _ in fulltext.bm25(store.db, "lessons", '"conftest"', 5)] == [first]


def test_a_v10_store_indexes_its_old_and_new_lessons_once_each(tmp_path: Path) -> None:
    # A store made by schema 10, whose trigger indexed its lessons: version 11 drops the trigger.
    db = sqlite3.connect(tmp_path / "memory.db", isolation_level=None)
    for script in MIGRATIONS[:10]:
        for statement in statements(script):
            db.execute(statement)
    db.execute("PRAGMA user_version = 10")
    old = db.execute("INSERT INTO lessons (hash, kind, text, cwd, strength, seen, created, updated, origin, layer) "
                     "VALUES ('ab', 'error', 'the build cache goes stale after switching branches', '', 0.5, 1, "
                     "'2026-04-01T00:00:00.000000Z', '2026-04-01T00:00:00.000000Z', '', 'personal')").lastrowid
    db.close()
    with open_store(tmp_path) as store:
        with store.write() as wdb:
            new = lessons.create(wdb, _lesson("the stale build cache hides a missing import"))
        _indexed_once(store.db)
        assert sorted(row for row, _ in fulltext.bm25(store.db, "lessons", '"build cache"', 5)) == [old, new]
