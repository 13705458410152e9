"""Conversations with any model (neverest/agents/chats.py): OpenAI, Anthropic and Gemini message arrays
become sessions for the same detectors as the agents' session files, through the one ingest function.

The conversations are written as each provider's documentation shows its messages: OpenAI's Chat
Completions (``tool_calls`` with ``function.arguments`` a JSON string, a ``tool`` message answering
``tool_call_id``), Anthropic's Messages (``tool_use`` and ``tool_result`` blocks with ``is_error``),
Gemini's ``contents`` (``functionCall`` with ``args`` an object, ``functionResponse`` whose
``response`` holds an ``error`` key when the call failed).
"""

from __future__ import annotations

import io
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from neverest.agents.chats import (
    ChatError,
    Conversation,
    conversation_of,
    events_of,
    guess_format,
    ingest_chat,
    read_conversations,
    session_of,
)
from neverest.clock import FixedClock, parse_time
from neverest.config import Config
from neverest.ctl import main
from neverest.memory.service import Memory

NOW = "2026-12-01T06:00:00Z"

OPENAI: dict[str, Any] = {"model": "gpt-4o-2024-08-06", "project": "/home/ann/src/shop", "messages": [
    {"role": "system", "content": "You are a coding assistant. You can run shell commands with the shell tool."},
    {"role": "user", "content": "Install the dependencies and run the tests."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_9pw1qnYScqvGrCH58HWCvFH6", "type": "function",
         "function": {"name": "shell", "arguments": "{\"command\": \"npm install\"}"}}]},
    {"role": "tool", "tool_call_id": "call_9pw1qnYScqvGrCH58HWCvFH6",
     "content": json.dumps({"exit_code": 1, "stdout": "",
                            "stderr": "npm ERR! code ERESOLVE\nnpm ERR! ERESOLVE unable to resolve dependency tree"})},
    {"role": "assistant", "content": [{"type": "text", "text": "The install failed on a peer dependency "
                                                               "conflict. I'll retry with --legacy-peer-deps."}]},
    {"role": "user", "content": [{"type": "text", "text": "No, don't use npm here, this project uses pnpm."}]},
]}

ANTHROPIC: dict[str, Any] = {"model": "claude-sonnet-4-5", "project": "/home/ann/src/api", "messages": [
    {"role": "user", "content": "Run the migrations for the dev database."},
    {"role": "assistant", "content": [
        {"type": "text", "text": "I'll run the migrations."},
        {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "bash",
         "input": {"command": "alembic upgrade head"}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "is_error": True,
         "content": "sqlalchemy.exc.OperationalError: (psycopg2.OperationalError) connection to server at "
                    "\"localhost\" (127.0.0.1), port 5432 failed: Connection refused"}]},
    {"role": "assistant", "content": [
        {"type": "text", "text": "The database is not running. Should I start it with docker compose up -d db?"}]},
    {"role": "user", "content": "wait, the dev database runs on port 5433, not 5432"},
]}

GEMINI: dict[str, Any] = {"model": "gemini-2.5-pro", "project": "/home/ann/src/svc", "contents": [
    {"role": "user", "parts": [{"text": "Build the Go service."}]},
    {"role": "model", "parts": [{"functionCall": {"name": "run_command", "args": {"command": "go build ./..."}}}]},
    {"role": "user", "parts": [{"functionResponse": {"name": "run_command", "response": {
        "error": "go: go.mod requires go >= 1.22 (running go 1.21.5; GOTOOLCHAIN=local)"}}}]},
    {"role": "model", "parts": [{"text": "The module needs a newer Go toolchain. I will lower go.mod to 1.21."}]},
    {"role": "user", "parts": [{"text": "don't touch go.mod, install go 1.22 instead"}]},
]}


def _memory(home: Path) -> Memory:
    home.mkdir(mode=0o700, exist_ok=True)
    return Memory.open(home, Config(), FixedClock(parse_time(NOW)))


def _episodes(memory: Memory) -> list[dict[str, Any]]:
    rows = memory.store.db.execute("SELECT kind, agent, session, cwd, title, said, happened, agent_did, at "
                                   "FROM episodes ORDER BY at, kind").fetchall()
    names = ("kind", "agent", "session", "cwd", "title", "said", "happened", "agent_did", "at")
    return [dict(zip(names, row, strict=True)) for row in rows]


@pytest.mark.parametrize(("conversation", "fmt", "error", "said"), [
    (OPENAI, "openai", ("shell: npm", "npm ERR! ERESOLVE unable to resolve dependency tree"),
     "No, don't use npm here, this project uses pnpm."),
    (ANTHROPIC, "anthropic", ("bash: alembic (network or timeout)", "port 5432 failed: Connection refused"),
     "wait, the dev database runs on port 5433, not 5432"),
    (GEMINI, "gemini", ("run_command: go", "go: go.mod requires go >= 1.22 (running go 1.21.5; GOTOOLCHAIN=local)"),
     "don't touch go.mod, install go 1.22 instead"),
], ids=["openai", "anthropic", "gemini"])
def test_each_format_gives_its_failed_call_and_the_persons_correction(
        tmp_path: Path, conversation: dict[str, Any], fmt: str, error: tuple[str, str], said: str) -> None:
    messages = conversation.get("messages", conversation.get("contents"))
    with _memory(tmp_path / "home") as memory:
        result = ingest_chat(memory, messages, model=conversation["model"], project=conversation["project"],
                             at="2026-11-30T10:00:00Z")
        episodes = _episodes(memory)
    assert result.stored == 3 and not result.refused
    by_kind = {e["kind"]: e for e in episodes}
    assert set(by_kind) == {"note", "error", "correction"}
    assert by_kind["error"]["title"] == error[0] and error[1] in by_kind["error"]["happened"]
    assert by_kind["correction"]["said"] == said  # the person's words, verbatim
    assert by_kind["correction"]["agent_did"].startswith("said: ")
    assert {e["agent"] for e in episodes} == {"chat"} and {e["cwd"] for e in episodes} == {conversation["project"]}
    assert {e["at"] for e in episodes} == {"2026-11-30T10:00:00.000000Z"}
    assert by_kind["note"]["happened"] == "" and conversation["model"] in _note_text(tmp_path / "home")
    assert guess_format(messages, conversation["model"]) == fmt


def _note_text(home: Path) -> str:
    with _memory(home) as memory:
        return str(memory.store.db.execute("SELECT text FROM episodes WHERE kind = 'note'").fetchone()[0])


def test_a_growing_history_is_one_session_whose_earlier_episodes_are_duplicates(tmp_path: Path) -> None:
    """What a proxy sends: each request the whole conversation so far."""
    messages = ANTHROPIC["messages"]
    with _memory(tmp_path / "home") as memory:
        first = ingest_chat(memory, messages[:3], "anthropic", project="/home/ann/src/api")
        again = ingest_chat(memory, messages, "anthropic", project="/home/ann/src/api")
        sessions = {e["session"] for e in _episodes(memory)}
    assert (first.stored, first.duplicates) == (2, 0)  # the session's note, the failed call
    assert (again.stored, again.duplicates) == (1, 2)  # the correction is new
    assert len(sessions) == 1 and next(iter(sessions)).startswith("chat-")


def test_a_named_session_is_kept_and_another_project_is_another_session() -> None:
    named, _ = events_of(Conversation("openai", OPENAI["messages"], session="req-42"))
    assert {e["session"] for e in named} == {"req-42"}
    here, _ = events_of(Conversation("openai", OPENAI["messages"], project="/a"))
    there, _ = events_of(Conversation("openai", OPENAI["messages"], project="/b"))
    assert {e["session"] for e in here} != {e["session"] for e in there}


def test_openai_tool_results_without_a_flag() -> None:
    def result(content: object) -> tuple[bool, int | None]:
        messages = [{"role": "user", "content": "go"},
                    {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
                        "name": "shell", "arguments": json.dumps({"command": "make build"})}}]},
                    {"role": "tool", "tool_call_id": "c1", "content": content}]
        [*_, turn] = session_of(messages, "openai")
        [found] = turn.results
        return found.is_error, found.exit_code

    assert result("Error: ENOENT: no such file or directory, open 'config.yml'") == (True, None)
    assert result("Traceback (most recent call last):\n  File \"x.py\"\nKeyError: 'a'") == (True, None)
    assert result("Exit code: 2\nmake: *** No rule to make target 'build'.  Stop.") == (True, 2)
    assert result("Exit code: 0\nbuilt in 1.2s") == (False, 0)
    assert result("built in 1.2s") == (False, None)
    assert result(json.dumps({"error": None, "output": "ok"})) == (False, None)
    assert result(json.dumps({"error": {"message": "timeout after 30 s"}})) == (True, None)
    assert result({"isError": True, "content": [{"type": "text", "text": "denied"}]}) == (True, None)
    assert result([{"type": "text", "text": "ModuleNotFoundError: No module named 'yaml'"}]) == (True, None)


def test_a_benign_exit_is_no_error_and_a_refusal_is_a_correction() -> None:
    grep = [{"role": "user", "content": "find TODOs"},
            {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "shell", "arguments": '{"command": "grep -r TODO src"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "Exit code: 1"}]
    assert [e["kind"] for e in events_of(Conversation("openai", grep))[0]] == ["note"]
    refused = [{"role": "user", "content": "clean up"},
               {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash",
                                                  "input": {"command": "rm -rf build"}}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True,
                                             "content": "The user doesn't want to proceed with this tool use. "
                                                        "The tool use was rejected. The user said: keep build"}]}]
    [_note, correction] = events_of(Conversation("anthropic", refused))[0]
    assert correction["kind"] == "correction" and correction["reaction"] == "rejected"
    assert correction["said"] == "keep build" and correction["agent_did"] == "ran Bash: rm -rf build"


def test_gemini_calls_without_ids_are_answered_by_name_in_order() -> None:
    contents = [
        {"role": "user", "parts": [{"text": "check both services"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "run", "args": {"command": "curl -sf a:8080"}}},
                                    {"functionCall": {"name": "run", "args": {"command": "curl -sf b:8080"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "run", "response": {"output": "ok"}}},
                                   {"functionResponse": {"name": "run", "response": {
                                       "error": "curl: (7) Failed to connect to b port 8080"}}}]},
    ]
    events, turns = events_of(Conversation("gemini", contents))
    [error] = [e for e in events if e["kind"] == "error"]
    assert turns == 3 and error["agent_did"] == "curl -sf b:8080" and error["title"].startswith("run: curl")
    # snake_case, as the Python SDK's dictionaries spell it; ids when given; thoughts left out.
    snake = [{"role": "user", "parts": [{"text": "build"}]},
             {"role": "model", "parts": [{"text": "Let me think", "thought": True}, {"function_call": {
                 "id": "f1", "name": "sh", "args": {"command": "cargo build"}}}]},
             {"role": "user", "parts": [{"function_response": {
                 "id": "f1", "name": "sh", "response": {"error": "error[E0425]: cannot find value"}}}]}]
    turns_ = session_of(snake, "gemini")
    assert turns_[1].text == "" and turns_[1].calls[0].id == "f1" and turns_[2].results[0].is_error


def test_the_programs_words_are_not_the_persons() -> None:
    """System and developer messages, and the wrappers a harness puts around the person's words."""
    messages = [{"role": "system", "content": "No, never do that."},
                {"role": "developer", "content": "stop using emojis"},
                {"role": "user", "content": "<system-reminder>be brief</system-reminder>fix the login test"},
                {"role": "assistant", "content": "Done: I changed the assertion."},
                {"role": "user", "content": "<system-reminder>be brief</system-reminder>"}]
    turns = session_of(messages, "openai")
    assert [(t.role, t.text) for t in turns] == [("user", "fix the login test"),
                                                  ("assistant", "Done: I changed the assertion.")]


def test_guessing_the_format() -> None:
    plain = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert guess_format(plain) == "openai" and guess_format(plain, "claude-opus-4") == "anthropic"
    assert guess_format(plain, "gemini-2.0-flash") == "gemini"
    assert guess_format([{"role": "user", "parts": [{"text": "hi"}]}]) == "gemini"
    assert guess_format([{"role": "tool", "tool_call_id": "x", "content": "1"}], "claude-x") == "openai"
    assert guess_format([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]) == "anthropic"
    assert conversation_of({"contents": plain}).fmt == "gemini"
    assert conversation_of({"messages": plain, "format": "Anthropic"}).fmt == "anthropic"


@pytest.mark.parametrize(("given", "field"), [
    ({"messages": "hi"}, "messages"), ({"model": "x"}, "messages"), ({"messages": [], "format": "cohere"}, "format"),
    ({"messages": [], "model": 4}, "model"), ({"messages": [], "at": "yesterday"}, "at"),
    ({"messages": [], "project": ["a"]}, "project"), ("hello", None),
])
def test_a_conversation_that_cannot_be_read_names_its_field(given: object, field: str | None) -> None:
    with pytest.raises(ChatError) as raised:
        conversation_of(given)
    assert raised.value.field == field


def test_the_file_formats() -> None:
    def read(data: str) -> list[object]:
        return [item if isinstance(item, ChatError) else (n, item.fmt, len(item.messages))
                for n, item in read_conversations(io.BytesIO(data.encode()))]

    lines = "\n".join([json.dumps(OPENAI), "", json.dumps(ANTHROPIC["messages"]), "{not json",
                       json.dumps(GEMINI)]) + "\n"
    [one, two, bad, four] = read(lines)
    assert one == (1, "openai", 6) and two == (3, "anthropic", 5) and four == (5, "gemini", 5)
    assert isinstance(bad, ChatError) and str(bad).startswith("not JSON")
    assert read(json.dumps(GEMINI, indent=2)) == [(1, "gemini", 5)]  # one pretty-printed document
    assert read(json.dumps(OPENAI["messages"], indent=1)) == [(1, "openai", 6)]
    assert read(json.dumps([OPENAI, GEMINI], indent=1)) == [(1, "openai", 6), (1, "gemini", 5)]
    assert read("\n\n") == []
    [broken] = read("{\n  \"messages\": [\n")
    assert isinstance(broken, ChatError)


def test_neverestctl_ingest_chats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("NEVEREST_NOW", NOW)
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    chats = tmp_path / "chats.jsonl"
    chats.write_text("\n".join(json.dumps(c) for c in (OPENAI, ANTHROPIC, GEMINI)) + "\n")
    assert main(["ingest", "--home", str(home), "--chats", str(chats), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["conversations"] == 3 and report["formats"] == {"anthropic": 1, "gemini": 1, "openai": 1}
    assert report["stored"] == 9 and report["detected"] == {"correction": 3, "error": 3, "note": 3}
    assert "sessions" not in report  # the agents' folders are read only when named

    # Again: nothing new.  A line that is not a conversation is named, the others read, exit status 1.
    with chats.open("a") as f:
        f.write('{"contents": {"role": "user"}}\n')
    assert main(["ingest", "--home", str(home), "--chats", str(chats)]) == 1
    captured = capsys.readouterr()
    assert "3 conversation(s) (1 anthropic, 1 gemini, 1 openai), 15 turns; 0 episodes stored, 9 already held" \
        in captured.out
    assert "line 4: contents: must be an array of messages" in captured.err
    assert main(["ingest", "--home", str(home), "--chats", str(tmp_path / "missing.jsonl")]) == 2

    assert main(["episodes", "--home", str(home), "--kind", "correction", "--json"]) == 0
    said = {json.loads(line)["said"] for line in capsys.readouterr().out.splitlines()}
    assert "No, don't use npm here, this project uses pnpm." in said


def test_the_at_of_a_conversation_dates_its_events(tmp_path: Path) -> None:
    with _memory(tmp_path / "home") as memory:
        ingest_chat(memory, GEMINI["contents"], "gemini")
        ats = {e["at"] for e in _episodes(memory)}
    assert ats == {datetime.fromisoformat(NOW).strftime("%Y-%m-%dT%H:%M:%S.%fZ")}


def test_a_surprise_after_a_failed_call(tmp_path: Path) -> None:
    messages = [
        {"role": "user", "content": "Start the dev server."},
        {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "shell", "arguments": json.dumps({"command": "npm run dev"})}}]},
        {"role": "tool", "tool_call_id": "call_1",
         "content": "Error: listen EADDRINUSE: address already in use :::3000"},
        {"role": "assistant", "content": "It turns out the port is held by a container started earlier."},
    ]
    events, _ = events_of(Conversation("openai", messages))
    [surprise] = [e for e in events if e["kind"] == "surprise"]
    assert surprise["happened"] == "It turns out the port is held by a container started earlier."


def test_neverestctl_ingest_chats_from_standard_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("NEVEREST_NOW", NOW)
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(json.dumps(GEMINI, indent=2).encode())))
    assert main(["ingest", "--home", str(home), "--chats", "-", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["formats"] == {"gemini": 1}
