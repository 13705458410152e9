"""Checks the corpus of real agent session files in tests/data/sessions against SOURCES.json."""

import hashlib
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).parent / "data" / "sessions"
SOURCES = ROOT / "SOURCES.json"
ALLOWED_LICENCES = {
    "MIT",
    "Apache-2.0",
    "BSD-2-Clause",
    "BSD-3-Clause",
    "ISC",
    "MPL-2.0",
    "Unlicense",
    "CC0-1.0",
    "CC-BY-4.0",
}
AGENTS = {"claude-code", "codex"}


def _sources():
    return json.loads(SOURCES.read_text(encoding="utf-8"))


def _jsonl_files():
    return sorted(p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.jsonl"))


def test_sources_entries_are_complete():
    keys = {
        "file", "agent", "repo", "path", "commit", "licence", "licence_file",
        "sha256", "lines", "truncated_at_line", "real", "real_note",
    }
    entries = _sources()
    assert entries
    for entry in entries:
        assert keys <= set(entry), entry.get("file")
        assert entry["agent"] in AGENTS
        assert len(entry["commit"]) == 40 and int(entry["commit"], 16) >= 0
        assert isinstance(entry["real"], bool)
        assert entry["truncated_at_line"] is None or isinstance(entry["truncated_at_line"], int)
    files = [e["file"] for e in entries]
    assert len(files) == len(set(files))


def test_licences_are_allowed():
    for entry in _sources():
        assert entry["licence"] in ALLOWED_LICENCES, (entry["file"], entry["licence"])
        assert entry["licence_file"]


def test_every_listed_file_exists_with_its_sha256_and_line_count():
    for entry in _sources():
        path = ROOT / entry["file"]
        assert path.is_file(), entry["file"]
        data = path.read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], entry["file"]
        assert len(data.decode("utf-8").splitlines()) == entry["lines"], entry["file"]


def test_every_jsonl_file_is_listed():
    listed = {e["file"] for e in _sources()}
    assert set(_jsonl_files()) == listed


def test_files_sit_where_their_agent_keeps_them():
    for entry in _sources():
        if entry["agent"] == "claude-code":
            folder = entry["file"].split("/")[2]
            assert entry["file"].startswith("claude/projects/"), entry["file"]
            assert "/" not in folder and ":" not in folder and "." not in folder, entry["file"]
        else:
            name = entry["file"].rsplit("/", 1)[-1]
            assert entry["file"].startswith("codex/sessions/"), entry["file"]
            assert name.startswith("rollout-"), entry["file"]


@pytest.mark.parametrize("rel", _jsonl_files())
def test_every_line_is_json(rel):
    with open(ROOT / rel, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            assert isinstance(json.loads(line), dict), f"{rel}:{number}"
