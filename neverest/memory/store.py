"""The memory's SQLite store, shared by neverestd and short-lived neverestctl processes.

WAL mode lets readers run while one process writes; ``busy_timeout`` makes a
writer wait a bounded time for the lock and then fail with ``StoreBusy`` and a
clear message instead of hanging.  ``synchronous=FULL`` makes every committed
transaction durable, so an acknowledged write survives kill -9 and power loss.

Every write goes through ``Store.write()``, a ``BEGIN IMMEDIATE`` transaction:
taking the write lock up front means a transaction never fails half-way on a
lock upgrade, and a crash at any point leaves either all of it or none.

``secure_delete`` is on: deleted content is overwritten, so forgetting an episode
(forget.py) does not leave its text in free space.

This module, ``holdings.py``, ``peers/table.py`` and the ``queries`` package are the
only ones that run SQL; they return typed rows (tests/test_store_layer.py).

The schema carries its version in ``PRAGMA user_version`` and migrates forward
one step at a time (``MIGRATIONS[i]`` takes version i to i+1), so a store made
by any release opens in every later one; a store from a *newer* release is
refused rather than misread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from neverest.paths import STORE_FILE, ensure_home

DEFAULT_BUSY_TIMEOUT_S: Final = 5.0
# The page cache of a read that passes over many pages once (``Store.passing_over``): enough for the
# B-tree's inner pages and a few leaves.
PASS_CACHE_KIB: Final = 256

# Version 1.  Column notes:
# - episodes.id is a hash of (agent, session, kind, key) where key is the event's
#   title, or its main text when it has none (events.py), so an event is stored once.
# - episodes.pending is 1 until the consolidation pass has considered the episode:
#   sleep work is proportional to what is new, not to the size of the store.
# - embeddings are float32 vectors as bytes, tagged with the space they live in.
# - lessons.origin is '' for this memory's own lessons, else the publishing origin;
#   lessons.centroid is the mean of the source episodes' vectors, so that the mean
#   cosine of an episode with a lesson's sources is one dot product.
# - records keeps every valid wire record exactly as received (sharing, PROTOCOL.md §9).
_SCHEMA_V1: Final = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE episodes (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    agent TEXT NOT NULL DEFAULT '',
    session TEXT NOT NULL DEFAULT '',
    cwd TEXT NOT NULL DEFAULT '',
    title TEXT NOT NULL DEFAULT '',
    said TEXT NOT NULL DEFAULT '',
    agent_did TEXT NOT NULL DEFAULT '',
    expected TEXT NOT NULL DEFAULT '',
    happened TEXT NOT NULL DEFAULT '',
    text TEXT NOT NULL DEFAULT '',
    gist TEXT NOT NULL,
    at TEXT NOT NULL,
    created TEXT NOT NULL,
    strength REAL NOT NULL DEFAULT 1.0,
    recalls INTEGER NOT NULL DEFAULT 0,
    last_touched TEXT,
    archived INTEGER NOT NULL DEFAULT 0,
    pending INTEGER NOT NULL DEFAULT 1,
    lesson_id INTEGER,
    space TEXT,
    embedding BLOB
);
CREATE INDEX episodes_pending ON episodes(pending) WHERE pending = 1;
CREATE INDEX episodes_kind_at ON episodes(kind, at);
CREATE INDEX episodes_unembedded ON episodes(space);
-- Covers recall's scan, so it reads ~150 bytes per episode instead of whole rows.
CREATE INDEX episodes_recall ON episodes(archived, space, strength, at, embedding);
CREATE TABLE lessons (
    id INTEGER PRIMARY KEY,
    hash TEXT NOT NULL,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    cwd TEXT NOT NULL DEFAULT '',
    strength REAL NOT NULL,
    seen INTEGER NOT NULL,
    sources TEXT NOT NULL DEFAULT '[]',
    created TEXT NOT NULL,
    updated TEXT NOT NULL,
    origin TEXT NOT NULL DEFAULT '',
    origins TEXT NOT NULL DEFAULT '[]',
    layer TEXT NOT NULL DEFAULT 'personal',
    archived INTEGER NOT NULL DEFAULT 0,
    space TEXT,
    embedding BLOB,
    centroid BLOB
);
CREATE INDEX lessons_hash ON lessons(hash);
CREATE TABLE predictions (
    id INTEGER PRIMARY KEY,
    lesson_id INTEGER NOT NULL,
    text TEXT NOT NULL,
    made TEXT NOT NULL,
    resolved TEXT,
    outcome TEXT,
    episode_id TEXT,
    space TEXT,
    embedding BLOB
);
CREATE INDEX predictions_open ON predictions(lesson_id) WHERE resolved IS NULL;
CREATE TABLE aliases (old INTEGER NOT NULL, new INTEGER NOT NULL, at TEXT NOT NULL, created TEXT NOT NULL);
CREATE TABLE sleeps (id INTEGER PRIMARY KEY, started TEXT NOT NULL, finished TEXT, report TEXT);
CREATE TABLE records (
    id INTEGER PRIMARY KEY,
    origin TEXT NOT NULL,
    seq INTEGER,
    type TEXT NOT NULL,
    target TEXT NOT NULL,
    raw BLOB NOT NULL,
    source TEXT NOT NULL,
    received TEXT NOT NULL
);
CREATE INDEX records_origin_seq ON records(origin, seq);
CREATE INDEX records_origin_target ON records(origin, target);
CREATE INDEX records_target ON records(target);
CREATE TABLE peers (
    origin TEXT PRIMARY KEY,
    addresses TEXT NOT NULL DEFAULT '[]',
    source TEXT NOT NULL,
    last_seen TEXT,
    score REAL NOT NULL DEFAULT 0
);
"""

# Version 2: sharing.
# - records gains the record's signed time, a digest of its bytes (one row per distinct
#   record), and whether a newer version from the same origin superseded it;
# - forks keeps the evidence when one origin signs two different records with one seq;
# - tombstones stop a removed or revoked lesson from coming back by a slower path;
# - refusals counts what was refused, by source and reason;
# - projects lists the projects whose lessons the owner publishes;
# - peer_addresses holds where peers can be reached (a URL is known before its origin is:
#   `peer add URL` works while the peer is offline), with failures and back-off.
_SCHEMA_V2: Final = """
ALTER TABLE records ADD COLUMN at TEXT NOT NULL DEFAULT '';
ALTER TABLE records ADD COLUMN digest TEXT;
ALTER TABLE records ADD COLUMN superseded INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX records_digest ON records(digest);
CREATE UNIQUE INDEX records_origin_seq_once ON records(origin, seq);
CREATE TABLE forks (
    origin TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kept_digest TEXT NOT NULL,
    other_raw BLOB NOT NULL,
    source TEXT NOT NULL,
    received TEXT NOT NULL,
    PRIMARY KEY (origin, seq, kept_digest)
);
CREATE TABLE tombstones (hash TEXT PRIMARY KEY, state TEXT NOT NULL, at TEXT NOT NULL);
CREATE TABLE refusals (
    source TEXT NOT NULL,
    reason TEXT NOT NULL,
    count INTEGER NOT NULL,
    last TEXT NOT NULL,
    PRIMARY KEY (source, reason)
);
CREATE TABLE projects (path TEXT PRIMARY KEY, corrections INTEGER NOT NULL DEFAULT 0, since TEXT NOT NULL);
CREATE TABLE peer_addresses (
    url TEXT PRIMARY KEY,
    origin TEXT,
    source TEXT NOT NULL,
    added TEXT NOT NULL,
    last_seen TEXT,
    last_error TEXT,
    failures INTEGER NOT NULL DEFAULT 0,
    ignored_until TEXT
);
CREATE INDEX peer_addresses_origin ON peer_addresses(origin);
"""

# Version 3: sets are tables with keys.
# - lesson_origins: the origins counted once each as support for a lesson, one row per origin
#   (was the JSON list lessons.origins);
# - lesson_sources: the episodes a lesson was learned from, one row per episode (was the JSON
#   list lessons.sources), indexed by episode so that forgetting an episode finds its lessons;
# - peers.addresses, a JSON list nothing read since peer_addresses replaced it, is dropped.
# The JSON lists are converted to rows in the migration's transaction, so every store keeps them.
_SCHEMA_V3: Final = """
CREATE TABLE lesson_origins (
    lesson_id INTEGER NOT NULL,
    origin TEXT NOT NULL,
    PRIMARY KEY (lesson_id, origin)
) WITHOUT ROWID;
CREATE TABLE lesson_sources (
    lesson_id INTEGER NOT NULL,
    episode_id TEXT NOT NULL,
    PRIMARY KEY (lesson_id, episode_id)
) WITHOUT ROWID;
CREATE INDEX lesson_sources_episode ON lesson_sources(episode_id);
INSERT OR IGNORE INTO lesson_origins (lesson_id, origin)
    SELECT l.id, CAST(j.value AS TEXT) FROM lessons l, json_each(l.origins) j;
INSERT OR IGNORE INTO lesson_sources (lesson_id, episode_id)
    SELECT l.id, CAST(j.value AS TEXT) FROM lessons l, json_each(l.sources) j;
ALTER TABLE lessons DROP COLUMN origins;
ALTER TABLE lessons DROP COLUMN sources;
ALTER TABLE peers DROP COLUMN addresses
"""

# Version 4: what the agents' hooks injected (neverest/agents/hook.py), so that a measure can
# compare sessions that were given lessons with sessions held out.
# - hook_sessions: one row per agent session the hook saw, with whether it is held out (a held-out
#   session is given nothing) and when and where it was first seen;
# - injections: one row per (session, lesson hash): the lesson was given to the session (held_out 0)
#   or would have been had the session not been held out (held_out 1), at which hook event and when.
#   The key makes "at most once per session" a property of the table;
# - lesson_states: the commons state of a lesson as last judged for the hook, with when: judging
#   needs the records and the trust policy, too slow to redo on every prompt, and a state moves
#   on the scale of days.
_SCHEMA_V4: Final = """
CREATE TABLE hook_sessions (
    session TEXT PRIMARY KEY,
    held_out INTEGER NOT NULL,
    cwd TEXT NOT NULL DEFAULT '',
    first TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE injections (
    session TEXT NOT NULL,
    lesson TEXT NOT NULL,
    event TEXT NOT NULL,
    at TEXT NOT NULL,
    held_out INTEGER NOT NULL,
    PRIMARY KEY (session, lesson)
) WITHOUT ROWID;
CREATE INDEX injections_at ON injections(at);
CREATE TABLE lesson_states (
    hash TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    support INTEGER NOT NULL,
    judged TEXT NOT NULL
) WITHOUT ROWID
"""

# Version 5: the storage budget (memory/budget.py, memory/admission.py).
# - declined: origins this memory chose not to hold (over its budget for records received), with
#   the head (seq and record digest) it was offered or held of them and until when the choice
#   holds: gossip shows that head in the digest, so peers do not send the origin again and again.
# - received_usage: bytes and records held by origin and by the peer that delivered them (every
#   folder file counts as the one peer "folder"), kept by triggers on records (since v6 inserts are
#   added by holdings.put, one statement per batch and origin) so that the budget reads a row per
#   origin instead of summing every record for every batch it screens.  ``last`` is when the
#   latest of them arrived (a delete leaves it: it orders evictions, nothing more).
_PEER_OF_SOURCE: Final = "CASE WHEN {0}.source LIKE 'folder:%' THEN 'folder' ELSE {0}.source END"
_SCHEMA_V5: Final = f"""
CREATE TABLE declined (
    origin TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    digest TEXT NOT NULL,
    until TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX declined_until ON declined(until);
CREATE TABLE received_usage (
    origin TEXT NOT NULL,
    peer TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    records INTEGER NOT NULL,
    last TEXT NOT NULL,
    PRIMARY KEY (origin, peer)
) WITHOUT ROWID;
INSERT INTO received_usage (origin, peer, bytes, records, last)
    SELECT origin, {_PEER_OF_SOURCE.format("records")}, sum(length(raw)), count(*), max(received)
    FROM records GROUP BY 1, 2;
CREATE TRIGGER records_usage_in AFTER INSERT ON records BEGIN
    INSERT INTO received_usage (origin, peer, bytes, records, last)
    VALUES (NEW.origin, {_PEER_OF_SOURCE.format("NEW")}, length(NEW.raw), 1, NEW.received)
    ON CONFLICT(origin, peer) DO UPDATE SET bytes = bytes + excluded.bytes, records = records + 1,
        last = max(last, excluded.last);
END;
CREATE TRIGGER records_usage_out AFTER DELETE ON records BEGIN
    UPDATE received_usage SET bytes = bytes - length(OLD.raw), records = records - 1
        WHERE origin = OLD.origin AND peer = {_PEER_OF_SOURCE.format("OLD")};
    DELETE FROM received_usage WHERE origin = OLD.origin AND records <= 0;
END
"""

# Version 6: ``received_usage`` is added to by ``holdings.put`` (one statement per origin and peer
# for a batch of records, ``holdings.Usage``) instead of a trigger run for every record stored,
# which cost about a fifth of receiving a record.  Deletes still go through the trigger.
_SCHEMA_V6: Final = "DROP TRIGGER records_usage_in"

# Version 7: what an episode read from a session adds (PROTOCOL.md §6): ``worked``, the call that
# succeeded after a failed one, and ``reaction``, how the person corrected the agent.
_SCHEMA_V7: Final = """
ALTER TABLE episodes ADD COLUMN worked TEXT NOT NULL DEFAULT '';
ALTER TABLE episodes ADD COLUMN reaction TEXT NOT NULL DEFAULT ''
"""

# Version 8: full-text indexes (FTS5, trigram: a word matches inside a longer identifier, "module" in
# ModuleNotFoundError) over the episodes' gists and the lessons' texts, kept by triggers, for recall's and the
# hook's key-term matching with BM25.  External content: the text is stored once, in its own table.
_SCHEMA_V8: Final = """
CREATE VIRTUAL TABLE episodes_fts USING fts5(gist, content='episodes', content_rowid='rowid', tokenize='trigram');
CREATE TRIGGER episodes_fts_in AFTER INSERT ON episodes BEGIN
    INSERT INTO episodes_fts(rowid, gist) VALUES (NEW.rowid, NEW.gist);
END;
CREATE TRIGGER episodes_fts_out AFTER DELETE ON episodes BEGIN
    INSERT INTO episodes_fts(episodes_fts, rowid, gist) VALUES ('delete', OLD.rowid, OLD.gist);
END;
CREATE TRIGGER episodes_fts_up AFTER UPDATE OF gist ON episodes BEGIN
    INSERT INTO episodes_fts(episodes_fts, rowid, gist) VALUES ('delete', OLD.rowid, OLD.gist);
    INSERT INTO episodes_fts(rowid, gist) VALUES (NEW.rowid, NEW.gist);
END;
CREATE VIRTUAL TABLE lessons_fts USING fts5(text, content='lessons', content_rowid='id', tokenize='trigram');
CREATE TRIGGER lessons_fts_in AFTER INSERT ON lessons BEGIN
    INSERT INTO lessons_fts(rowid, text) VALUES (NEW.id, NEW.text);
END;
CREATE TRIGGER lessons_fts_out AFTER DELETE ON lessons BEGIN
    INSERT INTO lessons_fts(lessons_fts, rowid, text) VALUES ('delete', OLD.id, OLD.text);
END;
CREATE TRIGGER lessons_fts_up AFTER UPDATE OF text ON lessons BEGIN
    INSERT INTO lessons_fts(lessons_fts, rowid, text) VALUES ('delete', OLD.id, OLD.text);
    INSERT INTO lessons_fts(rowid, text) VALUES (NEW.id, NEW.text);
END;
INSERT INTO episodes_fts(episodes_fts) VALUES ('rebuild');
INSERT INTO lessons_fts(lessons_fts) VALUES ('rebuild')
"""

# Version 9: the origins the owner named (``neverestctl trust add``, memory/queries/trust.py): they count
# as support under every trust policy and are pre-trusted under ``earned``, like ``trust_allow`` in the
# config, which stays read-only to the command.  Kept here, not in config.toml, so that a running daemon
# reads them at its next commons pass, and with the owner's note and when it was added.
_SCHEMA_V9: Final = """
CREATE TABLE trusted (
    origin TEXT PRIMARY KEY,
    note TEXT NOT NULL DEFAULT '',
    added TEXT NOT NULL
) WITHOUT ROWID
"""

# Version 10: fewer indexes on ``records``, which every record stored pays for: an index over hashes
# takes each new entry on a page of its own, and that page is written again at the commit.
# ``records_origin_seq`` repeated the unique ``records_origin_seq_once``; ``records_origin_target``
# and ``records_target`` become one index on (target, origin), which answers ``target = ?`` and
# ``origin = ? AND target = ?`` alike (the query plans of every statement on ``records`` the tests
# run were compared: none scans where it searched before).
_SCHEMA_V10: Final = """
DROP INDEX records_origin_seq;
DROP INDEX records_origin_target;
DROP INDEX records_target;
CREATE INDEX records_target_origin ON records(target, origin)
"""

# Version 11: ``lessons.create`` puts a new lesson's text into ``lessons_fts`` itself, in a statement of its
# own, instead of a trigger.  A trigger makes SQLite open a statement savepoint for each INSERT INTO
# lessons, and FTS5 (SQLite 3.40) writes its pending terms to disk as a new segment at every savepoint:
# 43 µs a lesson, against 9 for the same two inserts without the trigger (20 000 lessons, 2 000 a
# transaction).  A pull of a peer's lessons creates one per record it has not met.  The update and
# delete triggers stay: archiving and editing a lesson are rare.
_SCHEMA_V11: Final = "DROP TRIGGER lessons_fts_in"

MIGRATIONS: Final[tuple[str, ...]] = (_SCHEMA_V1, _SCHEMA_V2, _SCHEMA_V3, _SCHEMA_V4, _SCHEMA_V5, _SCHEMA_V6,
                                      _SCHEMA_V7, _SCHEMA_V8, _SCHEMA_V9, _SCHEMA_V10, _SCHEMA_V11)
SCHEMA_VERSION: Final = len(MIGRATIONS)


class StoreError(Exception):
    """The store cannot be used; the message says why and what to do."""


class StoreBusy(StoreError):
    """Another process held the write lock for longer than the busy timeout."""


class Store:
    """One connection to memory.db.  Not shared between threads."""

    def __init__(self, path: Path, *, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> None:
        self.path = path
        self.busy_timeout_s = busy_timeout_s
        # isolation_level=None: we issue BEGIN/COMMIT ourselves (see write()).
        self.db = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None,
                                  check_same_thread=False)
        try:
            self.db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            self.db.execute("PRAGMA journal_mode = WAL")
            self.db.execute("PRAGMA synchronous = FULL")
            self.db.execute("PRAGMA foreign_keys = ON")
            # Deleted content is overwritten, not left in free pages: forget (forget.py) must
            # really remove an episode's text, including copies left behind when rows move.
            self.db.execute("PRAGMA secure_delete = ON")
            self._migrate()
        except sqlite3.OperationalError as exc:
            self.db.close()
            raise self._explain(exc) from None
        except BaseException:
            self.db.close()
            raise

    def _explain(self, exc: sqlite3.OperationalError) -> StoreError:
        if "locked" in str(exc) or "busy" in str(exc):
            return StoreBusy(
                f"the store {self.path} stayed locked by another process for {self.busy_timeout_s:g} s; "
                "a sleep or a large import may be running: try again shortly"
            )
        return StoreError(f"cannot use the store {self.path}: {exc}")

    def _migrate(self) -> None:
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"the store {self.path} has schema version {version}, made by a newer Neverest "
                f"(this one knows up to {SCHEMA_VERSION}); upgrade Neverest to open it"
            )
        while version < SCHEMA_VERSION:
            with self.write() as db:
                # Re-read under the write lock: another process may have migrated meanwhile.
                version = db.execute("PRAGMA user_version").fetchone()[0]
                if version >= SCHEMA_VERSION:
                    break
                for statement in statements(MIGRATIONS[version]):
                    db.execute(statement)
                version += 1
                db.execute(f"PRAGMA user_version = {version}")

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction: committed on normal exit, rolled back on any exception."""
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise self._explain(exc) from None
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        try:
            self.db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            self.db.execute("ROLLBACK")
            raise self._explain(exc) from None

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: every read inside it sees one snapshot, while writers go on (WAL)."""
        self.db.execute("BEGIN DEFERRED")
        try:
            yield self.db
        finally:
            self.db.execute("COMMIT")

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        value = meta_value(self.db, key)
        return default if value is None else value

    @staticmethod
    def set_meta(db: sqlite3.Connection, key: str, value: str) -> None:
        """Set a meta value inside an open write transaction."""
        db.execute("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                   (key, value))

    def set_meta_if_free(self, key: str, value: str, *, wait_ms: int = 50) -> bool:
        """Set a meta value that is only a cache: waits ``wait_ms`` at most for another writer, and
        says whether it was written (a store busy that long, or read-only, is left as it is)."""
        timeout_ms = int(self.db.execute("PRAGMA busy_timeout").fetchone()[0])
        self.db.execute(f"PRAGMA busy_timeout = {int(wait_ms)}")
        try:
            with self.write() as db:
                Store.set_meta(db, key, value)
            return True
        except (StoreError, sqlite3.Error):
            return False
        finally:
            self.db.execute(f"PRAGMA busy_timeout = {timeout_ms}")

    def data_version(self) -> tuple[int, int]:
        """Changes when any connection commits: ``data_version`` moves when another connection
        commits, ``total_changes`` when this one writes."""
        return int(self.db.execute("PRAGMA data_version").fetchone()[0]), self.db.total_changes

    @contextmanager
    def passing_over(self) -> Iterator[None]:
        """For reads inside that pass over many pages once, on a connection that lives long: its page
        cache is held to ``PASS_CACHE_KIB`` meanwhile, then given back its size.  A cache fills up to
        ``cache_size`` (about 2 MB by default) and keeps its pages allocated until the connection
        closes; pages read once would stay resident for nothing, and a scan larger than the cache
        misses on every page whatever its size (the gossip view's rebuild: measured no slower)."""
        size = int(self.db.execute("PRAGMA cache_size").fetchone()[0])
        self.db.execute(f"PRAGMA cache_size = -{PASS_CACHE_KIB}")
        try:
            yield
        finally:
            self.db.execute(f"PRAGMA cache_size = {size}")

    def vacuum(self) -> None:
        """Rebuild the database file, so that no page keeps a stale copy of deleted content (rows a
        store moved before ``secure_delete`` was on, in schema version 2 and earlier, may have left
        one in a page's unused space)."""
        try:
            self.db.execute("VACUUM")
        except sqlite3.OperationalError as exc:
            raise self._explain(exc) from None
        # VACUUM may renumber the rowids of a table without an INTEGER PRIMARY KEY (episodes): the index
        # of their gists is rebuilt on the new ones.
        with self.write() as db:
            db.execute("INSERT INTO episodes_fts(episodes_fts) VALUES ('rebuild')")

    def checkpoint_truncate(self) -> bool:
        """Copy the WAL into the database and truncate it to zero bytes, so that content deleted
        since is no longer in the WAL either.  False when a reader kept it from completing."""
        busy, _, _ = self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return not busy

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def statements(script: str) -> list[str]:
    """A script's statements, each whole (a trigger's body holds semicolons of its own)."""
    out: list[str] = []
    part = ""
    for piece in script.split(";"):
        part += piece + ";"
        if sqlite3.complete_statement(part):
            if part.strip(" \n;"):
                out.append(part)
            part = ""
    if part.strip(" \n;"):
        out.append(part)
    return out


def meta_value(db: sqlite3.Connection, key: str) -> str | None:
    """A meta value, read on ``db`` (inside the caller's transaction when one is open)."""
    row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def schema_version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def open_read_only(path: Path, *, busy_timeout_s: float) -> sqlite3.Connection:
    """A read-only connection that creates and migrates nothing (``neverestctl doctor`` changes nothing)."""
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=busy_timeout_s)
    db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
    return db


def integrity_problems(db: sqlite3.Connection, *, limit: int = 5) -> list[str]:
    """SQLite's quick check: ``[]`` when the file is sound, else up to ``limit`` problems."""
    found = [str(row[0]) for row in db.execute(f"PRAGMA quick_check({int(limit)})")]
    return [] if found == ["ok"] else found


def open_store(home: Path, *, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> Store:
    """The store in ``home``, created and migrated as needed."""
    return Store(ensure_home(home) / STORE_FILE, busy_timeout_s=busy_timeout_s)
