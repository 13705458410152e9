"""``neverestctl setup`` in a throwaway home: merged into existing files without losing a key or
a comment, idempotent, ``--dry-run`` writes nothing, ``--undo`` puts every file back byte for byte."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import stat
import tomllib
from pathlib import Path

import pytest

from neverest.agents.setup import Environment, apply, plan, undo
from neverest.ctl import main

SETTINGS = b"""{
    "model": "opus",
    "permissions": {"allow": ["Bash(ls:*)"]},
    "hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "~/bin/guard.sh"}]}]
    }
}
"""
CLAUDE_JSON = b'{"numStartups": 42, "mcpServers": {"github": {"type": "stdio", "command": "gh-mcp", "args": []}},' \
              b' "projects": {"/x": {"allowedTools": []}}}'
CODEX_TOML = b"""# my codex config
model = "o4"  # the model I like

[mcp_servers.docs]
command = "docs-mcp"   # keep this comment
args = ["--port", "1"]

[profiles.fast]
model = "o4-mini"
"""


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A person's home with Claude Code and Codex configured, and no agent on the PATH."""
    home = tmp_path / "person"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_bytes(SETTINGS)
    (home / ".claude.json").write_bytes(CLAUDE_JSON)
    os.chmod(home / ".claude.json", 0o600)
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_bytes(CODEX_TOML)
    os.chmod(home / ".codex" / "config.toml", 0o640)
    memory_home = tmp_path / "memory"
    memory_home.mkdir(mode=0o700)
    empty_path = tmp_path / "bin"
    empty_path.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CODEX_HOME", str(home / ".codex"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("NEVEREST_HOME", str(memory_home))
    monkeypatch.setenv("PATH", str(empty_path))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    return home


def _snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
            for p in sorted(root.rglob("*")) if p.is_file()}


def _env(machine: Path) -> Environment:
    env = Environment.detect(Path(os.environ["NEVEREST_HOME"]), pinned=True)
    return dataclasses.replace(env, systemd=True)


def test_setup_merges_without_losing_a_key_or_a_comment(machine: Path) -> None:
    env = _env(machine)
    assert env.claude and env.codex
    apply(env, plan(env))
    settings = json.loads((machine / ".claude" / "settings.json").read_bytes())
    assert settings["model"] == "opus" and settings["permissions"] == {"allow": ["Bash(ls:*)"]}
    command = shlex.join(env.hook)  # neverest-hook: the hook's fast entry point
    for event in ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"):
        commands = [h["command"] for group in settings["hooks"][event] for h in group["hooks"]]
        assert command in commands
    assert settings["hooks"]["PreToolUse"][0] == {"matcher": "Bash", "hooks": [
        {"type": "command", "command": "~/bin/guard.sh"}]}  # the person's own hook stays first
    assert shlex.split(command)[-2:] == ["--home", os.environ["NEVEREST_HOME"]]
    assert Path(shlex.split(command)[0]).name == "neverest-hook" or "neverest.agents.hook" in command
    assert Path(shlex.split(command)[0]).is_absolute()

    claude = json.loads((machine / ".claude.json").read_bytes())
    assert claude["numStartups"] == 42 and claude["projects"] == {"/x": {"allowedTools": []}}
    assert claude["mcpServers"]["github"]["command"] == "gh-mcp"
    assert claude["mcpServers"]["neverest"]["args"][-1] == "mcp"
    assert stat.S_IMODE((machine / ".claude.json").stat().st_mode) == 0o600

    toml = (machine / ".codex" / "config.toml").read_bytes()
    assert toml.startswith(CODEX_TOML)  # every byte the person wrote, comments included
    parsed = tomllib.loads(toml.decode())
    assert parsed["mcp_servers"]["neverest"]["args"][-1] == "mcp"
    assert parsed["mcp_servers"]["docs"] == {"command": "docs-mcp", "args": ["--port", "1"]}
    assert stat.S_IMODE((machine / ".codex" / "config.toml").stat().st_mode) == 0o640

    unit = (machine / ".config" / "systemd" / "user" / "neverestd.service").read_text()
    assert "ExecStart=" in unit and "WantedBy=default.target" in unit


def test_a_second_run_changes_nothing(machine: Path) -> None:
    env = _env(machine)
    apply(env, plan(env))
    after_first = _snapshot(machine)
    again = plan(env)
    assert again.changes == [] and len(again.unchanged) == 5
    apply(env, again)
    assert _snapshot(machine) == after_first


def test_undo_restores_every_file_byte_for_byte_and_removes_what_it_made(machine: Path) -> None:
    before = _snapshot(machine)
    env = _env(machine)
    apply(env, plan(env))
    assert _snapshot(machine) != before
    done = undo(env)
    assert {d["action"] for d in done} == {"restored byte for byte", "removed (setup made it)"}
    after = _snapshot(machine)
    assert after == before
    assert not env.backups.exists()


def test_undo_after_the_agent_rewrote_its_file_removes_only_ours(machine: Path) -> None:
    env = _env(machine)
    apply(env, plan(env))
    path = machine / ".claude.json"
    data = json.loads(path.read_bytes())
    data["numStartups"] = 43  # Claude Code rewrites this file all the time
    path.write_text(json.dumps(data))
    undo(env)
    data = json.loads(path.read_bytes())
    assert data["numStartups"] == 43 and "neverest" not in data["mcpServers"] and "github" in data["mcpServers"]


def test_a_file_that_is_not_json_stops_setup_before_anything_is_written(machine: Path) -> None:
    (machine / ".claude.json").write_bytes(b"{not json")
    before = _snapshot(machine)
    assert main(["setup"]) == 1
    assert _snapshot(machine) == before


def test_the_command_dry_run_writes_nothing_then_setup_and_undo(machine: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    before = _snapshot(machine)
    memory_home = Path(os.environ["NEVEREST_HOME"])
    assert main(["setup", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would change" in out and "settings.json" in out and "config.toml" in out
    assert "systemd is not running here" in out or "systemctl --user" in out
    assert _snapshot(machine) == before and list(memory_home.iterdir()) == []

    assert main(["setup", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert len(first["changed"]) >= 3
    assert main(["setup"]) == 0
    assert "nothing to change" in capsys.readouterr().out
    assert main(["setup", "--undo", "--dry-run"]) == 0
    assert "would be restored" in capsys.readouterr().out
    assert main(["setup", "--undo"]) == 0
    assert _snapshot(machine) == before
    assert main(["setup", "--undo"]) == 0
    assert "nothing to undo" in capsys.readouterr().out


def test_a_symlinked_settings_file_stays_a_link(machine: Path) -> None:
    real = machine / "dotfiles" / "settings.json"
    real.parent.mkdir()
    (machine / ".claude" / "settings.json").rename(real)
    (machine / ".claude" / "settings.json").symlink_to(real)
    env = _env(machine)
    apply(env, plan(env))
    assert (machine / ".claude" / "settings.json").is_symlink()
    assert "hook" in real.read_text()
    undo(env)
    assert real.read_bytes() == SETTINGS


def test_only_the_agents_found_are_wired(machine: Path, tmp_path: Path) -> None:
    env = dataclasses.replace(_env(machine), codex=False, systemd=False)
    todo = plan(env)
    assert {c.kind for c in todo.changes} == {"claude-settings", "claude-config", "neverest-config"}
    [consent] = [c for c in todo.changes if c.kind == "neverest-config"]
    assert tomllib.loads(consent.content.decode())["agents"] == ["claude-code"]
    assert any("Codex CLI: not found" in n for n in todo.notes)
    assert any("[Service]" in n for n in todo.notes)  # without systemd the unit is printed


def test_an_old_neverest_table_is_replaced_in_place_and_an_inline_one_is_refused(tmp_path: Path) -> None:
    from neverest.agents.setup import SetupError, codex_added, codex_removed
    old = (b'# top\n[mcp_servers.neverest]  # ours, from an old install\ncommand = "/old/neverestctl"\n'
           b'args = ["mcp"]\n\n[profiles.x]\nmodel = "o4"  # mine\n')
    new = codex_added(old, tmp_path / "c.toml", "/new/neverestctl", ["mcp"])
    assert new is not None
    assert new.startswith(b"# top\n[mcp_servers.neverest]\ncommand = \"/new/neverestctl\"\n")
    assert new.endswith(b'[profiles.x]\nmodel = "o4"  # mine\n')
    assert codex_added(new, tmp_path / "c.toml", "/new/neverestctl", ["mcp"]) == new  # idempotent
    assert tomllib.loads((codex_removed(new, tmp_path / "c.toml") or b"").decode()) == {"profiles": {"x": {
        "model": "o4"}}}
    inline = b'mcp_servers = { neverest = { command = "x" } }\n'
    with pytest.raises(SetupError, match="other than as a"):
        codex_added(inline, tmp_path / "c.toml", "/new/neverestctl", ["mcp"])
    with pytest.raises(SetupError, match="not valid TOML"):
        codex_added(b"[broken", tmp_path / "c.toml", "/new/neverestctl", ["mcp"])


def test_the_agents_wired_are_recorded_in_the_memorys_config_and_undo_takes_them_back(machine: Path) -> None:
    memory_home = Path(os.environ["NEVEREST_HOME"])
    config = memory_home / "config.toml"
    mine = b'# my settings\nholdout = 0.25  # half as many held out\n'
    config.write_bytes(mine)
    env = _env(machine)
    apply(env, plan(env))
    text = config.read_bytes()
    assert text.startswith(mine)  # the person's lines and comments stay
    assert tomllib.loads(text.decode()) == {"holdout": 0.25, "agents": ["claude-code", "codex"]}
    from neverest.config import load_config
    assert load_config(memory_home, {}).agents == ("claude-code", "codex")
    undo(env)
    assert config.read_bytes() == mine
    # Changed since setup: only the agents line (and setup's comment) goes.
    apply(env, plan(env))
    config.write_bytes(config.read_bytes() + b"sleep_at = \"04:00\"\n")
    undo(env)
    assert config.read_bytes() == mine + b'sleep_at = "04:00"\n'


def test_agents_are_added_to_an_existing_list_and_kept_in_order(tmp_path: Path) -> None:
    from neverest.agents.setup import SetupError, agents_added, agents_removed
    path = tmp_path / "config.toml"
    assert agents_added(b'agents = ["codex"]  # mine\n', path, ["codex"]) == b'agents = ["codex"]  # mine\n'
    added = agents_added(b'trust = "any"\nagents = ["codex"]\n', path, ["claude-code", "codex"])
    assert added == b'trust = "any"\nagents = ["codex", "claude-code"]\n'
    assert agents_removed(added, path) == b'trust = "any"\n'
    with pytest.raises(SetupError, match="by hand"):
        agents_added(b'agents = [\n  "codex",\n]\n', path, ["claude-code"])


def _remember_twice(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for session in ("s1", "s2"):
        assert main(["remember", "--kind", "error", "--title", "pip install -e .", "--happened",
                     "fails without --no-build-isolation", "--cwd", str(project), "--session", session]) == 0
    capsys.readouterr()


def test_nothing_of_an_agent_is_read_or_written_before_setup_and_undo_takes_the_section_back(
        machine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from neverest.agents.memory_file import BEGIN, project_slug
    monkeypatch.setenv("NEVEREST_NOW", "2026-03-01T09:00:00Z")
    project = tmp_path / "project"
    project.mkdir()
    projects = machine / ".claude" / "projects"
    session = projects / project_slug(str(project)) / "sess-1.jsonl"
    session.parent.mkdir(parents=True)
    session.write_text(json.dumps({"type": "user", "sessionId": "sess-1", "cwd": str(project), "uuid": "u1",
                                   "message": {"role": "user", "content": "please fix the build"}}) + "\n")
    memory_file = session.parent / "memory" / "MEMORY.md"
    before = _snapshot(machine)
    _remember_twice(project, capsys)
    assert main(["sleep", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["learned"] and report["ingest"]["files"] == 0
    assert report["ingest"]["not_wired"] == ["claude-code", "codex"]
    assert _snapshot(machine) == before  # no session read, no MEMORY.md written

    assert main(["setup"]) == 0
    out = capsys.readouterr().out
    assert 'agents = ["claude-code", "codex"]' in out and "Nothing of an agent's is read or written before setup" in out
    assert main(["sleep", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ingest"]["files"] == 1
    assert memory_file.read_bytes().startswith(BEGIN)

    assert main(["setup", "--undo"]) == 0
    out = capsys.readouterr().out
    assert f"Neverest's section taken back: {memory_file}" in out
    assert not memory_file.exists()  # it held nothing else
    assert _snapshot(machine) == before


# A settings.json as a person keeps it: three-space indentation, " : " after some keys, an escaped
# character, numbers written their way, empty lists, and keys in their own order.
UNUSUAL = b"""{
   "model" : "opus",
   "env": {"LANG": "fr_FR.UTF-8", "NOTE": "caf\\u00e9"},
   "permissions": {
      "allow": [
         "Bash(ls:*)",
         "Read(~/src/**)"
      ],
      "deny": []
   },
   "hooks": {
      "PreToolUse": [
         {
            "matcher": "Bash",
            "hooks": [ { "type": "command", "command": "~/bin/guard.sh", "timeout": 5.0 } ]
         }
      ],
      "Notification": []
   },
   "cleanupPeriodDays": 1e2,
   "includeCoAuthoredBy": false
}
"""
TABBED = b'{\n\t"numStartups": 7,\n\t"projects": {\n\t\t"/x": {"allowedTools": []}\n\t}\n}'


def _only_added(before: bytes, after: bytes) -> bool:
    """Whether ``after`` is ``before`` with text inserted and nothing changed or taken away."""
    rest = iter(after)
    return all(byte in rest for byte in before)


def test_setup_changes_only_what_it_adds_and_keeps_the_persons_formatting(machine: Path) -> None:
    settings, claude = machine / ".claude" / "settings.json", machine / ".claude.json"
    settings.write_bytes(UNUSUAL)
    claude.write_bytes(TABBED)
    env = _env(machine)
    apply(env, plan(env))
    added = settings.read_bytes()
    assert _only_added(UNUSUAL, added) and added.startswith(UNUSUAL[:UNUSUAL.index(b"         }\n      ],")])
    for kept in (b'"NOTE": "caf\\u00e9"', b'"cleanupPeriodDays": 1e2', b'"timeout": 5.0 } ]', b'"deny": []',
                 b'"Notification": []'):
        assert kept in added
    new_lines = set(added.decode().splitlines()) - set(UNUSUAL.decode().splitlines())
    # What setup added is written as the file is: three spaces a level, " : " as its first key has it.
    assert new_lines and all((len(line) - len(line.lstrip(" "))) % 3 == 0 for line in new_lines)
    assert '            "matcher" : "*",' in new_lines
    data = json.loads(added)
    assert data["hooks"]["PreToolUse"][0]["matcher"] == "Bash" and data["cleanupPeriodDays"] == 100
    assert list(data) == ["model", "env", "permissions", "hooks", "cleanupPeriodDays", "includeCoAuthoredBy"]
    assert list(data["hooks"])[:2] == ["PreToolUse", "Notification"]
    tabbed = claude.read_bytes()
    assert _only_added(TABBED, tabbed) and b'\n\t"mcpServers": {\n\t\t"neverest": {\n\t\t\t"type": "stdio",' in tabbed

    assert plan(env).changes == []  # a second run changes nothing
    undo(env)
    assert settings.read_bytes() == UNUSUAL and claude.read_bytes() == TABBED


def test_undo_after_the_person_edited_the_file_takes_out_only_ours_byte_for_byte(machine: Path) -> None:
    settings, claude = machine / ".claude" / "settings.json", machine / ".claude.json"
    settings.write_bytes(UNUSUAL)
    env = _env(machine)
    apply(env, plan(env))
    # The person changes their model after setup; Claude Code rewrites its own file compactly.
    settings.write_bytes(settings.read_bytes().replace(b'"model" : "opus"', b'"model" : "sonnet"'))
    claude.write_bytes(claude.read_bytes().replace(b'"numStartups": 42', b'"numStartups": 43'))
    undo(env)
    assert settings.read_bytes() == UNUSUAL.replace(b'"model" : "opus"', b'"model" : "sonnet"')
    assert claude.read_bytes() == CLAUDE_JSON.replace(b'"numStartups": 42', b'"numStartups": 43')
