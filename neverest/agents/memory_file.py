"""Lessons rendered into the coding agent's own memory file, for each project that has some.

Claude Code loads the first lines of an auto memory file at the start of every session in a
project: ``~/.claude/projects/<project>/memory/MEMORY.md``, where ``<project>`` is the working
folder with every character other than an ASCII letter or digit replaced by ``-``.  "The first 200
lines of MEMORY.md, or the first 25KB, whichever comes first, are loaded at the start of every
conversation" (https://code.claude.com/docs/en/memory, "Auto memory"): the rest is read only if the
agent opens the file.  The memory owns one section of that file, between two markers; the rest of
the file belongs to the person and to the agent, and is kept byte for byte, every line in its order.

Where the section goes: near the top, so that it is among what is loaded: after a first heading (and
a YAML front matter) when the file opens with one, else at the very top.  A section already in the
file stays where it is while it ends within the loaded lines and bytes (a re-render moves nothing);
one that ends beyond them (the bottom of a long file, where versions before this one appended it) is
moved up.  The section itself is kept short: at most ``MAX_LINES`` lessons and ``MAX_SECTION_BYTES``.

What goes in: this memory's own lessons learned in the project (a lesson's project is the
working folder of the episodes it was learned from) and the lessons received from other
memories that are ``common`` here, never a candidate; each line is an observation with its kind
and where it came from, under a heading that says they are not instructions.

The veto list: a line the person deleted from the section is never written again.  The hashes
written to each file are kept in the store; a hash written last time and missing now was
deleted, and joins the file's vetoed hashes.

A deleted file is an opt-out: when the file this memory last left holding its section is gone,
the owner removed it, and the project is not written to again (nothing is re-created); the opt-out
is recorded with the file, shown by ``neverestctl memory-file``, and taken back by ``neverestctl
memory-file on PROJECT``.  A file left with nothing but the section is removed when the section has
nothing left to show (after ``forget``, say), so no empty file stays behind.

Only written when Claude Code is wired (``agents`` in the config, which ``neverestctl setup`` writes);
when it is not, ``withdraw_agent_memory`` takes back every section written while it was.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from neverest.clock import iso
from neverest.files import atomic_write
from neverest.memory.queries import agent_memory
from neverest.memory.service import Memory
from neverest.memory.views import LessonView, framing, one_line

BEGIN: Final = b"<!-- neverest:begin -->"
END: Final = b"<!-- neverest:end -->"
MEMORY_FILE: Final = "MEMORY.md"
MAX_LINES: Final = 20  # the agent loads only the first lines of the file: the section stays short
MAX_SECTION_BYTES: Final = 8000  # and small: 20 lines of 300 characters can be 24 KB of UTF-8
LOADED_LINES: Final = 200  # what Claude Code loads of MEMORY.md: its first 200 lines...
LOADED_BYTES: Final = 25_000  # ...or its first 25 KB, whichever comes first
MAX_TEXT: Final = 300
TAG_LEN: Final = 12
_TAG: Final = re.compile(rb"\(id ([^()\s]{1,%d})\)" % TAG_LEN)
_SLUG_MAX: Final = 200
_ATX_HEADING: Final = re.compile(rb"[ ]{0,3}#{1,6}(?:[ \t].*)?\r?")
_SETEXT_UNDERLINE: Final = re.compile(rb"[ ]{0,3}(?:=+|-+)[ \t]*\r?")
_FRONT_MATTER: Final = re.compile(rb"---[ \t]*\r?")


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


def _line(lesson: LessonView) -> str:
    where = lesson.source if lesson.own else f"{lesson.state} in the network, {lesson.source}"
    text = one_line(lesson.text, MAX_TEXT).replace("<!--", "<!-").replace("-->", "->")  # the markers are ours
    return f"- {lesson.kind}, {where} (id {lesson.hash[:TAG_LEN]}): {text}"


def section(lines: list[str]) -> bytes:
    body = ["## Neverest: observations, not instructions", "",
            f"From this machine's memory, and the lessons common among the memories it trusts: {framing()}. "
            "Delete a line and it is not written again.", "",
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


def _lines(content: bytes) -> list[tuple[int, int]]:
    """Each line's (start, end), ``end`` past its newline (the last line may have none)."""
    out: list[tuple[int, int]] = []
    start = 0
    while start < len(content):
        stop = content.find(b"\n", start)
        end = len(content) if stop < 0 else stop + 1
        out.append((start, end))
        start = end
    return out


def insertion_point(content: bytes) -> int:
    """Where a new section goes: past a YAML front matter and a first heading the file opens with
    (blank lines before the heading allowed), else the top.  Only past a line that ends with a
    newline, so that no line of the person's changes."""
    lines = _lines(content)
    i, at = 0, 0
    if lines and _FRONT_MATTER.fullmatch(content[lines[0][0]:lines[0][1]].rstrip(b"\n")):
        for j in range(1, min(len(lines), LOADED_LINES)):
            start, end = lines[j]
            if _FRONT_MATTER.fullmatch(content[start:end].rstrip(b"\n")) and content[start:end].endswith(b"\n"):
                i, at = j + 1, end
                break
    while i < len(lines) and not content[lines[i][0]:lines[i][1]].strip():
        i += 1
    if i >= len(lines):
        return at
    start, end = lines[i]
    line = content[start:end]
    if _ATX_HEADING.fullmatch(line.rstrip(b"\n")):
        return end if line.endswith(b"\n") else at
    if i + 1 < len(lines):
        under = content[lines[i + 1][0]:lines[i + 1][1]]
        if _SETEXT_UNDERLINE.fullmatch(under.rstrip(b"\n")) and under.endswith(b"\n"):
            return lines[i + 1][1]
    return at


def loaded(data: bytes, end: int) -> bool:
    """Whether ``data[:end]`` lies within what Claude Code loads of the file."""
    return end <= LOADED_BYTES and data.count(b"\n", 0, end) <= LOADED_LINES


def replaced(content: bytes | None, new_section: bytes | None) -> bytes:
    """The file with its section replaced by ``new_section`` (None: removed).  The section stays where
    it is while it ends within what the agent loads; otherwise, or when the file has none, it goes to
    ``insertion_point`` (the top, if even that would end beyond it)."""
    before, old, after = split(content or b"")
    if old is not None:
        if new_section is not None:
            data = before + new_section + after
            if loaded(data, len(before) + len(new_section)):
                return data
        if not after and before.endswith(b"\n\n"):
            before = before[:-1]  # the blank line put before a section appended at the end (before 0.1.1)
        rest = before + after
    else:
        rest = content or b""
    if new_section is None:
        return rest
    at = insertion_point(rest)
    if not loaded(rest[:at] + new_section, at + len(new_section)):
        at = 0
    return rest[:at] + new_section + rest[at:]


def _read(path: Path) -> tuple[bytes | None, int]:
    try:
        return path.read_bytes(), stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return None, 0o600


def _report() -> dict[str, Any]:
    return {"projects": 0, "written": 0, "unchanged": 0, "removed": 0, "vetoed": 0, "opted_out": 0,
            "opted_out_now": [], "skipped": []}


def render_agent_memory(memory: Memory, *, claude_projects: Path, lessons: list[LessonView] | None = None
                        ) -> dict[str, Any]:
    """Write each project's section from ``lessons`` (``memory.lessons()`` unless given); what was done, as
    a JSON-able report."""
    report = _report()
    if not claude_projects.is_dir():
        report["skipped"].append(f"{claude_projects} does not exist (Claude Code not used here)")
        return report
    lessons = memory.lessons() if lessons is None else lessons
    own: dict[str, list[LessonView]] = {}
    for lesson in lessons:
        if lesson.own:
            for project in lesson.projects:
                own.setdefault(project, []).append(lesson)
    # Received lessons are shown only when common, once each, in every project; never one learned here too.
    from neverest.commons import COMMON  # here: the commons module brings numpy, which ingest does not need

    own_hashes = {lesson.hash for lesson in lessons if lesson.own}
    received: dict[str, LessonView] = {}
    for lesson in lessons:
        if not lesson.own and lesson.hash not in own_hashes and lesson.state == COMMON:
            received.setdefault(lesson.hash, lesson)

    done: set[str] = set()
    for project, learned in sorted(own.items()):
        folder = project_folder(claude_projects, project)
        if folder is None:
            report["skipped"].append(f"{project}: its Claude Code folder name is cut and none matches")
            continue
        report["projects"] += 1
        path = memory_file(folder)
        _render_file(memory, path, learned + list(received.values()), report, project=project)
        done.add(os.fspath(path))
    # A project whose lessons are all gone (archived, forgotten) loses its section.
    for name in agent_memory.files(memory.store.db):
        if name not in done and Path(name).is_file():
            _render_file(memory, Path(name), [], report)
    return report


def memory_file(folder: Path) -> Path:
    """The MEMORY.md of a project's folder (where a symlink points, when it is one)."""
    path = folder / "memory" / MEMORY_FILE
    return path.resolve() if path.is_symlink() else path


def _render_file(memory: Memory, path: Path, candidates: list[LessonView], report: dict[str, Any], *,
                 project: str = "") -> None:
    """Write one file's section: the candidates not vetoed, at most ``MAX_LINES`` and ``MAX_SECTION_BYTES``;
    none removes it (and the file, when nothing else is in it).  A file opted out is left alone; a file
    gone since this memory last left its section in it is the owner's opt-out, recorded."""
    db = memory.store.db
    key = os.fspath(path)
    content, mode = _read(path)
    record = agent_memory.state(db, key)
    if record.opted_out:
        report["opted_out"] += 1
        return
    if content is None and record.written:
        with memory.store.write() as wdb:
            agent_memory.set_written(wdb, key, [], record.vetoed, opted_out=iso(memory.clock.now()))
        report["opted_out"] += 1
        report["opted_out_now"].append(
            f"{key} was deleted: this project is opted out and its memory file is not written again; "
            f"`neverestctl memory-file on {shlex.quote(project or key)}` opts it back in")
        return
    _, old_section, _ = split(content or b"")
    present = set(_TAG.findall(old_section or b""))
    newly = [h for h in record.written if h[:TAG_LEN].encode() not in present and h not in record.vetoed]
    vetoed = sorted({*record.vetoed, *newly})
    report["vetoed"] += len(newly)
    chosen = [lesson for lesson in candidates if lesson.hash not in vetoed][:MAX_LINES]
    lines = [_line(lesson) for lesson in chosen]
    while lines and len(section(lines)) > MAX_SECTION_BYTES:
        lines.pop()
    chosen = chosen[:len(lines)]
    new_section = section(lines) if lines else None
    data = replaced(content, new_section)
    if (content is None and new_section is None) or data == content:
        report["unchanged"] += 1
    elif not data:  # nothing but the section was in the file, and nothing is left to show
        path.unlink(missing_ok=True)
        report["removed"] += 1
    else:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write(path, data, mode=mode)
        report["written"] += 1
    with memory.store.write() as wdb:
        agent_memory.set_written(wdb, key, [lesson.hash for lesson in chosen], vetoed)


def withdraw_agent_memory(memory: Memory) -> dict[str, Any]:
    """Claude Code is not wired (any more): every section this memory wrote is taken back (a file left
    with nothing else is removed), and the records forget what was written, so that wiring it again
    starts afresh (the vetoes and opt-outs stay)."""
    report = _report()
    db = memory.store.db
    for name in agent_memory.files(db):
        record = agent_memory.state(db, name)
        if record.opted_out or not record.written:
            continue
        if Path(name).is_file():
            _render_file(memory, Path(name), [], report)
        else:
            with memory.store.write() as wdb:
                agent_memory.set_written(wdb, name, [], record.vetoed)
    return report


class MemoryFileError(Exception):
    """No memory file answers to what was named."""


def _named(memory: Memory, claude_projects: Path, what: str) -> str:
    """The recorded memory file a project folder (or the file's own path) names."""
    known = agent_memory.files(memory.store.db)
    given = Path(what).expanduser()
    if given.name == MEMORY_FILE and os.fspath(given.absolute()) in known:
        return os.fspath(given.absolute())
    folder = project_folder(claude_projects, os.fspath(given.absolute()))
    if folder is not None:
        path = os.fspath(memory_file(folder))
        if path in known:
            return path
    raise MemoryFileError(f"{what}: no memory file of this memory's (neverestctl memory-file lists them)")


def listing(memory: Memory) -> list[dict[str, Any]]:
    """Every memory file a section was written to, with what it holds and whether it is opted out."""
    db = memory.store.db
    out = []
    for name in sorted(agent_memory.files(db)):
        record = agent_memory.state(db, name)
        out.append({"file": name, "lessons": len(record.written), "vetoed": len(record.vetoed),
                    "opted_out": record.opted_out or None, "exists": Path(name).is_file()})
    return out


def opt_in(memory: Memory, claude_projects: Path, what: str) -> str:
    """Take back an opt-out: the file is written again at the next render (lines vetoed stay out)."""
    name = _named(memory, claude_projects, what)
    record = agent_memory.state(memory.store.db, name)
    with memory.store.write() as wdb:
        agent_memory.set_written(wdb, name, [] if record.opted_out else record.written, record.vetoed)
    return name


def opt_out(memory: Memory, claude_projects: Path, what: str) -> str:
    """Opt a project out as deleting its file does, its section removed now (the file kept when the
    person's lines are in it)."""
    name = _named(memory, claude_projects, what)
    if Path(name).is_file():
        _render_file(memory, Path(name), [], _report())
    record = agent_memory.state(memory.store.db, name)
    with memory.store.write() as wdb:
        agent_memory.set_written(wdb, name, [], record.vetoed, opted_out=iso(memory.clock.now()))
    return name
