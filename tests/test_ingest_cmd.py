"""``neverestctl ingest`` and ``neverestctl episodes`` as the owner runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neverest.ctl import main
from tests.test_transcripts import claude_session, codex_session, write

NOW = "2026-12-01T06:00:00Z"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NEVEREST_NOW", NOW)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    path = tmp_path / "home"
    path.mkdir(mode=0o700)
    return path


def run(home: Path, *argv: str) -> int:
    return main([*argv[:1], "--home", str(home), *argv[1:]])


def test_ingest_then_episodes(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "claude" / "-home-ann-shop" / "sess-1.jsonl", claude_session())
    write(tmp_path / "codex" / "2026" / "11" / "30" / "rollout-x.jsonl", codex_session())
    assert run(home, "ingest", "--claude", str(tmp_path / "claude"), "--codex", str(tmp_path / "codex"),
               "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["files"] == 2 and report["stored"] == 9 and report["lines"]["unknown"] == 1
    assert run(home, "ingest", "--claude", str(tmp_path / "claude"), "--codex", str(tmp_path / "codex")) == 0
    assert "0 episodes stored" in capsys.readouterr().out

    assert run(home, "episodes", "--json") == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 9 and {r["agent"] for r in rows} == {"claude-code", "codex"}
    assert run(home, "episodes", "--kind", "error", "--session", "sess-1") == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and "Bash: pytest" in out[0] and "ModuleNotFoundError" in out[0]
    assert run(home, "episodes", "--since", "2026-11-30T11:00:00", "--json") == 0
    assert {json.loads(line)["agent"] for line in capsys.readouterr().out.splitlines()} == {"codex"}

    # What the owner sees, the owner can forget; it is not ingested again.
    assert run(home, "forget", "--session", "sess-1") == 0
    assert run(home, "ingest", "--claude", str(tmp_path / "claude"), "--codex", str(tmp_path / "codex")) == 0
    capsys.readouterr()
    assert run(home, "episodes", "--session", "sess-1") == 0
    assert capsys.readouterr().out.strip() == "no episodes"


def test_default_folders(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "user" / ".claude" / "projects" / "p" / "sess-1.jsonl", claude_session())
    write(tmp_path / "codexhome" / "sessions" / "2026" / "rollout-1.jsonl", codex_session())
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codexhome"))
    assert run(home, "ingest", "--json") == 0
    assert json.loads(capsys.readouterr().out)["files"] == 2


def test_usage_errors(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(home, "ingest", "--claude", str(tmp_path / "nowhere")) == 2
    assert "--claude" in capsys.readouterr().err
    assert run(home, "episodes", "--since", "last week") == 2
    assert run(home, "episodes", "--kind", "gossip") == 2
