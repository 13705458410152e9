"""The bounded HTTP client: a total deadline, a capped body, and errors that say who is at fault.

The logic runs against ``httpx.MockTransport``; the deadline against a real server on
127.0.0.1 that trickles its answer one byte at a time (per-read timeouts never fire on it), the
async one on a clock the test jumps.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import trio
import trio.testing

from neverest import httpclient
from neverest.httpclient import PeerRefused, TransportFailure
from tests.virtual_time import real_rate_clock as real_rate_clock  # a fixture


async def test_an_accepted_answer_is_returned_whole() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=b"hello")

    async with httpclient.async_client(transport=httpx.MockTransport(handler), headers={"x-a": "b"}) as client:
        answer = await httpclient.post_bounded(client, "http://peer.test/x", b"body", max_bytes=5,
                                               total_timeout_s=5)
    assert answer.status == 200 and answer.body == b"hello"
    assert seen[0].content == b"body" and seen[0].headers["x-a"] == "b"
    assert seen[0].headers["accept-encoding"] == "identity"


async def test_a_refusal_is_the_peers_with_its_status_and_an_excerpt() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(403, content=b"wrong-peer: \x1b[31mno\n" + b"x" * 10_000)

    async with httpclient.async_client(transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(PeerRefused) as caught:
            await httpclient.get_bounded(client, "http://peer.test/", max_bytes=100, total_timeout_s=5)
    assert caught.value.status == 403 and not caught.value.oversize
    assert caught.value.detail.startswith("wrong-peer:") and "\x1b" not in caught.value.detail
    assert len(caught.value.detail) <= httpclient.DETAIL_CHARS


async def test_accept_lets_the_caller_take_other_statuses() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(304))
    async with httpclient.async_client(transport=transport) as client:
        answer = await httpclient.get_bounded(client, "http://c.test/", max_bytes=10, total_timeout_s=5,
                                              accept=(200, 304))
    assert answer.status == 304 and answer.body == b""


async def test_a_body_over_the_cap_is_refused_while_streaming() -> None:
    sent: list[int] = []

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(1000):
            sent.append(1)
            yield b"x" * 1024

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=chunks())

    async with httpclient.async_client(transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(PeerRefused) as caught:
            await httpclient.get_bounded(client, "http://peer.test/", max_bytes=4096, total_timeout_s=5)
    assert caught.value.oversize and caught.value.status == 200
    assert len(sent) <= 6  # stopped reading soon after the cap, not after 1000 chunks


async def test_a_declared_length_over_the_cap_is_refused_before_reading() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"x" * 100)

    async with httpclient.async_client(transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(PeerRefused, match="Content-Length 100"):
            await httpclient.get_bounded(client, "http://peer.test/", max_bytes=99, total_timeout_s=5)


async def test_network_failures_are_transport_failures_not_refusals() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "reset.test":
            raise httpx.ReadError("connection reset by peer")
        raise httpx.ConnectTimeout("timed out")

    async with httpclient.async_client(transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(TransportFailure) as reset:
            await httpclient.get_bounded(client, "http://reset.test/", max_bytes=10, total_timeout_s=5)
        with pytest.raises(TransportFailure) as slow:
            await httpclient.get_bounded(client, "http://slow.test/", max_bytes=10, total_timeout_s=5)
    assert reset.value.kind == "unreachable" and "reset" in reset.value.detail
    assert slow.value.kind == "timeout"


async def test_nothing_listening_is_unreachable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with httpclient.async_client() as client:
        with pytest.raises(TransportFailure) as caught:
            await httpclient.get_bounded(client, f"http://127.0.0.1:{port}/", max_bytes=10, total_timeout_s=5)
    assert caught.value.kind == "unreachable"


def test_the_sync_helpers_bound_and_classify_the_same_way() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/big":
            return httpx.Response(200, content=iter([b"x" * 600] * 10))
        if request.url.path == "/no":
            return httpx.Response(503, content=b"busy")
        if request.url.path == "/down":
            raise httpx.ConnectError("refused")
        return httpx.Response(200, content=b"ok")

    with httpclient.sync_client(transport=httpx.MockTransport(handler)) as client:
        assert httpclient.post_bounded_sync(client, "http://d.test/", b"", max_bytes=2,
                                            total_timeout_s=5).body == b"ok"
        with pytest.raises(PeerRefused) as big:
            httpclient.get_bounded_sync(client, "http://d.test/big", max_bytes=1000, total_timeout_s=5)
        with pytest.raises(PeerRefused) as no:
            httpclient.get_bounded_sync(client, "http://d.test/no", max_bytes=1000, total_timeout_s=5)
        with pytest.raises(TransportFailure) as down:
            httpclient.get_bounded_sync(client, "http://d.test/down", max_bytes=1000, total_timeout_s=5)
    assert big.value.oversize and no.value.status == 503 and no.value.detail == "busy"
    assert down.value.kind == "unreachable"


# -- the total deadline, against a real server that trickles -------------------------------------


@pytest.fixture
def trickler() -> Iterator[str]:
    """A server on 127.0.0.1 that answers headers at once, then one body byte every 50 ms (for 10 s)."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 200\r\n\r\n")
                    for _ in range(200):
                        if stop.wait(0.05):
                            break
                        conn.sendall(b"x")
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/"
    stop.set()
    thread.join(5)
    listener.close()


async def test_the_async_deadline_is_total_not_per_read(trickler: str, real_rate_clock: trio.testing.MockClock
                                                        ) -> None:
    """trio's clock runs at the real rate, and the test jumps it twice by 20 s (bytes arrive in
    between): 40 s of answer, each byte within the 30 s read timeout, over the 30 s in total."""
    caught: list[TransportFailure] = []

    async def fetch() -> None:
        with pytest.raises(TransportFailure) as failed:
            await httpclient.get_bounded(client, trickler, max_bytes=1000, total_timeout_s=30)
        caught.append(failed.value)

    async with httpclient.async_client(read_timeout_s=30) as client, trio.open_nursery() as nursery:
        started = trio.current_time()
        nursery.start_soon(fetch)
        for _ in range(2):
            await trio.sleep(0.1)
            real_rate_clock.jump(20.0)
    assert [failure.kind for failure in caught] == ["timeout"]
    assert trio.current_time() - started < 40 + 2  # (the real seconds the test took)


def test_the_sync_deadline_is_total_not_per_read(trickler: str) -> None:
    with httpclient.sync_client(read_timeout_s=5) as client:
        started = time.monotonic()
        with pytest.raises(TransportFailure) as caught:
            httpclient.get_bounded_sync(client, trickler, max_bytes=1000, total_timeout_s=0.2)
    assert caught.value.kind == "timeout"
    assert time.monotonic() - started < 2


async def test_plain_http_never_loads_the_ca_bundle(trickler: str) -> None:
    httpclient._tls_context.cache_clear()
    async with httpclient.async_client() as client:
        with pytest.raises(TransportFailure):
            await httpclient.get_bounded(client, trickler, max_bytes=1000, total_timeout_s=0.05)
    with httpclient.sync_client() as client, pytest.raises(TransportFailure):
        httpclient.get_bounded_sync(client, trickler, max_bytes=1000, total_timeout_s=0.05)
    assert httpclient._tls_context.cache_info().currsize == 0


def test_httpx_does_not_log_every_request_at_info() -> None:
    assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
    assert not logging.getLogger("httpcore").isEnabledFor(logging.INFO)
