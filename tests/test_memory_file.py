"""Lessons rendered into Claude Code's own MEMORY.md: a managed section, the rest of the file
untouched byte for byte, candidates never written, a deleted line never written again."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import nacl.signing

from neverest.agents.memory_file import BEGIN, END, claude_projects_dir, project_slug, render_agent_memory
from neverest.clock import FixedClock, iso
from neverest.config import Config
from neverest.memory.queries import lessons
from neverest.memory.receive import receive
from neverest.memory.service import Memory
from neverest.records import lesson_hash, sign_confirm, sign_lesson

NOW = datetime(2026, 4, 1, tzinfo=UTC)
PROJECT = "/work/my_app.v2"
KEYS = [nacl.signing.SigningKey(bytes([i]) * 32) for i in range(20, 25)]
COMMON_TEXT = "pip install fails offline without a wheel cache"
CANDIDATE_TEXT = "the staging database drops idle connections after a minute"


def _memory(tmp_path: Path) -> Memory:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    return Memory.open(home, Config(trust="any"), FixedClock(NOW))


def _own_lesson(memory: Memory, text: str, cwd: str = PROJECT, strength: float = 1.0) -> str:
    memory.ingest([{"kind": "error", "agent": "t", "session": text, "cwd": cwd, "title": text, "happened": text}])
    episode = memory.store.db.execute("SELECT id FROM episodes WHERE title = ?", (text,)).fetchone()[0]
    digest = lesson_hash("error", text)
    with memory.store.write() as db:
        lessons.create(db, lessons.NewLesson(hash=digest, kind="error", text=text, cwd="", strength=strength,
                                             seen=1, created=iso(NOW), origin="", layer="personal", space=None,
                                             embedding=None, centroid=None, sources=[episode]))
    return digest


def _received(memory: Memory) -> None:
    """One received lesson made common by three confirmations, one left a candidate."""
    def signed(i: int, text: str) -> bytes:
        return sign_lesson(KEYS[i], kind="error", text=text, seen=1, strength=1.0, updated=iso(NOW), seq=1).raw
    records = [signed(0, COMMON_TEXT), signed(4, CANDIDATE_TEXT)]
    records += [sign_confirm(KEYS[i], lesson_hash("error", COMMON_TEXT), at=iso(NOW)).raw for i in (1, 2, 3)]
    receive(memory.store, records, source="t", own_origin=memory.identity.origin, config=memory.config, now=NOW)


def _file(projects: Path) -> Path:
    return projects / project_slug(PROJECT) / "memory" / "MEMORY.md"


def test_the_project_folder_name_is_claude_codes() -> None:
    assert project_slug("/home/me/my_app.v2") == "-home-me-my-app-v2"
    assert project_slug("C:\\Users\\a b") == "C--Users-a-b"
    assert project_slug("/x/é𝄞") == "-x----"  # one dash per UTF-16 unit


def test_the_section_holds_own_and_common_lessons_and_keeps_the_rest_byte_for_byte(tmp_path: Path) -> None:
    projects = tmp_path / "claude" / "projects"
    path = _file(projects)
    path.parent.mkdir(parents=True)
    before = b"# My notes\r\n\r\n- keep tabs\there \xff\xfe not even utf-8\n"
    after = b"\n## Later notes\nwritten by the agent\n"
    path.write_bytes(before + BEGIN + b"\nold stuff\n" + END + b"\n" + after)
    os.chmod(path, 0o640)
    with _memory(tmp_path) as memory:
        _own_lesson(memory, "npm ci fails behind the proxy")
        _own_lesson(memory, "cargo build needs the vendored openssl", cwd="/elsewhere")
        _received(memory)
        report = render_agent_memory(memory, claude_projects=projects)
    data = path.read_bytes()
    assert data.startswith(before + BEGIN) and data.endswith(END + b"\n" + after)
    text = data.decode("utf-8", "replace")
    assert "observations, not instructions" in text
    assert "npm ci fails behind the proxy" in text and "error, learned here from 1 episode(s)" in text
    assert COMMON_TEXT in text and "common in the network" in text
    assert CANDIDATE_TEXT not in text  # a candidate is never written
    assert "cargo build" not in text  # another project's lesson goes to its own file
    assert (projects / project_slug("/elsewhere") / "memory" / "MEMORY.md").read_bytes().count(b"cargo build") == 1
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # the file keeps its mode
    assert report["written"] == 2 and report["projects"] == 2
    assert not [p for p in path.parent.iterdir() if p.name != "MEMORY.md"]  # no temporary file left


def test_a_new_file_gets_the_section_and_a_second_render_changes_nothing(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    projects.mkdir()
    with _memory(tmp_path) as memory:
        _own_lesson(memory, "npm ci fails behind the proxy")
        render_agent_memory(memory, claude_projects=projects)
        first = _file(projects).read_bytes()
        assert first.startswith(BEGIN)
        inode = _file(projects).stat().st_ino
        report = render_agent_memory(memory, claude_projects=projects)
    assert report["unchanged"] == 1 and report["written"] == 0
    assert _file(projects).read_bytes() == first and _file(projects).stat().st_ino == inode


def test_a_deleted_line_is_not_written_again(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    projects.mkdir()
    with _memory(tmp_path) as memory:
        _own_lesson(memory, "npm ci fails behind the proxy", strength=2.0)
        _own_lesson(memory, "the tests need a running redis")
        render_agent_memory(memory, claude_projects=projects)
        path = _file(projects)
        lines = path.read_bytes().split(b"\n")
        path.write_bytes(b"\n".join(line for line in lines if b"redis" not in line))
        report = render_agent_memory(memory, claude_projects=projects)
        assert report["vetoed"] == 1
        # The lesson grows stronger and a new one arrives: the vetoed one still stays out.
        _own_lesson(memory, "the linter wants a trailing comma")
        with memory.store.write() as db:
            db.execute("UPDATE lessons SET strength = 5 WHERE text LIKE '%redis%'")
        render_agent_memory(memory, claude_projects=projects)
    text = path.read_text()
    assert "redis" not in text
    assert "npm ci fails" in text and "trailing comma" in text


def test_without_claude_code_nothing_is_written(tmp_path: Path) -> None:
    with _memory(tmp_path) as memory:
        _own_lesson(memory, "npm ci fails behind the proxy")
        report = render_agent_memory(memory, claude_projects=tmp_path / "absent")
    assert report["written"] == 0 and report["skipped"]
    assert not (tmp_path / "absent").exists()


def test_the_file_is_replaced_whole_never_written_in_place(tmp_path: Path) -> None:
    """A new inode: the new content went to a temporary file renamed over the old one, so a
    reader (the agent starting a session) sees the old file or the new one, never half."""
    projects = tmp_path / "projects"
    path = _file(projects)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"# mine\n")
    old = path.open("rb")  # a reader that opened the file before the render
    inode = path.stat().st_ino
    with _memory(tmp_path) as memory:
        _own_lesson(memory, "npm ci fails behind the proxy")
        render_agent_memory(memory, claude_projects=projects)
    assert path.stat().st_ino != inode
    assert old.read() == b"# mine\n"
    old.close()
    assert path.read_bytes().startswith(b"# mine\n\n" + BEGIN)


def test_a_project_whose_lessons_are_gone_loses_its_section_and_keeps_the_rest(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    path = _file(projects)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"# mine\n")
    with _memory(tmp_path) as memory:
        _own_lesson(memory, "npm ci fails behind the proxy")
        render_agent_memory(memory, claude_projects=projects)
        assert BEGIN in path.read_bytes()
        with memory.store.write() as db:
            db.execute("UPDATE lessons SET archived = 1")
        render_agent_memory(memory, claude_projects=projects)
    assert path.read_bytes() == b"# mine\n"


def test_where_claude_codes_projects_are() -> None:
    assert claude_projects_dir({"HOME": "/h"}) == Path("/h/.claude/projects")
    assert claude_projects_dir({"HOME": "/h", "CLAUDE_CONFIG_DIR": "/c"}) == Path("/c/projects")
