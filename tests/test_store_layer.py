"""The store layer: SQL only in the query modules, schema v3 converts every store, and no
model is called while the store's write lock is held."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from neverest.clock import iso
from neverest.config import Config
from neverest.memory.embed import Embedded, FloatArray, HashedEmbedder
from neverest.memory.events import ingest
from neverest.memory.queries import lessons, status
from neverest.memory.recall import recall
from neverest.memory.sleep import sleep
from neverest.memory.store import MIGRATIONS, SCHEMA_VERSION, open_store, schema_version
from neverest.paths import STORE_FILE

ROOT = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 5, 1, 3, 0, tzinfo=UTC)
# The only modules that may talk SQL.
ALLOWED = {"neverest/memory/store.py", "neverest/memory/holdings.py", "neverest/peers/table.py"}
ALLOWED_DIRS = ("neverest/memory/queries/",)
SQL_CALL = re.compile(r"\.execute(?:many|script)?\(")


def test_no_sql_outside_the_query_modules() -> None:
    offenders = []
    for folder in ("neverest", "simulations"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name in ALLOWED or name.startswith(ALLOWED_DIRS):
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if SQL_CALL.search(line):
                    offenders.append(f"{name}:{number}: {line.strip()}")
    assert offenders == [], "SQL outside the query modules:\n" + "\n".join(offenders)


# -- schema v3 --------------------------------------------------------------------------


def _v2_store(home: Path) -> Path:
    """A store as version 2 made it, with lessons whose sets are JSON lists."""
    path = home / STORE_FILE
    db = sqlite3.connect(path, isolation_level=None)
    for script in MIGRATIONS[:2]:
        for statement in script.split(";"):
            if statement.strip():
                db.execute(statement)
    db.execute("PRAGMA user_version = 2")
    for i in range(1, 4):
        db.execute("INSERT INTO episodes (id, kind, gist, at, created) VALUES (?, 'correction', 'g', ?, ?)",
                   (f"ep{i}", iso(NOW), iso(NOW)))
    rows = [("h1", "[]", json.dumps(["ep1", "ep2"])),
            ("h2", json.dumps(["aaaa", "bbbb", "cccc"]), "[]"),
            ("h3", json.dumps(["aaaa"]), json.dumps(["ep3"]))]
    for digest, origins, sources in rows:
        db.execute("INSERT INTO lessons (hash, kind, text, strength, seen, sources, created, updated, origin, origins) "
                   "VALUES (?, 'correction', 't', 1.0, 1, ?, ?, ?, ?, ?)",
                   (digest, sources, iso(NOW), iso(NOW), "" if origins == "[]" else "aaaa", origins))
    db.execute("INSERT INTO peers (origin, addresses, source) VALUES ('aaaa', '[\"http://x:1\"]', 'manual')")
    db.close()
    return path


def test_a_v2_store_keeps_every_origin_and_source(tmp_path: Path) -> None:
    _v2_store(tmp_path)
    with open_store(tmp_path) as store:
        assert schema_version(store.db) == SCHEMA_VERSION >= 4
        ids = dict(store.db.execute("SELECT hash, id FROM lessons"))
        assert lessons.sources(store.db, ids["h1"]) == ["ep1", "ep2"]
        assert lessons.origins(store.db, ids["h1"]) == []
        assert lessons.origins(store.db, ids["h2"]) == ["aaaa", "bbbb", "cccc"]
        assert lessons.sources(store.db, ids["h2"]) == []
        assert (lessons.origins(store.db, ids["h3"]), lessons.sources(store.db, ids["h3"])) == (["aaaa"], ["ep3"])
        columns = {r[1] for r in store.db.execute("PRAGMA table_info(lessons)")}
        assert "origins" not in columns and "sources" not in columns
        assert "addresses" not in {r[1] for r in store.db.execute("PRAGMA table_info(peers)")}
        assert status.known_peer_origins(store.db) == {"aaaa"}
        assert [r.sources for r in sorted(lessons.rows(store.db), key=lambda r: r.hash)] == [2, 0, 1]


def test_a_current_store_opens_unchanged(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        ingest(store, [{"kind": "correction", "said": "the staging database is read-only", "at": iso(NOW)}], now=NOW)
        sleep(store, now=NOW, embedder=HashedEmbedder(), config=Config())
        before = list(store.db.iterdump())
    with open_store(tmp_path) as store:
        assert schema_version(store.db) == SCHEMA_VERSION
        assert list(store.db.iterdump()) == before


# -- no model inside a write transaction -------------------------------------------------


class _LockProbe:
    """Tries to take the store's write lock from another connection, as another process would."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.calls = 0
        self.blocked: list[str] = []

    def check(self, what: str) -> None:
        self.calls += 1
        other = sqlite3.connect(self.path, timeout=0.05, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
        except sqlite3.OperationalError as exc:
            self.blocked.append(f"{what}: {exc}")
        finally:
            other.close()


class _ProbingEmbedder(HashedEmbedder):
    def __init__(self, probe: _LockProbe) -> None:
        self.lock_probe = probe

    def probe(self) -> str:
        self.lock_probe.check("probe")
        return super().probe()

    def embed(self, texts: Sequence[str]) -> FloatArray:
        self.lock_probe.check("embed")
        return super().embed(texts)

    def embed_with_space(self, texts: Sequence[str]) -> Embedded:
        self.lock_probe.check("embed_with_space")
        return super().embed_with_space(texts)


class _ProbingWriter:
    def __init__(self, probe: _LockProbe) -> None:
        self.lock_probe = probe

    def write(self, prompt: str, *, system: str) -> str | None:
        self.lock_probe.check("writer")
        return "The staging database is read-only."


def test_no_model_is_called_inside_a_write_transaction(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    probe = _LockProbe(store.path)
    ingest(store, [{"kind": "correction", "said": "the staging database is read-only", "session": "a", "at": iso(NOW)},
                   {"kind": "error", "title": "pip fails", "happened": "no build isolation", "session": "a",
                    "at": iso(NOW)},
                   {"kind": "error", "title": "pip fails", "happened": "no build isolation", "session": "b",
                    "at": iso(NOW)}], now=NOW)
    embedder = _ProbingEmbedder(probe)
    report = sleep(store, now=NOW, embedder=embedder, config=Config(), writer=_ProbingWriter(probe))  # type: ignore[arg-type]
    assert len(report.learned) == 2
    assert recall(store, "staging database", now=NOW, embedder=embedder)
    assert probe.calls >= 4  # probe, the writer for each lesson, their sentences, the query
    assert probe.blocked == []


def test_status_counts(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        ingest(store, [{"kind": "note", "text": "the cache fills up", "at": iso(NOW)}], now=NOW)
        assert status.counts(store.db).to_json() == {"episodes": 1, "lessons": 0, "records": 0, "forks": 0,
                                                     "tombstones": 0}
