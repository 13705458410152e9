"""A real OpenAI-compatible model server on 127.0.0.1 that misbehaves on request, for tests."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


def model_row(text: str, dim: int) -> list[float]:
    """The fake model's vector for a text: deterministic, not unit length (the client scales it)."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest() * (dim // 32 + 1)
    return [byte - 127.5 for byte in digest[:dim]]


def words_row(text: str, dim: int) -> list[float]:
    """A tiny model that reads words: each word (lower case) counts in one of ``dim`` slots chosen by CRC-32,
    so texts sharing words are close, and the space is not the hashed one."""
    row = [0.0] * dim
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        row[zlib.crc32(word.encode()) % dim] += 1.0
    return row if any(row) else [1.0] + [0.0] * (dim - 1)


class FakeModelServer(ThreadingHTTPServer):
    """Serves /v1/embeddings and /v1/chat/completions; ``mode`` chooses how it (mis)behaves."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.mode = "ok"
        self.dim = 8
        self.delay_s = 3.0
        self.reply = "The build fails without the flag."
        self.row = model_row  # the model: text, dim -> vector (words_row reads words)
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1"

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that gave up on a slow answer breaks the pipe; that is the test's point."""

    def answer(self, path: str, request: Any) -> tuple[int, bytes]:
        mode = self.mode
        if mode == "500":
            return 500, b'{"error": {"message": "the model exploded"}}'
        if mode == "garbage":
            return 200, b'{"data": [oops'
        if mode == "big":
            return 200, b'{"data": [], "pad": "' + b"x" * 100_000 + b'"}'
        if path.endswith("/chat/completions"):
            if mode == "no-content":
                return 200, json.dumps({"choices": [{"message": {"role": "assistant"}}]}).encode()
            message = {"role": "assistant", "content": self.reply}
            return 200, json.dumps({"choices": [{"index": 0, "message": message}]}).encode()
        texts = request["input"]
        data: list[Any] = [{"object": "embedding", "index": i, "embedding": self.row(t, self.dim)}
                           for i, t in enumerate(texts)]
        if mode == "reversed":
            data.reverse()
        elif mode == "rows":
            data = data[:-1]
        elif mode == "nan":
            data[0]["embedding"][0] = float("nan")  # json.dumps writes the non-JSON token NaN
        elif mode == "infinity":
            data[0]["embedding"][0] = "INFINITY"  # replaced below by a number that parses as inf
        elif mode == "float32-overflow":
            data[0]["embedding"][0] = 1e300
        elif mode == "ragged":
            data[0]["embedding"].append(1.0)
        elif mode == "strings":
            data[0]["embedding"] = [str(x) for x in data[0]["embedding"]]
        elif mode == "nulls":
            data[0]["embedding"][0] = None
        elif mode == "index":
            for item in data:
                item["index"] = 0
        elif mode == "not-object":
            data[0] = [1.0] * self.dim
        elif mode == "no-data":
            return 200, json.dumps({"object": "list"}).encode()
        body = json.dumps({"object": "list", "data": data, "model": request["model"]}).encode()
        return 200, body.replace(b'"INFINITY"', b"1e999")


class _Handler(BaseHTTPRequestHandler):
    server: FakeModelServer

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((self.path, dict(self.headers), request))
        mode = self.server.mode
        if mode == "slow":
            time.sleep(self.server.delay_s)
        if mode == "trickle":  # declares a body, then sends it a byte every 0.1 s
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            for _ in range(30):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.1)
            return
        status, body = self.server.answer(self.path, request)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if mode != "big-stream":  # without a length, the body ends when the connection closes
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body if mode != "big-stream" else b" " * 100_000 + body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def model_server() -> Iterator[FakeModelServer]:
    srv = FakeModelServer()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join()
