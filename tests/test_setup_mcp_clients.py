"""``neverestctl setup`` for the agents reached by MCP only (Claude Desktop, Cursor, Windsurf, Gemini CLI), in a
throwaway home: Neverest's server added to each one's own file in the shape its documentation shows, nothing
else changed (formatting, escapes, comments, other settings), a second run changes nothing, ``--undo`` puts
every file back byte for byte (or, after the person edited it, takes out only Neverest's entry), the agents
not installed are skipped and said so, and a file that is not what its agent reads stops setup naming it.

Each fixture is an example from the agent's own documentation, written the unusual ways people write them:
- Claude Desktop: https://modelcontextprotocol.io/docs/develop/connect-local-servers (the Windows example and the
  troubleshooting section's "brave-search"), with CRLF line breaks, four spaces, " : " and escaped backslashes;
- Cursor: https://cursor.com/docs/mcp (the stdio "server-name" example, and a remote one by "url" with
  ``${env:...}`` in a header), indented with tabs, no line break at the end;
- Windsurf: https://docs.windsurf.com/windsurf/cascade/mcp (the "github" example; a remote one by "serverUrl",
  as github/github-mcp-server's install-windsurf.md shows it), all on one line, no spaces;
- Gemini CLI: https://geminicli.com/docs/reference/configuration (the "Example settings.json", nested as of
  v0.3.0) and https://geminicli.com/docs/tools/mcp-server, with comments (the CLI strips them: google-gemini/
  gemini-cli packages/cli/src/config/settings.ts) and a \\u escape.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path

import pytest

from neverest.agents import jsontext
from neverest.agents.mcp_clients import claude_desktop_folder, detect
from neverest.agents.setup import MANIFEST, Environment, apply, plan, undo
from neverest.ctl import main

CLAUDE_DESKTOP = (
    b'{\r\n'
    b'    "mcpServers" : {\r\n'
    b'        "filesystem": {\r\n'
    b'            "command": "npx",\r\n'
    b'            "args": [\r\n'
    b'                "-y",\r\n'
    b'                "@modelcontextprotocol/server-filesystem",\r\n'
    b'                "C:\\\\Users\\\\username\\\\Desktop",\r\n'
    b'                "C:\\\\Users\\\\username\\\\Downloads"\r\n'
    b'            ]\r\n'
    b'        },\r\n'
    b'        "brave-search": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-brave-search"],'
    b' "env": {"APPDATA": "C:\\\\Users\\\\user\\\\AppData\\\\Roaming\\\\", "BRAVE_API_KEY": "..."}}\r\n'
    b'    }\r\n'
    b'}\r\n')
CURSOR = (
    b'{\n\t"mcpServers": {\n\t\t"server-name": {\n\t\t\t"command": "npx",\n\t\t\t"args": ["-y", "mcp-server"],\n'
    b'\t\t\t"env": {\n\t\t\t\t"API_KEY": "value"\n\t\t\t}\n\t\t},\n\t\t"remote-server": {\n'
    b'\t\t\t"url": "https://api.example.com/mcp",\n'
    b'\t\t\t"headers": {"Authorization": "Bearer ${env:MY_SERVICE_TOKEN}"}\n\t\t}\n\t}\n}')
WINDSURF = (
    b'{"mcpServers":{"github":{"command":"npx","args":["-y","@modelcontextprotocol/server-github"],'
    b'"env":{"GITHUB_PERSONAL_ACCESS_TOKEN":"<YOUR_PERSONAL_ACCESS_TOKEN>"},"disabled":false},'
    b'"github-remote":{"serverUrl":"https://api.githubcopilot.com/mcp/",'
    b'"headers":{"Authorization":"Bearer YOUR_PAT"}}}}\n')
GEMINI = b"""{
    // Gemini CLI's settings, nested as of v0.3.0
    "general": {
        "vimMode": true,
        "preferredEditor": "code",
        "sessionRetention": {"enabled": true, "maxAge": "30d", "maxCount": 100}
    },
    "ui": {
        "theme": "GitHub",
        "customWittyPhrases": ["You forget a thousand things every day. Make sure this is one of \\u2019em"]
    },
    "tools": {
        "sandbox": "docker",
        "exclude": ["write_file"]
    },
    "mcpServers": {
        "mainServer": {
            "command": "bin/mcp_server.py"
        },
        "anotherServer": {
            "command": "node",
            "args": ["mcp_server.js", "--verbose"] /* as the docs have it */
        } // the last one
    },
    "telemetry": {"enabled": true, "target": "local", "otlpEndpoint": "http://localhost:4317", "logPrompts": true},
    "model": {"name": "gemini-1.5-pro-latest", "maxSessionTurns": 10}
}
"""
# A Gemini CLI settings file with no MCP server yet, and an allow-list of servers.
GEMINI_BARE = b"""{
  "general": {"vimMode": true},
  "privacy": {"usageStatisticsEnabled": false}, // opted out
  "mcp": {"allowed": ["docs"]}
}
"""

FILES = {  # the agent: (its folder under the home on Linux, its file, the fixture)
    "claude-desktop": (".config/Claude", "claude_desktop_config.json", CLAUDE_DESKTOP),
    "cursor": (".cursor", "mcp.json", CURSOR),
    "windsurf": (".codeium/windsurf", "mcp_config.json", WINDSURF),
    "gemini-cli": (".gemini", "settings.json", GEMINI),
}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A person's home with none of the agents installed, and nothing on the PATH."""
    home = tmp_path / "person"
    home.mkdir()
    memory_home = tmp_path / "memory"
    memory_home.mkdir(mode=0o700)
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("NEVEREST_HOME", str(memory_home))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME"):
        monkeypatch.delenv(name, raising=False)
    return home


def _install(home: Path, agent: str, content: bytes | None) -> Path:
    folder, name, _ = FILES[agent]
    (home / folder).mkdir(parents=True, exist_ok=True)
    path = home / folder / name
    if content is not None:
        path.write_bytes(content)
        os.chmod(path, 0o640)
    return path


def _env() -> Environment:
    env = Environment.detect(Path(os.environ["NEVEREST_HOME"]), pinned=True, platform="linux")
    return dataclasses.replace(env, systemd=False)


def _snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
            for p in sorted(root.rglob("*")) if p.is_file()}


def _only_added(before: bytes, after: bytes) -> bool:
    """Whether ``after`` is ``before`` with text inserted and nothing changed or taken away."""
    rest = iter(after)
    return all(byte in rest for byte in before)


@pytest.mark.parametrize("agent", list(FILES))
def test_the_server_is_added_in_the_agents_shape_and_nothing_else_changes_and_undo_gives_the_bytes_back(
        home: Path, agent: str) -> None:
    original = FILES[agent][2]
    path = _install(home, agent, original)
    before = _snapshot(home)
    env = _env()
    todo = plan(env)
    [report] = [c for c in todo.clients if c["agent"] == agent]
    assert report["status"] == "wired" and report["file"] == str(path)
    apply(env, todo)

    added = path.read_bytes()
    assert _only_added(original, added)  # every byte the person wrote, in its order: comments, escapes, spacing
    data, was = jsontext.loads(added.decode()), jsontext.loads(original.decode())
    servers = data.pop("mcpServers")
    ours = servers.pop("neverest")
    assert data | {"mcpServers": servers} == was  # nothing else changed
    assert list(ours) == ["command", "args"]  # the shape every one of them documents for a local server
    assert Path(ours["command"]).is_absolute() and Path(ours["command"]).name.startswith(("neverestctl", "python"))
    assert ours["args"][-3:] == ["--home", os.environ["NEVEREST_HOME"], "mcp"]
    assert list(jsontext.loads(added.decode())["mcpServers"])[-1] == "neverest"  # after the person's servers
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    if b"\r\n" in original:
        assert b"\n" not in added.replace(b"\r\n", b"")  # the file's own line breaks
    if agent == "gemini-cli":
        assert b"// Gemini CLI's settings" in added and b"/* as the docs have it */" in added
        assert b"\\u2019em" in added and b'} // the last one\n' not in added  # its comment stays on its line
        assert b'}, // the last one\n        "neverest": {\n            "command": ' in added
    if agent == "windsurf":
        assert b',"neverest":{"command":"' in added  # written as the file is: no spaces
    if agent == "cursor":
        assert b'\n\t\t"neverest": {\n\t\t\t"command": "' in added and not added.endswith(b"\n")

    again = plan(env)
    assert again.changes == [] and [c["status"] for c in again.clients if c["agent"] == agent] == ["already wired"]

    done = undo(env)
    assert {d["action"] for d in done} == {"restored byte for byte"} and {d.get("agent") for d in done} == {agent}
    assert _snapshot(home) == before
    assert not env.backups.exists()


def test_the_agents_not_installed_are_skipped_and_no_folder_is_made(home: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    _install(home, "cursor", None)  # installed, no mcp.json yet
    env = _env()
    todo = plan(env)
    status = {c["agent"]: (c["status"], c["why"]) for c in todo.clients}
    assert status["cursor"][0] == "wired"
    for agent in ("claude-desktop", "windsurf", "gemini-cli"):
        assert status[agent][0] == "skipped" and status[agent][1].startswith("not installed (no ")
        assert str(home / FILES[agent][0]) in status[agent][1]
    apply(env, todo)
    assert sorted(p.name for p in home.iterdir()) == [".cursor"]  # no folder for an agent not there
    made = home / ".cursor" / "mcp.json"
    assert json.loads(made.read_bytes())["mcpServers"]["neverest"]["args"][-1] == "mcp"
    assert stat.S_IMODE(made.stat().st_mode) == 0o600
    manifest = json.loads((env.backups / MANIFEST).read_bytes())
    assert manifest["files"][str(made)] | {"written": "-"} == {
        "kind": "mcp-servers", "existed": False, "backup": None, "mode": 0o600, "agent": "cursor",
        "key": "mcpServers", "added_key": True, "written": "-"}  # the record of what was wired
    assert [d["action"] for d in undo(env)] == ["removed (setup made it)"]
    assert not made.exists() and (home / ".cursor").is_dir()

    # The command says which were wired and which were skipped, and why.
    assert main(["setup", "--dry-run"]) == 0
    assert f"Cursor: would be wired: its MCP servers are in {made}" in capsys.readouterr().out
    assert not made.exists()
    assert main(["setup"]) == 0
    out = capsys.readouterr().out
    assert f"Cursor: wired: its MCP servers are in {made}" in out
    assert f"Windsurf: skipped: not installed (no {home / '.codeium' / 'windsurf'})" in out
    assert "Claude Desktop: skipped" in out and "Gemini CLI: skipped" in out
    assert "Cursor: MCP server only" in out
    assert main(["setup", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(c["agent"], c["status"]) for c in report["mcp_clients"]] == [
        ("claude-desktop", "skipped"), ("cursor", "already wired"), ("windsurf", "skipped"), ("gemini-cli", "skipped")]
    assert main(["setup", "--undo"]) == 0
    assert "removed (setup made it)" in capsys.readouterr().out and not made.exists()


def test_the_mcp_only_agents_are_not_given_consent_to_anything(home: Path) -> None:
    for agent, (_, _, content) in FILES.items():
        _install(home, agent, content)
    env = _env()
    apply(env, plan(env))
    config = Path(os.environ["NEVEREST_HOME"]) / "config.toml"
    assert not config.exists()  # `agents` (whose files Neverest reads) is for Claude Code and Codex only
    assert len(json.loads((env.backups / MANIFEST).read_bytes())["files"]) == 4


@pytest.mark.parametrize("agent, broken", [
    ("claude-desktop", b'{"mcpServers": {"filesystem": {"command": "npx",}}}'),  # a trailing comma
    ("cursor", b'{"mcpServers": {"server-name": {"command": "npx"}}'),  # cut short
    ("windsurf", b'["mcpServers"]'),  # not an object
    ("gemini-cli", b'{"mcpServers": ["neverest"]}'),  # servers not an object
    ("gemini-cli", b'{"general": {} /* never closed }'),
])
def test_a_file_the_agent_could_not_read_stops_setup_naming_it_and_nothing_changes(
        home: Path, agent: str, broken: bytes, capsys: pytest.CaptureFixture[str]) -> None:
    for other, (_, _, content) in FILES.items():
        _install(home, other, content)
    path = _install(home, agent, broken)
    before = _snapshot(home)
    assert main(["setup"]) == 1
    err = capsys.readouterr().err
    assert str(path) in err and "(nothing was changed)" in err
    assert _snapshot(home) == before


@pytest.mark.parametrize("agent", list(FILES))
def test_undo_after_the_person_edited_the_file_takes_out_only_neverests_entry(home: Path, agent: str) -> None:
    original = FILES[agent][2]
    path = _install(home, agent, original)
    env = _env()
    apply(env, plan(env))
    # The person (or the agent, from its settings page) changes one of their servers after setup.
    old, new = {"claude-desktop": (b'"BRAVE_API_KEY": "..."', b'"BRAVE_API_KEY": "abc"'),
                "cursor": (b'"API_KEY": "value"', b'"API_KEY": "other"'),
                "windsurf": (b'"disabled":false', b'"disabled":true'),
                "gemini-cli": (b'"vimMode": true', b'"vimMode": false')}[agent]
    path.write_bytes(path.read_bytes().replace(old, new))
    [done] = undo(env)
    assert done["action"].startswith("changed since setup: only Neverest's entries removed")
    assert path.read_bytes() == original.replace(old, new)


def test_a_settings_file_without_servers_gets_the_key_and_loses_it_again_and_gemini_is_told_to_allow_it(
        home: Path) -> None:
    path = _install(home, "gemini-cli", GEMINI_BARE)
    env = _env()
    todo = plan(env)
    assert any('mcp.allowed in' in n and 'does not list "neverest"' in n for n in todo.notes)
    apply(env, todo)
    added = path.read_bytes()
    assert added.startswith(GEMINI_BARE[:GEMINI_BARE.index(b"\n}")]) and b"// opted out" in added
    assert list(jsontext.loads(added.decode())) == ["general", "privacy", "mcp", "mcpServers"]
    path.write_bytes(added.replace(b'"vimMode": true', b'"vimMode": false'))
    undo(env)  # changed since: the "mcpServers" setup added goes with our server
    assert path.read_bytes() == GEMINI_BARE.replace(b'"vimMode": true', b'"vimMode": false')


def test_an_old_neverest_entry_is_replaced_in_place(home: Path) -> None:
    old = (b'{\n  "mcpServers": {\n    "neverest": {"command": "/old/neverestctl", "args": ["mcp"]},\n'
           b'    "docs": {"command": "docs-mcp"}\n  }\n}\n')
    path = _install(home, "cursor", old)
    env = _env()
    apply(env, plan(env))
    new = path.read_bytes()
    assert new.endswith(b'\n    "docs": {"command": "docs-mcp"}\n  }\n}\n')
    assert list(json.loads(new)["mcpServers"]) == ["neverest", "docs"]
    assert json.loads(new)["mcpServers"]["neverest"]["command"] != "/old/neverestctl"
    undo(env)
    assert path.read_bytes() == old


def test_a_file_broken_after_setup_is_left_as_it_is_and_its_original_kept(home: Path) -> None:
    cursor = _install(home, "cursor", CURSOR)
    gemini = _install(home, "gemini-cli", GEMINI)
    env = _env()
    apply(env, plan(env))
    cursor.write_bytes(b"{broken")
    done = {Path(d["file"]).name: d["action"] for d in undo(env)}
    assert done["settings.json"] == "restored byte for byte" and gemini.read_bytes() == GEMINI
    assert done["mcp.json"].startswith("not undone, left as it is: ") and str(cursor) in done["mcp.json"]
    assert cursor.read_bytes() == b"{broken"
    manifest = json.loads((env.backups / MANIFEST).read_bytes())
    assert list(manifest["files"]) == [str(cursor)]
    assert (env.backups / manifest["files"][str(cursor)]["backup"]).read_bytes() == CURSOR
    cursor.write_bytes(CURSOR)  # mended by hand: the next undo has nothing left to take out
    [again] = undo(env)
    assert again["action"].startswith("changed since setup")
    assert not env.backups.exists()


def test_each_agents_folder_where_its_documentation_puts_it(tmp_path: Path) -> None:
    home, xdg = tmp_path / "h", tmp_path / "xdg"
    assert claude_desktop_folder(home, xdg, {}, "darwin") == home / "Library" / "Application Support" / "Claude"
    assert claude_desktop_folder(home, xdg, {"APPDATA": str(tmp_path / "roaming")}, "win32") \
        == tmp_path / "roaming" / "Claude"
    assert claude_desktop_folder(home, xdg, {}, "linux") == xdg / "Claude"
    clients = {c.name: c for c in detect(home, xdg, {"GEMINI_CLI_HOME": str(tmp_path / "g")}, "linux")}
    assert clients["claude-desktop"].file == xdg / "Claude" / "claude_desktop_config.json"
    assert clients["cursor"].file == home / ".cursor" / "mcp.json"
    assert clients["windsurf"].file == home / ".codeium" / "windsurf" / "mcp_config.json"
    assert clients["gemini-cli"].file == tmp_path / "g" / ".gemini" / "settings.json"
    assert {c.key for c in clients.values()} == {"mcpServers"}
    assert all(c.source.startswith("https://") for c in clients.values())
    assert detect(home, xdg, {}, "linux")[3].file == home / ".gemini" / "settings.json"
