"""neverestctl replay: the hook's own code walks later sessions; a repeat is caught when its lesson came
before it, and the throwaway memory is never the one in NEVEREST_HOME."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neverest.agents.replay import replay
from neverest.ctl import main

CORPUS = Path(__file__).parent / "data" / "sessions"
SYNTAX = "/bin/bash: eval: line 1: syntax error near unexpected token `('"


def line(kind: str, content: object, sid: str, at: str, mid: str = "") -> str:
    message: dict[str, object] = {"role": kind, "content": content}
    if mid:
        message["id"] = mid
    return json.dumps({"type": kind, "sessionId": sid, "cwd": "/home/ann/src/web", "timestamp": at,
                       "message": message})


def session(sid: str, day: int) -> list[str]:
    at = f"2026-11-{day:02d}T10:%02d:00.000Z"
    page = "apps/web/app/(protected)/settings"
    return [
        line("user", "show me the settings pages", sid, at % 0),
        line("assistant", [{"type": "tool_use", "id": f"{sid}a", "name": "Bash", "input": {"command": f"ls {page}"}}],
             sid, at % 1, mid=f"{sid}1"),
        line("user", [{"type": "tool_result", "tool_use_id": f"{sid}a", "content": f"Exit code 2\n{SYNTAX}",
                       "is_error": True}], sid, at % 2),
        line("assistant", [{"type": "tool_use", "id": f"{sid}b", "name": "Bash", "input": {"command": "git status"}}],
             sid, at % 3, mid=f"{sid}2"),
        line("user", [{"type": "tool_result", "tool_use_id": f"{sid}b", "content": "On branch main"}], sid, at % 4),
        line("assistant", [{"type": "tool_use", "id": f"{sid}c", "name": "Bash",
                            "input": {"command": f"ls '{page}'"}}], sid, at % 5, mid=f"{sid}3"),
        line("user", [{"type": "tool_result", "tool_use_id": f"{sid}c", "content": "page.tsx"}], sid, at % 6),
    ]


def test_a_lesson_given_before_the_repeat_catches_it(tmp_path: Path) -> None:
    root = tmp_path / "claude" / "-home-ann-src-web"
    root.mkdir(parents=True)
    for sid, day in (("s1", 1), ("s2", 1), ("s3", 3)):
        (root / f"{sid}.jsonl").write_text("".join(x + "\n" for x in session(sid, day)))
    report = replay(tmp_path / "claude", None)
    assert report.sessions == 3 and report.lessons == 1
    # Day 3 repeats the mistake; the lesson came with the first `ls` of the route group, before the error.
    assert (report.repeats, report.memory.caught, report.memory.missed) == (1, 1, 0)
    # Given once (before the first ls) and not for `git status`: one injection, and it was used.
    assert (report.memory.injections, report.memory.unused) == (1, 0)
    assert report.baseline.injections >= 1


def test_replay_on_the_public_corpus_prints_a_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("NEVEREST_HOME", str(home))
    assert main(["replay", "--claude", str(CORPUS / "claude" / "projects"),
                 "--codex", str(CORPUS / "codex" / "sessions"), "--json"]) == 0
    out = capsys.readouterr().out.splitlines()
    figures = json.loads(out[-1])
    for key in ("sessions", "repeats", "caught", "missed", "injections", "unused"):
        assert isinstance(figures[key], int)
    assert set(figures["baseline"]) >= {"caught", "missed", "injections", "unused"}
    assert figures["sessions"] >= 12 and figures["caught"] + figures["missed"] == figures["repeats"]
    assert "caught" in out[1] or "caught" in "\n".join(out)
    assert list(home.iterdir()) == []  # the memory in NEVEREST_HOME was not touched


def test_replay_refuses_a_folder_that_is_not_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--claude", str(tmp_path / "nope")]) == 2
    assert "not a folder" in capsys.readouterr().err
