"""The Claude Code hook, run as the agent runs it: a process with the agent's JSON in and out."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nacl.signing
import numpy as np
import pytest

from neverest.agents import hook
from neverest.clock import iso
from neverest.config import Config
from neverest.memory.embed import hashed_vector, to_blob
from neverest.memory.queries import injections
from neverest.memory.receive import receive
from neverest.memory.store import open_store
from neverest.records import lesson_hash, sign_confirm, sign_lesson

NOW = datetime(2026, 4, 1, tzinfo=UTC)
KEYS = [nacl.signing.SigningKey(bytes([i]) * 32) for i in range(20, 26)]
PROJECT = "/work/shop"
OWN_ERROR = "pip install -e . fails without --no-build-isolation in the shop project"
OWN_CORRECTION = "the person wants the changelog updated before every release tag"
OTHER_PROJECT = "cargo build needs the nightly toolchain in the engine"
COMMON = "npm ci fails behind the corporate proxy unless the registry is set"
CANDIDATE = "docker compose up hangs when the proxy variables are exported"
# A hand-picked session id on each side of the 0.5 holdout (checked in the test below).
GIVEN, WITHHELD = "s-a", "s-e"


def _own(db: sqlite3.Connection, kind: str, text: str, cwd: str, strength: float) -> None:
    db.execute("INSERT INTO lessons (hash, kind, text, cwd, strength, seen, created, updated, space, embedding) "
               "VALUES (?, ?, ?, ?, ?, 2, ?, ?, 'hashed-256', ?)",
               (lesson_hash(kind, text), kind, text, cwd, strength, iso(NOW), iso(NOW),
                to_blob(hashed_vector(text))))


def _signed(i: int, text: str) -> bytes:
    return sign_lesson(KEYS[i], kind="error", text=text, seen=1, strength=1.0, updated=iso(NOW), seq=1).raw


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A memory with own lessons (two in this project, one elsewhere), a received lesson in state common
    (published by one memory, confirmed by three others, under trust "any") and a received candidate."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text('trust = "any"\n')
    store = open_store(home)
    with store.write() as db:
        _own(db, "error", OWN_ERROR, PROJECT, 1.5)
        _own(db, "correction", OWN_CORRECTION, PROJECT + "/docs", 1.2)
        _own(db, "error", OTHER_PROJECT, "/work/engine", 1.9)
    common = lesson_hash("error", COMMON)
    records = [_signed(0, COMMON)] + [sign_confirm(KEYS[i], common, at=iso(NOW)).raw for i in (1, 2, 3)]
    receive(store, [*records, _signed(4, CANDIDATE)], source="t", own_origin="f" * 16, config=Config(trust="any"),
            now=NOW)
    store.close()
    return home


def _env(home: Path, holdout: str = "0") -> dict[str, str]:
    return os.environ | {"NEVEREST_HOME": str(home), "NEVEREST_NOW": iso(NOW), "NEVEREST_HOLDOUT": holdout,
                         "PYTHONPATH": str(Path(__file__).parent.parent)}


def call(home: Path, payload: Any, *, holdout: str = "0", raw: bytes | None = None,
         argv: tuple[str, ...] = ("-m", "neverest.agents.hook"), env: dict[str, str] | None = None
         ) -> tuple[int, str, float]:
    data = raw if raw is not None else json.dumps(payload).encode()
    started = time.monotonic()
    done = subprocess.run([sys.executable, *argv], input=data, capture_output=True,
                          env=env or _env(home, holdout), timeout=30)
    return done.returncode, done.stdout.decode(), time.monotonic() - started


def context(out: str, event: str) -> str:
    answer = json.loads(out)
    assert answer["hookSpecificOutput"]["hookEventName"] == event
    text = answer["hookSpecificOutput"]["additionalContext"]
    assert isinstance(text, str) and len(text) <= hook.MAX_CONTEXT_CHARS
    assert text.splitlines()[0] == hook.HEADER
    return text


def payload(event: str, session: str = GIVEN, **fields: Any) -> dict[str, Any]:
    return {"session_id": session, "transcript_path": "/nonexistent.jsonl", "cwd": PROJECT,
            "hook_event_name": event, **fields}


def test_the_two_sessions_fall_on_each_side_of_the_holdout() -> None:
    assert not hook.held_out(GIVEN, 0.5) and hook.held_out(WITHHELD, 0.5)
    # Stable without state, and about the configured fraction over many sessions.
    share = sum(hook.held_out(f"session-{i}", 0.5) for i in range(4000)) / 4000
    assert 0.45 < share < 0.55
    assert [hook.held_out(f"session-{i}", 0.5) for i in range(50)] == [hook.held_out(f"session-{i}", 0.5)
                                                                       for i in range(50)]
    assert not any(hook.held_out(f"session-{i}", 0.0) for i in range(100))
    assert all(hook.held_out(f"session-{i}", 1.0) for i in range(100))


def test_session_start_gives_this_projects_own_lessons_and_common_ones_framed(home: Path) -> None:
    status, out, _ = call(home, payload("SessionStart", source="startup"))
    assert status == 0
    lines = context(out, "SessionStart").splitlines()[1:]
    assert lines == [
        f"- Observation from this memory (error, local): {OWN_ERROR}",
        f"- Observation from 4 other memories (error, common): {COMMON}",
    ]  # strongest of this project first, then general; never another project's, never a candidate; errors
    # only: a correction comes before the program it is about runs (PreToolUse)
    with contextlib.closing(sqlite3.connect(home / "memory.db")) as db:
        assert [(i.session, i.event, i.held_out) for i in injections.injections(db)] == [
            (GIVEN, "SessionStart", False)] * 2
        assert [(s.session, s.held_out, s.cwd) for s in injections.sessions(db)] == [(GIVEN, False, PROJECT)]


def test_each_lesson_is_given_once_per_session(home: Path) -> None:
    prompt = payload("UserPromptSubmit", prompt="why does pip install fail here?")
    status, out, _ = call(home, prompt)
    assert status == 0
    assert context(out, "UserPromptSubmit").splitlines()[1:] == [
        f"- Observation from this memory (error, local): {OWN_ERROR}"]
    assert call(home, prompt)[:2] == (0, "")  # the same session again: already given
    assert call(home, payload("PreToolUse", tool_name="Bash", tool_input={"command": "pip install -e ."}))[:2] == \
        (0, "")
    status, out, _ = call(home, payload("UserPromptSubmit", "s-other", prompt="why does pip install fail here?"))
    assert OWN_ERROR in context(out, "UserPromptSubmit")  # another session: given again


def test_a_prompt_gets_only_what_it_bears_on_and_never_a_candidate(home: Path) -> None:
    assert call(home, payload("UserPromptSubmit", prompt="rename the widget class"))[:2] == (0, "")
    # Every word of the candidate received from one memory, which nobody confirmed: never given.
    assert call(home, payload("UserPromptSubmit", prompt="docker compose up hangs with variables exported"))[:2] \
        == (0, "")
    _, out, _ = call(home, payload("UserPromptSubmit", prompt="npm ci behind the corporate proxy again"))
    assert context(out, "UserPromptSubmit").splitlines()[1:] == [
        f"- Observation from 4 other memories (error, common): {COMMON}"]


def test_pre_tool_use_gives_the_error_lessons_the_call_bears_on(home: Path) -> None:
    _, out, _ = call(home, payload("PreToolUse", tool_name="Bash", tool_input={"command": "pip install -e ."}))
    assert context(out, "PreToolUse").splitlines()[1:] == [
        f"- Observation from this memory (error, local): {OWN_ERROR}"]
    # The correction lesson shares words with this call but is not an error lesson.
    call_about_changelog = payload("PreToolUse", tool_name="Edit", tool_input={"file_path": "CHANGELOG.md",
                                                                                "new_string": "release tag notes"})
    assert call(home, call_about_changelog)[:2] == (0, "")


def test_stop_says_nothing_and_keeps_the_correction_lessons_for_the_next_prompt(home: Path, tmp_path: Path) -> None:
    """Claude Code takes no context from a Stop hook (only a blocking decision, never ours): the correction
    lessons the hand-back bears on are logged at Stop and given with the session's next prompt."""
    transcript = tmp_path / "session.jsonl"
    lines = [{"type": "user", "message": {"role": "user", "content": "tag the release"}},
             {"type": "assistant", "message": {"role": "assistant", "content": [
                 {"type": "thinking", "thinking": "..."},
                 {"type": "text", "text": "I created the release tag v2.0 and pushed it."}]}},
             {"type": "system", "content": "hook ran"}]
    transcript.write_bytes(b"garbage line\n" + "".join(json.dumps(line) + "\n" for line in lines).encode())
    stop = payload("Stop", stop_hook_active=False) | {"transcript_path": str(transcript)}
    assert call(home, stop)[:2] == (0, "")
    with contextlib.closing(sqlite3.connect(home / "memory.db")) as db:
        assert [(i.lesson, i.event, i.held_out) for i in injections.injections(db)] == [
            (lesson_hash("correction", OWN_CORRECTION), "Stop", False)]
    # The next prompt, about something else, brings it; the one after does not repeat it.
    _, out, _ = call(home, payload("UserPromptSubmit", prompt="now bump the version number"))
    assert context(out, "UserPromptSubmit").splitlines()[1:] == [
        f"- Observation from this memory (correction, local): {OWN_CORRECTION}"]
    assert call(home, payload("UserPromptSubmit", prompt="now bump the version number"))[:2] == (0, "")
    # A hand-back given in the input is used as it is.
    other = payload("Stop", "s-other", last_assistant_message="Done: pip install works now.")
    assert call(home, other)[:2] == (0, "")  # no correction lesson bears on it (the pip one is an error lesson)
    assert call(home, payload("UserPromptSubmit", "s-other", prompt="now bump the version number"))[:2] == (0, "")
    # A held-out session's Stop logs the lesson as withheld and keeps nothing for its next prompt.
    assert call(home, payload("Stop", WITHHELD, last_assistant_message="I pushed the release tag."),
                holdout="0.5")[:2] == (0, "")
    assert call(home, payload("UserPromptSubmit", WITHHELD, prompt="now bump the version number"),
                holdout="0.5")[:2] == (0, "")
    with contextlib.closing(sqlite3.connect(home / "memory.db")) as db:
        assert (WITHHELD, "Stop", True) in {(i.session, i.event, i.held_out) for i in injections.injections(db)}
        assert db.execute("SELECT count(*) FROM meta WHERE key LIKE 'hook_pending:%'").fetchone() == (0,)


def test_no_event_is_answered_with_a_decision_only_with_documented_context(home: Path, tmp_path: Path) -> None:
    """Every answer is the documented hookSpecificOutput with additionalContext, for SessionStart,
    UserPromptSubmit and PreToolUse only: never a decision, a permissionDecision, continue or a Stop answer."""
    calls = [payload("SessionStart", "s-x", source="startup"),
             payload("UserPromptSubmit", "s-y", prompt="npm ci behind the corporate proxy and pip install"),
             payload("PreToolUse", "s-z", tool_name="Bash", tool_input={"command": "pip install -e ."}),
             payload("Stop", "s-w", last_assistant_message="I pushed the release tag, changelog untouched."),
             payload("PostToolUse", "s-v", tool_name="Bash", tool_input={"command": "make"},
                     tool_response={"is_error": True, "stderr": "make: *** No rule to make target"}),
             payload("SubagentStop", "s-u", last_assistant_message="release tag pushed"),
             payload("Notification", "s-t", message="Claude needs your permission")]
    answered = set()
    for item in calls:
        status, out, _ = call(home, item)
        assert status == 0
        if out:
            answer = json.loads(out)
            assert set(answer) == {"hookSpecificOutput"}
            assert set(answer["hookSpecificOutput"]) == {"hookEventName", "additionalContext"}
            answered.add(answer["hookSpecificOutput"]["hookEventName"])
    assert answered == {"SessionStart", "UserPromptSubmit", "PreToolUse"}


def _explained(home: Path, item: dict[str, Any], *, holdout: str = "0", flag: bool = True) -> tuple[str, str]:
    env = _env(home, holdout) | ({} if flag else {"NEVEREST_HOOK_EXPLAIN": "1"})
    argv = ("-m", "neverest.agents.hook", "--explain") if flag else ("-m", "neverest.agents.hook")
    done = subprocess.run([sys.executable, *argv], input=json.dumps(item).encode(), capture_output=True, env=env,
                          timeout=30)
    assert done.returncode == 0
    return done.stdout.decode(), done.stderr.decode()


def test_explain_says_why_a_call_gave_nothing(home: Path, tmp_path: Path) -> None:
    out, why = _explained(home, payload("SessionStart", WITHHELD, source="startup"), holdout="0.5")
    assert out == "" and "held out (holdout 0.5; decided now)" in why and "2 lesson(s) withheld" in why
    out, why = _explained(home, payload("UserPromptSubmit", WITHHELD, prompt="npm ci and the proxy"), flag=False)
    assert out == "" and "decided when the hook first saw it" in why and "already given" in why
    out, why = _explained(home, payload("UserPromptSubmit", prompt="rename the widget class"))
    assert out == "" and "0 bear on it" in why and "nothing given" in why
    out, why = _explained(home, payload("UserPromptSubmit", prompt="docker compose up hangs with variables exported"))
    assert out == "" and "left out, candidate" in why and "cosine" in why
    out, why = _explained(home, payload("UserPromptSubmit", prompt="why does pip install fail here?"))
    assert OWN_ERROR in context(out, "UserPromptSubmit") and "given 1 lesson(s)" in why
    assert "bears on it, 2 key terms, cosine" in why and lesson_hash("error", OWN_ERROR)[:8] in why
    out, why = _explained(home, payload("Stop", last_assistant_message="I pushed the release tag."))
    assert out == "" and "no context from a Stop hook" in why and "kept for the session's next prompt" in why
    _, why = _explained(tmp_path / "nowhere", payload("SessionStart"))
    assert "nothing: no memory at" in why
    _, why = _explained(home, payload("Notification", message="hi"))
    assert "is not answered" in why
    # Without the flag or the variable, standard error stays empty.
    env = {k: v for k, v in _env(home).items() if k not in (hook.EXPLAIN_ENV, hook.DEBUG_ENV)}
    done = subprocess.run([sys.executable, "-m", "neverest.agents.hook"], capture_output=True, env=env, timeout=30,
                          input=json.dumps(payload("UserPromptSubmit", "s-q", prompt="rename the widget")).encode())
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


def test_a_held_out_session_gets_nothing_and_its_withheld_lessons_are_logged(home: Path) -> None:
    start = payload("SessionStart", WITHHELD, source="startup")
    assert call(home, start, holdout="0.5")[:2] == (0, "")
    _, out, _ = call(home, payload("SessionStart", GIVEN, source="startup"), holdout="0.5")
    assert OWN_ERROR in context(out, "SessionStart")
    with contextlib.closing(sqlite3.connect(home / "memory.db")) as db:
        assert {(s.session, s.held_out) for s in injections.sessions(db)} == {(WITHHELD, True), (GIVEN, False)}
        logged = injections.injections(db)
        assert {(i.session, i.held_out) for i in logged} == {(WITHHELD, True), (GIVEN, False)}
        assert len(logged) == 4  # the same two lessons given to one, withheld from the other
    # The decision is the session's: a later change of the fraction does not move a session seen already.
    assert call(home, payload("UserPromptSubmit", WITHHELD, prompt="npm ci and the proxy"), holdout="0")[:2] == \
        (0, "")


@pytest.mark.parametrize("raw", [
    b"", b"not json", b"\xff\xfe\x00garbage", b"[1, 2, 3]", b'"a string"', b"{" * 100000,
    json.dumps({"type": "agent-turn-complete", "turn-id": "1", "input-messages": ["hi"]}).encode(),  # Codex notify
    json.dumps({"session_id": "s", "hook_event_name": "Notification", "message": "hi"}).encode(),
    json.dumps({"session_id": ["s"], "hook_event_name": "SessionStart"}).encode(),
    json.dumps({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": 3, "tool_input": "x"}).encode(),
    json.dumps({"session_id": "s", "hook_event_name": "UserPromptSubmit", "prompt": {"x": 1}}).encode(),
    json.dumps({"session_id": "s", "hook_event_name": "PostToolUse", "tool_response": "Error: x"}).encode(),
])
def test_bad_input_gives_nothing_and_status_0_fast(home: Path, raw: bytes) -> None:
    status, out, took = call(home, None, raw=raw)
    assert (status, out) == (0, "")
    assert took < hook.DEADLINE_S + 1.0


def test_no_memory_and_a_wrong_command_line_give_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    assert call(missing, payload("SessionStart"))[:2] == (0, "")
    assert not missing.exists()  # the hook never creates a memory
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o700)
    assert call(empty, payload("SessionStart"))[:2] == (0, "")
    assert not (empty / "memory.db").exists()
    assert call(empty, payload("SessionStart"), argv=("-m", "neverest.agents.hook", "--bogus"))[:2] == (0, "")


def test_a_locked_store_gives_nothing_within_the_deadline(home: Path) -> None:
    prompt = payload("UserPromptSubmit", prompt="why does pip install fail here?")
    with contextlib.closing(sqlite3.connect(home / "memory.db", isolation_level=None)) as holder:
        holder.execute("BEGIN EXCLUSIVE")
        status, out, took = call(home, prompt)
        holder.execute("ROLLBACK")
    assert (status, out) == (0, "")
    assert took < hook.DEADLINE_S + 1.0
    # Not logged as given, so the lesson comes once the store is free.
    assert OWN_ERROR in context(call(home, prompt)[1], "UserPromptSubmit")


def test_a_hung_daemon_cannot_hold_the_agent(home: Path, tmp_path: Path) -> None:
    import socket
    # A socket that accepts and never answers (listen backlog), where the daemon's would be.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.bind(str(home / "control.sock"))
        silent.listen(8)
        failed = payload("PostToolUse", tool_name="Bash", tool_input={"command": "make"},
                         tool_response={"is_error": True, "stderr": "make: *** No rule to make target"})
        status, out, took = call(home, failed)
    assert (status, out) == (0, "")
    assert took < hook.DEADLINE_S + 1.0


FAILED = payload("PostToolUse", tool_name="Bash", tool_input={"command": "FOO=1 /usr/bin/pytest -x tests"},
                 tool_response={"stdout": "", "stderr": "\n  \nImportError: cannot import name 'x'\nmore",
                                "exit_code": 4})


def _errors(home: Path) -> list[tuple[str, str, str, str, str]]:
    with contextlib.closing(sqlite3.connect(home / "memory.db")) as db:
        return db.execute("SELECT title, happened, agent, session, cwd FROM episodes WHERE kind = 'error'").fetchall()


def test_a_failed_tool_call_is_stored_at_once_without_a_daemon(home: Path) -> None:
    ok = payload("PostToolUse", tool_name="Bash", tool_input={"command": "ls"},
                 tool_response={"stdout": "a b", "stderr": "", "exit_code": 0})
    assert call(home, ok)[:2] == (0, "")
    assert _errors(home) == []
    assert call(home, FAILED)[:2] == (0, "")
    expected = ("Bash: pytest (missing dependency)", "ImportError: cannot import name 'x'", "claude-code", GIVEN,
                PROJECT)
    assert _errors(home) == [expected]
    assert call(home, FAILED)[:2] == (0, "")  # told twice, stored once
    failure = payload("PostToolUseFailure", tool_name="Read", tool_input={"file_path": "/x"}, error="File not found")
    assert call(home, failure)[:2] == (0, "")
    assert _errors(home)[1][:2] == ("Read (no such file)", "File not found")
    # An exit that is an answer is no failure, as the session reader has it: grep found nothing.
    quiet = payload("PostToolUse", tool_name="Bash", tool_input={"command": "grep -r TODO src"},
                    tool_response={"stdout": "", "stderr": "", "exit_code": 1})
    assert call(home, quiet)[:2] == (0, "")
    assert len(_errors(home)) == 2


def test_a_failed_tool_call_goes_through_the_running_daemon(home: Path) -> None:
    env = _env(home) | {"PYTHONPROFILEIMPORTTIME": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "neverest.daemon", "--home", str(home), "--listen",
                             "127.0.0.1:0", "--no-mdns"], env=_env(home), stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not (home / "control.sock").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.05)
        done = subprocess.run([sys.executable, "-m", "neverest.agents.hook"], input=json.dumps(FAILED).encode(),
                              capture_output=True, env=env, timeout=30)
    finally:
        proc.terminate()
        proc.wait(10)
    assert (done.returncode, done.stdout) == (0, b"")
    assert _errors(home) == [("Bash: pytest (missing dependency)", "ImportError: cannot import name 'x'", "claude-code",
                              GIVEN, PROJECT)]
    # The daemon stored it: this process never loaded the ingest function (nor numpy).
    imported = done.stderr.decode()
    assert "neverest.memory.queries.injections" in imported
    assert "neverest.memory.events" not in imported and "numpy" not in imported


def test_neverestctl_hook_answers_the_same(home: Path) -> None:
    status, out, _ = call(home, payload("SessionStart"), argv=("-m", "neverest.ctl", "hook"))
    assert status == 0 and OWN_ERROR in context(out, "SessionStart")


def test_the_answering_path_imports_only_what_it_needs(home: Path) -> None:
    # The first call judges the commons state of the received lesson (the slow path, which loads the
    # whole rule) and keeps it; the calls after it answer with the standard library only.
    assert COMMON in context(call(home, payload("SessionStart", "s-b"))[1], "SessionStart")
    env = _env(home) | {"PYTHONPROFILEIMPORTTIME": "1"}
    done = subprocess.run([sys.executable, "-m", "neverest.agents.hook"], env=env, capture_output=True, timeout=30,
                          input=json.dumps(payload("UserPromptSubmit", prompt="npm ci or pip install fails")).encode())
    assert OWN_ERROR in context(done.stdout.decode(), "UserPromptSubmit")
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.decode().splitlines()}
    assert not imported & {"numpy", "trio", "httpx", "hypercorn", "zeroconf", "nacl", "neverest.memory.embed"}


@pytest.mark.parametrize("text", ["pip install -e . fails", "Straße ＦＵＬＬ width don\u2019t-stop", "", "a a a b",
                                  "cache hides error; error hides cache", "--no-build-isolation x_y 42"])
def test_the_hooks_hashed_space_is_the_memorys(text: str) -> None:
    expected = hashed_vector(text)
    mine = np.zeros(hook.DIM, dtype=np.float64)
    for i, v in hook.hashed(text).items():
        mine[i] = v
    assert (mine == expected.astype(np.float64)).all()  # the same float32 values, not merely close
    stored = hook.from_blob(to_blob(expected))
    assert stored.keys() == {int(i) for i in np.flatnonzero(expected)}
    assert all(abs(v - float(expected[i])) < 1e-7 for i, v in stored.items())
    dense = hook.from_blob(np.arange(hook.DIM, dtype="<f4").tobytes())
    assert dense == {i: float(i) for i in range(1, hook.DIM)}
    with pytest.raises(ValueError, match="256 float32 numbers"):
        hook.from_blob(np.arange(8, dtype="<f4").tobytes())


def test_a_v3_store_gains_the_hooks_tables_and_keeps_its_lessons(tmp_path: Path) -> None:
    from neverest.memory.store import MIGRATIONS, SCHEMA_VERSION, schema_version

    path = tmp_path / "memory.db"
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        for script in MIGRATIONS[:3]:
            for statement in script.split(";"):
                if statement.strip():
                    db.execute(statement)
        db.execute("PRAGMA user_version = 3")
        _own(db, "error", OWN_ERROR, PROJECT, 1.5)
    with open_store(tmp_path) as store:
        assert schema_version(store.db) == SCHEMA_VERSION >= 4
        assert injections.sessions(store.db) == [] and injections.injections(store.db) == []
        assert [c.text for c in injections.candidates(store.db)] == [OWN_ERROR]


def test_a_judged_state_is_kept_for_a_while_then_judged_again(home: Path) -> None:
    prompt = "npm ci behind the corporate proxy again"
    assert COMMON in context(call(home, payload("UserPromptSubmit", "s-1", prompt=prompt))[1], "UserPromptSubmit")
    with contextlib.closing(sqlite3.connect(home / "memory.db", isolation_level=None)) as db:
        assert db.execute("SELECT state, support, judged FROM lesson_states WHERE hash = ?",
                          (lesson_hash("error", COMMON),)).fetchone() == ("common", 3, iso(NOW))
        # Say the lesson was judged a candidate a minute ago: the hook keeps that verdict...
        db.execute("UPDATE lesson_states SET state = 'candidate', judged = ?", ("2026-03-31T23:59:00.000000Z",))
    assert call(home, payload("UserPromptSubmit", "s-2", prompt=prompt))[:2] == (0, "")
    # ... until it is older than the time a state is kept, when the records are judged again.
    with contextlib.closing(sqlite3.connect(home / "memory.db", isolation_level=None)) as db:
        db.execute("UPDATE lesson_states SET judged = ?", ("2026-03-31T23:00:00.000000Z",))
    assert COMMON in context(call(home, payload("UserPromptSubmit", "s-3", prompt=prompt))[1], "UserPromptSubmit")


def test_status_shows_the_holdout_share_and_the_sessions_held_out(home: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from neverest.ctl import main

    assert call(home, payload("SessionStart", WITHHELD, source="startup"), holdout="0.5")[:2] == (0, "")
    assert call(home, payload("SessionStart", GIVEN, source="startup"), holdout="0.5")[1]
    monkeypatch.setenv("NEVEREST_NOW", iso(NOW))
    monkeypatch.setenv("NEVEREST_HOLDOUT", "0.5")
    assert main(["status", "--home", str(home), "--json"]) == 0
    hook_status = json.loads(capsys.readouterr().out)["hook"]
    assert hook_status["holdout"] == 0.5 and (hook_status["sessions"], hook_status["held_out"]) == (2, 1)
    assert [(s["session"], s["cwd"], s["withheld"]) for s in hook_status["recent_held_out"]] == [(WITHHELD, PROJECT, 2)]
    assert main(["status", "--home", str(home)]) == 0
    out = capsys.readouterr().out
    assert "50% of agent sessions are given nothing" in out and "1 of 2 session(s) seen were held out" in out
    assert f"held out     {WITHHELD}" in out and "(2 lesson(s) withheld)" in out
