"""The loopback JSON API (neverest/agents/api.py): every status code on the ASGI app in this process, then
real sockets on 127.0.0.1: the app served by hypercorn here, ``neverestctl api`` and ``neverestd`` with
``api_listen`` as processes."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from neverest.agents.api import (
    MAX_BODY_BYTES,
    TOKEN_FILE,
    ApiApp,
    TokenError,
    api_token,
    check_listen,
    runner_here,
    serve,
)
from neverest.agents.operations import OperationError, OperationFailed, Request
from neverest.clock import FixedClock, parse_time
from neverest.ctl import main
from neverest.services.listen import ListenError
from tests.test_chats import GEMINI

REPO = Path(__file__).resolve().parent.parent
NOW = "2026-12-01T06:00:00Z"
CLOCK = FixedClock(parse_time(NOW))
ERROR = {"kind": "error", "title": "cargo build", "happened": "linker `cc` not found", "session": "s1"}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NEVEREST_NOW", NOW)
    home = tmp_path / "home"
    assert main(["init", "--home", str(home)]) == 0
    return home


@pytest.fixture
def app(home: Path) -> ApiApp:
    return ApiApp(api_token(home), runner_here(home, CLOCK), CLOCK)


def auth(token: bytes) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", b"Bearer " + token)]


async def call(app: ApiApp, method: str, path: str, body: bytes = b"", headers: list[tuple[bytes, bytes]] | None = None,
               *, chunks: list[bytes] | None = None, stall: bool = False) -> tuple[int, dict[bytes, bytes], Any]:
    """One request to the ASGI app as hypercorn would hand it over."""
    pieces = list(chunks) if chunks is not None else [body]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if not pieces:
            if stall:
                await trio.sleep_forever()
            return {"type": "http.disconnect"}
        piece = pieces.pop(0)
        return {"type": "http.request", "body": piece, "more_body": bool(pieces) or stall}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    given = list(headers or [])
    if chunks is None and not any(name == b"content-length" for name, _ in given):
        given.append((b"content-length", str(len(body)).encode()))
    scope = {"type": "http", "method": method, "path": path, "headers": given}
    await app(scope, receive, send)
    start, end = sent
    return start["status"], dict(start["headers"]), json.loads(end["body"])


JSON = [(b"content-type", b"application/json")]


async def test_the_token_is_made_private_on_first_start_and_kept(home: Path) -> None:
    token = api_token(home)
    path = home / TOKEN_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(token) == 64
    assert api_token(home) == token  # the next start keeps it
    path.chmod(0o644)
    with pytest.raises(TokenError, match="can be read by others"):
        api_token(home)
    path.unlink()
    (home / "elsewhere").write_text("x" * 64)
    path.symlink_to(home / "elsewhere")
    with pytest.raises(TokenError, match="cannot read"):
        api_token(home)
    path.unlink()
    path.write_text("short\n")
    path.chmod(0o600)
    with pytest.raises(TokenError, match="does not hold a token"):
        api_token(home)


async def test_without_the_token_nothing_is_looked_at(app: ApiApp) -> None:
    for headers in ([], auth(b"0" * 64), [(b"authorization", b"Basic " + app.token)], [(b"authorization", b"Bearer")],
                    auth(app.token[:-1])):
        for path in ("/v1/status", "/v1/nope", "/admin"):
            status, sent, body = await call(app, "POST", path, b"{}", headers + JSON)
            assert status == 401 and body["error"]["code"] == "unauthorized", (headers, path)
            assert sent[b"www-authenticate"] == b'Bearer realm="neverest-api"'
    status, _, body = await call(app, "POST", "/v1/status", b"", [(b"authorization", b"bearer " + app.token)])
    assert status == 200 and body["ok"] is True and body["result"]["episodes"] == 0


async def test_routes_methods_and_media_types(app: ApiApp) -> None:
    token = auth(app.token)
    for path in ("/v1/nope", "/v2/status", "/v1/status/", "/", "/v1/Status"):
        status, _, body = await call(app, "POST", path, b"{}", token + JSON)
        assert status == 404 and body["error"]["code"] == "unknown-operation", path
    status, sent, body = await call(app, "GET", "/v1/status", b"", token)
    assert status == 405 and sent[b"allow"] == b"POST" and body["error"]["code"] == "method-not-allowed"
    for media in (b"text/plain", b"application/x-www-form-urlencoded", b"multipart/form-data; boundary=x"):
        status, _, body = await call(app, "POST", "/v1/status", b"{}", [*token, (b"content-type", media)])
        assert status == 415 and body["error"]["code"] == "unsupported-media-type", media
    for media in (b"application/json; charset=utf-8", b"application/vnd.neverest+json", b"Application/JSON"):
        status, _, _ = await call(app, "POST", "/v1/status", b"{}", [*token, (b"content-type", media)])
        assert status == 200, media


async def test_bodies_that_are_not_taken(app: ApiApp) -> None:
    token = auth(app.token) + JSON
    big = b'{"query": "' + b"x" * MAX_BODY_BYTES + b'"}'
    status, _, body = await call(app, "POST", "/v1/recall", big, token)
    assert status == 413 and body["error"]["code"] == "too-large"
    # Without a length, refused at the chunk that takes it over.
    status, _, body = await call(app, "POST", "/v1/recall", headers=token, chunks=[big[:MAX_BODY_BYTES], big[-10:]])
    assert status == 413
    status, _, body = await call(app, "POST", "/v1/recall", b"{}", [*token[:1], (b"content-length", b"12x")])
    assert status == 400 and body["error"]["code"] == "bad-request"
    for data, says in ((b"{", "not JSON"), (b"[1, 2]", "a JSON object"), (b'"x"', "a JSON object"),
                       (b"\xff{}", "not UTF-8"), (b"[" * 50_000, "nested too deeply")):
        status, _, body = await call(app, "POST", "/v1/status", data, token)
        assert (status, body["error"]["code"]) == (400, "bad-json") and says in body["error"]["message"], data


async def test_a_body_that_trickles_is_cut_off(app: ApiApp, autojump_clock: trio.testing.MockClock) -> None:
    status, _, body = await call(app, "POST", "/v1/status", headers=auth(app.token), chunks=[b"{"], stall=True)
    assert (status, body["error"]["code"]) == (408, "body-timeout")
    assert trio.current_time() == pytest.approx(30)


async def test_the_operations_answers_and_errors(app: ApiApp) -> None:
    token = auth(app.token) + JSON
    status, _, body = await call(app, "POST", "/v1/remember", json.dumps(ERROR).encode(), token)
    assert status == 200 and body == {"ok": True, "operation": "remember",
                                      "result": {"stored": 1, "duplicate": False, "via": "store"}}
    status, _, body = await call(app, "POST", "/v1/recall", b'{"query": "cargo linker", "k": 1}', token)
    assert status == 200 and body["result"]["results"][0]["text"] == "cargo build: linker `cc` not found"
    status, _, body = await call(app, "POST", "/v1/chat", json.dumps(GEMINI).encode(), token)
    assert status == 200 and body["result"]["format"] == "gemini" and body["result"]["stored"] == 3
    for path, data, code, argument in (
            ("/v1/recall", b'{"k": 3}', 400, "query"),
            ("/v1/recall", b'{"query": "x", "k": "3"}', 400, "k"),
            ("/v1/lessons", b'{"sort": "new"}', 400, "sort"),
            ("/v1/remember", b'{"kind": "surprise"}', 400, "happened"),
            ("/v1/show", b'{"hash": "abcdef"}', 404, "hash")):
        status, _, body = await call(app, "POST", path, data, token)
        assert (status, body["error"].get("argument")) == (code, argument), (path, body)


async def test_who_is_at_fault_decides_the_status(home: Path) -> None:
    def runner(exc: Exception) -> Callable[[Request], Awaitable[dict[str, Any]]]:
        async def run(request: Request) -> dict[str, Any]:
            raise exc
        return run

    token = api_token(home)
    for raised, status_code, code in ((OperationError("refused", "the daemon refused it"), 422, "refused"),
                                      (OperationFailed("the memory's store failed: locked"), 500, "failed"),
                                      (RuntimeError("a bug"), 500, "failed")):
        app = ApiApp(token, runner(raised), CLOCK)
        status, _, body = await call(app, "POST", "/v1/status", b"", auth(token))
        assert (status, body["error"]["code"]) == (status_code, code)
        assert "a bug" not in body["error"]["message"]  # what failed inside is logged, not told


def test_only_loopback_unless_forced() -> None:
    for listen in ("127.0.0.1:0", "127.9.9.9:7429", "[::1]:7429", "localhost:7429"):
        check_listen(listen, allow_remote=False)
    for listen in ("0.0.0.0:7429", "192.168.1.4:7429", "[::]:7429", "example.org:7429"):
        with pytest.raises(ListenError, match="not a loopback address"):
            check_listen(listen, allow_remote=False)
        check_listen(listen, allow_remote=True)
    with pytest.raises(ListenError):
        check_listen("7429", allow_remote=False)


async def test_real_sockets(app: ApiApp) -> None:
    async with trio.open_nursery() as nursery:
        [url] = await nursery.start(serve, app, "127.0.0.1:0")
        async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=20) as client:
            ok = await client.post("/v1/status", json={}, headers={"Authorization": f"Bearer {app.token.decode()}"})
            nobody = await client.post("/v1/status", json={})
            wrong = await client.post("/v1/status", json={}, headers={"Authorization": "Bearer " + "f" * 64})
            text = await client.post("/v1/status", content=b"{}", headers={
                "Authorization": f"Bearer {app.token.decode()}", "Content-Type": "text/plain"})
        # A body declared over the bound is refused before a byte of it is sent.
        host, port = url.removeprefix("http://").split(":")
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(b"POST /v1/status HTTP/1.1\r\nHost: api\r\nContent-Type: application/json\r\n"
                                  b"Authorization: Bearer " + app.token +
                                  f"\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode())
            head = b""
            with trio.fail_after(20):
                while b"\r\n\r\n" not in head:
                    head += await stream.receive_some(4096)
        nursery.cancel_scope.cancel()
    assert ok.status_code == 200 and ok.headers["content-type"] == "application/json" and ok.json()["ok"]
    assert (nobody.status_code, wrong.status_code, text.status_code) == (401, 401, 415)
    assert head.startswith(b"HTTP/1.1 413 ")


def _env() -> dict[str, str]:
    return os.environ | {"PYTHONPATH": str(REPO), "NEVEREST_NOW": NOW}


@contextmanager
def process(argv: list[str], pattern: str, *, from_stderr: bool = False) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A process until the line matching ``pattern`` (its first group: the API's URL) shows on its output."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=REPO)
    stream = proc.stderr if from_stderr else proc.stdout
    assert stream is not None
    try:
        deadline = time.monotonic() + 30
        while True:
            line = stream.readline()
            assert line or proc.poll() is None, f"the process ended: {proc.returncode}"
            found = re.search(pattern, line)
            if found:
                break
            assert time.monotonic() < deadline, "the API did not start"
        yield found.group(1), proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)


def post(url: str, operation: str, arguments: dict[str, Any], token: str) -> httpx.Response:
    with httpx.Client(trust_env=False, timeout=30) as client:
        return client.post(f"{url}/v1/{operation}", json=arguments, headers={"Authorization": f"Bearer {token}"})


def test_neverestctl_api(home: Path) -> None:
    argv = [sys.executable, "-m", "neverest.ctl", "--home", str(home), "api", "--listen", "127.0.0.1:0"]
    with process(argv, r"neverest API on (http://127\.0\.0\.1:\d+)") as (url, proc):
        token = (home / TOKEN_FILE).read_text().strip()
        stored = post(url, "remember", ERROR, token)
        listed = post(url, "status", {}, token)
        refused = post(url, "status", {}, "x" * 64)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0  # a clean stop
    assert stored.status_code == 200 and stored.json()["result"] == {"stored": 1, "duplicate": False, "via": "store"}
    assert listed.json()["result"]["episodes"] == 1 and refused.status_code == 401

    done = subprocess.run([*argv[:-1], "0.0.0.0:0"], capture_output=True, text=True, env=_env(), timeout=60)
    assert done.returncode == 2 and "not a loopback address" in done.stderr and done.stdout == ""
    assert main(["api", "--home", str(home)]) == 2  # no address given, none configured


def test_the_daemon_serves_the_api_and_the_bridge_goes_through_it(home: Path) -> None:
    (home / "config.toml").write_text('api_listen = "127.0.0.1:0"\n')
    argv = [sys.executable, "-m", "neverest.daemon", "--home", str(home), "--listen", "127.0.0.1:0", "--no-mdns"]
    with process(argv, r"JSON API for other programs on (http://127\.0\.0\.1:\d+)", from_stderr=True) as (url, _):
        token = (home / TOKEN_FILE).read_text().strip()
        stored = post(url, "remember", ERROR, token)
        bridged = subprocess.run([sys.executable, "-m", "neverest.ctl", "--home", str(home), "bridge"],
                                 input=json.dumps({"operation": "remember", "arguments": ERROR | {"session": "s2"}}),
                                 capture_output=True, text=True, env=_env(), cwd=REPO, timeout=60)
        recalled = post(url, "recall", {"query": "cargo build linker"}, token)
        status = subprocess.run([sys.executable, "-m", "neverest.ctl", "--home", str(home), "status"],
                                capture_output=True, text=True, env=_env(), cwd=REPO, timeout=60)
    assert f"api          {url} (POST /v1/<operation>" in status.stdout, status.stdout
    assert stored.json()["result"] == {"stored": 1, "duplicate": False, "via": "daemon"}
    assert json.loads(bridged.stdout)["result"] == {"stored": 1, "duplicate": False, "via": "daemon"}
    assert len(recalled.json()["result"]["results"]) == 2

    (home / "config.toml").write_text('api_listen = "0.0.0.0:7429"\n')
    done = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=60)
    assert done.returncode == 2 and "not a loopback address" in done.stderr
