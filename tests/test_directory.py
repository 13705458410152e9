"""The directory: a file or a URL listing peers, read with bounds."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from neverest.peers.directory import MAX_BYTES, DirectoryError, fetch, parse


def test_json_and_text_forms() -> None:
    listing = parse(json.dumps(["http://127.0.0.1:7001", {"url": "http://127.0.0.1:7002", "origin": "ab" * 8},
                                {"url": "http://127.0.0.1:7003", "origin": "NOT-AN-ORIGIN"}, 5, "ftp://x",
                                "http://127.0.0.1:7001/"]).encode())
    assert listing.peers == [("http://127.0.0.1:7001", None), ("http://127.0.0.1:7002", "ab" * 8)]
    assert listing.skipped == 3
    text = parse(b"# peers\nhttp://127.0.0.1:7004\n\n  http://127.0.0.1:7005  \nnonsense\n")
    assert [u for u, _ in text.peers] == ["http://127.0.0.1:7004", "http://127.0.0.1:7005"] and text.skipped == 1


def test_limits() -> None:
    with pytest.raises(DirectoryError):
        parse(b"x" * (MAX_BYTES + 1))
    with pytest.raises(DirectoryError):
        parse(b'{"peers": []}')
    many = parse(json.dumps([f"http://127.0.0.1:{7000 + i}" for i in range(1500)]).encode())
    assert len(many.peers) == 1000 and many.skipped == 500


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = {"/ok": json.dumps(["http://127.0.0.1:7010"]).encode(), "/big": b"[" + b" " * (MAX_BYTES + 10)}.get(
            self.path)
        if body is None:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.end_headers()  # no Content-Length: the client must stop reading by itself
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def server() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_fetch_from_a_url_and_a_file(server: str, tmp_path: Path) -> None:
    assert fetch(server + "/ok").peers == [("http://127.0.0.1:7010", None)]
    with pytest.raises(DirectoryError, match="404"):
        fetch(server + "/missing")
    with pytest.raises(DirectoryError, match="over"):
        fetch(server + "/big")
    path = tmp_path / "peers.txt"
    path.write_text("http://127.0.0.1:7020\n")
    assert fetch(str(path)).peers == [("http://127.0.0.1:7020", None)]
    with pytest.raises(DirectoryError, match="cannot read"):
        fetch(str(tmp_path / "nope.txt"))


def test_fetch_through_an_injected_transport_says_who_failed() -> None:
    def network(request: httpx.Request) -> httpx.Response:
        if request.url.host == "down.test":
            raise httpx.ConnectError("connection refused")
        if request.url.host == "broken.test":
            return httpx.Response(503, content=b"maintenance")
        return httpx.Response(200, content=b"http://192.0.2.7:7428\n192.0.2.8:7428\n")

    transport = httpx.MockTransport(network)
    listing = fetch("http://dir.test/peers", transport=transport)
    # A directory is written by programs: a bare host:port there is skipped, not guessed at.
    assert listing.peers == [("http://192.0.2.7:7428", None)] and listing.skipped == 1
    with pytest.raises(DirectoryError, match=r"could not be read \(unreachable\)"):
        fetch("http://down.test/peers", transport=transport)
    with pytest.raises(DirectoryError, match="answered HTTP 503"):
        fetch("http://broken.test/peers", transport=transport)
