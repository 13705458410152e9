"""The agents' doors as the daemon and the CLI run them: where the agents' files are (from the config),
the transcripts read into the memory, and the agent-facing renders that follow the memory's own.

Consent: an agent's session files are read, and its memory file written, only when the agent is in the
config's ``agents`` (``neverestctl setup`` writes it for the agents it wired; ``setup --undo`` takes it
back).  Without it the doors touch nothing of the agent's, except to take back the section this memory
wrote into a Claude Code memory file while it was wired."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from neverest.agents.ingest import default_codex_dir, ingest_transcripts
from neverest.agents.memory_file import claude_projects_dir, render_agent_memory, withdraw_agent_memory
from neverest.agents.transcripts import CLAUDE_AGENT, CODEX_AGENT
from neverest.config import Config
from neverest.files import atomic_write
from neverest.memory.render import MORNING_MD
from neverest.memory.service import Memory
from neverest.memory.views import LessonView

log = logging.getLogger("neverest.agents")


def claude_dir(config: Config) -> Path:
    """Claude Code's projects folder: ``claude_dir``, else ``$CLAUDE_CONFIG_DIR/projects`` or ``~/.claude/projects``."""
    return Path(config.claude_dir).expanduser() if config.claude_dir else claude_projects_dir()


def codex_dir(config: Config) -> Path:
    """Codex's sessions folder: ``codex_dir``, else ``$CODEX_HOME/sessions`` or ``~/.codex/sessions``."""
    return Path(config.codex_dir).expanduser() if config.codex_dir else default_codex_dir()


def wired(config: Config, agent: str) -> bool:
    """Whether the owner wired ``agent`` ("claude-code", "codex"): its files may be read and written."""
    return agent in config.agents


def ingest_agents(memory: Memory) -> dict[str, Any]:
    """What is new in the wired agents' session files, into the memory (every ingest_every_s, and before a
    night); an agent not wired is not read (``not_wired`` in the report names it)."""
    config = memory.config
    report = ingest_transcripts(memory, claude=claude_dir(config) if wired(config, CLAUDE_AGENT) else None,
                                codex=codex_dir(config) if wired(config, CODEX_AGENT) else None).to_json()
    return report | {"not_wired": [a for a in (CLAUDE_AGENT, CODEX_AGENT) if not wired(config, a)]}


def render_for_agents(memory: Memory, lessons: list[LessonView]) -> None:
    """After the memory's own renders: each project's section of Claude Code's MEMORY.md (when Claude Code
    is wired; else the sections written while it was are taken back), and the last day's measure at the end
    of the morning report."""
    try:
        if wired(memory.config, CLAUDE_AGENT):
            report = render_agent_memory(memory, claude_projects=claude_dir(memory.config), lessons=lessons)
            for note in report["opted_out_now"]:
                log.info("%s", note)
        else:
            withdraw_agent_memory(memory)
    except OSError as exc:  # the agent's folder is not writable: the memory's own renders stand
        log.warning("Claude Code's memory files: %s", exc)
    if memory.home is None:
        return
    morning = memory.home / MORNING_MD
    try:
        text = morning.read_text(encoding="utf-8")
    except OSError:
        return
    # Imported here: the measures bring numpy, which the daemon's ingest (this module) does not need.
    from neverest.agents.measure import last_day_summary

    atomic_write(morning, (text.rstrip("\n") + "\n" + last_day_summary(memory) + "\n").encode("utf-8"),
                 mode=0o600 if os.name == "posix" else 0o644)
