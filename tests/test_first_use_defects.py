"""Defects a new user met in a first session with neverestctl, each reproduced as the user met it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from neverest.ctl import main

NOW = "2026-03-01T03:00:00Z"
PIP = ["--kind", "error", "--title", "pip install -e .", "--happened", "fails without --no-build-isolation"]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("NEVEREST_HOME", str(home))
    monkeypatch.setenv("NEVEREST_NOW", NOW)
    return home


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _learn_a_lesson(capsys: pytest.CaptureFixture[str]) -> str:
    """An error met in two sessions, and a sleep: one lesson of this memory's own; its hash."""
    for session in ("s1", "s2"):
        assert run(capsys, "remember", *PIP, "--session", session)[0] == 0
    assert run(capsys, "sleep")[0] == 0
    _, out, _ = run(capsys, "lessons", "--json")
    [lesson] = [json.loads(line) for line in out.splitlines()]
    return str(lesson["hash"])


def test_show_and_lessons_agree_that_a_lesson_never_published_is_local(
        home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = _learn_a_lesson(capsys)
    _, out, _ = run(capsys, "lessons", "--json")
    assert json.loads(out)["state"] == "local"
    status, out, _ = run(capsys, "show", target[:8], "--json")
    shown = json.loads(out)
    assert status == 0 and (shown["state"], shown["support"]) == ("local", 0)
    _, out, _ = run(capsys, "show", target[:8])
    assert "state local, support 0" in out and "candidate" not in out


def test_lessons_md_labels_a_received_candidate_as_a_candidate_not_common(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    project, shared = tmp_path / "project", tmp_path / "shared"
    project.mkdir()
    shared.mkdir()
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(mode=0o700)
    b.mkdir(mode=0o700)
    monkeypatch.setenv("NEVEREST_NOW", NOW)
    for session in ("s1", "s2"):
        assert run(capsys, "--home", str(a), "remember", *PIP, "--cwd", str(project), "--session", session)[0] == 0
    assert run(capsys, "--home", str(a), "sleep")[0] == 0
    assert run(capsys, "--home", str(a), "publish", "--project", str(project))[0] == 0
    assert run(capsys, "--home", str(a), "folder", "sync", str(shared))[0] == 0
    assert run(capsys, "--home", str(b), "folder", "sync", str(shared))[0] == 0
    _, out, _ = run(capsys, "--home", str(b), "lessons", "--json")
    assert json.loads(out)["state"] == "candidate"
    markdown = (b / "lessons.md").read_text()
    assert "(received, candidate, strength 0.50, seen 2)" in markdown
    assert "common layer" not in markdown
    # A's own lesson keeps its layer's name.
    assert ", personal layer, strength" in (a / "lessons.md").read_text()


def test_forgetting_an_episode_id_that_names_nothing_is_an_error_and_deletes_nothing(
        home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _learn_a_lesson(capsys)
    _, before, _ = run(capsys, "episodes", "--json")
    status, out, err = run(capsys, "forget", "--episode", "0123456789abcdef")
    assert status == 2 and out == ""
    assert "no episode has the id '0123456789abcdef'" in err and "nothing was forgotten" in err
    assert run(capsys, "episodes", "--json")[1] == before and len(before.splitlines()) == 2
    # An id that names an episode is forgotten as before.
    episode = json.loads(before.splitlines()[0])["id"]
    status, out, _ = run(capsys, "forget", "--episode", episode)
    assert status == 0 and out.startswith("forgot 1 episode(s)")


def test_lessons_has_a_header_row_naming_its_columns(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = _learn_a_lesson(capsys)
    status, out, _ = run(capsys, "lessons")
    header, row = out.splitlines()
    assert status == 0 and header.split() == ["hash", "kind", "strength", "seen", "state", "support", "text"]
    assert row.split()[:6] == [target[:8], "error", "1.00", "2", "local", "0"]
    # Each value sits under its column's name.
    for name, value in (("kind", "error"), ("state", "local"), ("text", "pip install")):
        assert header.index(name) == row.index(value)
    for name, value in (("strength", "1.00"), ("seen", " 2 "), ("support", " 0 ")):
        assert header.index(name) + len(name) == row.index(value) + len(value.rstrip())
    assert run(capsys, "lessons", "--json")[1].startswith("{")  # --json is JSON Lines only


def test_export_into_a_pipe_closed_early_ends_quietly_as_unix_tools_do(
        home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Enough episodes that the export is far bigger than a pipe's buffer (64 KiB).
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps({"kind": "note", "text": f"note {i} " + "x" * 100, "session": "s"}) + "\n"
                              for i in range(2000)))
    assert run(capsys, "remember", "--events", str(events))[0] == 0
    for command in ("export", "episodes --limit 100000", "lessons", "--help"):
        done = subprocess.run(f"{sys.executable} -m neverest.ctl {command} | head -n 1; exit ${{PIPESTATUS[0]}}",
                              shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=60)
        assert done.stderr == "", (command, done.stderr)
        assert done.stdout.count("\n") == 1 and done.returncode in (0, 141), (command, done.returncode)
        if command.startswith(("export", "episodes")):
            assert done.returncode == 141, command
