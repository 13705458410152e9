"""The memory commands as a user runs them: remember, sleep, lessons, recall, with NEVEREST_NOW."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from neverest.ctl import main
from neverest.memory.queries import lessons as lesson_queries
from neverest.memory.store import open_store


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NEVEREST_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir(mode=0o700)  # a named home must exist (only `init` or the default creates one)
    monkeypatch.setenv("NEVEREST_NOW", "2026-03-01T03:00:00Z")
    return tmp_path / "home"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status = main(list(argv))
    return status, capsys.readouterr().out


def jsonl(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


PIP = ["--kind", "error", "--title", "pip install -e .", "--happened", "fails without --no-build-isolation"]


def test_remember_sleep_lessons_recall(home: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    assert run(capsys, "remember", *PIP, "--session", "s1", "--json")[0] == 0
    status, out = run(capsys, "remember", *PIP, "--session", "s1", "--json")
    assert status == 0 and json.loads(out) == {"stored": 0, "duplicates": 1, "refused": []} | {
        k: v for k, v in json.loads(out).items() if k not in ("stored", "duplicates", "refused")}
    assert run(capsys, "remember", *PIP, "--session", "s2")[0] == 0
    assert run(capsys, "remember", "--kind", "correction", "--said", "don't reformat unrelated files",
               "--session", "s3")[0] == 0

    status, out = run(capsys, "sleep", "--json")
    report = json.loads(out)
    assert status == 0 and len(report["learned"]) == 2 and report["started"].startswith("2026-03-01T03:00")

    status, out = run(capsys, "lessons", "--json")
    lessons = jsonl(out)
    assert {lesson["kind"] for lesson in lessons} == {"error", "correction"}
    for lesson in lessons:
        assert {"hash", "kind", "text", "strength", "seen", "state", "origin", "updated"} <= set(lesson)
        assert len(str(lesson["origin"])) == 16
    assert [lesson["kind"] for lesson in jsonl(run(capsys, "lessons", "--json", "--kind", "error")[1])] == ["error"]

    # The rendered files exist and hold the same lessons.
    rendered = [json.loads(line) for line in (home / "lessons.jsonl").read_text().splitlines()]
    assert {r["hash"] for r in rendered} == {lesson["hash"] for lesson in lessons}
    assert {"id", "text", "kind", "seen", "strength", "updated"} <= set(rendered[0])
    markdown = (home / "lessons.md").read_text()
    assert "not instructions" in markdown and "learned here from 2 episode(s)" in markdown
    assert "learned 2 lesson(s)" in (home / "morning.md").read_text()

    status, out = run(capsys, "recall", "pip install build isolation", "-k", "2", "--json")
    hits = jsonl(out)
    assert status == 0 and len(hits) == 2 and "pip install" in str(hits[0]["text"])

    # 100 days later, with no sleep since, the next sleep decays everything 100 days' worth.
    monkeypatch.setenv("NEVEREST_NOW", "2026-06-09T03:00:00Z")
    report = json.loads(run(capsys, "sleep", "--json")[1])
    assert report["decay_days"] == 100


def test_remember_from_events_file_and_stdin(home: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text(
        json.dumps({"kind": "note", "text": "the build uses make", "session": "a"}) + "\n"
        + "{broken\n"
        + json.dumps({"kind": "oops"}) + "\n"
        + json.dumps({"kind": "error", "title": "make", "happened": "no rule", "extra": 1}) + "\n"
    )
    status, out = run(capsys, "remember", "--events", str(events), "--json")
    result = json.loads(out)
    assert status == 1 and result["stored"] == 2 and len(result["refused"]) == 2
    assert "kind" in str(result["refused"][1])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(
        json.dumps({"kind": "surprise", "happened": "port 8080 is taken"}).encode() + b"\n")))
    status, out = run(capsys, "remember", "--events", "-", "--json")
    assert status == 0 and json.loads(out)["stored"] == 1


def test_inbox_is_drained_by_sleep(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home.mkdir(parents=True, exist_ok=True)
    with (home / "inbox.jsonl").open("a") as f:
        f.write(json.dumps({"kind": "correction", "said": "the staging database is read-only"}) + "\n")
    report = json.loads(run(capsys, "sleep", "--json")[1])
    assert report["inbox"]["stored"] == 1 and len(report["learned"]) == 1
    assert json.loads(run(capsys, "sleep", "--json")[1])["inbox"]["stored"] == 0


def test_usage_errors(home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert run(capsys, "remember")[0] == 2
    assert run(capsys, "remember", "--kind", "bogus")[0] == 2
    assert run(capsys, "recall", "x", "-k", "0")[0] == 2
    monkeypatch.setenv("NEVEREST_NOW", "not a time")
    assert main(["lessons"]) == 2
    assert "NEVEREST_NOW" in capsys.readouterr().err


def test_store_locked_by_another_process_is_a_clear_error(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    open_store(home).close()
    (home / "config.toml").write_text("busy_timeout_s = 0.2\n")
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sqlite3, time\n"
         f"db = sqlite3.connect({str(home / 'memory.db')!r}, isolation_level=None)\n"
         "db.execute('BEGIN IMMEDIATE'); print('locked', flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        assert main(["remember", "--kind", "note", "--text", "x"]) == 1
        assert "locked by another process" in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()
    assert main(["remember", "--kind", "note", "--text", "x"]) == 0


def test_kill_9_during_sleep_leaves_a_consistent_store(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from gen_episodes import events  # type: ignore[import-not-found]

    from neverest.clock import parse_time
    from neverest.memory.events import ingest

    now = parse_time("2026-03-01T03:00:00Z")

    def two_kills(home: Path) -> tuple[dict[str, str], int] | None:
        """A store, and two sleeps on it killed with SIGKILL in the middle; None when a sleep finished
        before its kill arrived (the second resumes the first's work and can be quick)."""
        home.mkdir(mode=0o700)
        with open_store(home) as store:
            stored = ingest(store, events(3000, now.replace(month=2), 20, seed=7), now=now).stored
        env = dict(os.environ, NEVEREST_HOME=str(home), NEVEREST_NOW="2026-03-01T03:00:00Z")
        for kills, extra_s in enumerate((0.05, 0.15)):
            child = subprocess.Popen([sys.executable, "-m", "neverest.ctl", "sleep"], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            # Kill it only once it is inside a sleep (its row is written first), however slow
            # this machine is to start Python.
            with open_store(home) as watcher:
                deadline = time.monotonic() + 120
                unfinished = "SELECT count(*) FROM sleeps WHERE finished IS NULL"
                while watcher.db.execute(unfinished).fetchone()[0] < kills + 1:
                    if child.poll() is not None:
                        return None
                    assert time.monotonic() < deadline
                    time.sleep(0.01)
            time.sleep(extra_s)
            child.send_signal(signal.SIGKILL)
            child.wait()
        with open_store(home) as store:
            if store.db.execute("SELECT count(*) FROM sleeps WHERE finished IS NULL").fetchone()[0] != 2:
                return None
        return env, stored

    for attempt in range(4):  # bounded: each try is a fresh store
        home = tmp_path / f"home{attempt}"
        landed = two_kills(home)
        if landed is not None:
            break
    assert landed is not None, "in 4 tries no two kills both landed in the middle of a sleep"
    env, stored = landed
    done = subprocess.run([sys.executable, "-m", "neverest.ctl", "sleep", "--json"], env=env,
                          capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr
    with open_store(home) as store:
        db = store.db
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("SELECT count(*) FROM episodes").fetchone()[0] == stored
        assert db.execute("SELECT count(*) FROM episodes WHERE pending = 1").fetchone()[0] == 0
        assert db.execute("SELECT count(*) FROM episodes WHERE space IS NULL").fetchone()[0] == 0
        # Every lesson's sources point at episodes that name it (or a theme it merged into).
        for (lesson_id,) in db.execute("SELECT id FROM lessons WHERE archived = 0").fetchall():
            for source in lesson_queries.sources(db, lesson_id):
                owner = db.execute("SELECT lesson_id FROM episodes WHERE id = ?", (source,)).fetchone()
                assert owner is not None and owner[0] == lesson_id
        assert db.execute("SELECT count(*) FROM sleeps WHERE finished IS NOT NULL").fetchone()[0] >= 1
