"""Lesson sentences: deterministic observations with nothing that identifies the machine or person."""

from __future__ import annotations

import pytest

from neverest.memory.phrasing import command_head, observation, scrub
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
