"""HTTP_PROXY and friends: a commons or a directory beyond the LAN is called through the proxy the
environment names; loopback and LAN hosts, the hosts NO_PROXY lists, and gossip never are.

The proxy is a real one on 127.0.0.1 (a thread of this test): it answers every request itself
(it forwards nothing, so no test leaves the machine) and records the request line it was sent.
"""

from __future__ import annotations

import json
import socketserver
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from neverest import httpclient
from neverest.ctl import main
from neverest.httpclient import PeerRefused, TransportFailure, env_proxy
from neverest.peers import directory

LISTING = [{"url": "http://203.0.113.7:7428", "origin": "ab" * 8}]


@dataclass
class Proxy:
    url: str
    seen: list[str] = field(default_factory=list)


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    """A loopback HTTP proxy: a GET in absolute form is answered (a directory listing, or 401 for a
    commons); a CONNECT is refused with 403 (no tunnel is ever opened)."""
    seen: list[str] = []

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            line = self.rfile.readline().decode("latin-1").strip()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            seen.append(line)
            if line.startswith("CONNECT "):
                self.wfile.write(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")
                return
            if "/commons/" in line:
                status = b"401 Unauthorized"
                body = json.dumps({"error": "unauthorized", "message": "answered through the proxy"}).encode()
            else:
                status, body = b"200 OK", json.dumps(LISTING).encode()
            self.wfile.write(b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body) + body)

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Proxy(f"http://127.0.0.1:{server.server_address[1]}", seen)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def direct() -> Iterator[str]:
    """A plain HTTP server on 127.0.0.1 that serves the directory listing itself."""

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            body = json.dumps(LISTING).encode()
            self.wfile.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body)
                             + body)

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@pytest.mark.parametrize("url, environ, expected", [
    ("http://c.example.org/x", {"HTTP_PROXY": "http://p:3128"}, "http://p:3128"),
    ("http://c.example.org/x", {"http_proxy": "p:3128", "HTTP_PROXY": "http://other:1"}, "http://p:3128"),
    ("https://c.example.org/x", {"HTTP_PROXY": "http://p:3128"}, None),  # https takes HTTPS_PROXY
    ("https://c.example.org/x", {"HTTPS_PROXY": "http://p:3128"}, "http://p:3128"),
    ("https://c.example.org/x", {"ALL_PROXY": "http://p:3128"}, "http://p:3128"),
    ("http://c.example.org/x", {"HTTP_PROXY": "http://p:3128", "NO_PROXY": "example.org"}, None),
    ("http://c.example.org/x", {"HTTP_PROXY": "http://p:3128", "no_proxy": "other.org, .example.org"}, None),
    ("http://c.example.org/x", {"HTTP_PROXY": "http://p:3128", "NO_PROXY": "*.example.org:443"}, None),
    ("http://c.example.org/x", {"HTTP_PROXY": "http://p:3128", "NO_PROXY": "ample.org"}, "http://p:3128"),
    ("http://c.example.org/x", {"HTTP_PROXY": "http://p:3128", "NO_PROXY": "*"}, None),
    ("http://203.0.113.9/x", {"HTTP_PROXY": "http://p:3128", "NO_PROXY": "203.0.113.0/24"}, None),
    ("http://203.0.113.9/x", {"HTTP_PROXY": "http://p:3128"}, "http://p:3128"),
    # This machine and its LAN are always reached directly: a proxy cannot reach them.
    ("http://127.0.0.1:7428/x", {"HTTP_PROXY": "http://p:3128"}, None),
    ("http://localhost:7428/x", {"HTTP_PROXY": "http://p:3128"}, None),
    ("http://[::1]:7428/x", {"HTTP_PROXY": "http://p:3128"}, None),
    ("http://192.168.1.20:7428/x", {"HTTP_PROXY": "http://p:3128"}, None),
    ("http://10.1.2.3/x", {"ALL_PROXY": "http://p:3128"}, None),
    ("http://[fe80::1]:7428/x", {"HTTP_PROXY": "http://p:3128"}, None),
    ("http://nas.local:7428/x", {"HTTP_PROXY": "http://p:3128"}, None),
    ("http://c.example.org/x", {}, None),
])
def test_which_calls_go_through_the_proxy(url: str, environ: dict[str, str], expected: str | None) -> None:
    assert env_proxy(url, environ) == expected


def test_a_call_beyond_the_lan_goes_through_the_proxy_and_a_loopback_one_does_not(
        proxy: Proxy, direct: str) -> None:
    environ = {"HTTP_PROXY": proxy.url, "HTTPS_PROXY": proxy.url}
    with httpclient.sync_client(proxy_from_env=True, environ=environ) as client:
        answer = httpclient.get_bounded_sync(client, "http://directory.example.test/peers.json", max_bytes=10_000,
                                             total_timeout_s=10)
        assert json.loads(answer.body) == LISTING
        assert proxy.seen == ["GET http://directory.example.test/peers.json HTTP/1.1"]
        # https:// goes through a CONNECT tunnel (refused by this proxy: the network failed, no peer did).
        with pytest.raises(TransportFailure) as caught:
            httpclient.get_bounded_sync(client, "https://directory.example.test/peers.json", max_bytes=10_000,
                                        total_timeout_s=10)
        assert caught.value.kind == "unreachable"
        assert proxy.seen[1] == "CONNECT directory.example.test:443 HTTP/1.1"
        # The same client calls a loopback host directly.
        answer = httpclient.get_bounded_sync(client, direct + "/peers.json", max_bytes=10_000, total_timeout_s=10)
        assert json.loads(answer.body) == LISTING and len(proxy.seen) == 2
    # NO_PROXY: direct (and example.test resolves nowhere, so the call fails without the proxy seeing it).
    with httpclient.sync_client(proxy_from_env=True, environ=environ | {"NO_PROXY": "example.test"}) as client:
        with pytest.raises(TransportFailure):
            httpclient.get_bounded_sync(client, "http://directory.example.test/peers.json", max_bytes=10_000,
                                        total_timeout_s=10)
    assert len(proxy.seen) == 2
    # A client that does not ask for the environment's proxy (gossip's) never uses it.
    with httpclient.sync_client(environ=environ) as client, pytest.raises(TransportFailure):
        httpclient.get_bounded_sync(client, "http://directory.example.test/peers.json", max_bytes=10_000,
                                    total_timeout_s=10)
    assert len(proxy.seen) == 2


def test_the_directory_and_the_commons_honour_http_proxy(proxy: Proxy, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    assert directory.fetch("http://directory.example.test/peers.json").peers == [
        ("http://203.0.113.7:7428", "ab" * 8)]
    # `neverestctl commons pull` reaches the commons through the proxy (which answers 401 itself).
    home, token = tmp_path / "home", tmp_path / "token"
    home.mkdir(mode=0o700)
    token.write_text("secret\n")
    assert main(["--home", str(home), "commons", "pull", "http://commons.example.test", "--token-file",
                 str(token)]) == 1
    assert "HTTP 401 unauthorized: answered through the proxy" in capsys.readouterr().err
    assert proxy.seen == ["GET http://directory.example.test/peers.json HTTP/1.1",
                          "GET http://commons.example.test/commons/index HTTP/1.1"]


def test_a_refusal_through_the_proxy_is_the_far_ends(proxy: Proxy) -> None:
    with httpclient.sync_client(proxy_from_env=True, environ={"HTTP_PROXY": proxy.url}) as client:
        with pytest.raises(PeerRefused) as caught:
            httpclient.get_bounded_sync(client, "http://commons.example.test/commons/index", max_bytes=10_000,
                                        total_timeout_s=10)
    assert caught.value.status == 401
