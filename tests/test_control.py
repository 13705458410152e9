"""The control socket: no request stops the server, and every error says who is at fault.

The real ``serve`` runs in a trio nursery on a temporary home and real clients talk to it
over the Unix socket: raw bytes for hostile requests, ``ask`` for the client's contract.
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from neverest.control import (
    MAX_DEPTH,
    SOCKET_FILE,
    BadRequest,
    DaemonFailed,
    DaemonNotRunning,
    DaemonRefused,
    ask,
    nesting_within,
    running,
    serve,
)

TIMEOUT_S = 1.0


async def handler(request: dict[str, Any]) -> dict[str, Any]:
    op = request["op"]
    if op == "ping":
        return {}
    if op == "echo":
        return {"echo": request.get("value")}
    if op == "keyerror":
        return {"value": {}["missing"]}
    if op == "badarg":
        raise BadRequest('"value" must be a number')
    if op == "valueerror":
        raise ValueError("unknown thing")
    if op == "unencodable":
        return {"value": object()}
    raise BadRequest(f"unknown op {op!r}")


@pytest.fixture
async def home(tmp_path: Path) -> AsyncIterator[Path]:
    async with trio.open_nursery() as nursery:
        await nursery.start(serve, tmp_path, handler, TIMEOUT_S)
        yield tmp_path
        nursery.cancel_scope.cancel()
    assert not (tmp_path / SOCKET_FILE).exists()


async def raw(home: Path, payload: bytes, *, eof: bool = True) -> dict[str, Any]:
    """Send ``payload`` as is and read the one-line answer."""
    stream = await trio.open_unix_socket(str(home / SOCKET_FILE))
    async with stream:
        await stream.send_all(payload)
        if eof:
            await stream.send_eof()
        data = bytearray()
        with trio.fail_after(10):
            while chunk := await stream.receive_some(65536):
                data += chunk
    answer: dict[str, Any] = json.loads(bytes(data))
    return answer


async def still_serves(home: Path) -> None:
    assert await raw(home, b'{"op":"echo","value":[1,{"a":2}]}\n') == {"ok": True, "echo": [1, {"a": 2}]}


@pytest.mark.parametrize("payload", [
    b"",
    b"\n",
    b"garbage\n",
    b"\xff\xfe\x00 not utf-8\n",
    b'"a string"\n',
    b"[1, 2]\n",
    b'{"no": "op"}\n',
    b'{"op": 5}\n',
    b'{"op": "echo", "value": NaN',  # truncated, no newline: read to EOF, then refused
    b"[" * 100_000 + b"\n",
    b"{\"a\":" * 100_000 + b"\n",
    b'{"op":"echo","value":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
    b"[" * 20_000 + b"]" * 20_000 + b"\n",
])
async def test_a_malformed_request_is_the_clients_fault_and_the_server_goes_on(home: Path, payload: bytes) -> None:
    answer = await raw(home, payload)
    assert answer["ok"] is False and answer["fault"] == "client"
    assert answer["error"].startswith("bad request: ")
    await still_serves(home)


async def test_deep_nesting_is_refused_by_name(home: Path) -> None:
    answer = await raw(home, b"[" * 100_000 + b"\n")
    assert "nested deeper than 64" in answer["error"]


async def test_brackets_inside_strings_are_text(home: Path) -> None:
    text = "[" * 10_000 + '\\"{' * 1000
    answer = await raw(home, json.dumps({"op": "echo", "value": text}).encode() + b"\n")
    assert answer == {"ok": True, "echo": text}


def test_nesting_scan_agrees_with_the_limit() -> None:
    assert nesting_within(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH)
    assert not nesting_within(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1))
    assert nesting_within(b'{"a":[' + b"[1]," * 5000 + b"[]]}")  # wide, not deep
    assert nesting_within(b'["' + b"[" * 5000 + b'"]')
    assert not nesting_within(b"[" * 200)  # unbalanced: the parser would refuse it anyway


async def test_bad_arguments_are_the_clients_fault(home: Path) -> None:
    for op, error in (("badarg", '"value" must be a number'), ("bogus", "unknown op 'bogus'")):
        answer = await raw(home, json.dumps({"op": op}).encode() + b"\n")
        assert answer == {"ok": False, "error": f"bad request: {error}", "fault": "client"}
    # Only BadRequest blames the client: a ValueError from a bug in the handler is the daemon's.
    answer = await raw(home, b'{"op":"valueerror"}\n')
    assert answer["fault"] == "daemon" and answer["error"].startswith("internal error: ValueError")


async def test_a_failing_handler_is_the_daemons_fault_logged_with_its_traceback(
        home: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="neverestd.control"):
        answer = await raw(home, b'{"op":"keyerror"}\n')
    assert answer["ok"] is False and answer["fault"] == "daemon"
    assert answer["error"].startswith("internal error: KeyError: 'missing'")
    failures = [r for r in caplog.records if r.name == "neverestd.control" and r.exc_info]
    assert failures and failures[0].exc_info is not None and failures[0].exc_info[0] is KeyError
    await still_serves(home)
    answer = await raw(home, b'{"op":"unencodable"}\n')
    assert answer["fault"] == "daemon"
    await still_serves(home)


async def test_a_slow_client_does_not_hold_up_others_and_is_told_why(home: Path) -> None:
    async with await trio.open_unix_socket(str(home / SOCKET_FILE)) as slow:
        await slow.send_all(b'{"op": "ec')  # and nothing more
        with trio.fail_after(TIMEOUT_S / 2):
            await still_serves(home)  # served while the slow one waits
        with trio.fail_after(TIMEOUT_S * 10):
            data = bytearray()
            while chunk := await slow.receive_some(65536):
                data += chunk
    answer = json.loads(bytes(data))
    assert answer["fault"] == "client" and "within 1 s" in answer["error"]
    await still_serves(home)


async def test_a_client_that_never_reads_its_answer_does_not_hold_the_server(home: Path) -> None:
    big = "x" * 1_000_000  # larger than the socket's buffers: the answer cannot all be sent
    streams = []
    for _ in range(3):
        stream = await trio.open_unix_socket(str(home / SOCKET_FILE))
        await stream.send_all(json.dumps({"op": "echo", "value": big}).encode() + b"\n")
        streams.append(stream)
    await still_serves(home)
    for stream in streams:
        await stream.aclose()


async def test_many_connections_at_once_are_all_answered(home: Path) -> None:
    answers: list[dict[str, Any]] = []

    async def one(i: int) -> None:
        answers.append(await raw(home, json.dumps({"op": "echo", "value": i}).encode() + b"\n"))

    async with trio.open_nursery() as nursery:
        for i in range(100):
            nursery.start_soon(one, i)
    assert sorted(a["echo"] for a in answers) == list(range(100))


async def test_ask_raises_what_the_caller_must_act_on(home: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    assert (await trio.to_thread.run_sync(ask, home, {"op": "echo", "value": 3})) == {"ok": True, "echo": 3}
    with pytest.raises(DaemonRefused, match="bad request: unknown op 'bogus'"):
        await trio.to_thread.run_sync(ask, home, {"op": "bogus"})
    with pytest.raises(DaemonFailed, match="internal error: KeyError"):
        await trio.to_thread.run_sync(ask, home, {"op": "keyerror"})
    with pytest.raises(DaemonNotRunning):
        await trio.to_thread.run_sync(ask, tmp_path_factory.mktemp("nobody"), {"op": "ping"})
    assert await trio.to_thread.run_sync(running, home)
    assert not await trio.to_thread.run_sync(running, tmp_path_factory.mktemp("nobody"))


async def test_ask_blames_a_daemon_that_closes_without_answering(tmp_path: Path) -> None:
    listener = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await listener.bind(str(tmp_path / SOCKET_FILE))
    listener.listen(1)

    async def hang_up() -> None:
        conn, _ = await listener.accept()
        await conn.recv(65536)
        conn.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hang_up)
        with pytest.raises(DaemonFailed, match="without an answer"):
            await trio.to_thread.run_sync(ask, tmp_path, {"op": "ping"})
    listener.close()


def test_the_real_daemon_survives_hostile_requests(tmp_path: Path) -> None:
    # The defect as met: 100 000 nested brackets on neverestd's socket ended its nursery.
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    proc = subprocess.Popen([sys.executable, "-m", "neverest.daemon", "--home", str(home), "--listen", "127.0.0.1:0",
                             "--no-mdns"], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not running(home):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        for payload in (b"[" * 100_000 + b"\n", b'{"op":' + b"{" * 100_000 + b"\n", b"\xff\n", b'{"op":"bogus"}\n'):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(30)
                sock.connect(str(home / SOCKET_FILE))
                sock.sendall(payload)
                sock.shutdown(socket.SHUT_WR)
                answer = json.loads(sock.makefile("rb").read())
            assert answer["ok"] is False and answer["fault"] == "client", answer
        assert proc.poll() is None
        assert ask(home, {"op": "status"})["status"]["uptime_s"] >= 0
    finally:
        proc.terminate()
        proc.wait(timeout=30)
