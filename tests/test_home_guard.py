"""The suite's guard of the real home (tests/conftest.py), run on a small suite of its own: a test that
writes where Neverest writes in the person's home fails the run; the agents' own writes only show."""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SUITE = '''
import os
from pathlib import Path

def test_writes() -> None:
    assert os.environ["HOME"] != os.environ["PERSON"]  # the suite's HOME is a throwaway one
    target = Path(os.environ["PERSON"]) / os.environ["TARGET"]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("written by a test")
'''


def _run(tmp_path: Path, target: str) -> subprocess.CompletedProcess[str]:
    person = tmp_path / "person"
    (person / ".claude" / "projects" / "-work-app").mkdir(parents=True)
    (person / ".claude" / "projects" / "-work-app" / "s1.jsonl").write_text("{}\n")
    suite = tmp_path / "suite" / "test_it.py"
    suite.parent.mkdir()
    suite.write_text(SUITE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")} | {
        "HOME": str(person), "PERSON": str(person), "TARGET": target, "PYTHONPATH": str(ROOT),
        "NEVEREST_GUARD_HOMES": str(person)}  # not the machine's own home, where other runs may write meanwhile
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           str(suite)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("target", [".claude/projects/-work-app/memory/MEMORY.md", ".claude/settings.json",
                                    ".neverest/memory.db", ".codex/config.toml", ".claude.json"])
def test_a_test_that_writes_where_neverest_writes_fails_the_run(tmp_path: Path, target: str) -> None:
    done = _run(tmp_path, target)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 passed" in done.stdout and "the suite changed the real home" in done.stdout
    assert str(tmp_path / "person" / target) in done.stdout


@pytest.mark.parametrize("target", [".claude/projects/-work-app/s1.jsonl",  # an agent's transcript growing
                                    ".claude/projects/-work-new/s2.jsonl",  # an agent starting in a new project
                                    ".claude/todos/t.json", ".codex/sessions/2026/rollout-1.jsonl"])
def test_the_agents_own_writes_are_shown_without_failing(tmp_path: Path, target: str) -> None:
    done = _run(tmp_path, target)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "where Neverest never writes" in done.stdout and Path(target).name in done.stdout


def test_a_memory_file_of_another_test_runs_project_is_named_without_failing_this_run(tmp_path: Path) -> None:
    """Another run on the machine (a branch without the fix, say) may write meanwhile: a memory file of a
    project in another pytest run's temporary folder is that run's, named but not held against this one."""
    slug = "".join(c if c.isascii() and c.isalnum() else "-"
                   for c in f"{tempfile.gettempdir()}/pytest-of-{getpass.getuser()}/pytest-99999/test-x0/project")
    done = _run(tmp_path, f".claude/projects/{slug}/memory/MEMORY.md")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "another test run's temporary folder" in done.stdout and slug in done.stdout
