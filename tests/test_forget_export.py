"""forget: episodes gone from the store, the recall index and the bytes on disk; export: the owner's
data as JSON Lines, every table, never the key."""

from __future__ import annotations

import argparse
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nacl.signing
import pytest

from neverest.clock import iso
from neverest.commands.common import UsageError
from neverest.config import Config
from neverest.ctl import build_parser, runner
from neverest.identity import load_or_create
from neverest.memory import publish
from neverest.memory.embed import HashedEmbedder
from neverest.memory.events import ingest
from neverest.memory.export import export
from neverest.memory.forget import forget
from neverest.memory.queries import episodes, lessons
from neverest.memory.recall import recall
from neverest.memory.receive import receive
from neverest.memory.sleep import sleep
from neverest.memory.store import Store, open_store
from neverest.paths import KEY_FILE, STORE_FILE
from neverest.peers import table as peer_table
from neverest.records import sign_lesson

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
T1 = T0 + timedelta(days=3)
SECRET = "zanzibar7 quokka-password"  # appears only in the episodes of session "s1"


def _events() -> list[dict[str, str]]:
    return [
        {"kind": "note", "text": f"the deploy token is {SECRET}", "session": "s1", "at": iso(T0)},
        {"kind": "error", "title": "pip install fails", "happened": "without --no-build-isolation",
         "agent_did": f"typed {SECRET} into the prompt", "session": "s1", "at": iso(T0)},
        {"kind": "error", "title": "pip install fails", "happened": "without --no-build-isolation",
         "session": "s2", "at": iso(T1)},
        {"kind": "note", "text": "the person prefers tabs for indentation", "session": "s2", "at": iso(T1)},
    ]


def _filled(home: Path) -> Store:
    store = open_store(home)
    assert ingest(store, _events(), now=T1).stored == 4
    report = sleep(store, now=T1, embedder=HashedEmbedder(), config=Config())
    assert len(report.learned) == 1  # the two pip errors: one lesson with a source in each session
    return store


def _on_disk(home: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (home / STORE_FILE, home / f"{STORE_FILE}-wal") if p.exists())


def _ids(store: Store, session: str) -> list[str]:
    return episodes.select_ids(store.db, session=session)


@pytest.mark.parametrize("selector", ["episode", "session", "before"])
def test_forget_removes_the_episodes_from_store_recall_and_disk(tmp_path: Path, selector: str) -> None:
    store = _filled(tmp_path)
    s1 = _ids(store, "s1")
    [lesson_id] = [r.id for r in lessons.rows(store.db)]
    assert len(s1) == 2 and len(set(s1) & set(lessons.sources(store.db, lesson_id))) == 1
    assert SECRET.encode() in _on_disk(tmp_path)
    assert any(h.type == "episode" for h in recall(store, SECRET, now=T1, embedder=HashedEmbedder(), touch=False))
    # A prediction resolved by a forgotten episode goes with it.
    with store.write() as db:
        db.execute("INSERT INTO predictions (lesson_id, text, made, resolved, outcome, episode_id) "
                   "VALUES (?, 'p', ?, ?, 'confirmed', ?)", (lesson_id, iso(T0), iso(T1), s1[1]))

    if selector == "episode":
        for episode_id in s1:
            forget(store, episode=episode_id)
    elif selector == "session":
        result = forget(store, session="s1")
        assert (result.episodes, result.lesson_sources, result.predictions) == (2, 1, 1)
        assert result.wal_truncated
    else:
        result = forget(store, before=T0 + timedelta(days=1))
        assert result.episodes == 2

    assert not any(episodes.exists(store.db, e) for e in s1)
    assert _ids(store, "s2") and len(_ids(store, "s2")) == 2  # the others stay
    assert set(lessons.sources(store.db, lesson_id)).isdisjoint(s1)
    assert store.db.execute("SELECT count(*) FROM predictions WHERE episode_id IN (?, ?)", s1).fetchone()[0] == 0
    hits = recall(store, SECRET, now=T1, embedder=HashedEmbedder(), touch=False)
    assert not any(h.id in s1 for h in hits)
    assert all(SECRET not in h.text for h in hits)
    # Checked while the store is still open: closing the last connection would empty the WAL anyway.
    assert SECRET.encode() not in _on_disk(tmp_path)
    store.close()
    assert SECRET.encode() not in _on_disk(tmp_path)


def test_forget_takes_exactly_one_selector(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        with pytest.raises(ValueError):
            forget(store)
        with pytest.raises(ValueError):
            forget(store, episode="x", session="y")


def _parser() -> argparse.ArgumentParser:
    return build_parser()


def _run(home: Path, *argv: str) -> int:
    args = _parser().parse_args(["--home", str(home), *argv])
    result: int = runner(args.func)(args)
    return result


def test_the_forget_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _filled(tmp_path).close()
    with pytest.raises(UsageError, match="no episode is of the session 'nobody'"):
        _run(tmp_path, "forget", "--session", "nobody")  # forgets nothing, and renders the files as they stand
    assert "learned here from 2 episode(s)" in (tmp_path / "lessons.md").read_text()
    capsys.readouterr()
    for bad in ([], ["--session", "s1", "--before", "2026-03-03"]):
        with pytest.raises(UsageError):
            _run(tmp_path, "forget", *bad)
    with pytest.raises(UsageError):
        _run(tmp_path, "forget", "--before", "yesterday")
    assert _run(tmp_path, "forget", "--before", "2026-03-03", "--json") == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 2
    assert SECRET.encode() not in _on_disk(tmp_path)
    rendered = (tmp_path / "lessons.md").read_text()  # rendered again after forgetting
    assert "learned here from 1 episode(s)" in rendered and SECRET not in rendered
    with open_store(tmp_path) as store:
        assert _ids(store, "s1") == [] and len(_ids(store, "s2")) == 2


def test_export_has_every_table_and_never_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  other_key: nacl.signing.SigningKey) -> None:
    store = _filled(tmp_path)
    identity = load_or_create(tmp_path)
    publish.opt_in(store, tmp_path, corrections=False, now=T1)
    record = sign_lesson(other_key, kind="error", text="the CI runner has no network access", seen=2,
                         strength=1.0, updated=iso(T1), seq=1)
    assert receive(store, [record.raw], source="test", own_origin=identity.origin, config=Config(),
                   now=T1).candidates == 1
    with store.write() as db:
        peer_table.add(db, "http://192.0.2.7:7428", source="manual", now=T1)
    items = list(export(store))
    store.close()

    by_type: dict[str, list[dict[str, object]]] = {}
    for item in items:
        by_type.setdefault(str(item["type"]), []).append(item)
    assert set(by_type) == {"store", "episode", "lesson", "prediction", "project", "peer"}
    assert len(by_type["episode"]) == 4 and {e["session"] for e in by_type["episode"]} == {"s1", "s2"}
    own, received = sorted(by_type["lesson"], key=lambda lesson: str(lesson["origin"]))
    assert own["origins"] == [] and len(own["sources"]) == 2  # type: ignore[arg-type]
    assert received["origins"] == [record.origin] and received["sources"] == []
    assert by_type["project"][0]["path"] == str(tmp_path.resolve())
    assert by_type["peer"][0]["url"] == "http://192.0.2.7:7428"

    assert _run(tmp_path, "export") == 0
    out = capsys.readouterr().out
    assert [json.loads(line) for line in out.splitlines()] == json.loads(json.dumps(items))
    seed = (tmp_path / KEY_FILE).read_text().strip()
    assert len(seed) == 64 and seed not in out and seed.upper() not in out
    assert _run(tmp_path, "export", "--output", str(tmp_path / "out.jsonl"), "--json") == 0
    assert json.loads(capsys.readouterr().out)["lines"] == len(items)
    assert (tmp_path / "out.jsonl").read_text() == out
    assert os.stat(tmp_path / "out.jsonl").st_mode & 0o077 == 0
