"""The detectors on real session files public repositories committed (tests/data/sessions, provenance in
SOURCES.json): the moments a careful reader sees there are found, the benign exits are not errors, and what
the night learns passes every gate."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nacl.signing
import pytest

from neverest.agents.ingest import ingest_transcripts
from neverest.clock import FixedClock
from neverest.config import Config
from neverest.memory.receive import receive
from neverest.memory.scrub import scrub_check, withheld
from neverest.memory.service import Memory
from neverest.memory.store import open_store
from neverest.records import sign_lesson
from neverest.safety import imperative_reason

CORPUS = Path(__file__).parent / "data" / "sessions"
Learned = tuple[list[dict[str, Any]], list[str], list[tuple[str, str]]]  # episodes, lesson texts, (kind, text)
NOW = datetime(2027, 1, 1, 3, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def learned(tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[list[dict[str, Any]], list[str], list[tuple[str, str]]]]:
    root = tmp_path_factory.mktemp("corpus")
    shutil.copytree(CORPUS, root / "sessions")
    home = root / "home"
    home.mkdir(mode=0o700)
    clock = FixedClock(NOW)
    with Memory.open(home, Config(), clock) as memory:
        ingest_transcripts(memory, claude=root / "sessions" / "claude" / "projects",
                           codex=root / "sessions" / "codex" / "sessions")
        memory.night()
        clock.set(NOW + timedelta(days=1))
        memory.night()
        db = memory.store.db
        cols = ("kind", "session", "title", "said", "happened", "reaction", "agent_did", "worked")
        episodes = [dict(zip(cols, row, strict=True)) for row in db.execute(f"SELECT {', '.join(cols)} FROM episodes")]
        kinds_texts = [(str(r[0]), str(r[1])) for r in db.execute("SELECT kind, text FROM lessons ORDER BY id")]
    yield episodes, [text for _, text in kinds_texts], kinds_texts


def of(episodes: list[dict[str, Any]], session: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in episodes if e["session"].startswith(session) and e["kind"] == kind]


def test_an_interrupt_and_the_words_after_it_are_a_correction(learned: Learned
                                                              ) -> None:
    episodes, *_ = learned
    said = {(e["said"][:40], e["reaction"]) for e in of(episodes, "c76e5be5", "correction")}
    assert ("I think we should investigate the claude", "interrupted") in said
    assert ("resume", "interrupted") in said
    # The interrupted tool call is no error, and no error holds the harness's interrupt text.
    assert not [e for e in episodes if e["kind"] == "error" and "interrupted by user" in e["happened"]]


def test_benign_exits_in_real_sessions_are_not_errors(learned: Learned) -> None:
    episodes, *_ = learned
    errors = [e for e in episodes if e["kind"] == "error"]
    assert not [e for e in errors if "nothing to commit" in e["happened"]]  # DRMacIver/claude-reliability
    assert not [e for e in errors if e["title"].startswith("exec_command: rg") and not e["happened"]]


def test_a_failed_call_learns_what_worked(learned: Learned) -> None:
    episodes, *_ = learned
    [powercfg] = [e for e in of(episodes, "343e3472", "error") if e["title"] == "Bash: powercfg"]
    assert powercfg["worked"].startswith("powercfg -change")


def test_every_lesson_learned_passes_the_gates(learned: Learned) -> None:
    _, lessons, _ = learned
    assert lessons  # the cygpath failure met by several programs in two sessions
    for text in lessons:
        assert len(text) <= 200 and imperative_reason(text) is None and scrub_check(text) is None, text
        assert withheld(text) is None, text
        assert "\x1b" not in text and "Mischa" not in text and "C:\\" not in text
    assert "Several programs fail the same way: Command failed: cygpath -u 'a path'" in lessons
    # grep, rg and git timed out after 10019, 1013 and 1005 ms: what they share, not one of them's count.
    assert "Several programs fail on the network or time out: command timed out after 1 to 10 seconds" in lessons
    # Two spec-kit scripts on two branches: the sentence they share, without "Current branch: main".
    assert "Several programs fail the same way: ERROR: Not on a feature branch." in lessons


def test_the_corrections_refusing_powershell_are_one_lesson(learned: Learned) -> None:
    # One Codex session: powershell.exe refused nine times (eight without a word), stopped with "dont run", refused
    # with "stop trying to run powershell stuff".  One thing the person wants: one lesson, not three.
    episodes, _, kinds_texts = learned
    corrections = [text for kind, text in kinds_texts if kind == "correction" and "powershell" in text.lower()]
    assert corrections == ["The person refused to let the agent run powershell.exe"]
    said = {e["said"] for e in episodes if e["kind"] == "correction" and "powershell.exe" in e["agent_did"]}
    assert {"dont run", "stop trying to run powershell stuff"} <= said


def test_no_episode_keeps_a_terminal_escape(learned: Learned) -> None:
    episodes, *_ = learned
    assert not [e for e in episodes if "\x1b" in (e["happened"] or "") + (e["said"] or "")]


def test_the_lessons_learned_stay_apart_in_a_memory_that_receives_them(learned: Learned, tmp_path: Path) -> None:
    # The night kept these lessons apart (error lessons by their subject, phrasing.error_signature); another
    # memory that receives them keeps them apart too.  "rg is not installed here (command not found); find
    # works instead" and "python is not installed here (command not found); python3 works instead" share a
    # template and a cosine of 0.80, over the join threshold: each names its own program, so the second
    # is a lesson of its own, not a second origin's support for the first (meaning.subjects_agree).
    _, _, kinds_texts = learned
    assert ("error", "rg is not installed here (command not found); find works instead") in kinds_texts
    assert ("error", "python is not installed here (command not found); python3 works instead") in kinds_texts
    key = nacl.signing.SigningKey(b"\x09" * 32)
    lines = [sign_lesson(key, kind=kind, text=text, seen=2, strength=1.0, updated="2027-01-01T02:00:00.000000Z",
                         seq=k + 1).raw for k, (kind, text) in enumerate(kinds_texts)]
    store = open_store(tmp_path / "peer")
    result = receive(store, lines, source="peer", own_origin="f" * 16, config=Config(verify_processes=0), now=NOW)
    held = sorted((str(r[0]), str(r[1])) for r in store.db.execute("SELECT kind, text FROM lessons"))
    assert held == sorted(kinds_texts) and result.candidates == len(kinds_texts) == result.accepted
