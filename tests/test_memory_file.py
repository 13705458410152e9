"""Lessons rendered into Claude Code's own MEMORY.md: a managed section, the rest of the file
untouched byte for byte, candidates never written, a deleted line never written again."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import nacl.signing
import pytest

from neverest.agents.memory_file import (
    BEGIN,
    END,
    LOADED_BYTES,
    LOADED_LINES,
    MAX_SECTION_BYTES,
    claude_projects_dir,
    listing,
    opt_in,
    opt_out,
    project_slug,
    render_agent_memory,
    split,
    withdraw_agent_memory,
)
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
    assert path.read_bytes().startswith(b"# mine\n" + BEGIN)  # right under the first heading


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


def _persons_lines(data: bytes) -> list[bytes]:
    """The file's lines outside the managed section, each with its line ending."""
    before, section, after = split(data)
    assert section is not None
    return (before + after).splitlines(keepends=True)


def _within_loaded(data: bytes) -> bool:
    end = data.index(END) + len(END) + 1
    return end <= LOADED_BYTES and data[:end].count(b"\n") <= LOADED_LINES


def test_in_a_long_file_the_section_goes_near_the_top_and_every_line_of_the_person_stays(tmp_path: Path) -> None:
    """Claude Code loads only the first 200 lines (or 25 KB) of MEMORY.md: the section goes under the
    first heading, within them, and the person's 500 lines stay byte for byte and in order."""
    projects = tmp_path / "projects"
    path = _file(projects)
    path.parent.mkdir(parents=True)
    original = b"# Project memory\n\n" + b"".join(b"- note %d: keep\tthis \xe2\x9c\x93 as it is\r\n" % i
                                                   for i in range(498))
    assert original.count(b"\n") == 500
    path.write_bytes(original)
    with _memory(tmp_path) as memory:
        _own_lesson(memory, "npm ci fails behind the proxy")
        render_agent_memory(memory, claude_projects=projects)
        data = path.read_bytes()
        assert data.startswith(b"# Project memory\n" + BEGIN)
        assert _within_loaded(data) and b"npm ci fails behind the proxy" in data
        assert _persons_lines(data) == original.splitlines(keepends=True)
        # A second render moves nothing, and neither does one that changes the section's lines.
        inode = path.stat().st_ino
        assert render_agent_memory(memory, claude_projects=projects)["unchanged"] == 1
        assert path.read_bytes() == data and path.stat().st_ino == inode
        _own_lesson(memory, "the tests need a running redis", strength=2.0)
        render_agent_memory(memory, claude_projects=projects)
        again = path.read_bytes()
        assert again.index(BEGIN) == data.index(BEGIN) and b"running redis" in again
        assert _persons_lines(again) == original.splitlines(keepends=True)


def test_a_section_left_at_the_bottom_by_an_older_version_is_moved_up(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    path = _file(projects)
    path.parent.mkdir(parents=True)
    person = b"".join(b"line %d of the person's notes\n" % i for i in range(300))
    # What versions before this one wrote: the section appended at the end after a blank line.
    path.write_bytes(person + b"\n" + BEGIN + b"\n## old heading\n- error (id 0123456789ab): old\n" + END + b"\n")
    with _memory(tmp_path) as memory:
        _own_lesson(memory, "npm ci fails behind the proxy")
        render_agent_memory(memory, claude_projects=projects)
        data = path.read_bytes()
        assert data.startswith(BEGIN) and _within_loaded(data)  # no heading: at the very top
        assert _persons_lines(data) == person.splitlines(keepends=True)  # and the blank line it added is gone
        assert b"old heading" not in data
        assert render_agent_memory(memory, claude_projects=projects)["unchanged"] == 1


@pytest.mark.parametrize("person, where", [
    (b"", 0),
    (b"plain first line\n# later heading\n", 0),
    (b"\n\n## Second-level heading\nbody\n", len(b"\n\n## Second-level heading\n")),
    (b"Title\n=====\nbody\n", len(b"Title\n=====\n")),
    (b"---\nname: x\n---\n# Heading\nbody\n", len(b"---\nname: x\n---\n# Heading\n")),
    (b"---\nname: x\n---\nbody\n", len(b"---\nname: x\n---\n")),
    (b"# Only a heading, no newline", 0),  # nothing of the person's line changes, not even its end
    (b"#hashtag is not a heading\n", 0),
    (b"# " + b"x" * (LOADED_BYTES - 100) + b"\nbody\n", 0),  # under it the section would not be loaded
])
def test_where_a_new_section_goes(tmp_path: Path, person: bytes, where: int) -> None:
    projects = tmp_path / "projects"
    path = _file(projects)
    path.parent.mkdir(parents=True)
    path.write_bytes(person)
    with _memory(tmp_path) as memory:
        _own_lesson(memory, "npm ci fails behind the proxy")
        render_agent_memory(memory, claude_projects=projects)
    data = path.read_bytes()
    assert data.index(BEGIN) == where and _within_loaded(data)
    before, _, after = split(data)
    assert before + after == person


def test_the_section_stays_small_whatever_the_lessons(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    projects.mkdir()
    with _memory(tmp_path) as memory:
        for i in range(30):
            _own_lesson(memory, f"{i} " + "雪" * 290)  # 3 bytes a character in UTF-8
        render_agent_memory(memory, claude_projects=projects)
    _, section, _ = split(_file(projects).read_bytes())
    assert section is not None and 1000 < len(section) <= MAX_SECTION_BYTES


def test_a_deleted_memory_file_opts_its_project_out_until_the_owner_opts_back_in(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    projects.mkdir()
    with _memory(tmp_path) as memory:
        _own_lesson(memory, "npm ci fails behind the proxy")
        render_agent_memory(memory, claude_projects=projects)
        path = _file(projects)
        path.unlink()
        report = render_agent_memory(memory, claude_projects=projects)
        assert report["opted_out"] == 1 and "memory-file on" in report["opted_out_now"][0]
        assert not path.exists()
        # New lessons, later renders: the file is not written again.
        _own_lesson(memory, "the tests need a running redis")
        report = render_agent_memory(memory, claude_projects=projects)
        assert not path.exists() and report["opted_out"] == 1 and report["opted_out_now"] == []
        [item] = listing(memory)
        assert item["file"] == str(path) and item["opted_out"] == iso(NOW) and not item["exists"]
        # The owner opts back in by the project's folder: the file comes back with every lesson (none vetoed).
        assert opt_in(memory, projects, PROJECT) == str(path)
        render_agent_memory(memory, claude_projects=projects)
        text = path.read_text()
        assert "npm ci fails" in text and "running redis" in text
        assert listing(memory)[0]["opted_out"] is None


def test_opting_out_by_command_takes_the_section_back_and_keeps_the_persons_lines(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    path = _file(projects)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"# mine\nkeep me\n")
    with _memory(tmp_path) as memory:
        _own_lesson(memory, "npm ci fails behind the proxy")
        render_agent_memory(memory, claude_projects=projects)
        assert BEGIN in path.read_bytes()
        opt_out(memory, projects, str(path))
        assert path.read_bytes() == b"# mine\nkeep me\n"
        render_agent_memory(memory, claude_projects=projects)
        assert path.read_bytes() == b"# mine\nkeep me\n"


def test_a_file_holding_only_the_section_is_removed_when_nothing_is_left_to_show(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    projects.mkdir()
    with _memory(tmp_path) as memory:
        _own_lesson(memory, "npm ci fails behind the proxy")
        render_agent_memory(memory, claude_projects=projects)
        path = _file(projects)
        assert path.read_bytes().startswith(BEGIN)
        memory.forget(session="npm ci fails behind the proxy")  # the lesson's only episode
        with memory.store.write() as db:
            db.execute("UPDATE lessons SET archived = 1")
        report = render_agent_memory(memory, claude_projects=projects)
        assert report["removed"] == 1 and not path.exists()
        # Gone because nothing was left, not because the owner deleted it: a new lesson writes it again.
        _own_lesson(memory, "the tests need a running redis")
        render_agent_memory(memory, claude_projects=projects)
        assert b"running redis" in path.read_bytes()


def test_unwired_the_sections_written_are_taken_back(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    mine = _file(projects)
    mine.parent.mkdir(parents=True)
    mine.write_bytes(b"# mine\n")
    with _memory(tmp_path) as memory:
        _own_lesson(memory, "npm ci fails behind the proxy")
        _own_lesson(memory, "cargo build needs the vendored openssl", cwd="/elsewhere")
        render_agent_memory(memory, claude_projects=projects)
        made = projects / project_slug("/elsewhere") / "memory" / "MEMORY.md"
        assert made.is_file() and BEGIN in mine.read_bytes()
        withdraw_agent_memory(memory)
        assert mine.read_bytes() == b"# mine\n" and not made.exists()
        # Wired again: written afresh, and a file removed by the withdrawal is no opt-out.
        render_agent_memory(memory, claude_projects=projects)
        assert made.is_file() and BEGIN in mine.read_bytes()
