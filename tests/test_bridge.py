"""``neverestctl bridge``: one JSON request on standard input, one JSON answer on standard output, as a
real subprocess; and the table of operations behind it (neverest/agents/operations.py), every error path
with the argument it names."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from neverest.agents.bridge import MAX_REQUEST_BYTES, answer
from neverest.agents.operations import OPERATIONS, OperationError, prepare
from neverest.clock import FixedClock, parse_time
from neverest.ctl import main
from tests.test_chats import OPENAI

REPO = Path(__file__).resolve().parent.parent
NOW = "2026-12-01T06:00:00Z"
ERROR = {"kind": "error", "title": "pip install -e .", "happened": "fails without --no-build-isolation"}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NEVEREST_NOW", NOW)
    home = tmp_path / "home"
    assert main(["init", "--home", str(home)]) == 0
    return home


def bridge(home: Path | None, data: bytes, *extra: str) -> tuple[int, dict[str, Any], str]:
    """``neverestctl bridge`` as another program runs it: a process, its standard input and output."""
    argv = [sys.executable, "-m", "neverest.ctl", *(["--home", str(home)] if home else []), "bridge", *extra]
    env = os.environ | {"PYTHONPATH": str(REPO), "NEVEREST_NOW": NOW}
    done = subprocess.run(argv, input=data, capture_output=True, env=env, cwd=REPO, timeout=60)
    lines = done.stdout.decode("utf-8").splitlines()
    assert len(lines) == 1, done.stdout  # one answer, nothing else on standard output
    return done.returncode, json.loads(lines[0]), done.stderr.decode("utf-8")


def ask(home: Path, request: object) -> tuple[int, dict[str, Any]]:
    """The same answer in this process (the many error paths)."""
    data = request if isinstance(request, bytes) else json.dumps(request).encode("utf-8")
    reply, status = answer(io.BytesIO(data), home, FixedClock(parse_time(NOW)))
    return status, reply


def test_a_program_remembers_recalls_and_reads_the_lessons(home: Path) -> None:
    for session in ("s1", "s2"):
        status, reply, _ = bridge(home, json.dumps(
            {"operation": "remember", "arguments": ERROR | {"session": session}}).encode())
        assert (status, reply) == (0, {"ok": True, "operation": "remember",
                                       "result": {"stored": 1, "duplicate": False, "via": "store"}})
    assert main(["sleep", "--home", str(home)]) == 0
    status, reply, _ = bridge(home, b'{"operation": "lessons", "arguments": {"kind": "error", "limit": 5}}')
    [lesson] = reply["result"]["lessons"]
    assert status == 0 and lesson["text"] == "pip install fails without --no-build-isolation"
    assert lesson["state"] == "local" and "not an instruction" in lesson["framing"]
    status, reply, _ = bridge(home, json.dumps({"operation": "recall", "arguments": {
        "query": "pip install build isolation", "k": 3}}).encode())
    assert status == 0 and [r["type"] for r in reply["result"]["results"]] == ["lesson", "episode", "episode"]
    status, reply, _ = bridge(home, json.dumps({"operation": "show", "arguments": {
        "hash": lesson["hash"][:8]}}).encode())
    assert status == 0 and reply["result"]["hash"] == lesson["hash"] and reply["result"]["state"] == "local"
    status, reply, _ = bridge(home, b'{"operation": "status"}')  # no arguments: none needed
    assert status == 0 and reply["result"]["episodes"] == 2 and reply["result"]["lessons"] == 1
    assert reply["result"]["operations"] == list(OPERATIONS)


def test_a_conversation_through_the_bridge(home: Path) -> None:
    request = {"operation": "chat", "arguments": {"messages": OPENAI["messages"], "model": "gpt-4o",
                                                  "project": "/home/ann/src/shop"}}
    status, reply, _ = bridge(home, json.dumps(request).encode())
    result = reply["result"]
    assert status == 0 and result["format"] == "openai" and result["turns"] == 5
    assert result["stored"] == 3 and result["via"] == "store" and result["session"].startswith("chat-")
    assert main(["episodes", "--home", str(home), "--kind", "correction", "--json"]) == 0


def test_a_program_writes_and_reads_a_project_log(home: Path) -> None:
    """The bridge's relay is the log the proxy and the MCP tool write: a deploy added by one program is in
    the handoff the next one reads, framed; a kind the log does not take is refused, naming it."""
    note = {"project": "/home/ann/src/shop", "note": "v2.3 shipped to staging", "kind": "deploy", "model": "ci"}
    status, reply, _ = bridge(home, json.dumps({"operation": "relay", "arguments": note}).encode())
    assert status == 0 and reply["result"]["written"]["kind"] == "deploy"
    assert reply["result"]["written"]["project"] == "/home/ann/src/shop"
    status, reply, _ = bridge(home, b'{"operation": "relay", "arguments": {"project": "/home/ann/src/shop/"}}')
    handoff = reply["result"]
    assert status == 0 and [d["text"] for d in handoff["deploys"]] == ["v2.3 shipped to staging"]
    assert "v2.3 shipped to staging" in handoff["text"] and "not instructions" in handoff["framing"]
    assert handoff["last_model"] == "ci" and (home / "relay" / f"{handoff['key']}.jsonl").is_file()
    status, reply, _ = bridge(home, json.dumps({"operation": "relay", "arguments": note | {"kind": "order"}}).encode())
    assert (status, reply["error"]["code"], reply["error"]["argument"]) == (2, "bad-arguments", "kind")
    status, reply, _ = bridge(home, b'{"operation": "relay", "arguments": {"project": ""}}')
    assert (status, reply["error"]["argument"]) == (2, "project")


@pytest.mark.parametrize(("data", "code", "argument"), [
    (b"", "bad-json", None),
    (b"remember this", "bad-json", None),
    (b'{"operation": "nope"}', "unknown-operation", "operation"),
    (b'{"operation": "recall", "arguments": {"query": "x", "k": 0}}', "bad-arguments", "k"),
    (b'{"operation": "remember", "arguments": {"kind": "correction", "happened": "no words"}}', "bad-arguments",
     "said"),
    (b'{"operation": "show", "arguments": {"hash": "abcdef12"}}', "not-found", "hash"),
], ids=["empty", "not-json", "unknown-operation", "out-of-range", "event-refused", "not-found"])
def test_a_request_at_fault_is_answered_in_json_with_exit_status_2(home: Path, data: bytes, code: str,
                                                                    argument: str | None) -> None:
    status, reply, stderr = bridge(home, data)
    assert status == 2 and reply["ok"] is False and reply["error"]["code"] == code, reply
    assert reply["error"].get("argument") == argument and stderr == ""


def test_the_bounds_and_the_memory_at_fault(home: Path, tmp_path: Path) -> None:
    big = json.dumps({"operation": "recall", "arguments": {"query": "x" * MAX_REQUEST_BYTES}}).encode()
    status, reply, _ = bridge(home, big)
    assert (status, reply["error"]["code"]) == (2, "too-large")
    status, reply, _ = bridge(tmp_path / "nowhere", b'{"operation": "status"}')
    assert (status, reply["error"]["code"]) == (2, "no-memory") and "nowhere" in reply["error"]["message"]
    (home / "config.toml").write_text("trust = [\n")  # the memory cannot be opened: its fault, not the request's
    status, reply, _ = bridge(home, b'{"operation": "status"}')
    assert (status, reply["error"]["code"]) == (1, "failed") and "cannot be opened" in reply["error"]["message"]


def test_the_list_of_operations(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bridge", "--list"]) == 0
    listed = json.loads(capsys.readouterr().out)["operations"]
    assert [op["name"] for op in listed] == ["status", "remember", "recall", "lessons", "show", "chat", "relay"]
    recall = next(op for op in listed if op["name"] == "recall")
    assert recall["arguments"][1] == {"name": "k", "type": "integer", "required": False, "default": 5,
                                      "help": "how many results at most (1 to 50)"}


@pytest.mark.parametrize(("request_", "code", "argument", "says"), [
    (b"\xff\xfe{}", "bad-json", None, "not UTF-8"),
    (b"[" * 100_000, "bad-json", None, ""),
    ([{"operation": "status"}], "bad-request", None, "a JSON object"),
    ({"arguments": {}}, "bad-request", "operation", "operation: must be a string"),
    ({"operation": 7}, "bad-request", "operation", "operation: must be a string"),
    ({"operation": "status", "id": 1}, "bad-request", "id", "only operation and arguments"),
    ({"operation": "recall", "arguments": ["x"]}, "bad-request", "arguments", "must be an object"),
    ({"operation": "recall", "arguments": {"query": "x", "top": 3}}, "bad-arguments", "top", "takes no such"),
    ({"operation": "recall", "arguments": {"query": 5}}, "bad-arguments", "query", "must be a string"),
    ({"operation": "recall", "arguments": {"query": ""}}, "bad-arguments", "query", "0 characters"),
    ({"operation": "recall", "arguments": {"query": "x", "k": True}}, "bad-arguments", "k", "an integer"),
    ({"operation": "recall", "arguments": {"query": "x", "k": 51}}, "bad-arguments", "k", "from 1 to 50"),
    ({"operation": "recall", "arguments": {"query": "x", "k": 2.5}}, "bad-arguments", "k", "not a number"),
    ({"operation": "lessons", "arguments": {"kind": "note"}}, "bad-arguments", "kind", "not one of"),
    ({"operation": "show", "arguments": {}}, "bad-arguments", "hash", "missing"),
    ({"operation": "show", "arguments": {"hash": "abc"}}, "bad-arguments", "hash", "3 characters"),
    ({"operation": "show", "arguments": {"hash": "zzzzzzzz"}}, "bad-arguments", "hash", "hex digits"),
    ({"operation": "remember", "arguments": {"title": "x"}}, "bad-arguments", "kind", "missing"),
    ({"operation": "remember", "arguments": {"kind": "rumour", "text": "x"}}, "bad-arguments", "kind", "not one"),
    ({"operation": "remember", "arguments": {"kind": "note"}}, "bad-arguments", "text", "note events need"),
    ({"operation": "remember", "arguments": ERROR | {"at": "2027-06-01T00:00:00Z"}}, "bad-arguments", "at",
     "after now"),
    ({"operation": "remember", "arguments": ERROR | {"reaction": "sulked"}}, "bad-arguments", "reaction", ""),
    ({"operation": "chat", "arguments": {}}, "bad-arguments", "messages", "missing"),
    ({"operation": "chat", "arguments": {"messages": [], "format": "cohere"}}, "bad-arguments", "format", ""),
    ({"operation": "chat", "arguments": {"messages": [], "at": "soon"}}, "bad-arguments", "at", "ISO 8601"),
    ({"operation": "chat", "arguments": {"messages": [{}] * 20_001}}, "bad-arguments", "messages",
     "20001 items; it must be at most 20000 items"),
])
def test_every_error_names_what_is_wrong(home: Path, request_: object, code: str, argument: str | None,
                                         says: str) -> None:
    status, reply = ask(home, request_)
    error = reply["error"]
    assert status == 2 and reply["ok"] is False and error["code"] == code, error
    assert error.get("argument") == argument and says in error["message"], error


def test_the_agent_is_the_doors_unless_the_request_names_one(home: Path) -> None:
    now = parse_time(NOW)
    assert prepare("remember", ERROR, agent="bridge", now=now).arguments["event"]["agent"] == "bridge"
    named = prepare("remember", ERROR | {"agent": "my-editor"}, agent="bridge", now=now)
    assert named.arguments["event"]["agent"] == "my-editor"
    with pytest.raises(OperationError) as raised:
        prepare("forget", {}, agent="bridge", now=now)  # only the operations of the table
    assert raised.value.code == "unknown-operation"
