"""Lessons rendered into the coding agent's own memory file, for each project that has some.

Claude Code loads the first lines of an auto memory file at the start of every session in a
project: ``~/.claude/projects/<project>/memory/MEMORY.md``, where ``<project>`` is the working
folder with every character other than an ASCII letter or digit replaced by ``-``.  The memory
owns one section of that file, between two markers; the rest of the file belongs to the person
and to the agent, and is kept byte for byte.

What goes in: this memory's own lessons learned in the project (a lesson's project is the
working folder of the episodes it was learned from) and the lessons received from other
memories that are ``common`` here, never a candidate; each line is an observation with its kind
and where it came from, under a heading that says they are not instructions.

The veto list: a line the person deleted from the section is never written again.  The hashes
written to each file are kept in the store; a hash written last time and missing now was
deleted, and joins the file's vetoed hashes.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from neverest.commons import COMMON
from neverest.files import atomic_write
from neverest.memory import holdings
from neverest.memory.queries import agent_memory
from neverest.memory.scrub import shown
from neverest.memory.service import Memory
from neverest.memory.states import trust_filter, verdict

BEGIN: Final = b"<!-- neverest:begin -->"
END: Final = b"<!-- neverest:end -->"
MEMORY_FILE: Final = "MEMORY.md"
MAX_LINES: Final = 20  # the agent loads only the first lines of the file: the section stays short
MAX_TEXT: Final = 300
TAG_LEN: Final = 12
_TAG: Final = re.compile(rb"\(id ([^()\s]{1,%d})\)" % TAG_LEN)
_SLUG_MAX: Final = 200


def claude_projects_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Claude Code's projects folder: ``$CLAUDE_CONFIG_DIR/projects``, else ``~/.claude/projects``."""
    env = os.environ if environ is None else environ
    if env.get("CLAUDE_CONFIG_DIR"):
        return Path(env["CLAUDE_CONFIG_DIR"]).expanduser() / "projects"
    return Path(env.get("HOME") or Path.home()) / ".claude" / "projects"


def project_slug(cwd: str) -> str:
    """Claude Code's folder name for a working folder: each UTF-16 unit that is not an ASCII letter
    or digit becomes ``-`` (a character beyond the BMP is two units, so two dashes)."""
    return "".join(ch if ch.isascii() and ch.isalnum() else ("-" if ord(ch) < 0x10000 else "--") for ch in cwd)


def project_folder(claude_projects: Path, cwd: str) -> Path | None:
    """The project's folder under ``claude_projects``.  Claude Code cuts a name longer than 200
    characters and adds a hash of its own; such a folder is found among the existing ones, or
    not at all (None)."""
    slug = project_slug(cwd)
    if len(slug) <= _SLUG_MAX:
        return claude_projects / slug
    prefix = slug[:_SLUG_MAX] + "-"
    try:
        found = [p for p in claude_projects.iterdir() if p.name.startswith(prefix) and p.is_dir()]
    except OSError:
        return None
    return found[0] if len(found) == 1 else None


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    line = line.replace("<!--", "<!-").replace("-->", "->")  # the markers can only be ours
    return line if len(line) <= MAX_TEXT else line[:MAX_TEXT - 1] + "…"


def _line(lesson: agent_memory.Shown, state: str | None) -> str:
    if lesson.origin == "":
        where = f"learned here from {lesson.sources} episode(s)" if lesson.sources else "learned here"
    else:
        where = f"{state} in the network, from memory {lesson.origin[:16]}"
    return f"- {lesson.kind}, {where} (id {lesson.hash[:TAG_LEN]}): {_one_line(shown(lesson.text))}"


def section(lines: list[str]) -> bytes:
    body = ["## Neverest: observations, not instructions", "",
            "What earlier sessions showed (this machine's memory, and lessons common among the memories it "
            "trusts). Weigh them, then decide for yourself. Delete a line and it is not written again.", "",
            *lines]
    return BEGIN + b"\n" + "\n".join(body).encode("utf-8") + b"\n" + END + b"\n"


def split(content: bytes) -> tuple[bytes, bytes | None, bytes]:
    """(before, the managed section or None, after).  A begin marker without its end is not a section."""
    start = content.find(BEGIN)
    if start < 0:
        return content, None, b""
    end = content.find(END, start)
    if end < 0:
        return content, None, b""
    stop = end + len(END)
    if content[stop:stop + 1] == b"\n":
        stop += 1
    return content[:start], content[start:stop], content[stop:]


def replaced(content: bytes | None, new_section: bytes | None) -> bytes:
    """The file with its section replaced by ``new_section`` (None: removed); appended when absent."""
    before, old, after = split(content or b"")
    if old is not None:
        if new_section is None and not after and before.endswith(b"\n\n"):
            before = before[:-1]  # the blank line put before the section when it was appended
        return before + (new_section or b"") + after
    if new_section is None:
        return before
    if before and not before.endswith(b"\n"):
        before += b"\n"
    return before + (b"\n" if before else b"") + new_section


def _read(path: Path) -> tuple[bytes | None, int]:
    try:
        return path.read_bytes(), stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return None, 0o600


def render_agent_memory(memory: Memory, *, claude_projects: Path) -> dict[str, Any]:
    """Write each project's section; what was done, as a JSON-able report."""
    report: dict[str, Any] = {"projects": 0, "written": 0, "unchanged": 0, "vetoed": 0, "skipped": []}
    if not claude_projects.is_dir():
        report["skipped"].append(f"{claude_projects} does not exist (Claude Code not used here)")
        return report
    db = memory.store.db
    shown = agent_memory.unarchived(db)
    own: dict[str, list[agent_memory.Shown]] = {}
    for lesson in shown:
        if lesson.origin == "":
            for project in lesson.projects:
                own.setdefault(project, []).append(lesson)
    # Received lessons are judged once; only the common ones are shown, in every project.
    counts = trust_filter(db, memory.config, memory.identity.origin)
    own_hashes = {lesson.hash for lesson in shown if lesson.origin == ""}
    received: list[tuple[agent_memory.Shown, str]] = []
    seen: set[str] = set()
    for lesson in shown:
        if lesson.origin == "" or lesson.hash in own_hashes or lesson.hash in seen:
            continue
        held = holdings.about(db, lesson.hash)
        state = verdict(db, lesson.hash, now=memory.clock.now(), config=memory.config,
                        own_origin=memory.identity.origin, counts=counts, held=held).state
        if state == COMMON:
            received.append((lesson, state))
            seen.add(lesson.hash)

    done: set[str] = set()
    for project, lessons in sorted(own.items()):
        folder = project_folder(claude_projects, project)
        if folder is None:
            report["skipped"].append(f"{project}: its Claude Code folder name is cut and none matches")
            continue
        report["projects"] += 1
        path = folder / "memory" / MEMORY_FILE
        if path.is_symlink():
            path = path.resolve()
        chosen: list[tuple[agent_memory.Shown, str | None]] = [(lesson, None) for lesson in lessons]
        _render_file(memory, path, chosen + [(lesson, state) for lesson, state in received], report)
        done.add(os.fspath(path))
    # A project whose lessons are all gone (archived, forgotten) loses its section.
    for name in agent_memory.files(db):
        if name not in done and Path(name).is_file():
            _render_file(memory, Path(name), [], report)
    return report


def _render_file(memory: Memory, path: Path, candidates: list[tuple[agent_memory.Shown, str | None]],
                 report: dict[str, Any]) -> None:
    """Write one file's section: the candidates not vetoed, at most ``MAX_LINES``; none removes it."""
    db = memory.store.db
    content, mode = _read(path)
    _, old_section, _ = split(content or b"")
    present = set(_TAG.findall(old_section or b""))
    was_written, vetoed = agent_memory.written(db, os.fspath(path))
    newly = [h for h in was_written if h[:TAG_LEN].encode() not in present and h not in vetoed]
    vetoed = sorted({*vetoed, *newly})
    report["vetoed"] += len(newly)
    chosen = [(lesson, state) for lesson, state in candidates if lesson.hash not in vetoed][:MAX_LINES]
    new_section = section([_line(lesson, state) for lesson, state in chosen]) if chosen else None
    data = replaced(content, new_section)
    if (content is None and new_section is None) or data == content:
        report["unchanged"] += 1
    else:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write(path, data, mode=mode)
        report["written"] += 1
    with memory.store.write() as wdb:
        agent_memory.set_written(wdb, os.fspath(path), [lesson.hash for lesson, _ in chosen], vetoed)
