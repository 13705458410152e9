"""The HTTP commons server against real hypercorn on 127.0.0.1: in-process, and as a process killed with -9.
Its body timeout is also tested on the app itself in virtual time (tests/virtual_time.py)."""

from __future__ import annotations

import errno
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import nacl.signing
import pytest
import trio
import trio.testing

from neverest.clock import FixedClock, iso
from neverest.gossip.loopback import AppNetwork
from neverest.peers import directory as peer_directory
from neverest.records import canonical, origin_of, sign_lesson
from neverest.transports import commons_directory, commons_storage, commons_verify
from neverest.transports.announce import sign_announcement
from neverest.transports.commons_server import (
    MAX_FILE_BYTES,
    MAX_RECORDS,
    CommonsApp,
    CommonsServerError,
    Limits,
    RateLimiter,
    Refusal,
    etag_of,
    main,
    serve,
)
from neverest.transports.commons_verify import Verifier, VerifierError
from tests.virtual_time import autojump
from tests.virtual_time import real_rate_clock as real_rate_clock  # a fixture

TOKEN_A = "token-a-0123456789abcdef"
TOKEN_B = "token-b-0123456789abcdef"
NOW = datetime(2026, 4, 2, 12, 0, tzinfo=UTC)


def key(i: int) -> nacl.signing.SigningKey:
    return nacl.signing.SigningKey(bytes([i]) * 32)


def origin(i: int) -> str:
    return origin_of(bytes(key(i).verify_key))


@functools.cache
def record(i: int, seq: int) -> bytes:
    return sign_lesson(key(i), kind="error", text=f"Tool {i} fails in case {seq} on the runner", seen=1,
                       strength=1.0, updated="2026-04-01T12:00:00.000000Z", seq=seq).raw


def body(i: int, seqs: range | list[int]) -> bytes:
    return b"".join(record(i, s) + b"\n" for s in seqs)


def auth(token: str = TOKEN_A) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@dataclass
class Server:
    url: str
    data: Path
    tokens: Path
    scope: trio.CancelScope
    stopped: trio.Event

    def client(self, token: str | None = TOKEN_A) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, headers=auth(token) if token else {}, timeout=10)

    @property
    def port(self) -> int:
        return int(self.url.rpartition(":")[2])

    async def stop(self) -> None:
        self.scope.cancel()
        await self.stopped.wait()


Start = Callable[..., Awaitable[Server]]


@pytest.fixture
async def start(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Start]:
    """Start a commons server in-process; a second call with ``data=`` restarts on that folder."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# test tokens\n{TOKEN_A}\n\n{TOKEN_B}\n")
    tokens.chmod(0o600)

    async def _start(limits: Limits | None = None, data: Path | None = None, **kw: Any) -> Server:
        folder = data or tmp_path / "data"
        stopped = trio.Event()

        async def run(task_status: trio.TaskStatus[tuple[str, trio.CancelScope]]) -> None:
            try:
                with trio.CancelScope() as scope:
                    async with trio.open_nursery() as inner:
                        binds = await inner.start(functools.partial(
                            serve, folder, tokens, "127.0.0.1:0", limits=limits or Limits(body_timeout_s=1.0), **kw))
                        task_status.started((binds[0], scope))
            finally:
                stopped.set()

        url, scope = await nursery.start(run)
        return Server(url, folder, tokens, scope, stopped)

    yield _start
    nursery.cancel_scope.cancel()


@pytest.fixture
async def server(start: Start) -> Server:
    return await start(clock=FixedClock(NOW))


async def put(server: Server, who: int, data: bytes, token: str = TOKEN_A, **headers: str) -> httpx.Response:
    async with server.client(token) as http:
        return await http.put(f"/commons/{origin(who)}.jsonl", content=data,
                              headers={k.replace("_", "-"): v for k, v in headers.items()})


async def snapshot(server: Server, who: int) -> tuple[int, bytes, str | None, Any]:
    """What a reader sees of one origin: status, bytes, ETag, and the index."""
    async with server.client() as http:
        got = await http.get(f"/commons/{origin(who)}.jsonl")
        index = (await http.get("/commons/index")).json()
    return got.status_code, got.content, got.headers.get("etag"), index


async def raw_request(port: int, request: bytes) -> tuple[int, bytes]:
    """Send bytes exactly as given (no client-side path normalisation); the status and what came back."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(request)
        data = b""
        with trio.fail_after(5):
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                data += chunk
    return int(data.split(b" ", 2)[1]), data


def stored_files(data: Path) -> list[str]:
    return sorted(str(p.relative_to(data)) for p in data.rglob("*") if p.is_file())


# -- acceptance ----------------------------------------------------------------------------


async def test_put_then_get_returns_the_same_bytes_and_the_index_lists_it(server: Server) -> None:
    v1 = body(1, range(1, 4))
    created = await put(server, 1, v1, if_none_match="*")
    assert created.status_code == 201, created.text
    etag = created.headers["etag"]
    assert etag == etag_of(v1) and created.json()["records"] == 3
    async with server.client() as http:
        got = await http.get(f"/commons/{origin(1)}.jsonl")
        assert got.status_code == 200 and got.content == v1 and got.headers["etag"] == etag
        assert got.headers["content-type"] == "application/x-ndjson"
        head = await http.head(f"/commons/{origin(1)}.jsonl")
        assert head.status_code == 200 and head.content == b"" and int(head.headers["content-length"]) == len(v1)
        index = await http.get("/commons/index")
        [entry] = index.json()
        assert entry["origin"] == origin(1) and entry["records"] == 3 and entry["etag"] == etag
        assert datetime.fromisoformat(entry["updated"]).tzinfo is not None
    assert (server.data / "commons" / f"{origin(1)}.jsonl").read_bytes() == v1
    assert (server.data / "commons" / f"{origin(1)}.jsonl").stat().st_mode & 0o777 == 0o644

    v2 = body(1, range(1, 6))
    replaced = await put(server, 1, v2, if_match=etag)
    assert replaced.status_code == 200 and replaced.headers["etag"] == etag_of(v2)
    assert (await snapshot(server, 1))[1] == v2
    # The same bytes again: nothing is written, the ETag and `updated` do not move.
    before = (await snapshot(server, 1))[3]
    again = await put(server, 1, v2, if_match=etag_of(v2))
    assert again.status_code == 200 and again.headers["etag"] == etag_of(v2)
    assert (await snapshot(server, 1))[3] == before


async def test_empty_files_blank_lines_and_crlf_are_read_as_every_receiver_reads_them(server: Server) -> None:
    empty = await put(server, 1, b"", if_none_match="*")
    assert empty.status_code == 201 and empty.json()["records"] == 0  # a memory with no records yet
    spaced = b"\n" + record(2, 1) + b"\r\n  \n" + record(2, 2)  # no final newline either
    ok = await put(server, 2, spaced)
    assert ok.status_code == 201 and ok.json()["records"] == 2
    assert (await snapshot(server, 2))[1] == spaced


# -- refusals: each leaves what is stored untouched -------------------------------------------


def _unsigned() -> bytes:
    fields = json.loads(record(1, 9))
    del fields["sig"]
    return canonical(fields)


REFUSALS: list[tuple[str, Callable[[], bytes], int, str, str | None]] = [
    ("unsigned line", lambda: body(1, [1]) + _unsigned() + b"\n", 422, "bad-record", "bad-signature"),
    ("signature over other bytes", lambda: record(1, 9).replace(b'"seen":1', b'"seen":2') + b"\n", 422,
     "bad-record", "bad-signature"),
    ("a line of another origin", lambda: body(1, [1]) + body(2, [1]), 422, "bad-record", "other-origin"),
    ("not JSON", lambda: body(1, [1]) + b'{"v":1,"hash":\n', 422, "bad-record", "not-json"),
    ("a line over 16 KiB", lambda: b"x" * (16 * 1024 + 1) + b"\n", 422, "bad-record", "too-large"),
    # 1 001 real records cannot fit in 256 KiB (a lesson is ~420 bytes), so the count is checked
    # before anything is verified: 1 001 short lines are refused for their number alone.
    ("1 001 records", lambda: b"x\n" * (MAX_RECORDS + 1), 413, "too-many-records", None),
    ("over 256 KiB", lambda: b"x" * (MAX_FILE_BYTES + 1), 413, "too-large", None),
    ("not UTF-8", lambda: body(1, [1]) + b"\xff\xfe\n", 400, "bad-encoding", None),
]


@pytest.mark.parametrize(("name", "make", "status", "error", "reason"), REFUSALS, ids=[r[0] for r in REFUSALS])
async def test_a_refused_put_changes_nothing(server: Server, name: str, make: Callable[[], bytes], status: int,
                                             error: str, reason: str | None) -> None:
    v1 = body(1, range(1, 4))
    etag = (await put(server, 1, v1)).headers["etag"]
    before = await snapshot(server, 1)
    answer = await put(server, 1, make(), if_match=etag)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"] == error
    if reason is not None:
        assert answer.json()["reason"] == reason and answer.json()["line"] >= 1
    assert await snapshot(server, 1) == before
    assert before[1] == v1
    assert stored_files(server.data / "commons") == [f"{origin(1)}.jsonl"]


async def test_the_error_names_the_line_and_the_reason(server: Server) -> None:
    answer = await put(server, 1, body(1, [1, 2]) + body(2, [1]))
    assert answer.status_code == 422
    assert answer.json()["line"] == 3 and "other-origin" in answer.json()["message"]
    assert (await snapshot(server, 1))[0] == 404  # a refused first PUT creates nothing


async def test_an_oversize_body_streamed_without_length_is_cut_off(server: Server) -> None:
    v1 = body(1, range(1, 3))
    await put(server, 1, v1)
    before = await snapshot(server, 1)

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(200):  # 12.8 MB if nobody stopped it
            yield b"y" * 65536

    async with server.client() as http:
        try:
            answer = await http.put(f"/commons/{origin(1)}.jsonl", content=chunks())
            assert answer.status_code == 413
        except httpx.HTTPError:
            pass  # the server may close the connection while we are still sending: refused either way
    assert await snapshot(server, 1) == before


async def test_tokens_are_required_on_every_endpoint(start: Start) -> None:
    # 30 failures from one address: more than the default failed-authentication burst.
    server = await start(Limits(body_timeout_s=1.0, auth_failure_burst=100))
    v1 = body(1, range(1, 3))
    await put(server, 1, v1)
    before = await snapshot(server, 1)
    requests = [("GET", "/commons/index"), ("GET", f"/commons/{origin(1)}.jsonl"),
                ("PUT", f"/commons/{origin(1)}.jsonl"), ("GET", "/directory"), ("POST", "/directory/announce"),
                ("GET", "/nowhere")]
    for authorization, status in [(None, 401), ("Basic dXNlcjpwYXNz", 401), ("Bearer", 401),
                                  ("Bearer not-the-token-0123456789", 403), (f"Bearer {TOKEN_A}x", 403)]:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            for method, path in requests:
                headers = {"authorization": authorization} if authorization else {}
                answer = await http.request(method, path, headers=headers, content=body(1, [5]))
                assert answer.status_code == status, (authorization, method, path)
                assert answer.json()["error"] == ("unauthorized" if status == 401 else "forbidden")
                if status == 401:
                    assert answer.headers["www-authenticate"].startswith("Bearer")
    assert await snapshot(server, 1) == before
    # The second token of the file works as well as the first; the scheme is case-insensitive.
    async with httpx.AsyncClient(base_url=server.url, headers={"authorization": f"bearer {TOKEN_B}"}) as http:
        assert (await http.get("/commons/index")).status_code == 200


async def test_bad_origins_and_paths_are_404_and_nothing_escapes_the_data_folder(server: Server) -> None:
    v1 = body(1, range(1, 3))
    await put(server, 1, v1)
    (server.data / "secret.jsonl").write_bytes(b"not for clients\n")
    before = stored_files(server.data)
    o = origin(1)
    async with server.client() as http:
        for path in [f"/commons/{o.upper()}.jsonl", f"/commons/{o[:15]}.jsonl", f"/commons/{o}0.jsonl",
                     f"/commons/{'g' * 16}.jsonl", f"/commons/{o}.json", f"/commons/{o}", "/commons/",
                     "/commons/index.jsonl", f"/commons/{o}.jsonl/", "/", "/directory/"]:
            for method in ("GET", "PUT"):
                answer = await http.request(method, path, content=v1 if method == "PUT" else None)
                assert answer.status_code == 404, (method, path)
                assert answer.json()["error"] == "not-found"
    # Sent byte for byte: encoded slashes and dots, dot segments, a percent-encoded digit of a
    # real origin (decoded, it would name a stored file: refused all the same).
    escapes = ["/commons/..%2F..%2F..%2Fetc%2Fpasswd", "/commons/..%2Fsecret.jsonl", "/commons/%2e%2e/secret.jsonl",
               "/commons/../secret.jsonl", "/commons/../commons/index", f"/commons/{o}%2Ejsonl",
               f"/commons/%3{o[0]}{o[1:]}.jsonl", f"/commons//{o}.jsonl", f"/commons/{o}.jsonl%00",
               f"/commons%2F{o}.jsonl", "/commons/%2e%2e%2fdirectory.json"]
    for target in escapes:
        for verb in (b"GET", b"PUT"):
            payload = v1 if verb == b"PUT" else b""
            request = (verb + b" " + target.encode() + b" HTTP/1.1\r\nHost: x\r\n"
                       + f"Authorization: Bearer {TOKEN_A}\r\nContent-Length: {len(payload)}\r\n"
                         "Connection: close\r\n\r\n".encode() + payload)
            status, reply = await raw_request(server.port, request)
            assert status == 404, (verb, target, reply[:200])
            assert b"not for clients" not in reply
    assert stored_files(server.data) == before
    assert (await snapshot(server, 1))[1] == v1


async def test_methods_not_allowed(server: Server) -> None:
    async with server.client() as http:
        answer = await http.delete(f"/commons/{origin(1)}.jsonl")
        assert answer.status_code == 405 and answer.headers["allow"] == "GET, HEAD, PUT"
        assert (await http.post("/commons/index", content=b"x")).status_code == 405
        assert (await http.get("/directory/announce")).headers["allow"] == "POST"


async def test_a_slow_client_gets_408_while_others_are_served(tmp_path: Path,
                                                              mock_clock: trio.testing.MockClock) -> None:
    """In virtual time, on the app itself: the body timeout is the whole body's, a trickle does not
    restart it, and readers are served meanwhile."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN_A}\n{TOKEN_B}\n")
    tokens.chmod(0o600)
    app = CommonsApp.open(tmp_path / "data", tokens, limits=Limits(body_timeout_s=10.0, verify_processes=0),
                          clock=FixedClock(NOW))
    network = AppNetwork()
    network.listen("http://commons.test", app)
    v1 = body(1, range(1, 3))
    answered: list[tuple[float, int]] = []
    trickled = [0]

    async def trickle() -> dict[str, Any]:  # a byte a second, after the first 50
        if trickled[0]:
            await trio.sleep(1.0)
        trickled[0] += 1
        sent = 49 + trickled[0]
        return {"type": "http.request", "body": v1[:50] if sent == 50 else v1[sent - 1:sent],
                "more_body": sent < len(v1)}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answered.append((trio.current_time() - began, message["status"]))

    scope = {"type": "http", "method": "PUT", "path": f"/commons/{origin(1)}.jsonl",
             "raw_path": f"/commons/{origin(1)}.jsonl".encode(), "client": ("192.0.2.7", 40000),
             "headers": [(b"authorization", f"Bearer {TOKEN_A}".encode()), (b"content-length", str(len(v1)).encode())]}
    try:
        async with httpx.AsyncClient(transport=network.transport_for("192.0.2.8"), base_url="http://commons.test",
                                     headers=auth(TOKEN_B)) as http:
            assert (await http.put(f"/commons/{origin(1)}.jsonl", content=v1)).status_code == 201
            async with trio.open_nursery() as nursery:
                # Readers' GETs read the file in a worker thread: virtual time stands still meanwhile.
                nursery.start_soon(autojump, mock_clock)
                began = trio.current_time()
                nursery.start_soon(app, scope, trickle, send)
                for _ in range(20):  # meanwhile, other clients are served at once
                    assert (await http.get(f"/commons/{origin(1)}.jsonl")).status_code == 200
                assert trio.current_time() == began and answered == []
                while not answered:
                    await trio.sleep(1.0)
                nursery.cancel_scope.cancel()
            assert answered == [(10.0, 408)]  # not when its last byte would be in, minutes later
            assert (await http.get(f"/commons/{origin(1)}.jsonl")).content == v1
    finally:
        app.close()


async def test_a_slow_client_gets_408_over_a_real_socket(start: Start, real_rate_clock: trio.testing.MockClock
                                                         ) -> None:
    """hypercorn serves other clients while one trickles its body, and sends our 408 on its socket.
    The clock runs at the real rate until the test jumps it: 20 s, a trickle, 10 s more."""
    server = await start(Limits(body_timeout_s=30.0), clock=FixedClock(NOW))
    v1 = body(1, range(1, 3))
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    async with stream:
        await stream.send_all(f"PUT /commons/{origin(1)}.jsonl HTTP/1.1\r\nHost: x\r\n"
                              f"Authorization: Bearer {TOKEN_A}\r\nContent-Length: {len(v1)}\r\n\r\n".encode()
                              + v1[:50])
        async with server.client(TOKEN_B) as http:
            with trio.fail_after(5):
                for _ in range(20):  # meanwhile, other clients are served at once
                    assert (await http.get("/commons/index")).json() == []
        real_rate_clock.jump(20.0)
        await stream.send_all(v1[50:60])  # a trickle does not restart the clock
        real_rate_clock.jump(10.0)
        with trio.fail_after(5):
            answer = b""
            while b"\r\n\r\n" not in answer:
                answer += await stream.receive_some(4096)
    assert b" 408 " in answer.split(b"\r\n")[0]
    assert [p for p in stored_files(server.data) if p.startswith("commons/")] == []


# -- conditional requests ------------------------------------------------------------------------


async def test_conditional_reads_and_writes(server: Server) -> None:
    v1, v2 = body(1, range(1, 3)), body(1, range(1, 4))
    async with server.client() as http:
        path = f"/commons/{origin(1)}.jsonl"
        missing = await http.put(path, content=v1, headers={"if-match": "*"})
        assert missing.status_code == 412  # If-Match: * needs an existing file
        etag = (await http.put(path, content=v1, headers={"if-none-match": "*"})).headers["etag"]
        assert (await http.put(path, content=v2, headers={"if-none-match": "*"})).status_code == 412
        stale = await http.put(path, content=v2, headers={"if-match": '"0123456789abcdef0123456789abcdef"'})
        assert stale.status_code == 412 and stale.json()["etag"] == etag
        assert (await http.put(path, content=v2, headers={"if-match": f"W/{etag}"})).status_code == 412  # strong only
        assert (await http.put(path, content=v2, headers={"if-none-match": etag})).status_code == 412
        assert (await snapshot(server, 1))[1] == v1

        not_modified = await http.get(path, headers={"if-none-match": etag})
        assert not_modified.status_code == 304 and not_modified.content == b"" and not_modified.headers["etag"] == etag
        assert (await http.get(path, headers={"if-none-match": f'"x", W/{etag}'})).status_code == 304
        assert (await http.get(path, headers={"if-none-match": '"x"'})).status_code == 200

        index = await http.get("/commons/index")
        index_etag = index.headers["etag"]
        assert (await http.get("/commons/index", headers={"if-none-match": index_etag})).status_code == 304

        updated = await http.put(path, content=v2, headers={"if-match": f'"other", {etag}'})
        assert updated.status_code == 200 and updated.headers["etag"] == etag_of(v2)
        assert (await http.get(path, headers={"if-none-match": etag})).status_code == 200
        assert (await http.get("/commons/index", headers={"if-none-match": index_etag})).status_code == 200
        assert (await http.put(path, content=v1, headers={"if-match": "*"})).status_code == 200


async def test_concurrent_puts_with_the_same_if_match_one_wins(server: Server) -> None:
    etag = (await put(server, 1, body(1, [1]))).headers["etag"]
    for round_ in range(4):
        writers = [body(1, [1, 10 * round_ + w + 2]) for w in range(2 if round_ < 2 else 8)]
        statuses: list[int] = []

        async def write(data: bytes, etag: str = etag, statuses: list[int] = statuses) -> None:
            statuses.append((await put(server, 1, data, if_match=etag)).status_code)

        async with trio.open_nursery() as nursery:
            for data in writers:
                nursery.start_soon(write, data)
        assert sorted(statuses) == [200] + [412] * (len(writers) - 1), statuses
        _, stored, etag_now, index = await snapshot(server, 1)
        assert stored in writers and etag_now == etag_of(stored) and index[0]["etag"] == etag_now
        etag = etag_now


async def test_concurrent_first_puts_create_once(server: Server) -> None:
    statuses: list[int] = []

    async def create(w: int) -> None:
        statuses.append((await put(server, 3, body(3, [1, w + 2]), if_none_match="*")).status_code)

    async with trio.open_nursery() as nursery:
        for w in range(6):
            nursery.start_soon(create, w)
    assert sorted(statuses) == [201] + [412] * 5


async def test_failures_on_our_side_are_500_or_507_and_change_nothing(server: Server,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    v1 = body(1, range(1, 3))
    await put(server, 1, v1)
    before = await snapshot(server, 1)

    def broken(path: Path, data: bytes) -> os.stat_result:
        raise RuntimeError("a bug of ours")

    def full(path: Path, data: bytes) -> os.stat_result:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(commons_storage, "_write", broken)
    answer = await put(server, 1, body(1, range(1, 4)))
    assert answer.status_code == 500 and answer.json() == {
        "error": "internal", "message": "the server failed; the failure is logged"}
    monkeypatch.setattr(commons_storage, "_write", full)
    answer = await put(server, 1, body(1, range(1, 4)))
    assert answer.status_code == 507 and answer.json()["error"] == "no-space"
    assert await snapshot(server, 1) == before


# -- verification in worker processes ------------------------------------------------------------


def _pooled(**kw: Any) -> Limits:
    """Limits under which every body with a line to verify goes to the verifying processes."""
    return Limits(body_timeout_s=1.0, verify_processes=2, verify_min_lines=1, **kw)


async def test_the_verifying_processes_refuse_what_the_threads_refuse(start: Start) -> None:
    server = await start(_pooled())
    v1 = body(1, range(1, 4))
    etag = (await put(server, 1, v1)).headers["etag"]
    before = await snapshot(server, 1)
    for name, make, status, error, reason in REFUSALS:
        answer = await put(server, 1, make(), if_match=etag)
        assert answer.status_code == status, (name, answer.text)
        assert answer.json()["error"] == error, name
        if reason is not None:
            assert answer.json()["reason"] == reason and answer.json()["line"] >= 1, name
    # The line named is the one a thread would name, counted over the whole body.
    answer = await put(server, 1, body(1, range(1, 30)) + body(2, [1]), if_match=etag)
    assert answer.json()["line"] == 30 and answer.json()["reason"] == "other-origin"
    assert await snapshot(server, 1) == before
    assert stored_files(server.data / "commons") == [f"{origin(1)}.jsonl"]
    assert child_pids(os.getpid())  # the checks above were made in worker processes
    big = body(1, range(1, 41))
    assert (await put(server, 1, big, if_match=etag)).status_code == 200
    assert (await snapshot(server, 1))[1] == big


async def test_conditional_puts_verified_in_processes_are_still_atomic(start: Start) -> None:
    server = await start(_pooled())
    statuses: list[int] = []

    async def create(w: int) -> None:
        statuses.append((await put(server, 3, body(3, [w + 1, *range(40, 60)]), if_none_match="*")).status_code)

    async with trio.open_nursery() as nursery:
        for w in range(6):
            nursery.start_soon(create, w)
    assert sorted(statuses) == [201] + [412] * 5
    etag = (await snapshot(server, 3))[2]
    assert etag is not None
    for round_ in range(3):
        # Bodies unlike the stored one: a PUT of the bytes already stored keeps the ETag, so a
        # second If-Match writer would rightly win too.
        writers = [body(3, [100 * (round_ + 1) + w + 1, *range(40, 60)]) for w in range(6)]
        results: list[tuple[int, bytes]] = []

        async def write(data: bytes, etag: str = etag, results: list[tuple[int, bytes]] = results) -> None:
            results.append(((await put(server, 3, data, if_match=etag)).status_code, data))

        async with trio.open_nursery() as nursery:
            for data in writers:
                nursery.start_soon(write, data)
        assert sorted(status for status, _ in results) == [200] + [412] * 5
        [winner] = [data for status, data in results if status == 200]
        _, stored, etag_now, index = await snapshot(server, 3)
        assert stored == winner and etag_now == etag_of(winner) and index[0]["etag"] == etag_now
        assert etag_now is not None
        etag = etag_now


async def test_limits_hold_under_concurrent_puts(start: Start) -> None:
    # max_origins: of 8 new origins pushed at once, exactly 3 are stored.
    server = await start(_pooled(max_origins=3))
    statuses: list[int] = []

    async def create(i: int) -> None:
        statuses.append((await put(server, i, body(i, range(1, 21)))).status_code)

    async with trio.open_nursery() as nursery:
        for i in range(1, 9):
            nursery.start_soon(create, i)
    assert sorted(statuses) == [201] * 3 + [507] * 5
    assert len(stored_files(server.data / "commons")) == 3
    async with server.client() as http:
        assert len((await http.get("/commons/index")).json()) == 3
    await server.stop()

    # The per-token rate limit: of 10 PUTs sent at once with a burst of 4, 4 get through.
    now = [0.0]
    server = await start(_pooled(rate_per_s=0.001, burst=4.0), data=server.data.parent / "data2",
                         monotonic=lambda: now[0])
    statuses = []

    async def push(i: int) -> None:
        statuses.append((await put(server, i, body(i, range(1, 21)))).status_code)

    async with trio.open_nursery() as nursery:
        for i in range(1, 11):
            nursery.start_soon(push, i)
    assert sorted(statuses) == [201] * 4 + [429] * 6


def test_the_verifier_checks_in_threads_below_its_threshold_and_starts_processes_lazily() -> None:
    verifier = Verifier(processes=1, min_lines=5)
    try:
        lines = list(enumerate([record(1, s) for s in range(1, 5)], 1))
        verifier.check(origin(1), lines)  # 4 lines: checked in this thread
        assert not verifier.started
        with pytest.raises(Refusal) as refused:
            verifier.check(origin(2), lines)
        assert refused.value.extra == {"line": 1, "reason": "other-origin"}
        assert not verifier.started
        verifier.check(origin(1), [*lines, (5, record(1, 5))])  # 5 lines: in a worker process
        assert verifier.started
        with pytest.raises(Refusal) as refused:
            verifier.check(origin(1), [*lines, (5, _unsigned())])
        assert refused.value.extra == {"line": 5, "reason": "bad-signature"}
    finally:
        verifier.close()
    assert not verifier.started
    with pytest.raises(VerifierError):
        verifier.check(origin(1), [*lines, (5, record(1, 5))])



def test_a_verifying_process_that_dies_is_replaced() -> None:
    verifier = Verifier(processes=1, min_lines=1)
    lines = list(enumerate([record(1, s) for s in range(1, 4)], 1))
    try:
        verifier.check(origin(1), lines)
        [first] = verifier.pids()
        os.kill(first, signal.SIGKILL)
        # Reaped (not merely a zombie) means its reader has seen the end of its pipe and marked it dead.
        wait_until(lambda: not Path(f"/proc/{first}").exists(), "the killed worker was not reaped")
        verifier.check(origin(1), lines)  # by a new worker
        [second] = verifier.pids()
        assert second != first
        with pytest.raises(Refusal):
            verifier.check(origin(2), lines)
    finally:
        verifier.close()
    assert not alive(second)  # closed: it finished and exited


def test_a_stuck_verifying_process_is_killed_and_frees_every_request_it_held(monkeypatch: pytest.MonkeyPatch) -> None:
    verifier = Verifier(processes=1, min_lines=1)
    # Over a pipe's 64 KiB: the second request blocks in its write while the worker is stuck.
    lines = list(enumerate([record(1, s) for s in range(1, 201)], 1))
    verifier.check(origin(1), lines)
    [stuck] = verifier.pids()
    try:
        # Short only while the worker is stopped: a worker starting on a busy machine may take longer.
        monkeypatch.setattr(commons_verify, "VERIFY_TIMEOUT_S", 0.3)
        os.kill(stuck, signal.SIGSTOP)
        failures: list[BaseException] = []

        def check() -> None:
            try:
                verifier.check(origin(1), lines)
            except VerifierError as exc:
                failures.append(exc)

        threads = [threading.Thread(target=check) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in threads)  # no request is left hanging
        assert len(failures) == 2
        wait_until(lambda: not Path(f"/proc/{stuck}").exists(), "the stuck worker was not killed and reaped")
        monkeypatch.undo()
        verifier.check(origin(1), lines)  # a new worker takes over
    finally:
        verifier.close()
        for pid in child_pids(os.getpid()) & {stuck}:  # a failed run must not leave it stopped forever
            os.kill(pid, signal.SIGKILL)


# -- limits ----------------------------------------------------------------------------------------


async def test_rate_limit_per_token(start: Start) -> None:
    now = [100.0]
    server = await start(Limits(rate_per_s=1.0, burst=3.0), monotonic=lambda: now[0])
    async with server.client() as a, server.client(TOKEN_B) as b:
        for _ in range(3):
            assert (await a.get("/commons/index")).status_code == 200
        limited = await a.get("/commons/index")
        assert limited.status_code == 429 and limited.headers["retry-after"] == "1"
        assert limited.json()["error"] == "rate-limited"
        assert (await b.get("/commons/index")).status_code == 200  # another token has its own bucket
        now[0] += 0.5
        assert (await a.get("/commons/index")).status_code == 429
        now[0] += 0.6
        assert (await a.get("/commons/index")).status_code == 200
        assert (await a.get("/commons/index")).status_code == 429


async def test_failed_authentications_are_limited_per_address_over_real_sockets(start: Start) -> None:
    server = await start(Limits(body_timeout_s=1.0, auth_failure_burst=5, auth_failure_rate_per_s=0.01))
    wrong = {"authorization": "Bearer not-the-token-0123456789"}
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as guesser:
        got = [(await guesser.get("/commons/index", headers=wrong)).status_code for _ in range(8)]
        assert got == [403] * 5 + [429] * 3
        # The address is blocked, whatever token it now sends.
        assert (await guesser.get("/commons/index", headers=auth())).status_code == 429
    # Another loopback address (the client binds 127.0.0.2) is another client.
    other = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
    async with httpx.AsyncClient(base_url=server.url, timeout=10, transport=other, headers=auth()) as honest:
        assert (await honest.get("/commons/index")).status_code == 200


def test_token_bucket_refills_up_to_its_burst() -> None:
    now = [0.0]
    limiter = RateLimiter(10.0, 2.0, lambda: now[0])
    assert [limiter.take("t") for _ in range(3)][:2] == [0.0, 0.0]
    assert limiter.take("t") == pytest.approx(0.1)
    now[0] += 100
    assert [limiter.take("t") for _ in range(3)] == [0.0, 0.0, pytest.approx(0.1)]
    assert RateLimiter(0, 1, lambda: 0.0).take("t") == 0.0  # rate 0: no limit


async def test_max_origins(start: Start) -> None:
    server = await start(Limits(max_origins=1))
    assert (await put(server, 1, body(1, [1]))).status_code == 201
    full = await put(server, 2, body(2, [1]))
    assert full.status_code == 507 and full.json()["error"] == "too-many-origins"
    assert (await put(server, 1, body(1, [1, 2]))).status_code == 200  # existing files still update
    assert (await snapshot(server, 2))[0] == 404


async def test_the_tokens_file_is_read_again_when_it_changes(start: Start) -> None:
    now = [0.0]
    server = await start(monotonic=lambda: now[0])
    token_c = "token-c-" + "9" * 20
    server.tokens.write_text(f"{TOKEN_B}\n{token_c}\n")
    now[0] += 2  # past the re-check interval
    async with server.client() as a, server.client(token_c) as c:
        assert (await a.get("/commons/index")).status_code == 403  # revoked
        assert (await c.get("/commons/index")).status_code == 200  # added
        server.tokens.write_text("short\n")  # a broken edit: the tokens in force stay
        now[0] += 2
        assert (await c.get("/commons/index")).status_code == 200


def test_the_server_refuses_to_start_on_bad_tokens_or_a_shared_folder(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    tokens = tmp_path / "tokens"
    for text, message in [("", "holds no token"), ("# only a comment\n\n", "holds no token"),
                          ("tooshort\n", "line 1"), (f"{TOKEN_A}\nhas space in it 0123456789\n", "line 2")]:
        tokens.write_text(text)
        with pytest.raises(CommonsServerError, match=message) as err:
            CommonsApp.open(tmp_path / "data", tokens, monotonic=lambda: 0.0)
        assert "has space" not in str(err.value)  # a token is never echoed
    with pytest.raises(CommonsServerError, match="cannot read"):
        CommonsApp.open(tmp_path / "data", tmp_path / "missing", monotonic=lambda: 0.0)
    tokens.write_text(TOKEN_A + "\n")
    first = CommonsApp.open(tmp_path / "data", tokens, monotonic=lambda: 0.0)
    try:
        with pytest.raises(CommonsServerError, match="another commons server"):
            CommonsApp.open(tmp_path / "data", tokens, monotonic=lambda: 0.0)
    finally:
        first.close()
    CommonsApp.open(tmp_path / "data", tokens, monotonic=lambda: 0.0).close()  # released on close
    assert main(["--data", str(tmp_path / "data"), "--tokens", str(tmp_path / "missing")]) == 1
    assert "cannot read the tokens file" in capsys.readouterr().err
    assert main(["--data", str(tmp_path / "data"), "--tokens", str(tokens), "--burst", "0"]) == 2
    assert main(["--data", str(tmp_path / "data"), "--tokens", str(tokens), "--auth-failure-burst", "0"]) == 2
    assert main(["--tokens", str(tokens)]) == 2  # --data is required


# -- the directory --------------------------------------------------------------------------------


def announcement(i: int, address: str, at: datetime, **change: str) -> bytes:
    """A signed announcement with some fields changed after signing."""
    fields = json.loads(sign_announcement(key(i), address, at))
    fields.update(change)
    return json.dumps(fields).encode()


async def test_announce_and_read_the_directory(start: Start, tmp_path: Path) -> None:
    server = await start(clock=FixedClock(NOW))
    async with server.client() as http:
        ok = await http.post("/directory/announce", content=sign_announcement(key(1), "http://127.0.0.1:7001/", NOW))
        assert ok.status_code == 200, ok.text
        assert ok.json() == {"origin": origin(1), "url": "http://127.0.0.1:7001", "at": iso(NOW)}
        later = NOW + timedelta(minutes=1)
        assert (await http.post("/directory/announce",
                                content=sign_announcement(key(2), "http://127.0.0.1:7002", later))).status_code == 200
        listing = await http.get("/directory")
        parsed = peer_directory.parse(listing.content)
        assert parsed.peers == [("http://127.0.0.1:7002", origin(2)), ("http://127.0.0.1:7001", origin(1))]
        assert parsed.skipped == 0
        assert (await http.get("/directory", headers={"if-none-match": listing.headers["etag"]})).status_code == 304
        # Each entry carries what a reader needs to check it itself.
        entry = listing.json()[1]
        signed = {k: entry[k] for k in ("origin", "key", "url", "at")}
        nacl.signing.VerifyKey(bytes.fromhex(entry["key"])).verify(
            json.dumps(signed, sort_keys=True, separators=(",", ":")).encode(), bytes.fromhex(entry["sig"]))

        fresh = sign_announcement(key(1), "http://127.0.0.1:7001", NOW)
        sig = json.loads(fresh)["sig"]
        refusals = [
            (announcement(1, "http://127.0.0.1:7009", NOW, sig=("0" if sig[0] != "0" else "1") + sig[1:]), 422,
             "bad-signature"),
            (announcement(1, "http://127.0.0.1:7009", NOW, url="http://127.0.0.1:7666"), 422, "bad-signature"),
            (announcement(1, "http://127.0.0.1:7009", NOW, origin=origin(2)), 422, "origin-mismatch"),
            (sign_announcement(key(3), "http://127.0.0.1:7009", NOW - timedelta(minutes=11)), 422, "clock-skew"),
            (sign_announcement(key(3), "http://127.0.0.1:7009", NOW + timedelta(minutes=11)), 422, "clock-skew"),
            (announcement(1, "http://127.0.0.1:7009", NOW, extra="x"), 400, "bad-field"),
            (b'{"origin": "a", "origin": "b"}', 400, "not-json"),
            (b"[]", 400, "not-json"),
            (b"not json", 400, "not-json"),
        ]
        for data, status, reason in refusals:
            answer = await http.post("/directory/announce", content=data)
            assert answer.status_code == status, (reason, answer.text)
            assert answer.json()["reason"] == reason
        # A URL that is not in normal form would not match what was signed once normalised.
        fields = {"origin": origin(3), "key": bytes(key(3).verify_key).hex(), "url": "http://127.0.0.1:7003/x",
                  "at": iso(NOW)}
        fields["sig"] = key(3).sign(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
                                    ).signature.hex()
        assert (await http.post("/directory/announce", content=json.dumps(fields))).json()["reason"] == "bad-url"
        older = await http.post("/directory/announce",
                                content=sign_announcement(key(2), "http://127.0.0.1:7666", NOW))
        assert older.status_code == 409 and older.json()["error"] == "superseded"
        big = await http.post("/directory/announce", content=b" " * 5000)
        assert big.status_code == 413
        assert (await http.get("/directory")).content == listing.content  # no refusal changed it
    await server.stop()
    (server.data / ".directory.json.x1y2.tmp").write_bytes(b"[{")  # as a write killed midway leaves it
    again = await start(data=server.data, clock=FixedClock(NOW))
    assert not (server.data / ".directory.json.x1y2.tmp").exists()
    async with again.client() as http:
        assert (await http.get("/directory")).content == listing.content  # it was on disk


async def test_the_directory_keeps_the_newest_announcements(start: Start, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commons_directory, "MAX_DIRECTORY_ENTRIES", 3)
    server = await start(clock=FixedClock(NOW))
    async with server.client() as http:
        async with trio.open_nursery() as nursery:  # concurrent announcements share disk writes
            for i in range(1, 5):
                nursery.start_soon(functools.partial(
                    http.post, "/directory/announce",
                    content=sign_announcement(key(i), f"http://127.0.0.1:70{i:02}", NOW + timedelta(seconds=i))))
        origins = [e["origin"] for e in (await http.get("/directory")).json()]
    assert origins == [origin(4), origin(3), origin(2)]
    on_disk = json.loads((server.data / "directory.json").read_bytes())
    assert sorted(e["origin"] for e in on_disk) == sorted(origins)


# -- a real process, killed with -9 ----------------------------------------------------------------


def start_process(data: Path, tokens: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start the server as its own process; its address, from the line it logs once listening."""
    marker = "commons server listening on "
    seen = log.read_text().count(marker) if log.exists() else 0  # the log is appended to across restarts
    with log.open("ab") as err:
        proc = subprocess.Popen([sys.executable, "-m", "neverest.transports.commons_server", "--listen",
                                 "127.0.0.1:0", "--data", str(data), "--tokens", str(tokens)],
                                stdout=subprocess.DEVNULL, stderr=err, env=dict(os.environ))
    deadline = time.monotonic() + 30
    while (text := log.read_text()).count(marker) == seen:
        assert proc.poll() is None and time.monotonic() < deadline, text
        time.sleep(0.05)
    return proc, text[text.rfind(marker) + len(marker):].split()[0]


@pytest.fixture
def process_dir(tmp_path: Path) -> Iterator[tuple[Path, Path, Path, list[subprocess.Popen[bytes]]]]:
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKEN_A + "\n")
    procs: list[subprocess.Popen[bytes]] = []
    yield tmp_path / "data", tokens, tmp_path / "server.log", procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def kill9(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


def test_kill_9_during_a_put_leaves_the_previous_version_intact(
        process_dir: tuple[Path, Path, Path, list[subprocess.Popen[bytes]]]) -> None:
    data, tokens, log, procs = process_dir
    v1, v2 = body(1, range(1, 11)), body(1, range(1, 21))
    proc, url = start_process(data, tokens, log)
    procs.append(proc)
    path = f"/commons/{origin(1)}.jsonl"
    with httpx.Client(base_url=url, headers=auth(), timeout=10) as http:
        assert http.put(path, content=v1).status_code == 201
    port = int(url.rpartition(":")[2])

    # 1. Killed in the middle of the body.
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(f"PUT {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN_A}\r\n"
                 f"Content-Length: {len(v2)}\r\n\r\n".encode() + v2[: len(v2) // 2])
    time.sleep(0.3)
    kill9(proc)
    sock.close()
    proc, url = start_process(data, tokens, log)
    procs.append(proc)
    with httpx.Client(base_url=url, headers=auth(), timeout=10) as http:
        got = http.get(path)
        assert got.content == v1 and got.headers["etag"] == etag_of(v1)
        assert http.get("/commons/index").json()[0]["records"] == 10

    # 2. Killed right after the whole body was sent: the old version or the whole new one.
    port = int(url.rpartition(":")[2])
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(f"PUT {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN_A}\r\n"
                 f"Content-Length: {len(v2)}\r\n\r\n".encode() + v2)
    kill9(proc)
    sock.close()
    # A temporary file as an interrupted write leaves it: removed at start, never served.
    (data / "commons" / f".{origin(1)}.jsonl.zz9.tmp").write_bytes(v2[:100])
    proc, url = start_process(data, tokens, log)
    procs.append(proc)
    with httpx.Client(base_url=url, headers=auth(), timeout=10) as http:
        got = http.get(path)
        assert got.content in (v1, v2) and got.headers["etag"] == etag_of(got.content)
        [entry] = http.get("/commons/index").json()
        assert entry["etag"] == got.headers["etag"] and entry["records"] == (10 if got.content == v1 else 20)
    assert stored_files(data / "commons") == [f"{origin(1)}.jsonl"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0


def test_kill_9_under_a_stream_of_puts(process_dir: tuple[Path, Path, Path, list[subprocess.Popen[bytes]]]) -> None:
    data, tokens, log, procs = process_dir
    writers = range(1, 5)
    versions = {i: (body(i, range(1, 9)), body(i, range(3, 15))) for i in writers}
    proc, url = start_process(data, tokens, log)
    procs.append(proc)
    with httpx.Client(base_url=url, headers=auth(), timeout=10) as http:
        for i in writers:
            assert http.put(f"/commons/{origin(i)}.jsonl", content=versions[i][0]).status_code == 201
    done = {i: 0 for i in writers}

    def hammer(i: int) -> None:
        with httpx.Client(base_url=url, headers=auth(), timeout=10) as http:
            n = 0
            while True:
                n += 1
                try:
                    answer = http.put(f"/commons/{origin(i)}.jsonl", content=versions[i][n % 2])
                except httpx.HTTPError:
                    return  # the server is gone
                assert answer.status_code == 200
                done[i] += 1

    threads = [threading.Thread(target=hammer, args=(i,)) for i in writers]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while sum(done.values()) < 40:  # well into the stream of writes
        assert time.monotonic() < deadline
        time.sleep(0.01)
    kill9(proc)
    for t in threads:
        t.join(timeout=20)
    proc, url = start_process(data, tokens, log)
    procs.append(proc)
    with httpx.Client(base_url=url, headers=auth(), timeout=10) as http:
        index = {e["origin"]: e for e in http.get("/commons/index").json()}
        assert sorted(index) == sorted(origin(i) for i in writers)
        for i in writers:
            got = http.get(f"/commons/{origin(i)}.jsonl")
            assert got.content in versions[i]  # one version or the other, whole
            assert index[origin(i)]["etag"] == got.headers["etag"] == etag_of(got.content)
            assert index[origin(i)]["records"] == (8 if got.content == versions[i][0] else 12)
    assert stored_files(data / "commons") == sorted(f"{origin(i)}.jsonl" for i in writers)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0


def child_pids(pid: int) -> set[int]:
    """The live children of a process (Linux /proc)."""
    out: set[int] = set()
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            out |= {int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()}
    except FileNotFoundError:
        pass
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def none_alive(pids: set[int]) -> bool:
    return not any(alive(pid) for pid in pids)


def wait_until(condition: Callable[[], bool], what: str, within_s: float = 20.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_verifying_processes_start_on_demand_and_never_outlive_the_server(
        process_dir: tuple[Path, Path, Path, list[subprocess.Popen[bytes]]]) -> None:
    data, tokens, log, procs = process_dir
    for stop in ("SIGTERM", "SIGKILL"):
        proc, url = start_process(data, tokens, log)
        procs.append(proc)
        i = 1 if stop == "SIGTERM" else 2
        with httpx.Client(base_url=url, headers=auth(), timeout=30) as http:
            assert http.put(f"/commons/{origin(i)}.jsonl", content=body(i, [1])).status_code == 201
            assert child_pids(proc.pid) == set()  # one line to verify: no process started for it
            assert http.put(f"/commons/{origin(i)}.jsonl", content=body(i, range(1, 41))).status_code == 200
        workers = child_pids(proc.pid)
        assert workers  # 39 new lines: verified in a worker process, started for it
        if stop == "SIGTERM":
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=15) == 0
            assert none_alive(workers)  # stopped and reaped before the server exited
        else:
            kill9(proc)
            # Orphans now: each notices its server is gone and exits by itself.
            wait_until(functools.partial(none_alive, workers), "a verifying process outlived its server")


def test_an_acknowledged_put_survives_kill_9(
        process_dir: tuple[Path, Path, Path, list[subprocess.Popen[bytes]]]) -> None:
    """Writers create new origins (verified in the worker processes) and update their own
    (verified in threads) until the server is killed; every answer 200/201 they got must be on
    disk after a restart, byte for byte, or be followed by the one PUT they had in flight."""
    data, tokens, log, procs = process_dir
    proc, url = start_process(data, tokens, log)
    procs.append(proc)
    writers = range(1, 5)
    seeds = {w: range(10 * w, 10 * w + 10) for w in writers}  # each writer's new origins, in order
    acked: dict[str, bytes] = {}  # origin -> the last version answered 200/201
    in_flight: dict[str, bytes] = {}  # origin -> a version sent and not answered
    done = [0]

    def write(w: int) -> None:
        with httpx.Client(base_url=url, headers=auth(), timeout=30) as http:
            for i in seeds[w]:
                versions = [body(i, range(v, v + 20)) for v in range(1, 5)]
                for n, version in enumerate(versions):
                    in_flight[origin(i)] = version
                    headers = {"if-none-match": "*"} if n == 0 else {"if-match": etag_of(versions[n - 1])}
                    try:
                        answer = http.put(f"/commons/{origin(i)}.jsonl", content=version, headers=headers)
                    except httpx.HTTPError:
                        return  # the server is gone
                    assert answer.status_code == (201 if n == 0 else 200), answer.text
                    acked[origin(i)] = version
                    del in_flight[origin(i)]
                    done[0] += 1

    threads = [threading.Thread(target=write, args=(w,)) for w in writers]
    for t in threads:
        t.start()
    wait_until(lambda: done[0] >= 30, "the writers made no progress")
    kill9(proc)
    for t in threads:
        t.join(timeout=30)
    assert len(acked) >= 5
    proc, url = start_process(data, tokens, log)
    procs.append(proc)
    with httpx.Client(base_url=url, headers=auth(), timeout=10) as http:
        index = {e["origin"]: e for e in http.get("/commons/index").json()}
        for o, version in acked.items():
            got = http.get(f"/commons/{o}.jsonl").content
            assert got == version or got == in_flight.get(o), o
            assert index[o]["etag"] == etag_of(got)
        # An origin never acknowledged is absent, or whole if its first PUT was written.
        for o in set(index) - set(acked):
            assert http.get(f"/commons/{o}.jsonl").content == in_flight[o]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
