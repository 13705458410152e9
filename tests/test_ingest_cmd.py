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


def test_default_folders_are_read_only_for_the_agents_wired(home: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "user" / ".claude" / "projects" / "p" / "sess-1.jsonl", claude_session())
    write(tmp_path / "codexhome" / "sessions" / "2026" / "rollout-1.jsonl", codex_session())
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codexhome"))
    # Nothing wired (setup never ran): the agents' folders are not read, and the owner is told how.
    assert run(home, "ingest") == 0
    out = capsys.readouterr().out
    assert "0 session files" in out and "Claude Code: not read (not wired" in out and "--codex DIR" in out
    # A folder named by hand is read all the same.
    assert run(home, "ingest", "--codex", str(tmp_path / "codexhome" / "sessions"), "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["files"] == 1 and report["not_wired"] == ["claude-code"]
    # Wired (as setup records it in the config): the defaults are read.
    (home / "config.toml").write_text('agents = ["claude-code", "codex"]\n')
    assert run(home, "ingest", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["files"] == 2 and report["not_wired"] == []


def test_usage_errors(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(home, "ingest", "--claude", str(tmp_path / "nowhere")) == 2
    assert "--claude" in capsys.readouterr().err
    assert run(home, "episodes", "--since", "last week") == 2
    assert run(home, "episodes", "--kind", "gossip") == 2


def test_the_daemons_pass_and_sleep_touch_only_the_agents_wired(tmp_path: Path) -> None:
    """What the daemon's ingest service, its nightly sleep and ``neverestctl sleep`` run: an agent's
    session files are read, and Claude Code's memory files written, only once the agent is wired."""
    from neverest.agents.doors import ingest_agents, render_for_agents
    from neverest.clock import FixedClock, parse_time
    from neverest.config import Config
    from neverest.memory.service import Memory

    claude = tmp_path / "claude-projects"
    write(claude / "-home-ann-shop" / "sess-1.jsonl", claude_session())
    codex = tmp_path / "codex-sessions"
    write(codex / "2026" / "11" / "30" / "rollout-x.jsonl", codex_session())
    home = tmp_path / "memory"
    home.mkdir(mode=0o700)
    for agents, files in (((), 0), (("codex",), 1), (("claude-code", "codex"), 2)):
        config = Config(agents=agents, claude_dir=str(claude), codex_dir=str(codex))
        with Memory.open(home, config, FixedClock(parse_time(NOW)), renderers=(render_for_agents,)) as memory:
            report = ingest_agents(memory)
            assert report["files"] == files and len(report["not_wired"]) == 2 - files
            memory.ingest([{"kind": "error", "agent": "t", "session": "x", "cwd": "/home/ann/shop", "title": "t",
                            "happened": "pip install fails"}])
            with memory.store.write() as db:
                db.execute("INSERT OR IGNORE INTO lessons (hash, kind, text, cwd, strength, seen, created, updated) "
                           "VALUES ('ab', 'error', 'pip install fails offline', '/home/ann/shop', 1, 2, ?, ?)",
                           (NOW, NOW))
            memory.render()
        written = (claude / "-home-ann-shop" / "memory" / "MEMORY.md").exists()
        assert written == ("claude-code" in agents)


SESSIONS = Path(__file__).parent / "data" / "sessions"


@pytest.mark.parametrize("batch", [1000, 7])  # one flush, and many (a repeat in a later flush than its event)
def test_a_first_ingest_into_an_empty_store_holds_nothing_already(
        home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        batch: int) -> None:
    from neverest.agents import ingest as ingest_module

    monkeypatch.setattr(ingest_module, "BATCH_EVENTS", batch)
    claude, codex = SESSIONS / "claude", SESSIONS / "codex" / "sessions"
    assert run(home, "ingest", "--claude", str(claude), "--codex", str(codex), "--json") == 0
    report = json.loads(capsys.readouterr().out)
    # Events that repeat one met earlier in the run (the same error again in a session, an error again
    # with what worked) are repeats, not episodes "already held": the store was empty.
    assert report["duplicates"] == 0 and report["refused"] == 0
    assert report["stored"] + report["repeats"] == sum(report["detected"].values())
    assert report["repeats"] >= report["detected"]["worked"] > 0
    assert run(home, "episodes", "--json", "--limit", "100000") == 0
    assert len(capsys.readouterr().out.splitlines()) == report["stored"]

    # A session file seen again under another name: its events were held before this run.
    again = tmp_path / "again"
    again.mkdir()
    [first] = sorted(claude.rglob("*.jsonl"))[:1]
    (again / first.name).write_bytes(first.read_bytes())
    assert run(home, "ingest", "--claude", str(again)) == 0
    out = capsys.readouterr().out
    assert "; 0 episodes stored" in out and " 0 already held" not in out
