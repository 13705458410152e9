"""The gossip HTTP edge: real hypercorn on 127.0.0.1 and a real httpx client, hostile bodies included;
and what it serves to whoever watches the daemon (/healthz, /metrics).  Timeouts are ours (trio's
clock): they are tested in virtual time, on the app itself, and on a socket with a jumped clock."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from neverest.gossip.http import (
    DEFAULT_BODY_TIMEOUT_S,
    EXCHANGE_PATH,
    GossipApp,
    RemoteError,
    client,
    post,
    serve,
)
from neverest.gossip.loopback import AppNetwork
from neverest.httpclient import PeerRefused, TransportFailure
from tests.virtual_time import real_rate_clock as real_rate_clock  # a fixture


async def echo(body: bytes, peer: str) -> bytes:
    if body == b"bad":
        raise RemoteError("that is not a gossip message")
    if body == b"boom":
        raise RuntimeError("a bug of ours")
    return b"echo:" + body


@pytest.fixture
async def server(nursery: trio.Nursery) -> AsyncIterator[str]:
    app = GossipApp(echo, max_body_bytes=64 * 1024, body_timeout_s=1.0)
    binds = await nursery.start(serve, app, "127.0.0.1:0")
    yield binds[0]
    nursery.cancel_scope.cancel()


async def test_an_exchange_round_trips(server: str) -> None:
    async with client() as http:
        assert await post(http, server, b"hello", max_response_bytes=1024) == b"echo:hello"


async def test_an_answer_carries_only_its_type_and_length(server: str) -> None:
    """What an in-sync exchange puts on the wire (PROTOCOL.md §11): no ``date`` or ``server`` header."""
    host, port = server.removeprefix("http://").split(":")
    async with await trio.open_tcp_stream(host, int(port)) as stream:
        await stream.send_all(b"POST " + EXCHANGE_PATH.encode() + b" HTTP/1.1\r\nHost: x\r\n"
                              b"Content-Type: application/octet-stream\r\nContent-Length: 5\r\n\r\nhello")
        answer = b""
        with trio.fail_after(5):
            while not answer.endswith(b"echo:hello"):
                answer += await stream.receive_some(1024)
    head = answer.split(b"\r\n\r\n")[0].split(b"\r\n")
    assert head[0] == b"HTTP/1.1 200 "
    assert sorted(line.split(b":")[0].lower() for line in head[1:]) == [b"content-length", b"content-type"]


async def test_errors_say_who_is_at_fault(server: str) -> None:
    async with client() as http:
        with pytest.raises(PeerRefused, match="400: that is not a gossip message") as bad:
            await post(http, server, b"bad", max_response_bytes=1024)
        assert bad.value.status == 400 and bad.value.detail == "that is not a gossip message"
        with pytest.raises(PeerRefused, match="500: internal error"):
            await post(http, server, b"boom", max_response_bytes=1024)
        response = await http.get(server + EXCHANGE_PATH)
        assert response.status_code == 405
        assert (await http.post(server + "/other", content=b"x")).status_code == 404


async def test_oversize_bodies_are_refused_declared_or_streamed(server: str) -> None:
    async with client() as http:
        response = await http.post(server + EXCHANGE_PATH, content=b"x" * (64 * 1024 + 1))
        assert response.status_code == 413

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(1000):  # 64 MB if nobody stopped it
                yield b"y" * 65536
        try:
            response = await http.post(server + EXCHANGE_PATH, content=chunks())
            assert response.status_code == 413
        except httpx.HTTPError:
            pass  # the server may close the connection while we are still sending: refused either way


async def test_a_trickling_peer_is_cut_off_at_the_body_timeout_and_others_are_served(
        autojump_clock: trio.testing.MockClock) -> None:
    """In virtual time, on the app itself: the body timeout is the whole body's, not each chunk's.
    (No worker thread here, so pytest-trio's plain autojump clock is exact.)"""
    refused: list[tuple[str, str]] = []
    app = GossipApp(echo, max_body_bytes=64 * 1024, body_timeout_s=10.0,
                    refused=lambda host, reason: refused.append((host, reason)))
    answered: list[tuple[float, int]] = []
    trickled = [0]

    async def trickle() -> dict[str, Any]:  # a byte a second: 100 s for the 100 bytes it announced
        await trio.sleep(1.0)
        trickled[0] += 1
        return {"type": "http.request", "body": b"x", "more_body": trickled[0] < 100}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answered.append((trio.current_time() - began, message["status"]))

    scope = {"type": "http", "method": "POST", "path": EXCHANGE_PATH, "headers": [(b"content-length", b"100")],
             "client": ("192.0.2.7", 40000)}
    began = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(app, scope, trickle, send)
        network = AppNetwork()
        network.listen("http://peer.test", app)
        async with client(transport=network.transport_for("192.0.2.8")) as http:
            for _ in range(20):  # meanwhile, other peers are served at once
                assert await post(http, "http://peer.test", b"quick", max_response_bytes=1024) == b"echo:quick"
        assert trio.current_time() == began and answered == []
    assert answered == [(10.0, 408)]  # not 100 s later, though a byte came every second
    assert refused == [("192.0.2.7", "http-408")]  # a strike towards a cut-off


async def test_a_trickling_peer_gets_408_over_a_real_socket(nursery: trio.Nursery,
                                                           real_rate_clock: trio.testing.MockClock) -> None:
    """hypercorn serves other connections while one waits for its body, and sends our 408 on it.
    The clock runs at the real rate until the test jumps it past the body timeout."""
    binds = await nursery.start(serve, GossipApp(echo), "127.0.0.1:0")  # the default body timeout, 30 s
    host, port = binds[0].removeprefix("http://").split(":")
    began = trio.current_time()
    async with await trio.open_tcp_stream(host, int(port)) as trickler:
        await trickler.send_all(b"POST " + EXCHANGE_PATH.encode() + b" HTTP/1.1\r\nHost: x\r\n"
                                b"Content-Length: 100\r\n\r\nxx")
        async with client() as http:
            with trio.fail_after(5):
                for _ in range(20):
                    assert await post(http, binds[0], b"quick", max_response_bytes=1024) == b"echo:quick"
        assert trio.current_time() - began < DEFAULT_BODY_TIMEOUT_S  # so the trickler was waiting all along
        real_rate_clock.jump(DEFAULT_BODY_TIMEOUT_S)
        answer = b""
        with trio.fail_after(5):
            while b"\r\n" not in answer:
                answer += await trickler.receive_some(1024)
    assert b" 408 " in answer.split(b"\r\n")[0]
    nursery.cancel_scope.cancel()


async def test_client_bounds(server: str) -> None:
    async with client(connect_timeout_s=1) as http:
        with pytest.raises(PeerRefused) as refused:
            await post(http, server, b"x" * 2000, max_response_bytes=100)
        assert refused.value.oversize
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
        closed.close()
        with pytest.raises(TransportFailure) as failed:
            await post(http, url, b"x", max_response_bytes=100)
        assert failed.value.kind == "unreachable"


async def test_healthz_answers_ok_and_metrics_404_without_a_renderer(server: str) -> None:
    async with httpx.AsyncClient() as http:
        health = await http.get(server + "/healthz")
        assert (health.status_code, health.text) == (200, "ok\n")
        assert health.headers["content-type"].startswith("text/plain")
        assert (await http.post(server + "/healthz", content=b"x")).status_code == 405
        assert (await http.get(server + "/metrics")).status_code == 404
        assert (await http.get(server + "/healthz/x")).status_code == 404


async def test_metrics_are_what_the_callback_renders(nursery: trio.Nursery) -> None:
    calls: list[int] = []

    async def metrics() -> str:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("a bug of ours")
        return f"# TYPE neverest_records gauge\nneverest_records {len(calls)}\n"

    binds = await nursery.start(serve, GossipApp(echo, metrics=metrics), "127.0.0.1:0")
    async with httpx.AsyncClient() as http:
        first = await http.get(binds[0] + "/metrics")
        assert first.status_code == 200
        assert first.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert first.text == "# TYPE neverest_records gauge\nneverest_records 1\n"
        broken = await http.get(binds[0] + "/metrics")
        assert (broken.status_code, broken.text) == (500, "internal error\n")  # no details to the caller
        assert (await http.get(binds[0] + "/metrics")).text.endswith("neverest_records 3\n")
        assert (await http.delete(binds[0] + "/metrics")).status_code == 405
        # The exchange is served as before, everything else is still refused.
        async with client() as gossip_client:
            assert await post(gossip_client, binds[0], b"hi", max_response_bytes=100) == b"echo:hi"
        assert (await http.get(binds[0] + "/")).status_code == 404
    nursery.cancel_scope.cancel()


def test_loading_the_client_loads_what_its_first_request_would_import() -> None:
    """``load_client`` runs in a worker thread before a memory's first exchange: it must import httpcore,
    which the client's transport otherwise imports at its first request, on the event loop (22 ms in which
    the daemon answered no one).  A fresh interpreter, so that nothing else loaded it first."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from neverest.gossip import http\n"
            "assert 'httpcore' not in sys.modules, 'loaded before its time'\n"
            "http.load_client()\n"
            "missing = {'httpcore._async.connection_pool', 'httpcore._backends.auto'} - set(sys.modules)\n"
            "assert not missing, missing\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
