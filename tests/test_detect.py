"""The session detectors on the moments real sessions hold: refused calls, interrupts, the
person's words inside IDE and harness wrappers, benign exits, what worked after a failure,
terminal escapes; and the lessons a sleep writes from them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from neverest.agents.detect import Detector, fixes
from neverest.agents.ingest import ingest_transcripts
from neverest.agents.transcripts import Turn, parse_line
from neverest.clock import FixedClock
from neverest.config import Config
from neverest.memory import error_class
from neverest.memory.phrasing import observation, what_worked
from neverest.memory.service import Memory
from neverest.safety import imperative_reason

NOW = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)
CWD = "/home/ann/src/shop"
REFUSED = ("The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a file "
           "edit, the new_string was NOT written to the file). STOP what you are doing and wait for the user to "
           "tell you how to proceed.")


def claude(kind: str, content: object, *, sid: str = "s1", minute: int = 0, mid: str = "") -> str:
    message: dict[str, Any] = {"role": kind, "content": content}
    if mid:
        message["id"] = mid
    return json.dumps({"type": kind, "sessionId": sid, "cwd": CWD, "message": message,
                       "timestamp": f"2026-11-30T10:{minute:02d}:00.000Z"})


def bash(call_id: str, command: str, minute: int) -> str:
    return claude("assistant", [{"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": command}}],
                  mid=f"m{minute}", minute=minute)


def result(call_id: str, text: str, minute: int, *, error: bool = False) -> str:
    return claude("user", [{"type": "tool_result", "tool_use_id": call_id, "content": text, "is_error": error}],
                  minute=minute)


def run(lines: list[str], agent: str = "claude-code") -> list[dict[str, Any]]:
    """The events a detector gives for ``lines``, in order (the same path ingest takes)."""
    detector = Detector(agent, session="file")
    events: list[dict[str, Any]] = []
    for raw in lines:
        info = parse_line(raw.encode(), agent)
        detector.saw(info.session, info.cwd)
        if info.exit_code is not None:
            detector.exit_code(*info.exit_code)
        if info.turn is not None:
            events.extend(detector.turn(info.turn))
    return events


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["kind"] for e in events]


def test_a_refused_call_is_a_correction_with_the_words_that_follow_never_an_error() -> None:
    events = run([
        claude("user", "tidy the repo", minute=0),
        bash("t1", "rm -rf claude-parser", 1),
        result("t1", REFUSED, 2, error=True),
        claude("user", "no, that folder is the parser we are building", minute=3),
    ])
    assert kinds(events) == ["note", "correction"]
    [correction] = [e for e in events if e["kind"] == "correction"]
    assert correction["reaction"] == "rejected"
    assert correction["said"] == "no, that folder is the parser we are building"
    assert correction["agent_did"] == "ran Bash: rm -rf claude-parser"


def test_words_given_with_the_refusal_are_the_correction() -> None:
    events = run([
        claude("user", "go", minute=0),
        bash("t1", "npm install", 1),
        result("t1", "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it "
                     "was a file edit, the new_string was NOT written to the file). To tell you how to proceed, "
                     "the user said:\nuse pnpm, not npm", 2, error=True),
    ])
    [correction] = [e for e in events if e["kind"] == "correction"]
    assert (correction["said"], correction["reaction"]) == ("use pnpm, not npm", "rejected")
    assert observation("correction", said=correction["said"], agent_did=correction["agent_did"],
                       reaction="rejected") == "The person wanted pnpm rather than npm"


def test_a_refusal_without_words_is_stored_once_the_agent_goes_on_and_makes_no_lesson() -> None:
    events = run([
        claude("user", "ship it", minute=0),
        bash("t1", "git push --force", 1),
        result("t1", REFUSED, 2, error=True),
        bash("t2", "git push", 3),
        result("t2", "Everything up-to-date", 4),
    ])
    [correction] = [e for e in events if e["kind"] == "correction"]
    assert correction["said"] == "" and correction["reaction"] == "rejected"
    assert "error" not in kinds(events)
    # Counted for the owner, and phrased only as the refusal of that program.
    assert observation("correction", said="", agent_did=correction["agent_did"], reaction="rejected") == \
        "The person refused to let the agent run git push"


def test_an_interrupt_and_what_follows_is_a_correction() -> None:
    events = run([
        claude("user", "fix the layout", minute=0),
        claude("assistant", [{"type": "tool_use", "id": "t1", "name": "Edit", "input": {"file_path": "a.tsx"}}],
               mid="m1", minute=1),
        claude("user", [{"type": "text", "text": "[Request interrupted by user for tool use]"}], minute=2),
        claude("user", "not the new session button, the settings tab", minute=3),
    ])
    [correction] = [e for e in events if e["kind"] == "correction"]
    assert correction["reaction"] == "interrupted" and correction["agent_did"] == "ran Edit"
    assert observation("correction", said=correction["said"], reaction="interrupted",
                       agent_did="ran Edit") == "The person wanted the settings tab rather than the new session button"


def test_codex_ide_context_is_removed_before_the_persons_words_are_read() -> None:
    def line(kind: str, payload: dict[str, Any]) -> str:
        return json.dumps({"timestamp": "2026-11-30T11:00:00.000Z", "type": kind, "payload": payload})

    ide = ("# Context from my IDE setup:\n\n## Active file: src/app/page.tsx\n\n## Open tabs:\n- page.tsx: "
           "src/app/page.tsx\n\n## My request for Codex:\nwhy is the sidebar still empty?\n")
    events = run([
        line("session_meta", {"id": "c1", "cwd": CWD}),
        line("response_item", {"type": "message", "role": "user",
                               "content": [{"type": "input_text", "text": "Add a sidebar"}]}),
        line("response_item", {"type": "message", "role": "assistant",
                               "content": [{"type": "output_text", "text": "Added the sidebar."}]}),
        line("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": ide}]}),
    ], agent="codex")
    [note] = [e for e in events if e["kind"] == "note"]
    assert note["text"].endswith("first asked: Add a sidebar")
    [correction] = [e for e in events if e["kind"] == "correction"]
    assert correction["said"] == "why is the sidebar still empty?"


@pytest.mark.parametrize(("said", "is_one"), [
    ("wtf?", True),
    ("you just deleted my claude-parser?", True),
    ("No teams or leads are loading into the pane now", True),
    ("it's still broken", True),
    ("not the new session button, the settings tab", True),
    ("No problem, thanks", False),
    ("Now add a test for the refund path", False),
    ("Nothing else, thanks", False),
])
def test_complaints_and_redirections_are_corrections(said: str, is_one: bool) -> None:
    events = run([claude("user", "start", minute=0),
                  claude("assistant", [{"type": "text", "text": "Done."}], mid="m1", minute=1),
                  claude("user", said, minute=2)])
    assert ("correction" in kinds(events)) is is_one


def test_told_to_act_after_the_agent_asked() -> None:
    events = run([claude("user", "migrate the db", minute=0),
                  claude("assistant", [{"type": "text", "text": "Should I run the migration now?"}], mid="m1",
                         minute=1),
                  claude("user", "just do it, don't ask", minute=2)])
    [correction] = [e for e in events if e["kind"] == "correction"]
    assert correction["reaction"] == "told to act"


@pytest.mark.parametrize(("command", "output"), [
    ("rg -n TODO src", "Exit code 1"),
    ("grep -r foo . | grep -v test", "Exit code 1"),
    ("diff a.txt b.txt", "Exit code 1\n1c1\n< a\n---\n> b"),
    ("test -f .env", "Exit code 1"),
    ("git diff --quiet", "Exit code 1"),
    ("git commit -m wip", "Exit code 1\nOn branch master\nnothing to commit, working tree clean"),
])
def test_benign_exits_are_not_errors(command: str, output: str) -> None:
    events = run([claude("user", "look", minute=0), bash("t1", command, 1), result("t1", output, 2, error=True)])
    assert "error" not in kinds(events)


def test_a_real_failure_of_grep_is_still_an_error() -> None:
    events = run([claude("user", "look", minute=0), bash("t1", "grep -r foo /nope", 1),
                  result("t1", "Exit code 2\ngrep: /nope: No such file or directory", 2, error=True)])
    assert kinds(events) == ["note", "error"]


def test_an_error_learns_what_worked_and_the_lesson_says_it(tmp_path: Path) -> None:
    page = "apps/web/app/(protected)/settings"
    syntax = "/bin/bash: eval: line 1: syntax error near unexpected token `('"

    def session(sid: str, minute: int) -> list[str]:
        return [
            claude("user", "list the settings pages", sid=sid, minute=minute),
            bash(f"{sid}a", f"ls {page}", minute + 1),
            result(f"{sid}a", f"Exit code 2\n{syntax}", minute + 2, error=True),
            bash(f"{sid}b", "git status", minute + 3),
            result(f"{sid}b", "On branch main", minute + 4),
            bash(f"{sid}c", f"ls '{page}'", minute + 5),
            result(f"{sid}c", "page.tsx", minute + 6),
        ]

    root = tmp_path / "claude" / "-home-ann-src-shop"
    root.mkdir(parents=True)
    for sid, minute in (("s1", 0), ("s2", 20)):
        (root / f"{sid}.jsonl").write_text("".join(line.replace('"s1"', f'"{sid}"') + "\n"
                                                   for line in session(sid, minute)))
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    with Memory.open(home, Config(), FixedClock(NOW + timedelta(hours=1))) as memory:
        report = ingest_transcripts(memory, claude=tmp_path / "claude", codex=None)
        assert report.detected["error"] == 2 and report.detected["worked"] == 2
        rows = memory.store.db.execute("SELECT title, worked FROM episodes WHERE kind = 'error'").fetchall()
        assert rows == [("Bash: ls (shell syntax)", f"ls '{page}'")] * 2
        night = memory.night()
    texts = [item["text"] for item in night["learned"]]
    assert texts == ["In this project, shell commands with an unquoted path holding `(` (such as a route group "
                     "folder) fail with a syntax error; quoting the path works"]
    assert len(texts[0]) <= 200 and imperative_reason(texts[0]) is None


def test_ansi_escapes_are_stripped_at_ingest() -> None:
    events = run([claude("user", "test", minute=0), bash("t1", "npm test", 1),
                  result("t1", "Exit code 1\n\x1b[31m\x1b[1mFAIL\x1b[22m\x1b[39m src/a.test.ts\n"
                               "\x1b[41m Failed Tests 1 \x1b[49m", 2, error=True)])
    [error] = [e for e in events if e["kind"] == "error"]
    assert "\x1b" not in error["happened"] and "[31m" not in error["happened"]
    assert error["title"] == "Bash: npm (failing test)"


def test_a_surprise_is_read_only_after_a_failure() -> None:
    calm = run([claude("user", "go", minute=0),
                claude("assistant", [{"type": "text", "text": "It turns out the config is YAML."}], mid="m1",
                       minute=1)])
    assert "surprise" not in kinds(calm)
    after = run([claude("user", "go", minute=0), bash("t1", "node build.js", 1),
                 result("t1", "Exit code 1\nError: Cannot find module 'esbuild'", 2, error=True),
                 claude("assistant", [{"type": "text", "text": "Actually, let me check. The bundler actually lives "
                                                               "in the tools workspace."}], mid="m3", minute=3)])
    [surprise] = [e for e in after if e["kind"] == "surprise"]
    assert surprise["happened"] == "The bundler actually lives in the tools workspace."


@pytest.mark.parametrize(("failed", "worked", "said"), [
    ("ls app/(protected)/x", "ls 'app/(protected)/x'", "quoting the path works"),
    ("python -m pytest", "python3 -m pytest", "python3 works instead"),
    ("pip install -e .", "pip install -e . --no-build-isolation", "adding --no-build-isolation works"),
    ("npm run build", "NODE_OPTIONS=--max-old-space-size=4096 npm run build", "setting NODE_OPTIONS works"),
    ("cargo build", "cargo build", ""),
])
def test_what_worked(failed: str, worked: str, said: str) -> None:
    assert what_worked(failed, worked) == said


def test_fixes_needs_the_same_program_or_the_same_arguments() -> None:
    assert fixes("python x.py", "python3 x.py")
    assert fixes("ls a/(b)", "ls 'a/(b)'")
    assert not fixes("ls a", "ls a")
    assert not fixes("ls a/(b)", "git status")


@pytest.mark.parametrize(("text", "cls"), [
    ("zsh: command not found: python", error_class.COMMAND_NOT_FOUND),
    ("ModuleNotFoundError: No module named 'fastapi'", error_class.DEPENDENCY),
    ("bash: line 1: syntax error near unexpected token `('", error_class.SHELL_SYNTAX),
    ("Error: EACCES: permission denied, open 'x'", error_class.PERMISSION),
    ("error: could not write: Operation not permitted (sandbox)", error_class.SANDBOX),
    ("src/a.ts(3,5): error TS2339: Property 'x' does not exist on type 'Y'", error_class.TYPE_ERROR),
    ("Tests: 2 failed, 10 passed", error_class.FAILING_TEST),
    ("curl: (28) Operation timed out after 30001 milliseconds", error_class.NETWORK),
    ("FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory", error_class.OUT_OF_MEMORY),
    ("ls: cannot access 'x': No such file or directory", error_class.NO_SUCH_FILE),
    ("<tool_use_error>File has not been read yet. Read it first before writing to it.</tool_use_error>",
     error_class.TOOL_USE),
    ("npm ERR! missing script: build", error_class.OTHER),
])
def test_error_classes(text: str, cls: str) -> None:
    assert error_class.classify(text) == cls


def test_one_moments_symptoms_make_no_lesson_without_what_worked() -> None:
    assert observation("error", title="Bash: ls (no such file)", agent_did="ls /Volumes/x/claude-parser",
                       happened='Path "/Volumes/x/claude-parser" does not exist') is None
    assert observation("error", title="Glob", happened=REFUSED) is None or "STOP" not in (
        observation("error", title="Glob", happened=REFUSED) or "")
    assert observation("error", title="Edit (tool use)",
                       happened="<tool_use_error>String to replace not found in file.</tool_use_error>") is None


def turns(detector: Detector, texts: list[tuple[str, str]]) -> Iterator[dict[str, Any]]:
    for role, text in texts:
        yield from detector.turn(Turn(role=role, at=None, text=text))


def test_detector_state_survives_a_json_round_trip() -> None:
    first = Detector("claude-code", session="f")
    lines = [claude("user", "go", minute=0), bash("t1", "ls a/(b)", 1),
             result("t1", "Exit code 2\nsyntax error near unexpected token `('", 2, error=True)]
    for raw in lines:
        info = parse_line(raw.encode(), "claude-code")
        if info.turn is not None:
            first.turn(info.turn)
    second = Detector("claude-code", json.loads(json.dumps(first.state())), session="f")
    events: list[dict[str, Any]] = []
    for raw in [bash("t2", "ls 'a/(b)'", 3), result("t2", "x", 4)]:
        info = parse_line(raw.encode(), "claude-code")
        if info.turn is not None:
            events.extend(second.turn(info.turn))
    assert [e.get("worked") for e in events] == ["ls 'a/(b)'"]


def test_morning_report_counts_corrections_by_reaction_and_kind_of_action(tmp_path: Path) -> None:
    from neverest.memory.render import morning_report

    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    with Memory.open(home, Config(), FixedClock(NOW)) as memory:
        memory.ingest([
            {"kind": "correction", "said": "", "reaction": "rejected", "agent_did": "ran Bash: rm -rf build",
             "session": "a"},
            {"kind": "correction", "said": "no, keep it", "reaction": "interrupted", "agent_did": "ran Bash: rm x",
             "session": "b"},
            {"kind": "correction", "said": "just do it", "reaction": "told to act",
             "agent_did": "said: Should I run it?", "session": "c"},
            {"kind": "correction", "said": "not the button, the tab", "reaction": "corrected",
             "agent_did": "ran Edit", "session": "d"},
        ])
        night = memory.night()
        report = morning_report(memory.store)
    assert night["delegation"] == {"acted, stopped": {"Bash: rm": 2}, "asked, told to act": {"a reply": 1},
                                   "corrected": {"Edit": 1}}
    assert "- acted, stopped: 2 (Bash: rm ×2)" in report
    assert "- asked, told to act: 1 (a reply ×1)" in report
    # The refusal without words made no lesson; the others did, each as what the person wanted.
    texts = sorted(item["text"] for item in night["learned"])
    assert "The person wanted the tab rather than the button" in texts
    assert "The person wanted the agent to act rather than ask first" in texts


def test_a_models_sentence_passes_the_same_gates() -> None:
    from neverest.memory.phrasing import lesson_gate

    assert lesson_gate("pip install fails without --no-build-isolation") is None
    assert lesson_gate("pip install fails in /home/ann/app") is not None
    assert lesson_gate("Stop what you are doing and wait for the user.") is not None
    assert lesson_gate("x" * 201) is not None
