"""Before a tool call, the lessons whose situation the call is, and not the ones that share a word."""

from __future__ import annotations

import pytest

from neverest.agents.moments import bears_on_call, command_traits

PAREN = ("In this project, shell commands with an unquoted path holding `(` (such as a route group folder) fail "
         "with a syntax error; quoting the path works")
PYTHON = "python is not installed here (command not found); python3 works instead"
PIP = "pip install fails without --no-build-isolation"
PNPM = "The person wanted pnpm rather than npm"
PUSH = "The person refused to let the agent run git push"


@pytest.mark.parametrize(("lesson", "command", "given"), [
    (PAREN, "ls apps/web/app/(protected)/settings", True),
    (PAREN, "cd apps/web && cat app/(protected)/layout.tsx | head", True),
    (PAREN, "ls -la", False),
    (PAREN, "git status", False),
    (PAREN, "ls 'apps/web/app/(protected)/settings'", False),  # already quoted: the mistake is not made
    (PAREN, "echo $(date)", False),
    (PYTHON, "python -m pytest -q", True),
    (PYTHON, "python3 -m pytest -q", False),
    (PIP, "pip install -e .", True),
    (PIP, "pip list", False),
    (PNPM, "npm install left-pad", True),
    (PNPM, "pnpm install", False),
    (PUSH, "git push origin main", True),
    (PUSH, "git status", False),
    ("cargo build fails: linker cc not found", "cargo build --release", True),
    ("cargo build fails: linker cc not found", "cargo test", False),
])
def test_a_lesson_is_given_for_its_own_moment_only(lesson: str, command: str, given: bool) -> None:
    assert bears_on_call(lesson, command) is given


def test_traits_read_outside_quotes() -> None:
    assert command_traits("ls app/(group)/x") == {"unquoted path holding `(`"}
    assert command_traits('ls "app/(group)/x"') == set()


def test_before_a_call_one_lesson_a_situation_the_strongest() -> None:
    from neverest.agents.hook import rank
    from neverest.memory.queries.injections import Candidate

    def lesson(digest: str, text: str, strength: float) -> Candidate:
        return Candidate(digest, "correction", text, "/src/app", strength, "", "", None)

    rows = [lesson("a" * 32, "The person stopped the agent while it ran powershell.exe", 1.0),
            lesson("b" * 32, "The person refused to let the agent run powershell.exe", 3.0),
            lesson("c" * 32, PUSH, 2.0)]
    payload = {"tool_name": "Bash", "tool_input": {"command": "powershell.exe -Command whoami"}, "cwd": "/src/app"}
    assert [g[0].hash[0] for g in rank("PreToolUse", rows, payload)] == ["b"]
