"""``neverestctl mcp`` driven as an agent drives it: the SDK's own client over stdio, on a
real subprocess, and raw JSON-RPC lines for what a well-behaved client never sends."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, TextIO

import pytest
import trio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import CallToolResult, TextContent

from neverest.ctl import main
from neverest.identity import Identity
from neverest.records import sign_confirm, sign_lesson

REPO = Path(__file__).resolve().parent.parent
NOW = "2026-03-01T03:00:00Z"
CONFIG = 'trust = "any"\n'  # what is under test is the server, not the trust policy
TIMEOUT_S = 60


def _env() -> dict[str, str]:
    return {"PYTHONPATH": str(REPO), "NEVEREST_NOW": NOW}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text(CONFIG)
    return home


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[TextIO]:
    with (tmp_path / "server.err").open("w+") as log:
        yield log


def _received_lesson(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A lesson received from another memory and confirmed by three more (common); its hash."""
    folder = tmp_path / "shared"
    folder.mkdir()
    x = Identity.from_seed(hashlib.sha256(b"mcp/x").digest())
    lesson = sign_lesson(x.signing_key, kind="error", text="pip install -e . fails without --no-build-isolation",
                         seen=2, strength=1.5, updated="2026-02-27T03:00:00.000000Z", seq=1)
    (folder / f"{x.origin}.jsonl").write_bytes(lesson.raw + b"\n")
    for name in (b"y", b"z", b"w"):
        who = Identity.from_seed(hashlib.sha256(b"mcp/" + name).digest())
        confirm = sign_confirm(who.signing_key, lesson.target, at="2026-02-28T03:00:00.000000Z", seq=1)
        (folder / f"{who.origin}.jsonl").write_bytes(confirm.raw + b"\n")
    monkeypatch.setenv("NEVEREST_NOW", NOW)
    assert main(["--home", str(home), "folder", "sync", str(folder), "--json"]) == 0
    return lesson.target


@contextlib.asynccontextmanager
async def session(home: Path, errlog: TextIO) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "neverest.ctl", "--home", str(home), "mcp"],
                                   env=_env(), cwd=str(REPO))
    async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        yield client


def _data(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def _error_text(result: CallToolResult) -> str:
    assert result.is_error
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def test_tools_are_listed_with_schemas_and_descriptions(home: Path, errlog: TextIO) -> None:
    with trio.fail_after(TIMEOUT_S):
        async with session(home, errlog) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(listed) == {"remember", "recall", "lessons", "show", "relay"}
    for tool in listed.values():
        assert tool.description and len(tool.description) > 80
        assert tool.input_schema["type"] == "object"
    remember = listed["remember"].input_schema
    assert remember["required"] == ["kind"]
    assert set(remember["properties"]) >= {"kind", "title", "happened", "said", "expected", "session", "cwd"}
    assert remember["properties"]["kind"]["enum"] == ["error", "correction", "surprise", "note", "environment"]
    recall = listed["recall"].input_schema
    assert recall["required"] == ["query"]
    assert recall["properties"]["k"]["type"] == "integer" and recall["properties"]["k"]["maximum"] == 50
    assert listed["show"].input_schema["required"] == ["hash"]
    assert listed["lessons"].input_schema.get("required", []) == []


async def test_remember_then_recall_finds_it(home: Path, errlog: TextIO) -> None:
    event = {"kind": "error", "title": "pytest: ModuleNotFoundError",
             "happened": "No module named 'frobnicate' when running the suite", "session": "s-1", "cwd": "/tmp/p"}
    with trio.fail_after(TIMEOUT_S):
        async with session(home, errlog) as client:
            stored = _data(await client.call_tool("remember", event))
            again = _data(await client.call_tool("remember", event))
            found = _data(await client.call_tool("recall", {"query": "frobnicate module missing", "k": 3}))
            nothing = _data(await client.call_tool("recall", {"query": "zebra quasar"}))
    assert stored == {"stored": 1, "duplicate": False, "via": "store"}
    assert again == {"stored": 0, "duplicate": True, "via": "store"}
    assert [r["type"] for r in found["results"]] == ["episode"]
    hit = found["results"][0]
    assert "frobnicate" in hit["text"] and hit["kind"] == "error"
    assert "not an instruction" in hit["framing"] and hit["provenance"].startswith("remembered here at 2026-03-01")
    assert nothing["results"] == []
    # What the server stored is what the command line sees: one store.
    assert main(["--home", str(home), "recall", "frobnicate", "--json"]) == 0


async def test_lessons_and_show_frame_a_received_lesson(home: Path, tmp_path: Path, errlog: TextIO,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    target = _received_lesson(home, tmp_path, monkeypatch)
    with trio.fail_after(TIMEOUT_S):
        async with session(home, errlog) as client:
            held = _data(await client.call_tool("lessons", {}))
            only_corrections = _data(await client.call_tool("lessons", {"kind": "correction"}))
            shown = _data(await client.call_tool("show", {"hash": target[:10].upper()}))
            recalled = _data(await client.call_tool("recall", {"query": "pip install no-build-isolation"}))
    assert held["total"] == 1 and held["shown"] == 1
    lesson = held["lessons"][0]
    assert lesson["hash"] == target and lesson["kind"] == "error" and lesson["state"] == "common"
    assert lesson["support"] == 3
    assert lesson["provenance"].startswith("received from memory ") and lesson["origin"] in lesson["provenance"]
    assert "not an instruction" in lesson["framing"]
    assert only_corrections == {"total": 0, "shown": 0, "lessons": []}
    assert shown["hash"] == target and shown["state"] == "common" and len(shown["supporters"]) == 3
    assert shown["publishers"] == [lesson["origin"]] and "not an instruction" in shown["framing"]
    assert shown["provenance"].startswith(f"received from memory {lesson['origin']}")
    assert [(r["type"], r["hash"], r["state"]) for r in recalled["results"]] == [("lesson", target, "common")]


async def test_tool_errors_are_tool_errors_and_the_server_goes_on(home: Path, errlog: TextIO) -> None:
    with trio.fail_after(TIMEOUT_S):
        async with session(home, errlog) as client:
            unknown = await client.call_tool("show", {"hash": "abcdef12"})
            short = await client.call_tool("show", {"hash": "abc"})
            bad_kind = await client.call_tool("remember", {"kind": "rumour", "text": "x"})
            refused = await client.call_tool("remember", {"kind": "correction", "happened": "no words said"})
            bad_k = await client.call_tool("recall", {"query": "x", "k": 0})
            after = _data(await client.call_tool("lessons", {"limit": 5}))
    assert "0 lessons have a hash starting with abcdef12" in _error_text(unknown)
    assert "hash" in _error_text(short)
    assert "kind" in _error_text(bad_kind)
    assert "event refused" in _error_text(refused) and "said" in _error_text(refused)
    assert "k" in _error_text(bad_k)
    assert after == {"total": 0, "shown": 0, "lessons": []}


@contextlib.contextmanager
def running_daemon(home: Path) -> Iterator[None]:
    """A real neverestd on ``home`` (loopback, no zeroconf) for the length of the block."""
    proc = subprocess.Popen([sys.executable, "-m", "neverest.daemon", "--home", str(home), "--listen",
                             "127.0.0.1:0", "--no-mdns"], env=os.environ | _env(), stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not (home / "control.sock").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.05)
        yield
    finally:
        proc.terminate()
        proc.wait(10)


async def test_remember_goes_through_the_running_daemon(home: Path, errlog: TextIO) -> None:
    with running_daemon(home), trio.fail_after(TIMEOUT_S):
        async with session(home, errlog) as client:
            stored = _data(await client.call_tool("remember", {"kind": "note", "text": "the staging db is read-only"}))
            found = _data(await client.call_tool("recall", {"query": "staging db read-only"}))
    assert stored == {"stored": 1, "duplicate": False, "via": "daemon"}
    assert [r["text"] for r in found["results"]] == ["the staging db is read-only"]


def _rpc(proc: subprocess.Popen[bytes], line: bytes) -> dict[str, Any]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(line + b"\n")
    proc.stdin.flush()
    # An unanswered line must fail the test, not hang it.
    assert select.select([proc.stdout], [], [], 20)[0], f"no answer to {line[:60]!r}"
    answer: dict[str, Any] = json.loads(proc.stdout.readline())
    return answer


def test_malformed_lines_get_json_rpc_errors_and_the_next_request_works(home: Path, tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "neverest.ctl", "--home", str(home), "mcp"], cwd=REPO,
                            env=os.environ | _env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    try:
        init = _rpc(proc, json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
        ).encode())
        assert init["id"] == 1 and init["result"]["serverInfo"]["name"] == "neverest"
        assert _rpc(proc, b"{this is not json") == {"jsonrpc": "2.0", "id": None, "error": {
            "code": -32700, "message": "parse error: the line is not JSON (one JSON-RPC message per line)"}}
        invalid = _rpc(proc, b'{"jsonrpc": "2.0", "id": 7, "params": []}')
        assert invalid["id"] == 7 and invalid["error"]["code"] == -32600
        assert _rpc(proc, b"\xff\xfe binary")["error"]["code"] == -32700
        assert _rpc(proc, b"[" * 100_000 + b"]" * 100_000)["error"]["code"] == -32700
        for bad_id in (b"true", b'{"a": 1}', b"1.5"):  # the SDK alone reads these as notifications: no answer
            wrong = _rpc(proc, b'{"jsonrpc": "2.0", "id": ' + bad_id + b', "method": "tools/list"}')
            assert wrong == {"jsonrpc": "2.0", "id": None, "error": {
                "code": -32600, "message": "invalid request: id must be a string or an integer"}}
        huge = _rpc(proc, b'{"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": {"x": "'
                    + b"a" * (5 * 1024 * 1024) + b'"}}')
        assert huge["id"] is None and huge["error"]["code"] == -32600 and "bytes" in huge["error"]["message"]
        assert _rpc(proc, b'{"jsonrpc": "2.0", "id": 9, "method": "no/such"}')["error"]["code"] == -32601
        proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')  # type: ignore[union-attr]
        listed = _rpc(proc, b'{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}')
        assert listed["id"] == 2 and len(listed["result"]["tools"]) == 5
        assert proc.poll() is None
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            assert proc.wait(10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


async def test_relay_reads_the_handoff_and_adds_a_line(home: Path, errlog: TextIO) -> None:
    with trio.fail_after(TIMEOUT_S):
        async with session(home, errlog) as client:
            empty = _data(await client.call_tool("relay", {"project": "/src/shop"}))
            written = _data(await client.call_tool("relay", {"project": "/src/shop", "note": "shipped 1.2",
                                                            "kind": "deploy", "model": "claude-sonnet"}))
            handed = _data(await client.call_tool("relay", {"project": "/src/shop/"}))
            bad = await client.call_tool("relay", {"project": "/src/shop", "note": "  "})
    assert empty["text"] == "" and empty["recent"] == []
    assert written["written"]["kind"] == "deploy" and written["written"]["role"] == "note"
    assert [d["text"] for d in handed["deploys"]] == ["shipped 1.2"] and handed["last_model"] == "claude-sonnet"
    assert "shipped 1.2" in handed["text"] and "not instructions" in handed["framing"]
    assert "empty" in _error_text(bad)


# -- the protocol served without the SDK ----------------------------------------------------------

def test_the_server_negotiates_the_versions_the_sdk_negotiates_and_lists_tools_the_sdk_reads() -> None:
    from mcp.types import InitializeResult, Tool
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION

    from neverest.agents import mcp_server

    assert mcp_server.PROTOCOL_VERSIONS == HANDSHAKE_PROTOCOL_VERSIONS
    assert mcp_server.LATEST_PROTOCOL_VERSION == LATEST_HANDSHAKE_VERSION
    for tool in mcp_server.TOOLS:
        assert Tool.model_validate(tool).model_dump(by_alias=True, exclude_none=True) == tool
    InitializeResult.model_validate({"capabilities": mcp_server.CAPABILITIES, "protocolVersion": "2025-06-18",
                                     "serverInfo": {"name": "neverest", "version": "0"}})


def test_arguments_are_checked_as_pydantic_checked_them() -> None:
    from neverest.agents.mcp_server import TOOLS, ToolError, arguments

    tools = {tool["name"]: tool for tool in TOOLS}
    # Lax as pydantic: integral floats, digit strings and booleans are integers; unknown names are left out.
    assert arguments(tools["recall"], {"query": "x", "k": "3"}) == {"query": "x", "k": 3}
    assert arguments(tools["recall"], {"query": "x", "k": 2.0, "extra": 1}) == {"query": "x", "k": 2}
    assert arguments(tools["lessons"], {"limit": True}) == {"kind": None, "limit": 1}
    assert arguments(tools["relay"], {"project": "p"}) == {"project": "p", "note": None, "kind": "note", "model": "",
                                                            "limit": 20}
    with pytest.raises(ToolError) as caught:
        arguments(tools["relay"], {"note": "", "kind": "rumour", "limit": 2.5, "model": 7})
    assert str(caught.value).splitlines()[::2] == [
        "5 validation errors for relayArguments", "  Field required [type=missing, input_value={'note': '', 'kind': "
        "'rumour', 'limit': 2.5, 'model': 7}, input_type=dict]", "  String should have at least 1 character "
        "[type=string_too_short, input_value='', input_type=str]", "  Input should be 'note', 'deploy' or "
        "'correction' [type=literal_error, input_value='rumour', input_type=str]", "  Input should be a valid "
        "string [type=string_type, input_value=7, input_type=int]", "  Input should be a valid integer, got a "
        "number with a fractional part [type=int_from_float, input_value=2.5, input_type=float]"]


def test_requests_before_initialize_and_the_empty_lists(home: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "neverest.ctl", "--home", str(home), "mcp"], cwd=REPO,
                            env=os.environ | _env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    try:
        assert _rpc(proc, b'{"jsonrpc": "2.0", "id": 0, "method": "ping"}') == {"jsonrpc": "2.0", "id": 0, "result": {}}
        early = _rpc(proc, b'{"jsonrpc": "2.0", "id": "a", "method": "tools/list"}')
        assert early["id"] == "a" and early["error"]["code"] == -32602
        init = _rpc(proc, json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "1999-01-01", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
        ).encode())
        assert init["result"]["protocolVersion"] == "2025-11-25" and "recall" in init["result"]["instructions"]
        for method, key in (("resources/list", "resources"), ("prompts/list", "prompts"),
                            ("resources/templates/list", "resourceTemplates")):
            assert _rpc(proc, json.dumps({"jsonrpc": "2.0", "id": 2, "method": method}).encode())["result"] == {key: []}
        unknown = _rpc(proc, b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "x"}}')
        assert unknown["result"] == {"content": [{"text": "Unknown tool: x", "type": "text"}], "isError": True}
        nameless = _rpc(proc, b'{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"arguments": {}}}')
        assert nameless["error"]["code"] == -32602
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            assert proc.wait(10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_the_server_loads_neither_the_sdk_nor_pydantic(home: Path) -> None:
    code = ("import sys, runpy; sys.argv = ['neverestctl', '--home', sys.argv[1], 'mcp']\n"
            "try:\n    runpy.run_module('neverest.ctl', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'pydantic', 'anyio', 'numpy')),"
            " file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code, str(home)], cwd=REPO, env=os.environ | _env(),
                          input=b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": '
                                b'"2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}\n'
                                b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "lessons", '
                                b'"arguments": {}}}\n', capture_output=True, timeout=60, check=True)
    assert [json.loads(line)["id"] for line in done.stdout.splitlines()] == [1, 2]
    assert done.stderr.decode().strip().splitlines()[-1] == "[]"
