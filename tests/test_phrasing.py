"""Lesson sentences: deterministic observations with nothing that identifies the machine or person."""

from __future__ import annotations

import pytest

from neverest.memory.phrasing import command_head, objection_head, observation, scrub, what_failures_share
from neverest.safety import imperative_reason


@pytest.mark.parametrize(("raw", "gone", "kept"), [
    ("fails in /home/ann/src/app/build.py", "/home/ann", "fails in"),
    ("see https://ci.example.com/job/42 for details", "example.com", "for details"),
    ("mail ann@example.com about it", "ann@", "about it"),
    ("commit 3f9a1c2b7d4e5f60718293a4 broke it", "3f9a1c2b7d4e", "broke it"),
    ("token ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4 leaked", "ghp_a1B2", "leaked"),
    ("LANG=de_DE.UTF-8 breaks sorting", "de_DE", "LANG breaks sorting"),
    (r"fails under C:\Users\ann\proj", "ann", "fails under"),
])
def test_scrub_removes_identifying_details(raw: str, gone: str, kept: str) -> None:
    out = scrub(raw)
    assert gone not in out and kept in out


def test_command_head_keeps_program_and_subcommand() -> None:
    assert command_head("pip install -e /home/ann/x --user") == "pip install"
    assert command_head("docker compose up -d") == "docker compose up"
    assert command_head("./run.sh --fast") == "run.sh"  # a script by its path: its file name names it
    assert command_head("ls ops") == "ls"  # ls's word is a folder, not a sub-command


@pytest.mark.parametrize(("kind", "fields", "expected"), [
    ("error", {"title": "pip install -e .", "happened": "fails without --no-build-isolation"},
     "pip install fails without --no-build-isolation"),
    ("error", {"title": "pytest tests/unit", "happened": "ModuleNotFoundError: foo"},
     "pytest fails: ModuleNotFoundError: foo"),
    ("surprise", {"expected": "the build to pass", "happened": "it failed on LANG=C"},
     "Expected the build to pass, but it failed on LANG"),
    ("correction", {"said": "don't push to main"}, "The person did not want the agent to push to main"),
    ("correction", {"said": "use tabs, please"}, "The person wanted the agent to use tabs"),
    ("correction", {"said": "the config lives in etc"}, "The person corrected the agent: the config lives in etc"),
])
def test_observations(kind: str, fields: dict[str, str], expected: str) -> None:
    text = observation(kind, **fields)
    assert text == expected
    assert imperative_reason(text) is None
    assert observation(kind, **fields) == text  # deterministic


def test_environment_and_notes_make_no_sentence() -> None:
    assert observation("environment", text="Debian 12") is None
    assert observation("note", text="x") is None


POWERSHELL = "ran shell: powershell.exe -NoProfile -Command 'rg \"specify\"'"


@pytest.mark.parametrize(("said", "agent_did", "reaction", "head"), [
    ("", POWERSHELL, "rejected", "powershell.exe"),  # a refused call, no words: the objection is all it says
    ("dont run", POWERSHELL, "interrupted", "powershell.exe"),  # words that make no lesson of their own
    ("stop trying to run powershell stuff", POWERSHELL, "rejected", "powershell.exe"),  # words naming it
    ("don't push to main", "ran Bash: git push --force", "rejected", "git push"),  # naming its sub-command
    # Words that say something of their own: what to do instead, or a fact; a lesson apart.
    ("the build folder is shared with the release job", "ran Bash: rm -rf build", "rejected", ""),
    ("use pnpm instead of npm", "ran Bash: npm install", "rejected", ""),
    ("run powershell as admin", POWERSHELL, "interrupted", ""),
    ("don't use npm here, use pnpm", "ran Bash: npm install", "rejected", ""),
    # Too many words to be about the call, a reaction that is no objection, a call that ran no command.
    ("can you not read the file without powershell ? what is the powershell command for ?", POWERSHELL,
     "interrupted", ""),
    ("stop trying to run powershell stuff", POWERSHELL, "told to act", ""),
    ("dont run", "said: here is the plan", "interrupted", ""),
])
def test_objection_head_names_the_command_a_correction_objects_to(said: str, agent_did: str, reaction: str,
                                                                  head: str) -> None:
    assert objection_head(said, agent_did, reaction) == head


TIMED_OUT = "command timed out after {} milliseconds"


@pytest.mark.parametrize(("happened", "others", "said"), [
    # The corpus's timeouts (codex's runner): grep after 10019 ms, rg after 1013, git after 1005.
    (TIMED_OUT.format(1013), [TIMED_OUT.format(n) for n in (10019, 1013, 1005)],
     "command timed out after 1 to 10 seconds"),
    (TIMED_OUT.format(1013), [TIMED_OUT.format(n) for n in (1013, 1005)], "command timed out after about 1 second"),
    ("3 tests failed\nsee the log", ["3 tests failed\nsee the log", "5 tests failed\nother lines"],
     "3 to 5 tests failed\nsee the log"),
    ("took 0.5 s", ["took 0.5 s", "took 1.5 s"], "took 0.5 to 1.5 s"),  # as written, not rounded
    # Numbers that agree, lines of another shape, one failure alone: as it is.
    (TIMED_OUT.format(1013), [TIMED_OUT.format(1013), TIMED_OUT.format(1013)], TIMED_OUT.format(1013)),
    (TIMED_OUT.format(1013), [TIMED_OUT.format(1013), "exit code 2"], TIMED_OUT.format(1013)),
    (TIMED_OUT.format(1013), [TIMED_OUT.format(1013)], TIMED_OUT.format(1013)),
    ("python3.11 not found", ["python3.11 not found", "python3.12 not found"], "python3.11 not found"),  # a name
    # The spec-kit scripts of one corpus project, on two branches: the sentence they share, not one's branch.
    ("ERROR: Not on a feature branch. Current branch: main",
     ["ERROR: Not on a feature branch. Current branch: main",
      "ERROR: Not on a feature branch. Current branch: codex/troubleshoot-sign-in"], "ERROR: Not on a feature branch."),
    # No whole sentence shared (the cygpath failures differ inside their one sentence), or too short a one.
    ("Command failed: cygpath -u 'c:\\users\\ann'",
     ["Command failed: cygpath -u 'c:\\users\\ann'", "Command failed: cygpath -u 'C:\\Users\\ann\\x.sh'"],
     "Command failed: cygpath -u 'c:\\users\\ann'"),
    ("Failed. Retry one", ["Failed. Retry one", "Failed. Retry two"], "Failed. Retry one"),
])
def test_what_failures_share_leaves_out_one_failures_figures(happened: str, others: list[str], said: str) -> None:
    assert what_failures_share(happened, others) == said
