"""The hook's way to a configured embedding model: one query, a strict time limit, else the hashed space.

When ``embed_url`` and ``embed_model`` are configured (config.toml, or ``NEVEREST_EMBED_URL`` and
``NEVEREST_EMBED_MODEL``, as ``neverest.config`` reads them), the nightly sleep stores the lessons' vectors
in the model's space (``model:<name>``), and the hook matches a prompt against them there: it needs the
prompt's vector in that space, from the same OpenAI-compatible ``POST {embed_url}/embeddings``
``neverest.memory.embed.ModelEmbedder`` uses.

The hook runs on every prompt and must never hold the agent up, so the call here is bounded by
``TIMEOUT_S`` (and by what is left of the hook's deadline), and every failure (nothing listening, too
slow, an HTTP error, an answer that is not one finite vector) gives ``None``: the hook then matches in the
hashed space, as it does with no model.  A failure is also written down in the home (``LATCH_FILE``, its
time), and for ``RETRY_AFTER_S`` after it the model is not asked at all: a model that is slow (loading,
swapped out) costs one prompt ``TIMEOUT_S``, not every prompt until it recovers.

Standard library only, and light: the request goes over a plain socket (``_post_http``), imported only when
the model is asked, so that reading the configuration costs a hook without a model nothing.
"""

from __future__ import annotations

import json
import math
import os
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Final

# neverest.memory.embed.MODEL_SPACE_PREFIX, restated: the hook does not import numpy.
MODEL_SPACE_PREFIX: Final = "model:"
# A query is one short text: a model served on this machine embeds it in a few milliseconds
# (all-MiniLM-L6-v2 in 4-20 ms here, docs/sessions.md "Model space"); a quarter of a second is
# already a model that is loading or swapped out, and waiting for it would be felt on every prompt.
TIMEOUT_S: Final = 0.25
RETRY_AFTER_S: Final = 60.0
LATCH_FILE: Final = "hook-model-down"
MAX_ANSWER_BYTES: Final = 1 << 20  # one vector of at most 8192 numbers as JSON is well under this
MAX_DIM: Final = 8192  # neverest.memory.embed.MAX_MODEL_DIM
CONFIG_FILE: Final = "config.toml"  # neverest.paths.CONFIG_FILE
URL_ENV: Final = "NEVEREST_EMBED_URL"
MODEL_ENV: Final = "NEVEREST_EMBED_MODEL"
# The prompt's head only: a model's time grows with the text (all-MiniLM-L6-v2 served by
# benchmarks/embed_server.py here: 50 ms for 100 characters, 150 ms for 1 000, 250 ms from 2 000 on,
# where it stops at 256 word pieces), and a prompt says what it is about first.  The key terms are
# still read from the whole prompt.
MAX_TEXT_CHARS: Final = 1000


def configured(home: Path) -> tuple[str, str] | None:
    """(embed_url, embed_model) as the configuration sets them, or None when no model is configured.

    The environment wins over config.toml, as in ``neverest.config``; the file is parsed only when it
    mentions ``embed_`` at all, so a hook without a model pays a read of a small file, not tomllib."""
    url, model = os.environ.get(URL_ENV), os.environ.get(MODEL_ENV)
    if url is None or model is None:
        try:
            raw = (home / CONFIG_FILE).read_bytes()
        except OSError:
            raw = b""
        if b"embed_" in raw:
            import tomllib

            table = tomllib.loads(raw.decode("utf-8"))
            url = url if url is not None else str(table.get("embed_url", ""))
            model = model if model is not None else str(table.get("embed_model", ""))
    url, model = (url or "").strip(), (model or "").strip()
    return (url, model) if url and model else None


class ModelQuery:
    """Asks the model for one text's vector; ``None`` on any failure, with the reason in ``last_error``.

    ``latch``: the file that remembers a failure (None: remember nothing, as replay does); ``now``: the
    hook's clock, against which the latch's time is read."""

    def __init__(self, url: str, model: str, *, timeout_s: float = TIMEOUT_S, latch: Path | None = None,
                 now: datetime | None = None) -> None:
        self.url, self.model, self.timeout_s, self.latch, self.now = url, model, timeout_s, latch, now
        self.space = MODEL_SPACE_PREFIX + model
        self.last_error: str | None = None
        self.asked = False  # whether the model was asked (not skipped for the latch)

    def latched(self) -> bool:
        """Whether a failure less than ``RETRY_AFTER_S`` ago says not to ask."""
        if self.latch is None or self.now is None:
            return False
        try:
            failed = datetime.fromisoformat(self.latch.read_text().strip())
        except (OSError, ValueError):
            return False
        return failed.tzinfo is not None and self.now - failed < timedelta(seconds=RETRY_AFTER_S)

    def vector(self, text: str, deadline: float = math.inf) -> list[float] | None:
        """``text``'s unit vector in the model's space, asked within ``min(timeout_s, deadline - now)``."""
        if self.latched():
            self.last_error = f"the model failed less than {RETRY_AFTER_S:g} s ago ({self.latch}): not asked"
            return None
        budget = min(self.timeout_s, deadline - time.monotonic())
        if budget <= 0.01:
            self.last_error = "no time left to ask the model"
            return None
        self.asked = True
        try:
            found = _unit(json.loads(self._ask(text[:MAX_TEXT_CHARS], budget), parse_constant=_refuse))
        # Socket errors and timeouts are OSErrors; a wrong answer (HTTP, JSON, the vector) a ValueError.
        except (OSError, ValueError, RecursionError) as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"[:300]
            self._remember_failure()
            return None
        self.last_error = None
        if self.latch is not None:
            try:
                self.latch.unlink()
            except OSError:
                pass
        return found

    def _ask(self, text: str, budget: float) -> bytes:
        """The body of the model's 200 answer to ``POST {url}/embeddings``, within ``budget`` seconds."""
        from urllib.parse import urlsplit

        parts = urlsplit(self.url.rstrip("/") + "/embeddings")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"embed_url {self.url!r} is not an http:// or https:// URL")
        body = json.dumps({"model": self.model, "input": [text]}).encode("ascii")
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        deadline = time.monotonic() + budget
        if parts.scheme == "https":
            return _post_https(parts.hostname, parts.port, path, body, budget)
        return _post_http(parts.hostname, parts.port or 80, path, body, deadline)

    def _remember_failure(self) -> None:
        if self.latch is None or self.now is None:
            return
        try:
            self.latch.write_text(self.now.isoformat())
        except OSError:
            pass


def _post_http(host: str, port: int, path: str, body: bytes, deadline: float) -> bytes:
    """One HTTP/1.1 POST over a plain socket, the connection closed after it.

    Not http.client: importing it (and the email package it parses headers with) took 45-65 ms here, more
    than the model's answer; a socket is a few.  The answer is read to its end or ``MAX_ANSWER_BYTES``,
    each wait bounded by what is left of ``deadline``; a chunked body is joined."""
    import socket

    host_header = f"[{host}]" if ":" in host else host
    request = (f"POST {path} HTTP/1.1\r\nHost: {host_header}:{port}\r\nContent-Type: application/json\r\n"
               f"Accept: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection((host, port), timeout=_left(deadline)) as sock:
        sock.sendall(request + body)
        data = bytearray()
        while len(data) <= MAX_ANSWER_BYTES + 65536:
            sock.settimeout(_left(deadline))
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
            if _complete(data):
                break
    head, _, rest = bytes(data).partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = lines[0].split(b" ", 2)
    if len(status) < 2 or not status[0].startswith(b"HTTP/"):
        raise ValueError("the answer is not HTTP")
    if status[1] != b"200":
        raise ValueError(f"HTTP {status[1].decode('ascii', 'replace')}")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        rest = _unchunk(rest)
    elif b"content-length" in headers:
        rest = rest[:int(headers[b"content-length"])]
    if len(rest) > MAX_ANSWER_BYTES:
        raise ValueError("the answer is too large")
    return rest


def _complete(data: bytearray) -> bool:
    """Whether an answer with a Content-Length is all there (the server may keep the connection open)."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return False
    for line in bytes(data[:end]).split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            return len(data) - end - 4 >= int(value.strip())
    return False


def _unchunk(data: bytes) -> bytes:
    out = bytearray()
    while True:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0].strip() or b"0", 16)
        if size == 0:
            return bytes(out)
        if len(data) < size:
            raise ValueError("the chunked answer was cut")
        out += data[:size]
        data = data[size + 2:]


def _post_https(host: str, port: int | None, path: str, body: bytes, budget: float) -> bytes:
    """The same over TLS, through http.client (slower to import; a model on this machine rarely needs it)."""
    import http.client

    connection = http.client.HTTPSConnection(host, port, timeout=budget)
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json", "Accept": "application/json"})
        response = connection.getresponse()
        data = response.read(MAX_ANSWER_BYTES + 1)
    except http.client.HTTPException as exc:
        raise ValueError(f"{type(exc).__name__}: {exc}") from None
    finally:
        connection.close()
    if response.status != 200:
        raise ValueError(f"HTTP {response.status}")
    if len(data) > MAX_ANSWER_BYTES:
        raise ValueError("the answer is too large")
    return data


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the model did not answer in time")
    return left


def _refuse(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def _unit(answer: object) -> list[float]:
    data = answer.get("data") if isinstance(answer, dict) else None
    first = data[0] if isinstance(data, list) and len(data) == 1 else None
    row = first.get("embedding") if isinstance(first, dict) else None
    if not isinstance(row, list) or not 1 <= len(row) <= MAX_DIM:
        raise ValueError("the answer is not one embedding")
    if not all(type(x) in (int, float) and math.isfinite(x) for x in row):
        raise ValueError("the embedding holds something other than finite numbers")
    norm = math.sqrt(math.fsum(x * x for x in row))
    if norm == 0.0:
        raise ValueError("the embedding is zero")
    return [x / norm for x in row]
