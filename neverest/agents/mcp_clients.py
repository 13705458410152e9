"""The agents that Neverest reaches by MCP only: Claude Desktop, Cursor, Windsurf and Gemini CLI.

Each keeps its MCP servers in a JSON file of its own, in its own place and under its own key; ``setup``
adds the server ``neverest`` (``neverestctl mcp`` over stdio) there, and only where the agent is installed:
its configuration folder exists (setup makes no folder for an agent that is not there).  Neverest reads
none of these agents' files and writes nothing else of theirs: they call its tools, so they are not in
the memory's ``agents`` (the consent to read an agent's session files, for Claude Code and Codex); what
setup wired is recorded in its manifest (``<home>/setup/manifest.json``, each file with its agent), which
``setup --undo`` reads.

What each agent's documentation says (checked against these pages; the formats are the agents' own):

- Claude Desktop: ``claude_desktop_config.json`` in the app's folder, ``~/Library/Application Support/Claude``
  (macOS) or ``%APPDATA%\\Claude`` (Windows); ``{"mcpServers": {NAME: {"command", "args", "env"}}}``.
  https://modelcontextprotocol.io/docs/develop/connect-local-servers (source:
  modelcontextprotocol/modelcontextprotocol, docs/docs/develop/connect-local-servers.mdx).  There is no
  Linux build from Anthropic: the community's (and Electron's own rule for an app's folder) use
  ``$XDG_CONFIG_HOME/Claude``, ``~/.config/Claude``.  Claude Desktop reads the file with ``JSON.parse``: no comments.
- Cursor: ``~/.cursor/mcp.json`` for every project (``.cursor/mcp.json`` in a project, not touched here);
  ``{"mcpServers": {NAME: {"command", "args", "env"}}}`` for a stdio server, ``url`` for a remote one.
  https://cursor.com/docs/mcp (formerly https://docs.cursor.com/context/model-context-protocol).
- Windsurf: ``~/.codeium/windsurf/mcp_config.json`` (the raw file behind Windsurf Settings > Cascade > MCP
  Servers), ``{"mcpServers": {NAME: {"command", "args", "env"}}}``, a remote server by ``serverUrl``.
  https://docs.windsurf.com/windsurf/cascade/mcp (and, for the file's place and the remote key,
  github/github-mcp-server docs/installation-guides/install-windsurf.md); the JetBrains plugin's
  ``~/.codeium/mcp_config.json`` (https://docs.windsurf.com/plugins/cascade/mcp) is another file, not touched.
- Gemini CLI: ``~/.gemini/settings.json`` (``$GEMINI_CLI_HOME/.gemini`` when that is set), the CLI's whole
  settings file (``general``, ``ui``, ``mcp``, ... stay as they are) with ``mcpServers``: ``{NAME: {"command",
  "args", "env", "cwd", "timeout", "trust", ...}}``, a remote one by ``url`` or ``httpUrl``; its schema allows
  no other key in a server (``additionalProperties: false``), and the CLI strips comments before parsing.
  https://geminicli.com/docs/tools/mcp-server and https://geminicli.com/docs/reference/configuration
  (google-gemini/gemini-cli: docs/tools/mcp-server.md, docs/reference/configuration.md,
  schemas/settings.schema.json, packages/cli/src/config/settings.ts).

The entry written is the shape every one of them documents for a local server: ``command`` (the absolute
path of ``neverestctl``) and ``args``, nothing else (Gemini's schema refuses an unknown key such as ``type``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

CLAUDE_DESKTOP: Final = "claude-desktop"
CURSOR: Final = "cursor"
WINDSURF: Final = "windsurf"
GEMINI_CLI: Final = "gemini-cli"


@dataclass(frozen=True)
class McpClient:
    """One agent that takes Neverest's MCP server, and where and how it keeps its servers."""

    name: str  # as the manifest records it
    label: str  # as people call it
    folder: Path  # its configuration folder: it is installed when this exists
    file: Path  # the JSON file holding its MCP servers
    key: str  # the member of that file's top object holding the servers, by name
    source: str  # the documentation this follows

    def installed(self) -> bool:
        return self.folder.is_dir()

    def entry(self, command: str, args: list[str]) -> dict[str, Any]:
        """Neverest's server as this agent's file writes a local (stdio) server."""
        return {"command": command, "args": args}

    def hint(self, data: Mapping[str, Any]) -> str | None:
        """What the person must do for the agent to start the server, seen in its settings (``data``), if
        anything: Gemini CLI starts only the servers ``mcp.allowed`` lists, when it lists any, and none
        that ``mcp.excluded`` does."""
        if self.name != GEMINI_CLI:
            return None
        mcp = data.get("mcp")
        if not isinstance(mcp, Mapping):
            return None
        allowed, excluded = mcp.get("allowed"), mcp.get("excluded")
        if isinstance(excluded, list) and "neverest" in excluded:
            return f'{self.label}: "neverest" is in mcp.excluded in {self.file}: take it out for Gemini to start it'
        if isinstance(allowed, list) and allowed and "neverest" not in allowed:
            return f'{self.label}: mcp.allowed in {self.file} does not list "neverest": add it for Gemini to start it'
        return None


def claude_desktop_folder(home: Path, config_home: Path, environ: Mapping[str, str], platform: str) -> Path:
    """Claude Desktop's folder: macOS and Windows as Anthropic documents them; elsewhere (the community's
    Linux builds) Electron's rule, ``$XDG_CONFIG_HOME/Claude``."""
    if platform == "darwin":
        return home / "Library" / "Application Support" / "Claude"
    if platform.startswith("win"):
        return Path(environ.get("APPDATA") or home / "AppData" / "Roaming") / "Claude"
    return config_home / "Claude"


def detect(home: Path, config_home: Path, environ: Mapping[str, str] | None = None,
           platform: str | None = None) -> tuple[McpClient, ...]:
    """The four agents, with their files where this machine would have them (installed or not)."""
    env = os.environ if environ is None else environ
    platform = sys.platform if platform is None else platform
    desktop = claude_desktop_folder(home, config_home, env, platform)
    gemini = (Path(env["GEMINI_CLI_HOME"]).expanduser() if env.get("GEMINI_CLI_HOME") else home) / ".gemini"
    return (
        McpClient(CLAUDE_DESKTOP, "Claude Desktop", desktop, desktop / "claude_desktop_config.json", "mcpServers",
                  "https://modelcontextprotocol.io/docs/develop/connect-local-servers"),
        McpClient(CURSOR, "Cursor", home / ".cursor", home / ".cursor" / "mcp.json", "mcpServers",
                  "https://cursor.com/docs/mcp"),
        McpClient(WINDSURF, "Windsurf", home / ".codeium" / "windsurf",
                  home / ".codeium" / "windsurf" / "mcp_config.json", "mcpServers",
                  "https://docs.windsurf.com/windsurf/cascade/mcp"),
        McpClient(GEMINI_CLI, "Gemini CLI", gemini, gemini / "settings.json", "mcpServers",
                  "https://geminicli.com/docs/tools/mcp-server"),
    )
