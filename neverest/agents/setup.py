"""Wiring the agents on this machine to the memory, and unwiring them byte for byte.

``neverestctl setup`` finds the agents installed and changes their configuration files:

- Claude Code: the hooks (SessionStart, UserPromptSubmit, PreToolUse, PostToolUse, Stop) in
  ``~/.claude/settings.json``, each running ``neverest-hook``; the MCP server
  (``neverestctl mcp``) among the user's servers, ``mcpServers`` in ``~/.claude.json`` (where
  ``claude mcp add --scope user`` writes them);
- Codex CLI: the MCP server as the table ``[mcp_servers.neverest]`` of ``$CODEX_HOME/config.toml``,
  edited as text (only that table), so the person's comments and formatting stay;
- Claude Desktop, Cursor, Windsurf, Gemini CLI (``mcp_clients``): the MCP server in each one's own JSON file,
  under its own key, where the agent is installed (its folder exists); each is said wired or skipped, and why;
- the daemon: a systemd user unit for ``neverestd``, written where systemd runs, else printed;
- consent: the memory's own ``config.toml`` gets ``agents = [...]``, the agents wired here.  Neverest
  reads an agent's session files and writes its memory file only for the agents listed there, so
  nothing of an agent's is touched before setup (``neverestctl ingest --claude DIR`` by hand still
  reads what it is given), and ``--undo`` takes the consent back with the rest.  The agents reached by MCP
  only are not listed there (Neverest reads nothing of theirs): the manifest below records them.

Every file is merged into, never rewritten from scratch: a key that was there stays, and a JSON
file is edited as text (``jsontext``), so only what Neverest adds changes: the person's
indentation, key order, escapes and numbers stay as they wrote them.  The first
time setup changes a file it keeps the original bytes (or that it did not exist) in the home's
``setup`` folder with a manifest; ``--undo`` puts each file back byte for byte when nobody
changed it since, or else removes only Neverest's entries from it (the agents rewrite their own
files: Claude Code updates ``~/.claude.json`` all the time).  Planning comes before writing: a
file that cannot be read as its format says stops the run before anything is written.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import sys
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from neverest.agents import jsontext
from neverest.agents.mcp_clients import McpClient
from neverest.agents.mcp_clients import detect as detect_mcp_clients
from neverest.agents.transcripts import CLAUDE_AGENT, CODEX_AGENT
from neverest.files import atomic_write
from neverest.paths import CONFIG_FILE

HOOK_EVENTS: Final = ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop")
TOOL_EVENTS: Final = ("PreToolUse", "PostToolUse")  # the events whose matcher is a tool name
SERVER: Final = "neverest"
MANIFEST: Final = "manifest.json"
SETUP_DIR: Final = "setup"
UNIT_NAME: Final = "neverestd.service"
CONSENT_COMMENT: Final = "# Wired by `neverestctl setup`: only these agents' files are read and written by Neverest."
ENABLE_HINT: Final = "systemctl --user daemon-reload && systemctl --user enable --now neverestd"


class SetupError(Exception):
    """A file cannot be merged into as it is; the message names it and says why."""


@dataclass(frozen=True)
class Environment:
    """Where the agents' files are and how to run Neverest's programs, as found on this machine."""

    home: Path  # the person's home folder
    claude_dir: Path  # $CLAUDE_CONFIG_DIR, else ~/.claude
    claude_json: Path  # $CLAUDE_CONFIG_DIR/.claude.json, else ~/.claude.json
    codex_home: Path
    config_home: Path  # $XDG_CONFIG_HOME, else ~/.config
    backups: Path  # the Neverest home's setup folder
    config: Path  # the Neverest home's config.toml, where the agents wired are recorded
    ctl: tuple[str, ...]  # argv of neverestctl (with --home when one is pinned)
    hook: tuple[str, ...]  # argv of neverest-hook: the hook without loading the rest of neverestctl (it runs often)
    daemon: tuple[str, ...]  # argv of neverestd
    claude: bool
    codex: bool
    systemd: bool
    mcp_clients: tuple[McpClient, ...] = ()  # the agents reached by MCP only, installed or not

    @classmethod
    def detect(cls, neverest_home: Path, *, pinned: bool, environ: Mapping[str, str] | None = None,
               platform: str | None = None) -> Environment:
        env = os.environ if environ is None else environ
        home = Path(env.get("HOME") or Path.home())
        moved = Path(env["CLAUDE_CONFIG_DIR"]).expanduser() if env.get("CLAUDE_CONFIG_DIR") else None
        claude_dir = moved or home / ".claude"
        claude_json = (moved or home) / ".claude.json"
        codex_home = Path(env["CODEX_HOME"]).expanduser() if env.get("CODEX_HOME") else home / ".codex"
        config_home = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
        path = env.get("PATH", os.defpath)
        pin = ("--home", os.fspath(neverest_home.absolute())) if pinned else ()
        return cls(
            home=home, claude_dir=claude_dir, claude_json=claude_json, codex_home=codex_home,
            config_home=config_home, backups=neverest_home / SETUP_DIR, config=neverest_home / CONFIG_FILE,
            ctl=(*_program("neverestctl", "neverest.ctl", path), *pin),
            hook=(*_program("neverest-hook", "neverest.agents.hook", path), *pin),
            daemon=(*_program("neverestd", "neverest.daemon", path), *pin),
            claude=claude_dir.is_dir() or claude_json.is_file()
            or shutil.which("claude", path=path) is not None,
            codex=bool(env.get("CODEX_HOME")) or codex_home.is_dir() or shutil.which("codex", path=path) is not None,
            systemd=Path("/run/systemd/system").is_dir() and shutil.which("systemctl", path=path) is not None,
            mcp_clients=detect_mcp_clients(home, config_home, env, platform),
        )


def _program(script: str, module: str, path: str) -> tuple[str, ...]:
    """The absolute argv of one of Neverest's programs: the script installed next to this Python
    (the same environment), else the one on the PATH, else this Python running the module."""
    beside = Path(sys.executable).parent / script
    if beside.is_file() and os.access(beside, os.X_OK):
        return (os.fspath(beside),)
    found = shutil.which(script, path=path)
    if found:
        return (os.fspath(Path(found).absolute()),)
    return (os.fspath(Path(sys.executable).absolute()), "-m", module)


# -- Claude Code's JSON files -------------------------------------------------------------------


def _json_object(content: bytes | None, path: Path, *, comments: bool = False) -> dict[str, Any]:
    """The file's top object; ``comments``: the agent's reader allows ``//`` and ``/* */`` comments."""
    if content is None or not content.strip():
        return {}
    try:
        data = jsontext.loads(content.decode("utf-8-sig")) if comments else json.loads(content)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SetupError(f"{path} is not valid JSON ({exc}); fix or move it, then run setup again") from None
    if not isinstance(data, dict):
        raise SetupError(f"{path} holds a JSON {type(data).__name__}, not an object; setup will not touch it")
    return data


def _dump_json(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _is_our_hook(entry: object) -> bool:
    if not isinstance(entry, dict) or not isinstance(entry.get("command"), str):
        return False
    try:
        argv = shlex.split(entry["command"])
    except ValueError:
        return False
    if any(Path(a).name == "neverest-hook" or a == "neverest.agents.hook" for a in argv):
        return True
    return bool(argv) and argv[-1] == "hook" and any(
        Path(a).name == "neverestctl" or a == "neverest.ctl" for a in argv)


def _without_our_hooks(hooks: dict[str, Any], keep: tuple[str, ...] = ()) -> None:
    """Take Neverest's hooks out of ``hooks``: a group left with none goes, and so does an event left
    with no group (unless it is in ``keep``: setup adds to it again).  What held none of ours is
    left as it is, empty lists included."""
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept = []
        touched = False
        for group in groups:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                ours = [h for h in group["hooks"] if _is_our_hook(h)]
                if ours:
                    touched = True
                    group = {**group, "hooks": [h for h in group["hooks"] if not _is_our_hook(h)]}
                    if not group["hooks"]:
                        continue
            kept.append(group)
        if not touched:
            continue
        if kept or event in keep:
            hooks[event] = kept
        else:
            del hooks[event]


def _first_of_ours(text: str, hooks: jsontext.Node) -> tuple[int, int, int] | None:
    """Where the first of Neverest's hooks is in the text: (event, group, hook) indexes."""
    for e, (_, _, groups) in enumerate(hooks.members):
        for g, group in enumerate(groups.items if groups.kind == "array" else []):
            inner = group.member("hooks") if group.kind == "object" else None
            for h, item in enumerate(inner.items if inner is not None and inner.kind == "array" else []):
                if _is_our_hook(json.loads(text[item.start:item.end])):
                    return e, g, h
    return None


def _our_hooks_taken_out(text: str, *, keep: tuple[str, ...], drop_empty_hooks: bool) -> str:
    """``_without_our_hooks`` on the file's text, one hook at a time, every other byte kept; and the
    "hooks" object itself when it is left empty and ``drop_empty_hooks``."""
    while True:
        root = jsontext.parse(text)
        hooks = root.member("hooks")
        found = _first_of_ours(text, hooks) if hooks is not None and hooks.kind == "object" else None
        if hooks is None or found is None:
            return text
        e, g, h = found
        event, _, groups = hooks.members[e]
        inner = groups.items[g].member("hooks")
        assert inner is not None
        if not all(_is_our_hook(json.loads(text[i.start:i.end])) for i in inner.items):
            text = jsontext.remove(text, inner, h)  # the group keeps the person's hooks
        elif len(groups.items) > 1 or event in keep:
            text = jsontext.remove(text, groups, g)  # the group held only ours
        elif len(hooks.members) > 1 or not drop_empty_hooks:
            text = jsontext.remove(text, hooks, e)  # the event held only that group
        else:
            index = root.index("hooks")
            assert index is not None
            text = jsontext.remove(text, root, index)


def _edited(content: bytes, expected: dict[str, Any], edit: Callable[[str], str], *, path: Path | None = None,
            comments: bool = False) -> bytes:
    """``content`` changed by ``edit`` (``jsontext``: only what Neverest adds or takes out changes, the
    person's indentation, key order, escapes, numbers and comments stay); checked to hold ``expected``.  A
    file the text edit cannot follow (a key given twice, UTF-16) is written anew from ``expected``; or, with
    ``path`` (the agents reached by MCP only: their files are the person's, and may hold comments), refused."""
    try:
        text = content.decode("utf-8")
        bom = "\ufeff" if text.startswith("\ufeff") else ""
        new = bom + edit(text[len(bom):])
        if (jsontext.loads if comments else json.loads)(new[len(bom):]) == expected:
            return new.encode("utf-8")
    except (ValueError, KeyError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        pass
    if path is not None:
        raise SetupError(f"{path} cannot be edited without changing more than Neverest's entry (a key given "
                         "twice, or an encoding other than UTF-8?); add the server by hand, then run setup again")
    return _dump_json(expected)


def hooks_added(content: bytes | None, path: Path, command: str) -> bytes | None:
    data = _json_object(content, path)
    hooks = data.get("hooks", {})
    if not isinstance(hooks, dict):
        raise SetupError(f"{path}: \"hooks\" is not an object; setup will not touch it")
    wanted = copy.deepcopy(hooks)
    _without_our_hooks(wanted, keep=HOOK_EVENTS)
    groups: dict[str, dict[str, Any]] = {}
    for event in HOOK_EVENTS:
        listed = wanted.setdefault(event, [])
        if not isinstance(listed, list):
            raise SetupError(f"{path}: hooks.{event} is not a list; setup will not touch it")
        groups[event] = ({"matcher": "*"} if event in TOOL_EVENTS else {}) | {
            "hooks": [{"type": "command", "command": command}]}
        listed.append(groups[event])
    if wanted == hooks:
        return content
    expected = data | {"hooks": wanted}
    if content is None or not content.strip():
        return _dump_json(expected)

    def edit(text: str) -> str:
        text = _our_hooks_taken_out(text, keep=HOOK_EVENTS, drop_empty_hooks=False)
        root = jsontext.parse(text)
        if root.member("hooks") is None:
            return jsontext.add(text, root, {event: [groups[event]] for event in HOOK_EVENTS}, "hooks", root=root)
        for event in HOOK_EVENTS:
            hooks_node = root.member("hooks")
            assert hooks_node is not None
            listed = hooks_node.member(event)
            text = jsontext.add(text, hooks_node, [groups[event]], event, root=root) if listed is None else \
                jsontext.add(text, listed, groups[event], root=root)
            root = jsontext.parse(text)
        return text
    return _edited(content, expected, edit)


def hooks_removed(content: bytes | None, path: Path) -> bytes | None:
    data = _json_object(content, path)
    hooks = data.get("hooks")
    if content is None or not isinstance(hooks, dict):
        return content
    left = copy.deepcopy(hooks)
    _without_our_hooks(left)
    if left == hooks:
        return content
    expected = {k: v for k, v in data.items() if k != "hooks"} | ({"hooks": left} if left else {})
    return _edited(content, expected, lambda text: _our_hooks_taken_out(text, keep=(), drop_empty_hooks=True))


def server_added(content: bytes | None, path: Path, server: dict[str, Any], *, key: str = "mcpServers",
                 client: bool = False) -> bytes | None:
    """The file with Neverest's server among the servers under ``key``.  ``client``: the file of an agent
    reached by MCP only (comments allowed, nothing rewritten that the text edit cannot follow)."""
    data = _json_object(content, path, comments=client)
    servers = data.get(key, {})
    if not isinstance(servers, dict):
        raise SetupError(f"{path}: \"{key}\" is not an object; setup will not touch it")
    if servers.get(SERVER) == server:
        return content
    expected = data | {key: servers | {SERVER: server}}
    if content is None or not content.strip():
        return _dump_json(expected)

    def edit(text: str) -> str:
        root = jsontext.parse(text)
        node = root.member(key)
        if node is None:
            return jsontext.add(text, root, {SERVER: server}, key, root=root)
        if node.kind != "object":
            raise KeyError(key)
        return jsontext.set_member(text, node, SERVER, server)
    return _edited(content, expected, edit, path=path if client else None, comments=client)


def server_removed(content: bytes | None, path: Path, *, key: str = "mcpServers", client: bool = False,
                   drop_empty: bool = False) -> bytes | None:
    """The file without Neverest's server; ``drop_empty``: and without ``key`` when that leaves it empty
    (setup added it)."""
    data = _json_object(content, path, comments=client)
    servers = data.get(key)
    if content is None or not isinstance(servers, dict) or SERVER not in servers:
        return content
    left = {k: v for k, v in servers.items() if k != SERVER}
    drop = drop_empty and not left
    expected = {k: v for k, v in data.items() if k != key} if drop else data | {key: left}

    def edit(text: str) -> str:
        root = jsontext.parse(text)
        node = root.member(key)
        index = node.index(SERVER) if node is not None else None
        if node is None or index is None:
            raise KeyError(SERVER)
        if drop:
            at = root.index(key)
            assert at is not None
            return jsontext.remove(text, root, at)
        return jsontext.remove(text, node, index)
    return _edited(content, expected, edit, path=path if client else None, comments=client)


# -- Codex's TOML, edited as text ----------------------------------------------------------------

_HEADER: Final = re.compile(r"""^[ \t]*\[[ \t]*mcp_servers[ \t]*\.[ \t]*(?:neverest|"neverest"|'neverest')[ \t]*\]"""
                            r"""[ \t]*(?:#.*)?$""", re.MULTILINE)
_ANY_HEADER: Final = re.compile(r"^[ \t]*\[", re.MULTILINE)


def _toml_string(value: str) -> str:
    out = ['"']
    for ch in value:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return "".join(out) + '"'


def _toml(content: bytes | None, path: Path) -> tuple[str, dict[str, Any]]:
    try:
        text = (content or b"").decode("utf-8")
        return text, tomllib.loads(text)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SetupError(f"{path} is not valid TOML ({exc}); fix it, then run setup again") from None


def _block(text: str) -> tuple[int, int] | None:
    """Where our table's text is: its header to the next table header."""
    found = _HEADER.search(text)
    if found is None:
        return None
    following = _ANY_HEADER.search(text, found.end())
    return found.start(), following.start() if following else len(text)


def codex_added(content: bytes | None, path: Path, command: str, args: list[str]) -> bytes | None:
    text, data = _toml(content, path)
    servers = data.get("mcp_servers", {})
    if isinstance(servers, dict) and servers.get(SERVER) == {"command": command, "args": args}:
        return content
    table = (f"[mcp_servers.{SERVER}]\ncommand = {_toml_string(command)}\n"
             f"args = [{', '.join(_toml_string(a) for a in args)}]\n")
    where = _block(text)
    if where is not None:
        new = text[:where[0]] + table + ("\n" if where[1] < len(text) else "") + text[where[1]:]
    elif isinstance(servers, dict) and SERVER in servers:
        raise SetupError(f"{path} defines mcp_servers.{SERVER} other than as a [mcp_servers.{SERVER}] table; "
                         "remove it or write it as that table, then run setup again")
    else:
        new = text + ("\n" if text and not text.endswith("\n") else "") + ("\n" if text else "") + table
    expected = copy.deepcopy(data)
    expected.setdefault("mcp_servers", {})[SERVER] = {"command": command, "args": args}
    _, parsed = _toml(new.encode("utf-8"), path)
    if parsed != expected:  # the text edit must change our table and nothing else
        raise SetupError(f"{path}: the [mcp_servers.{SERVER}] table could not be replaced without touching "
                         "other keys; edit it by hand")
    return new.encode("utf-8")


def codex_removed(content: bytes | None, path: Path) -> bytes | None:
    text, _ = _toml(content, path)
    where = _block(text)
    if where is None:
        return content
    before = text[:where[0]]
    if where[1] == len(text) and before.endswith("\n\n"):
        before = before[:-1]  # the blank line setup put before the table it appended
    return (before + text[where[1]:]).encode("utf-8")


# -- Neverest's own config.toml: the agents wired (consent), edited as text ---------------------------

_AGENTS_LINE: Final = re.compile(r"^[ \t]*agents[ \t]*=.*(?:\n|$)", re.MULTILINE)


def _agents_listed(data: dict[str, Any]) -> list[str]:
    value = data.get("agents", [])
    items = value.split(",") if isinstance(value, str) else value if isinstance(value, list) else []
    return [str(item).strip() for item in items if str(item).strip()]


def agents_added(content: bytes | None, path: Path, agents: list[str]) -> bytes | None:
    """``agents`` in the memory's config.toml holding ``agents`` (those there already kept, in their order)."""
    text, data = _toml(content, path)
    had = _agents_listed(data)
    wanted = had + [a for a in agents if a not in had]
    if wanted == had and "agents" in data:
        return content
    line = f"agents = [{', '.join(_toml_string(a) for a in wanted)}]\n"
    found = list(_AGENTS_LINE.finditer(text))
    if len(found) == 1 and "agents" in data:
        new = text[:found[0].start()] + line + text[found[0].end():]
    elif "agents" in data:
        raise SetupError(f"{path} sets agents in a way setup cannot edit; write agents = {json.dumps(wanted)} "
                         "there by hand")
    else:
        new = text + ("\n" if text and not text.endswith("\n") else "") + CONSENT_COMMENT + "\n" + line
    try:
        _, parsed = _toml(new.encode("utf-8"), path)
    except SetupError:
        parsed = {}
    if parsed != data | {"agents": wanted}:  # the text edit must change the agents and nothing else
        raise SetupError(f"{path}: agents could not be set without touching other settings; write "
                         f"agents = {json.dumps(wanted)} there by hand")
    return new.encode("utf-8")


def agents_removed(content: bytes | None, path: Path) -> bytes | None:
    """The config.toml without its ``agents`` line (and setup's comment above it)."""
    text, data = _toml(content, path)
    found = list(_AGENTS_LINE.finditer(text))
    if "agents" not in data or len(found) != 1:
        return content
    before, after = text[:found[0].start()], text[found[0].end():]
    if before.endswith(CONSENT_COMMENT + "\n"):
        before = before[:-len(CONSENT_COMMENT) - 1]
    return (before + after).encode("utf-8")


# -- the daemon's unit ------------------------------------------------------------------------------


def _systemd_arg(arg: str) -> str:
    if arg and not re.search(r"[\s\"'\\$%;]", arg):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"').replace("$", "$$").replace("%", "%%") + '"'


def unit_text(daemon: tuple[str, ...]) -> bytes:
    return (
        "[Unit]\n"
        "Description=Neverest: the memory of this machine's coding agents\n"
        "After=network-online.target\n\n"
        "[Service]\n"
        f"ExecStart={' '.join(_systemd_arg(a) for a in daemon)}\n"
        "Restart=on-failure\n"
        "RestartSec=5\n\n"
        "[Install]\n"
        "WantedBy=default.target\n").encode()


# -- planning, applying, undoing -----------------------------------------------------------------


@dataclass
class Change:
    path: Path
    # Which remover undoes it: claude-settings, claude-config, codex-config, mcp-servers, neverest-config, unit.
    kind: str
    what: str
    content: bytes
    record: dict[str, Any] = field(default_factory=dict)  # kept in the manifest with the file (its agent, ...)


@dataclass
class Plan:
    changes: list[Change] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # The agents reached by MCP only, each {"agent", "label", "file", "status", "why"}; status: "wired" (this
    # run adds the server), "already wired" or "skipped".
    clients: list[dict[str, str]] = field(default_factory=list)


def _target(path: Path) -> Path:
    """A symlinked file (a dotfiles manager's) is changed where it points, and stays a link."""
    return path.resolve() if path.is_symlink() else path


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def plan(env: Environment) -> Plan:
    """What setup would change; raises SetupError before anything is written."""
    out = Plan()

    def consider(path: Path, kind: str, what: str, change: Callable[[bytes | None, Path], bytes | None],
                 record: dict[str, Any] | None = None) -> bool:
        path = _target(path)
        old = _read(path)
        new = change(old, path)
        if new is None or new == old:
            out.unchanged.append(f"{path}: {what}")
            return False
        out.changes.append(Change(path, kind, what, new, record or {}))
        return True

    if env.claude:
        command = shlex.join(env.hook)
        consider(env.claude_dir / "settings.json", "claude-settings",
                 f"hooks {', '.join(HOOK_EVENTS)} run `{command}`",
                 lambda c, p: hooks_added(c, p, command))
        server = {"type": "stdio", "command": env.ctl[0], "args": [*env.ctl[1:], "mcp"], "env": {}}
        consider(env.claude_json, "claude-config", f"MCP server {SERVER!r} (user scope) runs "
                 f"`{shlex.join([*env.ctl, 'mcp'])}`", lambda c, p: server_added(c, p, server))
    else:
        out.notes.append("Claude Code: not found (no ~/.claude, ~/.claude.json or `claude` on the PATH)")
    if env.codex:
        consider(env.codex_home / "config.toml", "codex-config",
                 f"[mcp_servers.{SERVER}] runs `{shlex.join([*env.ctl, 'mcp'])}`",
                 lambda c, p: codex_added(c, p, env.ctl[0], [*env.ctl[1:], "mcp"]))
    else:
        out.notes.append("Codex CLI: not found (no $CODEX_HOME, ~/.codex or `codex` on the PATH)")
    for client in env.mcp_clients:
        _consider_client(out, consider, client, env.ctl)
    reached = [c["label"] for c in out.clients if c["status"] != "skipped"]
    if reached:
        out.notes.append(f"{', '.join(reached)}: MCP server only; they call Neverest's tools, Neverest reads none of "
                         "their files (they are not in agents). Restart them (or refresh their MCP list) to start it.")
    agents = [name for name, found in ((CLAUDE_AGENT, env.claude), (CODEX_AGENT, env.codex)) if found]
    if agents:
        consider(env.config, "neverest-config", f"agents = {json.dumps(agents)}: Neverest may read these agents' "
                 "session files and write their memory files", lambda c, p: agents_added(c, p, agents))
        out.notes.append(consent_note(agents))
    unit = unit_text(env.daemon)
    unit_path = env.config_home / "systemd" / "user" / UNIT_NAME
    if env.systemd:
        consider(unit_path, "unit", "systemd user unit for neverestd", lambda c, p: unit)
        out.notes.append(f"to start the daemon now and at every login: {ENABLE_HINT}")
    else:
        out.notes.append(f"systemd is not running here: start `{shlex.join(env.daemon)}` your own way; "
                         f"with systemd, this unit goes in {unit_path}:\n{unit.decode()}")
    return out


def _consider_client(out: Plan, consider: Callable[..., bool], client: McpClient, ctl: tuple[str, ...]) -> None:
    """Neverest's server for an agent reached by MCP only, where it is installed; what was done said in
    ``out.clients``."""
    report = {"agent": client.name, "label": client.label, "file": os.fspath(client.file)}
    if not client.installed():
        out.clients.append(report | {"status": "skipped", "why": f"not installed (no {client.folder})"})
        return
    server = client.entry(ctl[0], [*ctl[1:], "mcp"])
    path = _target(client.file)
    old = _read(path)
    data = _json_object(old, path, comments=True)  # (a file that is not JSON stops here, naming itself)
    changed = consider(client.file, "mcp-servers", f"MCP server {SERVER!r} for {client.label} runs "
                       f"`{shlex.join([*ctl, 'mcp'])}`",
                       lambda c, p: server_added(c, p, server, key=client.key, client=True),
                       {"agent": client.name, "key": client.key, "added_key": client.key not in data})
    out.clients.append(report | {"status": "wired" if changed else "already wired",
                                 "why": f"its MCP servers are in {client.file} ({client.source})"})
    hint = client.hint(data)
    if hint:
        out.notes.append(hint)


def consent_note(agents: list[str]) -> str:
    """What wiring the agents lets Neverest touch, said once at setup."""
    what = {CLAUDE_AGENT: "Claude Code's session files (claude_dir, default ~/.claude/projects) and the "
                          "MEMORY.md of each project with lessons (delete one to opt that project out)",
            CODEX_AGENT: "Codex's session files (codex_dir, default $CODEX_HOME/sessions or ~/.codex/sessions)"}
    return ("Neverest reads and writes only what the agents wired here consent to: "
            + "; ".join(what[a] for a in agents)
            + ". Nothing of an agent's is read or written before setup; `neverestctl setup --undo` takes it back.")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _load_manifest(backups: Path) -> dict[str, Any]:
    try:
        data = json.loads((backups / MANIFEST).read_bytes())
    except FileNotFoundError:
        return {"files": {}}
    except ValueError as exc:
        raise SetupError(f"{backups / MANIFEST} is damaged ({exc}); the backups next to it are the "
                         "original files") from None
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        raise SetupError(f"{backups / MANIFEST} is damaged; the backups next to it are the original files")
    return data


def apply(env: Environment, todo: Plan) -> None:
    """Write the planned changes, keeping each file's original the first time it changes."""
    if not todo.changes:
        return
    env.backups.mkdir(mode=0o700, exist_ok=True)
    manifest = _load_manifest(env.backups)
    for change in todo.changes:
        key = os.fspath(change.path)
        old = _read(change.path)
        entry = manifest["files"].get(key)
        if entry is None:
            entry = {"kind": change.kind, "existed": old is not None, "backup": None, "mode": 0o600} | change.record
            if old is not None:
                entry["mode"] = stat.S_IMODE(change.path.stat().st_mode)
                entry["backup"] = f"{len(manifest['files'])}-{change.path.name}"
                atomic_write(env.backups / entry["backup"], old)
            else:
                entry["mode"] = 0o644 if change.kind == "unit" else 0o600
            manifest["files"][key] = entry
            atomic_write(env.backups / MANIFEST, _dump_json(manifest))  # the backup is known before the change
        mode = stat.S_IMODE(change.path.stat().st_mode) if old is not None else entry["mode"]
        change.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write(change.path, change.content, mode=mode)
        entry["written"] = _sha(change.content)
        atomic_write(env.backups / MANIFEST, _dump_json(manifest))


_REMOVERS: Final[dict[str, Callable[[bytes | None, Path], bytes | None]]] = {
    "claude-settings": hooks_removed, "claude-config": server_removed, "codex-config": codex_removed,
    "neverest-config": agents_removed,
}


def _remover(entry: Mapping[str, Any]) -> Callable[[bytes | None, Path], bytes | None] | None:
    """What takes Neverest's entries out of a file changed since setup, as the manifest describes it."""
    if entry["kind"] == "mcp-servers":
        key, drop = str(entry.get("key", "mcpServers")), bool(entry.get("added_key"))
        return lambda c, p: server_removed(c, p, key=key, client=True, drop_empty=drop)
    return _REMOVERS.get(entry["kind"])


def undo(env: Environment, *, dry_run: bool = False) -> list[dict[str, str]]:
    """Each file setup changed put back; what was done to each.  A file that can no longer be read (the
    person broke it since) is left as it is, and its original stays in the backups with the manifest."""
    manifest = _load_manifest(env.backups)
    done: list[dict[str, str]] = []
    kept: dict[str, Any] = {}
    for key, entry in manifest["files"].items():
        path = Path(key)
        current = _read(path)
        remover = _remover(entry)
        if current is not None and _sha(current) == entry.get("written"):
            if entry["existed"]:
                original = (env.backups / entry["backup"]).read_bytes()
                action = "restored byte for byte"
                if not dry_run:
                    atomic_write(path, original, mode=int(entry["mode"]))
            else:
                action = "removed (setup made it)"
                if not dry_run:
                    path.unlink()
        elif current is None:
            action = "already gone"
        elif remover is not None:
            try:
                new = remover(current, path)
            except SetupError as exc:
                kept[key] = entry
                was = f"its original is kept in {env.backups / entry['backup']}" if entry.get("backup") else \
                    "setup made it (there was no such file before)"
                done.append({"file": key, "action": f"not undone, left as it is: {exc}; {was}"}
                            | ({"agent": entry["agent"]} if entry.get("agent") else {}))
                continue
            action = "changed since setup: only Neverest's entries removed, the rest kept"
            if new != current and new is not None and not dry_run:
                atomic_write(path, new, mode=stat.S_IMODE(path.stat().st_mode))
        else:
            action = "changed since setup: left as it is"
        done.append({"file": key, "action": action} | ({"agent": entry["agent"]} if entry.get("agent") else {}))
    if not dry_run:
        for key, entry in manifest["files"].items():
            if entry.get("backup") and key not in kept:
                (env.backups / entry["backup"]).unlink(missing_ok=True)
        if kept:
            atomic_write(env.backups / MANIFEST, _dump_json(manifest | {"files": kept}))
        else:
            (env.backups / MANIFEST).unlink(missing_ok=True)
        if env.backups.is_dir() and not any(env.backups.iterdir()):
            env.backups.rmdir()
    return done
